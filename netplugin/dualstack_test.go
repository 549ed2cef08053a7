package netplugin

import (
	"crypto/rand"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// randomULA is a random fdxx:xxxx:xxxx::/48 (RFC 4193): no other test, and
// nothing beyond the namespaces a test makes, uses it.
func randomULA(t *testing.T) netip.Prefix {
	t.Helper()
	var b [16]byte
	b[0] = 0xfd
	rand.Read(b[1:6])
	return netip.PrefixFrom(netip.AddrFrom16(b), 48)
}

// dualStack makes cfg dual-stack: IPv4 first (as the test config has it),
// then a random IPv6 ULA /56 cluster CIDR with the node's /64.
func dualStack(t *testing.T, cfg *Config) netip.Prefix {
	t.Helper()
	cluster6 := netip.PrefixFrom(randomULA(t).Addr(), 56)
	pod6 := netip.PrefixFrom(cluster6.Addr(), 64)
	cfg.ClusterCIDRs = []netip.Prefix{cfg.ClusterCIDR, cluster6}
	cfg.PodCIDRs = []netip.Prefix{cfg.PodCIDR, pod6}
	return pod6
}

// outsideNetns makes a namespace beyond the node: a veth from the node's
// namespace to it, with a /64 of its own (node ::1, outside ::2), and
// returns the namespace and the outside address. Nothing routes back to
// pods from there: only a masqueraded connection can be answered.
func outsideNetns(t *testing.T, node string) (string, netip.Addr) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outside")
	if err := CreateNetns(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveNetns(path) })
	p := randomULA(t)
	nodeAddr, outAddr := p.Addr().Next(), p.Addr().Next().Next()
	out, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	name := "vo" + randomHex(8)
	if err := inNetns(node, func() error {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = name
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(out))}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, linkAddr(netip.PrefixFrom(nodeAddr, 64))); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	}); err != nil {
		t.Fatalf("veth to the outside: %v", err)
	}
	if err := inNetns(path, func() error {
		for _, n := range []string{"lo", "eth0"} {
			l, err := netlink.LinkByName(n)
			if err == nil {
				err = netlink.LinkSetUp(l)
			}
			if err != nil {
				return err
			}
			if n == "eth0" {
				if err := netlink.AddrAdd(l, linkAddr(netip.PrefixFrom(outAddr, 64))); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("outside netns: %v", err)
	}
	return path, outAddr
}

// TestDualStackPods runs a dual-stack pod network in a node namespace of
// its own (IPv6 forwarding is switched on there, not on the host): pods
// get an IPv4 and an IPv6 address in the order of the pod CIDRs, talk to
// each other and to the node over both, reach the outside masqueraded to
// the node's address, and are reached on their hostPorts over both.
func TestDualStackPods(t *testing.T) {
	node := nodeNetns(t, "0")
	cfg := testConfigIn(t, node)
	pod6 := dualStack(t, &cfg)
	n := newTestNetworkIn(t, cfg, node)
	gw4, gw6 := cfg.PodCIDR.Addr().Next(), pod6.Addr().Next()

	const tcpPort, v6Only, v4Only, whoPort = 30011, 30012, 30013, 30014
	a := setup(t, n, Pod{ID: "pod-a", HostPorts: []HostPort{
		{Protocol: "TCP", HostPort: tcpPort, ContainerPort: 8080},
		{Protocol: "TCP", HostIP: gw6.String(), HostPort: v6Only, ContainerPort: 8080},
		{Protocol: "TCP", HostIP: "0.0.0.0", HostPort: v4Only, ContainerPort: 8080},
		{Protocol: "TCP", HostPort: whoPort, ContainerPort: 9090},
	}})
	b := setup(t, n, Pod{ID: "pod-b"})
	for _, att := range []Attachment{a, b} {
		if len(att.IPs) != 2 || att.IP != att.IPs[0] || !cfg.PodCIDR.Contains(att.IPs[0]) || !pod6.Contains(att.IPs[1]) ||
			att.IPs[1] == gw6 || att.Gateway != gw4 {
			t.Fatalf("attachment %+v: want an IPv4 address of %s then an IPv6 one of %s, gateway %s", att, cfg.PodCIDR, pod6, gw4)
		}
	}
	if got, ok := n.Get("pod-a"); !ok || !slices.Equal(got.IPs, a.IPs) {
		t.Errorf("Get(pod-a) = %+v, %v; want IPs %v", got, ok, a.IPs)
	}
	a6, b6 := a.IPs[1], b.IPs[1]
	serveEcho(t, a.NetnsPath, "tcp", ":8080", "a")
	serveEcho(t, b.NetnsPath, "tcp", ":8080", "b")
	serveEcho(t, a.NetnsPath, "udp", ":5353", "a")
	serveWho(t, a.NetnsPath, ":9090")

	t.Run("pods talk over IPv6", func(t *testing.T) {
		mustAsk(t, b.NetnsPath, "tcp", netip.AddrPortFrom(a6, 8080).String(), "hi", "a: hi")
		mustAsk(t, a.NetnsPath, "tcp", netip.AddrPortFrom(b6, 8080).String(), "hi", "b: hi")
		mustAsk(t, b.NetnsPath, "udp", netip.AddrPortFrom(a6, 5353).String(), "hi", "a: hi")
		// ... and over IPv4 still.
		mustAsk(t, b.NetnsPath, "tcp", netip.AddrPortFrom(a.IP, 8080).String(), "hi", "a: hi")
	})
	t.Run("the node reaches a pod over IPv6 and sees its address", func(t *testing.T) {
		mustAsk(t, node, "tcp", netip.AddrPortFrom(a6, 8080).String(), "node", "a: node")
		mustAsk(t, b.NetnsPath, "tcp", netip.AddrPortFrom(a6, 9090).String(), "who", b6.String())
	})
	t.Run("hostPort on both families", func(t *testing.T) {
		mustAsk(t, node, "tcp", netip.AddrPortFrom(gw6, tcpPort).String(), "v6", "a: v6")
		mustAsk(t, node, "tcp", netip.AddrPortFrom(gw4, tcpPort).String(), "v4", "a: v4")
		mustAsk(t, b.NetnsPath, "tcp", netip.AddrPortFrom(gw6, tcpPort).String(), "b", "a: b")
		// Without br_netfilter the answer must come back through the
		// node: the connection is masqueraded to the IPv6 gateway.
		mustAsk(t, b.NetnsPath, "tcp", netip.AddrPortFrom(gw6, whoPort).String(), "who", gw6.String())
	})
	t.Run("hairpin: the pod reaches its own hostPort over IPv6", func(t *testing.T) {
		mustAsk(t, a.NetnsPath, "tcp", netip.AddrPortFrom(gw6, tcpPort).String(), "self", "a: self")
		mustAsk(t, a.NetnsPath, "tcp", netip.AddrPortFrom(gw6, whoPort).String(), "who", gw6.String())
	})
	t.Run("hostIP picks the family", func(t *testing.T) {
		mustAsk(t, node, "tcp", netip.AddrPortFrom(gw6, v6Only).String(), "v6", "a: v6")
		if got, err := ask(node, "tcp", netip.AddrPortFrom(gw4, v6Only).String(), "v4"); err == nil {
			t.Errorf("hostPort bound to %s answered on %s: %q", gw6, gw4, got)
		}
		mustAsk(t, node, "tcp", netip.AddrPortFrom(gw4, v4Only).String(), "v4", "a: v4")
		if got, err := ask(node, "tcp", netip.AddrPortFrom(gw6, v4Only).String(), "v6"); err == nil {
			t.Errorf("hostPort bound to 0.0.0.0 answered on %s: %q", gw6, got)
		}
	})
	t.Run("traffic leaving the cluster is masqueraded", func(t *testing.T) {
		outside, outAddr := outsideNetns(t, node)
		serveWho(t, outside, "[::]:7070")
		nodeAddr := outAddr.Prev()
		mustAsk(t, a.NetnsPath, "tcp", netip.AddrPortFrom(outAddr, 7070).String(), "out", nodeAddr.String())
	})
	t.Run("the ip6 table", func(t *testing.T) {
		var rules map[string]int
		if err := inNetns(node, func() (err error) { rules, err = familyRules(cfg, true); return err }); err != nil {
			t.Fatal(err)
		}
		// pod-a: three hostPorts of IPv6 (all addresses twice, gw6 once;
		// 0.0.0.0 is IPv4's), and its hairpin rule.
		want := map[string]int{chainPrerouting: 1, chainOutput: 1, chainHostPorts: 3, chainPostrouting: 3, chainForward: 2}
		if !maps.Equal(rules, want) {
			t.Errorf("ip6 table chains and rule counts %v, want %v", rules, want)
		}
	})

	// A restart keeps both addresses; a teardown releases both.
	n.Close()
	n2 := newTestNetworkIn(t, cfg, node)
	if got, ok := n2.Get("pod-a"); !ok || !slices.Equal(got.IPs, a.IPs) {
		t.Fatalf("after a restart Get(pod-a) = %+v, %v; want IPs %v", got, ok, a.IPs)
	}
	mustAsk(t, node, "tcp", netip.AddrPortFrom(gw6, tcpPort).String(), "again", "a: again")
	if err := n2.Teardown(ctx, "pod-a"); err != nil {
		t.Fatal(err)
	}
	for _, f := range n2.fams {
		if _, _, ok := f.ipam.lookup("pod-a"); ok {
			t.Errorf("pod-a keeps its address of %s after Teardown", f.pod)
		}
	}
	if got, err := ask(node, "tcp", netip.AddrPortFrom(gw6, tcpPort).String(), "gone"); err == nil {
		t.Errorf("hostPort answered after Teardown: %q", got)
	}
}

// TestPodCIDRsPickTheFamilies: the node's pod CIDRs say which families
// its pods get, whatever the cluster's: a node of a cluster that became
// dual-stack after it got its IPv4 pod CIDR keeps networking IPv4 pods
// (no ip6 table); pod CIDRs listed IPv6 first give IPv6 first.
func TestPodCIDRsPickTheFamilies(t *testing.T) {
	node := nodeNetns(t, "0")
	cfg := testConfigIn(t, node)
	pod6 := dualStack(t, &cfg)
	v4only := cfg
	v4only.PodCIDRs = []netip.Prefix{cfg.PodCIDR}
	n := newTestNetworkIn(t, v4only, node)
	a := setup(t, n, Pod{ID: "pod-a"})
	if len(a.IPs) != 1 || !cfg.PodCIDR.Contains(a.IP) {
		t.Fatalf("attachment %+v: want one address of %s", a, cfg.PodCIDR)
	}
	if err := inNetns(node, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		if _, err := c.ListTableOfFamily(cfg.Table, nftables.TableFamilyIPv6); err == nil {
			t.Errorf("a network with an IPv4 pod CIDR alone has an ip6 table")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n.Close()

	// Now the node has both, IPv6 first: the pod set up before keeps
	// its IPv4 address and gets an IPv6 one, listed first.
	both := cfg
	both.PodCIDRs = []netip.Prefix{pod6, cfg.PodCIDR}
	n2 := newTestNetworkIn(t, both, node)
	a2 := setup(t, n2, Pod{ID: "pod-a"})
	if len(a2.IPs) != 2 || !pod6.Contains(a2.IPs[0]) || a2.IPs[1] != a.IP || a2.Gateway != pod6.Addr().Next() {
		t.Fatalf("attachment %+v: want an address of %s, then %s", a2, pod6, a.IP)
	}
	b := setup(t, n2, Pod{ID: "pod-b"})
	serveEcho(t, a2.NetnsPath, "tcp", ":8080", "a")
	mustAsk(t, b.NetnsPath, "tcp", netip.AddrPortFrom(a2.IPs[0], 8080).String(), "hi", "a: hi")
}

// TestIPv6OnlyPods: a network with an IPv6 pod CIDR alone has no ip
// table, and pods get one IPv6 address, its gateway their default route.
func TestIPv6OnlyPods(t *testing.T) {
	node := nodeNetns(t, "1")
	cfg := testConfigIn(t, node)
	cluster6 := netip.PrefixFrom(randomULA(t).Addr(), 56)
	cfg.ClusterCIDRs = []netip.Prefix{cluster6}
	cfg.PodCIDRs = []netip.Prefix{netip.PrefixFrom(cluster6.Addr(), 64)}
	gw := cluster6.Addr().Next()
	n := newTestNetworkIn(t, cfg, node)
	a := setup(t, n, Pod{ID: "pod-a", HostPorts: []HostPort{{HostPort: 30021, ContainerPort: 8080}}})
	b := setup(t, n, Pod{ID: "pod-b"})
	if len(a.IPs) != 1 || !a.IP.Is6() || !cfg.PodCIDRs[0].Contains(a.IP) || a.Gateway != gw {
		t.Fatalf("attachment %+v: want one address of %s, gateway %s", a, cfg.PodCIDRs[0], gw)
	}
	serveEcho(t, a.NetnsPath, "tcp", ":8080", "a")
	mustAsk(t, b.NetnsPath, "tcp", netip.AddrPortFrom(a.IP, 8080).String(), "hi", "a: hi")
	mustAsk(t, node, "tcp", netip.AddrPortFrom(gw, 30021).String(), "hp", "a: hp")
	// With br_netfilter on, the node bridges the DNAT'd packet: b keeps
	// its own address, as under the portmap plugin.
	mustAsk(t, b.NetnsPath, "tcp", netip.AddrPortFrom(gw, 30021).String(), "b", "a: b")
	if err := inNetns(node, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		if _, err := c.ListTableOfFamily(cfg.Table, nftables.TableFamilyIPv4); err == nil {
			t.Errorf("an IPv6-only network has an ip table %s", cfg.Table)
		}
		if got := readSysctl(t, "net/ipv6/conf/all/forwarding"); got != "1" {
			t.Errorf("net.ipv6.conf.all.forwarding = %q in the node namespace, want 1", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Setup(ctx, Pod{ID: "p4", HostPorts: []HostPort{{HostIP: "10.0.0.1", HostPort: 80, ContainerPort: 80}}}); err == nil ||
		err.Error() != "set up pod /: hostPort 80: hostIP 10.0.0.1: the pod network has no IPv4 pod CIDR" {
		t.Errorf("Setup with an IPv4 hostIP: %v", err)
	}
	if _, err := n.Setup(ctx, Pod{ID: "p4", HostPorts: []HostPort{{HostIP: "::1", HostPort: 80, ContainerPort: 80}}}); err == nil {
		t.Error("Setup with a hostPort on ::1: no error")
	}
}

// familyRules counts the rules of each chain of the network's table of
// one family, in the calling thread's namespace.
func familyRules(cfg Config, v6 bool) (map[string]int, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	chains, err := c.ListChainsOfTableFamily(tableFamily(v6))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, ch := range chains {
		if ch.Table.Name != cfg.Table {
			continue
		}
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			return nil, err
		}
		out[ch.Name] = len(rules)
	}
	return out, nil
}

// TestDualStackRoutes: routes to other nodes' pod CIDRs of both families,
// each via a node address of its family, in a node namespace of its own.
func TestDualStackRoutes(t *testing.T) {
	node := nodeNetns(t, "0")
	cfg := testConfigIn(t, node)
	pod6 := dualStack(t, &cfg)
	n := newTestNetworkIn(t, cfg, node)
	_, outAddr := outsideNetns(t, node) // a connected IPv6 network: ::1 node, ::2 the other node
	peer6 := netip.PrefixFrom(pod6.Addr(), 64)
	b := peer6.Addr().As16()
	b[7] = 9 // another /64 of the cluster's /56
	peer6 = netip.PrefixFrom(netip.AddrFrom16(b), 64)

	ours := func() map[netip.Prefix]netip.Addr {
		t.Helper()
		out := map[netip.Prefix]netip.Addr{}
		if err := inNetns(node, func() error {
			routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: routeProtocol}, netlink.RT_FILTER_PROTOCOL)
			for _, r := range routes {
				dst, _ := ipNetToPrefix(r.Dst)
				gw, _ := netip.AddrFromSlice(r.Gw)
				out[dst] = gw
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := map[netip.Prefix]netip.Addr{peer6: outAddr}
	if err := n.SetRoutes(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got := ours(); !maps.Equal(got, want) {
		t.Errorf("routes %v, want %v", got, want)
	}
	for _, bad := range []map[netip.Prefix]netip.Addr{
		{peer6: netip.MustParseAddr("192.0.2.1")},     // gateway of the other family
		{netip.MustParsePrefix("fd99::/64"): outAddr}, // outside the cluster CIDRs
		{pod6: outAddr}, // this node's own
	} {
		if err := n.SetRoutes(ctx, bad); err == nil {
			t.Errorf("SetRoutes(%v): no error", bad)
		}
	}
	if err := n.SetRoutes(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := ours(); len(got) != 0 {
		t.Errorf("routes after SetRoutes(nil): %v", got)
	}
}

// TestCleanupBothFamilies: `bonsai server --cleanup` removes a
// dual-stack network's ip6 table with its ip one.
func TestCleanupBothFamilies(t *testing.T) {
	node := nodeNetns(t, "0")
	cfg := testConfigIn(t, node)
	dualStack(t, &cfg)
	n := newTestNetworkIn(t, cfg, node)
	n.Close()
	if err := inNetns(node, func() error {
		if err := Cleanup(cfg.Table, cfg.Bridge); err != nil {
			return err
		}
		c, err := nftables.New()
		if err != nil {
			return err
		}
		for _, v6 := range []bool{false, true} {
			if _, err := c.ListTableOfFamily(cfg.Table, tableFamily(v6)); err == nil {
				t.Errorf("table %s (IPv6: %v) is still there after Cleanup", cfg.Table, v6)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
