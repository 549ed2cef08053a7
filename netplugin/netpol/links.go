package netpol

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A pod set up by CNI plugins meets the node however the chain made it
// do so. The enforcer sees a pod's traffic only where it passes the
// node's IP hooks: a veth whose host end is on a Linux bridge (the
// bridge plugin: frames between its pods are sent through the node, as
// on the built-in network), or a veth with no bridge, whose every packet
// the node routes (ptp). Anything else (macvlan, ipvlan, a device moved
// into the pod) reaches the wire, and other pods, past the node: no
// policy of such a pod is enforced, and the log says so.

type linkKind uint8

const (
	linkUnknown   linkKind = iota
	linkBridged            // veth on the bridge: port names it
	linkRouted             // veth with no bridge: the node routes all
	linkUnpoliced          // the node does not see its traffic
)

// podLink is where a pod's traffic meets the node.
type podLink struct {
	kind   linkKind
	port   string // the host end of its veth
	bridge string // the bridge port is on (linkBridged)
	why    string // linkUnpoliced: why
}

// findLink looks, in the pod's network namespace at path, for the
// interface holding ip and, through the host end of its veth, for where
// it meets the node; nl is the node's rtnetlink socket.
func findLink(nl *netlink.Handle, path string, ip netip.Addr) (podLink, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return podLink{}, fmt.Errorf("open the pod's network namespace %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return podLink{}, fmt.Errorf("rtnetlink in %s: %w", path, err)
	}
	defer h.Close()
	addrs, err := h.AddrList(nil, unix.AF_INET)
	if err != nil {
		return podLink{}, fmt.Errorf("addresses in %s: %w", path, err)
	}
	var link netlink.Link
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip {
			if link, err = h.LinkByIndex(a.LinkIndex); err != nil {
				return podLink{}, err
			}
			break
		}
	}
	if link == nil {
		return podLink{}, fmt.Errorf("no interface of %s has %s", path, ip)
	}
	if link.Type() != "veth" {
		return podLink{kind: linkUnpoliced, why: fmt.Sprintf("its interface %s is a %s, whose traffic need not pass the node", link.Attrs().Name, link.Type())}, nil
	}
	peer := link.Attrs().ParentIndex
	host, err := nl.LinkByIndex(peer)
	if err != nil || host.Type() != "veth" {
		return podLink{kind: linkUnpoliced, why: fmt.Sprintf("the other end of its veth %s is not a veth of the node's", link.Attrs().Name)}, nil
	}
	l := podLink{port: host.Attrs().Name}
	// The node must route the pod's address back out of where the
	// pod is, or a frame sent up to it would go nowhere.
	routes, err := nl.RouteGet(ip.AsSlice())
	if err != nil || len(routes) == 0 {
		return podLink{kind: linkUnpoliced, why: fmt.Sprintf("the node has no route to %s", ip)}, nil
	}
	if m := host.Attrs().MasterIndex; m > 0 {
		master, err := nl.LinkByIndex(m)
		if err != nil || master.Type() != "bridge" {
			return podLink{kind: linkUnpoliced, why: fmt.Sprintf("its veth %s is enslaved to something other than a bridge", host.Attrs().Name)}, nil
		}
		if routes[0].LinkIndex != master.Attrs().Index {
			return podLink{kind: linkUnpoliced, why: fmt.Sprintf("the node routes %s elsewhere than through bridge %s", ip, master.Attrs().Name)}, nil
		}
		l.kind, l.bridge = linkBridged, master.Attrs().Name
		return l, nil
	}
	if routes[0].LinkIndex != host.Attrs().Index {
		return podLink{kind: linkUnpoliced, why: fmt.Sprintf("the node routes %s elsewhere than through %s", ip, host.Attrs().Name)}, nil
	}
	l.kind = linkRouted
	return l, nil
}

// linkOf is where the local pod p meets the node: from PortName on the
// built-in network, else found (once) in its network namespace.
// e.mu must not be held.
func (e *Enforcer) linkOf(p *pod) podLink {
	if e.portName != nil {
		if p.uid == "" {
			return podLink{}
		}
		return podLink{kind: linkBridged, port: e.portName(p.uid), bridge: e.bridge}
	}
	if e.netnsDir == "" || p.uid == "" || e.nl == nil {
		return podLink{}
	}
	e.mu.Lock()
	l, ok := e.links[p.uid]
	e.mu.Unlock()
	if !ok {
		var err error
		if l, err = findLink(e.nl, filepath.Join(e.netnsDir, p.uid), p.ip); err != nil {
			// Not there yet, or gone: the pod's next change, or the
			// next full sync, looks again.
			if !errors.Is(err, unix.ENOENT) {
				e.log.Debug("find a pod's link to the node", "pod", p.key(), "err", err)
			}
			return podLink{}
		}
		e.noteLink(p.namespace+"/"+p.name, p.uid, l)
	}
	return l
}

// noteLink keeps a pod's link, and says once if its policies cannot be
// enforced.
func (e *Enforcer) noteLink(who, uid string, l podLink) {
	e.mu.Lock()
	_, had := e.links[uid]
	e.links[uid] = l
	e.mu.Unlock()
	if !had && l.kind == linkUnpoliced {
		e.log.Warn("network policies are NOT enforced for this pod", "pod", who, "why", l.why)
	}
}
