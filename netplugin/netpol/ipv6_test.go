package netpol

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// v6Addr puts an IPv6 address on a link, without DAD, as netplugin does.
func v6Addr(t *testing.T, h *netlink.Handle, link, cidr string) {
	t.Helper()
	l, err := h.LinkByName(link)
	must(t, "find "+link, err)
	a, err := netlink.ParseAddr(cidr)
	must(t, "parse "+cidr, err)
	a.Flags = unix.IFA_F_NODAD
	must(t, "address "+cidr, h.AddrAdd(l, a))
}

// serveV6 answers TCP connections on [::]:port in ns with name.
func serveV6(t *testing.T, ns netns.NsHandle, name string, port int) {
	t.Helper()
	var l net.Listener
	must(t, "listen", inNS(ns, func() (err error) {
		l, err = net.Listen("tcp6", fmt.Sprintf("[::]:%d", port))
		return err
	}))
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s\n", name)
			c.Close()
		}
	}()
}

func probeV6(ns netns.NsHandle, addr netip.Addr, port int) error {
	var c net.Conn
	if err := inNS(ns, func() (err error) {
		c, err = net.DialTimeout("tcp6", netip.AddrPortFrom(addr, uint16(port)).String(), time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	_, err := bufio.NewReader(c).ReadString('\n')
	return err
}

// TestIPv6OfIsolatedPods: policies are enforced for IPv4 only, so a pod
// that a policy isolates must get no IPv6 at all on a dual-stack pod
// network: not bridged from another pod, and not routed through the
// node, to or from it (the node forwards IPv6 past the ip tables). Pods
// no policy isolates keep their IPv6.
func TestIPv6OfIsolatedPods(t *testing.T) {
	n := newCastNode(t, "0")
	sysctlIn(t, n.node, "net/ipv6/conf/all/forwarding", "1")
	v6Addr(t, n.nl, nodeBridge, "fd00:42::1/64")
	v6Addr(t, n.nl, "out0", "fd00:201::1/64")
	out := handleIn(t, n.outside)
	v6Addr(t, out, "eth0", "fd00:201::2/64")
	must(t, "outside's IPv6 route", out.RouteAdd(&netlink.Route{Dst: &net.IPNet{IP: net.ParseIP("fd00:42::"), Mask: net.CIDRMask(64, 128)}, Gw: net.ParseIP("fd00:201::1")}))
	serveV6(t, n.outside, "outside", 80)
	outside := netip.MustParseAddr("fd00:201::2")
	ip6 := map[string]netip.Addr{}
	for i, id := range []string{"default/db", "default/frontend", "plain/frontend"} {
		p := n.pods[id]
		h := handleIn(t, p.ns)
		a := netip.MustParseAddr(fmt.Sprintf("fd00:42::%d", 10+i))
		v6Addr(t, h, "eth0", a.String()+"/64")
		must(t, "IPv6 default route", h.RouteAdd(&netlink.Route{Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, Gw: net.ParseIP("fd00:42::1")}))
		serveV6(t, p.ns, id, 80)
		ip6[id] = a
	}
	db, plain := n.pods["default/db"], n.pods["plain/frontend"]
	check := func(what string, from netns.NsHandle, to netip.Addr, want bool) {
		t.Helper()
		// A refusal may take a few tries to show while neighbours are
		// resolved; an allowance must show within them.
		var err error
		for range 3 {
			if err = probeV6(from, to, 80); err == nil {
				break
			}
		}
		if (err == nil) != want {
			t.Errorf("%s over IPv6: reached %v (%v), want %v", what, err == nil, err, want)
		}
	}
	// Before any policy: IPv6 works every way, so the refusals below
	// are the policy's.
	check("plain to db", plain.ns, ip6["default/db"], true)
	check("outside to db", n.outside, ip6["default/db"], true)
	check("db to outside", db.ns, outside, true)

	n.set(t, defaultDenyIngress("default"))
	check("plain to db (isolated for ingress), bridged", plain.ns, ip6["default/db"], false)
	check("outside to db (isolated for ingress), routed", n.outside, ip6["default/db"], false)
	check("db (isolated) to outside, routed", db.ns, outside, false)
	check("plain (not isolated) to outside", plain.ns, outside, true)
	check("outside to plain (not isolated)", n.outside, ip6["plain/frontend"], true)
}
