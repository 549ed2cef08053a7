package proxy

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A UDP "connection" DNAT'd to an endpoint lives on in conntrack as long
// as the client keeps sending, so a client that reuses its source port
// (a resolver talking to the DNS Service, say) would keep sending to an
// endpoint long gone. As kube-proxy does, the flows of UDP endpoints that
// leave a Service are deleted after the sync that removed their rules;
// the next packet then goes through the rules again. TCP needs nothing:
// a connection to an endpoint that is gone fails, and the next one is
// new.

// staleUDP is the UDP endpoint addresses old has and new lacks.
func staleUDP(old, new objects) []netip.Addr {
	keep := map[netip.Addr]bool{}
	for _, a := range new.udpEndpoints {
		keep[a] = true
	}
	var out []netip.Addr
	for _, a := range old.udpEndpoints {
		if !keep[a] {
			out = append(out, a)
			keep[a] = true // once
		}
	}
	return out
}

// clearUDPFlows deletes the conntrack entries of UDP flows whose replies
// come from one of addrs, that is, flows DNAT'd to them (and any direct
// flows to them, which the next packet recreates as they were).
func (p *Proxier) clearUDPFlows(addrs []netip.Addr) {
	if p.conntrack == nil || len(addrs) == 0 {
		return
	}
	filters := make([]netlink.CustomConntrackFilter, 0, len(addrs))
	for _, a := range addrs {
		f := &netlink.ConntrackFilter{}
		if err := f.AddProtocol(unix.IPPROTO_UDP); err != nil {
			p.log.Error("build conntrack filter", "err", err)
			return
		}
		if err := f.AddIP(netlink.ConntrackReplySrcIP, net.IP(a.AsSlice())); err != nil {
			p.log.Error("build conntrack filter", "err", err)
			return
		}
		filters = append(filters, f)
	}
	n, err := p.conntrack.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, filters...)
	if err != nil {
		// Rules are right; only flows already under way keep going
		// where they went.
		p.log.Error("delete conntrack entries of removed UDP endpoints", "endpoints", addrs, "err", err)
		return
	}
	p.log.Debug("deleted conntrack entries of removed UDP endpoints", "endpoints", addrs, "entries", n)
}
