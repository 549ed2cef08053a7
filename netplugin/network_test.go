package netplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The tests here make real bridges, veths, namespaces and nftables tables,
// each with names of its own, and send traffic only to 127.0.0.0/8, to the
// test bridge's address and to pods in the namespaces they made.

var ctx = context.Background()

// tableRules counts the rules of each chain of the test's table.
func tableRules(t *testing.T, cfg Config) map[string]int {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Name: cfg.Table, Family: nftables.TableFamilyIPv4}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ch := range chains {
		if ch.Table.Name != cfg.Table {
			continue
		}
		rules, err := c.GetRules(table, ch)
		if err != nil {
			t.Fatal(err)
		}
		out[ch.Name] = len(rules)
	}
	return out
}

func readSysctl(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestNewIsIdempotent(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	br, err := netlink.LinkByName(cfg.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	if br.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("bridge %s is not up", cfg.Bridge)
	}
	wantRules := map[string]int{chainPrerouting: 1, chainOutput: 1, chainHostPorts: 0, chainPostrouting: 3, chainForward: 2, chainInput: 1}
	if diff := cmp.Diff(wantRules, tableRules(t, cfg)); diff != "" {
		t.Errorf("rules per chain (-want +got):\n%s", diff)
	}
	if got := readSysctl(t, "net/ipv4/ip_forward"); got != "1" {
		t.Errorf("ip_forward = %s", got)
	}
	if got := readSysctl(t, "net/ipv4/conf/"+cfg.Bridge+"/route_localnet"); got != "1" {
		t.Errorf("route_localnet on %s = %s", cfg.Bridge, got)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	// Again, on what the first one left: same bridge, same rules.
	newTestNetwork(t, cfg)
	br2, err := netlink.LinkByName(cfg.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	if br2.Attrs().Index != br.Attrs().Index || br2.Attrs().HardwareAddr.String() != br.Attrs().HardwareAddr.String() {
		t.Errorf("bridge replaced: index %d→%d, MAC %s→%s", br.Attrs().Index, br2.Attrs().Index, br.Attrs().HardwareAddr, br2.Attrs().HardwareAddr)
	}
	addrs, err := netlink.AddrList(br2, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	gw := netip.PrefixFrom(cfg.PodCIDR.Addr().Next(), cfg.PodCIDR.Bits())
	if len(addrs) != 1 || addrs[0].IPNet.String() != gw.String() {
		t.Errorf("bridge addresses = %v, want only %s", addrs, gw)
	}
	if diff := cmp.Diff(wantRules, tableRules(t, cfg)); diff != "" {
		t.Errorf("rules per chain after second New (-want +got):\n%s", diff)
	}
}

// A local address on the bridge serves pods from the host, as the cluster
// DNS does, and stays across a second New.
func TestLocalAddrs(t *testing.T) {
	cfg := testConfig(t)
	// Inside the cluster CIDR, outside this node's pod CIDR: unique to
	// the test.
	b := cfg.ClusterCIDR.Addr().As4()
	b[2], b[3] = 255, 10
	local := netip.AddrFrom4(b)
	cfg.LocalAddrs = []netip.Addr{local}
	n := newTestNetwork(t, cfg)
	pod := setup(t, n, Pod{ID: "client"})
	// A server of the host, as bonsai's DNS is.
	l, err := net.Listen("tcp", netip.AddrPortFrom(local, 8053).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 64)
			k, _ := c.Read(buf)
			c.Write(append([]byte("host: "), buf[:k]...))
			c.Close()
		}
	}()
	mustAsk(t, pod.NetnsPath, "tcp", netip.AddrPortFrom(local, 8053).String(), "hi", "host: hi")
	n.Close()
	newTestNetwork(t, cfg)
	br, err := netlink.LinkByName(cfg.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(br, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range addrs {
		got = append(got, a.IPNet.String())
	}
	slices.Sort(got)
	want := []string{netip.PrefixFrom(cfg.PodCIDR.Addr().Next(), cfg.PodCIDR.Bits()).String(), netip.PrefixFrom(local, 32).String()}
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bridge addresses after a second New (-want +got):\n%s", diff)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := Config{
		DataDir:     t.TempDir(),
		ClusterCIDR: netip.MustParsePrefix("10.42.0.0/16"),
		PodCIDR:     netip.MustParsePrefix("10.42.3.0/24"),
	}
	tests := []struct {
		name    string
		change  func(*Config)
		wantErr string
	}{
		{"no data dir", func(c *Config) { c.DataDir = "" }, "DataDir is required"},
		{"pod CIDR outside cluster", func(c *Config) { c.PodCIDR = netip.MustParsePrefix("10.43.0.0/24") }, "not inside cluster CIDR"},
		{"pod CIDR too small", func(c *Config) { c.PodCIDR = netip.MustParsePrefix("10.42.0.0/31") }, "too small"},
		{"IPv6 pod CIDR in an IPv4 cluster CIDR", func(c *Config) { c.PodCIDR = netip.MustParsePrefix("fd00::/64") }, "pod CIDR fd00::/64 is not inside cluster CIDR [10.42.0.0/16]: none is of its family"},
		{"IPv6 pod CIDR too small", func(c *Config) {
			c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("fd00::/48")}
			c.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("fd00::/126")}
		}, "too small: need at least a /125"},
		{"two of one family", func(c *Config) {
			c.ClusterCIDRs = []netip.Prefix{c.ClusterCIDR, netip.MustParsePrefix("10.50.0.0/16")}
			c.PodCIDRs = []netip.Prefix{c.PodCIDR, netip.MustParsePrefix("10.50.0.0/24")}
		}, "two of one family"},
		{"a pod CIDR of no cluster CIDR's family", func(c *Config) {
			c.ClusterCIDRs = []netip.Prefix{c.ClusterCIDR}
			c.PodCIDRs = []netip.Prefix{c.PodCIDR, netip.MustParsePrefix("fd00::/64")}
		}, "pod CIDR fd00::/64 is not inside cluster CIDR [10.42.0.0/16]: none is of its family"},
		{"two pod CIDRs of one family", func(c *Config) {
			c.ClusterCIDRs = []netip.Prefix{c.ClusterCIDR, netip.MustParsePrefix("fd00::/48")}
			c.PodCIDRs = []netip.Prefix{c.PodCIDR, netip.MustParsePrefix("10.42.4.0/24")}
		}, "two of one family"},
		{"IPv6 pod CIDR outside the IPv6 cluster CIDR", func(c *Config) {
			c.ClusterCIDRs = []netip.Prefix{c.ClusterCIDR, netip.MustParsePrefix("fd00::/48")}
			c.PodCIDRs = []netip.Prefix{c.PodCIDR, netip.MustParsePrefix("fd01::/64")}
		}, "pod CIDR fd01::/64 is not inside cluster CIDR fd00::/48"},
		{"IPv6 MTU", func(c *Config) {
			c.ClusterCIDRs = []netip.Prefix{c.ClusterCIDR, netip.MustParsePrefix("fd00::/48")}
			c.PodCIDRs = []netip.Prefix{c.PodCIDR, netip.MustParsePrefix("fd00::/64")}
			c.MTU = 1000
		}, "too small for IPv6"},
		{"local address of no family", func(c *Config) { c.LocalAddrs = []netip.Addr{netip.MustParseAddr("fd00::10")} }, "must be of a pod CIDR's family"},
		{"bridge name too long", func(c *Config) { c.Bridge = "bonsai-bridge-0123" }, "not a valid interface name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.change(&cfg)
			_, err := New(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New: err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestPodsTalkAcrossTheBridge(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	a := setup(t, n, Pod{ID: "pod-a"})
	b := setup(t, n, Pod{ID: "pod-b"})

	gw := cfg.PodCIDR.Addr().Next()
	for _, att := range []Attachment{a, b} {
		if att.Gateway != gw || !cfg.PodCIDR.Contains(att.IP) || att.IP == gw {
			t.Errorf("attachment %+v: want an IP in %s other than the gateway %s", att, cfg.PodCIDR, gw)
		}
	}
	if a.IP == b.IP {
		t.Fatalf("both pods got %s", a.IP)
	}
	if want := filepath.Join(cfg.NetnsDir, "pod-a"); a.NetnsPath != want || !IsNetnsMount(want) {
		t.Errorf("netns path %s (mounted: %v), want %s", a.NetnsPath, IsNetnsMount(a.NetnsPath), want)
	}

	serveEcho(t, a.NetnsPath, "tcp", ":8080", "a")
	serveEcho(t, b.NetnsPath, "tcp", ":8080", "b")
	mustAsk(t, b.NetnsPath, "tcp", netip.AddrPortFrom(a.IP, 8080).String(), "hi", "a: hi")
	mustAsk(t, a.NetnsPath, "tcp", netip.AddrPortFrom(b.IP, 8080).String(), "hi", "b: hi")
	mustAsk(t, "", "tcp", netip.AddrPortFrom(a.IP, 8080).String(), "from host", "a: from host")
}

// TestHostPorts runs each node in a namespace of its own, with the
// bridge netfilter sysctl at 0 (a host that never loaded br_netfilter)
// and at 1: hostPorts must answer either way.
func TestHostPorts(t *testing.T) {
	for _, brnf := range []string{"0", "1"} {
		t.Run("bridge-nf-call-iptables="+brnf, func(t *testing.T) { testHostPorts(t, brnf) })
	}
}

func testHostPorts(t *testing.T, brnf string) {
	node := nodeNetns(t, brnf)
	cfg := testConfigIn(t, node)
	n := newTestNetworkIn(t, cfg, node)
	// Nothing else listens in the node's namespace: any port is free.
	const tcpPort, udpPort, loopbackOnly, whoPort = 30001, 30002, 30003, 30004
	a := setup(t, n, Pod{ID: "pod-a", HostPorts: []HostPort{
		{Protocol: "TCP", HostPort: tcpPort, ContainerPort: 8080},
		{Protocol: "UDP", HostPort: udpPort, ContainerPort: 5353},
		{Protocol: "TCP", HostIP: "127.0.0.1", HostPort: loopbackOnly, ContainerPort: 8080},
		{Protocol: "TCP", HostPort: whoPort, ContainerPort: 9090},
	}})
	b := setup(t, n, Pod{ID: "pod-b"})
	serveEcho(t, a.NetnsPath, "tcp", ":8080", "a")
	serveEcho(t, a.NetnsPath, "udp", ":5353", "a")
	serveWho(t, a.NetnsPath, ":9090")
	gw := a.Gateway.String()

	t.Run("TCP on the node's loopback", func(t *testing.T) {
		mustAsk(t, node, "tcp", fmt.Sprintf("127.0.0.1:%d", tcpPort), "lo", "a: lo")
	})
	t.Run("UDP on the node's loopback", func(t *testing.T) {
		mustAsk(t, node, "udp", fmt.Sprintf("127.0.0.1:%d", udpPort), "lo", "a: lo")
	})
	t.Run("TCP on a node address", func(t *testing.T) {
		mustAsk(t, node, "tcp", fmt.Sprintf("%s:%d", gw, tcpPort), "gw", "a: gw")
	})
	t.Run("hairpin: the pod reaches its own hostPort", func(t *testing.T) {
		mustAsk(t, a.NetnsPath, "tcp", fmt.Sprintf("%s:%d", gw, tcpPort), "self", "a: self")
		// Masqueraded, or the pod would answer itself directly.
		mustAsk(t, a.NetnsPath, "tcp", fmt.Sprintf("%s:%d", gw, whoPort), "who", gw)
	})
	t.Run("hostIP limits the addresses", func(t *testing.T) {
		mustAsk(t, node, "tcp", fmt.Sprintf("127.0.0.1:%d", loopbackOnly), "lo", "a: lo")
		if got, err := ask(node, "tcp", fmt.Sprintf("%s:%d", gw, loopbackOnly), "gw"); err == nil {
			t.Errorf("hostPort bound to 127.0.0.1 answered on %s: %q", gw, got)
		}
	})
	t.Run("another pod reaches the hostPort", func(t *testing.T) {
		mustAsk(t, b.NetnsPath, "tcp", fmt.Sprintf("%s:%d", gw, tcpPort), "b", "a: b")
		mustAsk(t, b.NetnsPath, "udp", fmt.Sprintf("%s:%d", gw, udpPort), "b", "a: b")
		// Where br_netfilter shows the bridged answer to conntrack, the
		// pod keeps its address, as with the CNI portmap plugin; where
		// it does not, the answer must come back through the node, and
		// the connection is masqueraded to the gateway.
		want := b.IP.String()
		if brnf == "0" {
			want = gw
		}
		mustAsk(t, b.NetnsPath, "tcp", fmt.Sprintf("%s:%d", gw, whoPort), "who", want)
	})
}

// route_localnet, which hostPorts on 127.0.0.1 need, would also let a pod
// reach what the host binds to 127.0.0.1 (CVE-2020-8558); the input rule
// must stop that.
func TestPodsCannotReachHostLoopback(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	a := setup(t, n, Pod{ID: "pod-a"})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host secret\n"))
			c.Close()
		}
	}()

	// Make the pod send 127.0.0.0/8 out of eth0 to its gateway, as a
	// malicious pod could, and accept answers from 127.0.0.1.
	if err := inNetns(a.NetnsPath, func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := h.AddrDel(lo, &netlink.Addr{IPNet: prefixToIPNet(netip.MustParsePrefix("127.0.0.1/8"))}); err != nil {
			return fmt.Errorf("remove 127.0.0.1 from the pod's lo: %w", err)
		}
		eth0, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: prefixToIPNet(loopbackNet), Gw: a.Gateway.AsSlice()}); err != nil {
			return fmt.Errorf("route 127.0.0.0/8 via the gateway: %w", err)
		}
		return os.WriteFile("/proc/sys/net/ipv4/conf/eth0/route_localnet", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}

	reach := func(timeout time.Duration) error {
		return inNetns(a.NetnsPath, func() error {
			c, err := net.DialTimeout("tcp", l.Addr().String(), timeout)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	if err := reach(500 * time.Millisecond); err == nil {
		t.Fatal("a pod reached a socket bound to the host's 127.0.0.1")
	}

	// The control: without the input rule the same path works, so the
	// rule (and not a broken test setup) is what stopped it.
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Name: cfg.Table, Family: nftables.TableFamilyIPv4}
	c.FlushChain(&nftables.Chain{Name: chainInput, Table: table})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	// A loaded machine (the whole suite runs at once) may take a while
	// to answer: the control gets a few seconds.
	if err := reach(5 * time.Second); err != nil {
		t.Fatalf("control without the input rule: %v", err)
	}
}

func TestSetupIsIdempotent(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	port := freePort(t)
	pod := Pod{ID: "pod-a", HostPorts: []HostPort{{HostPort: port, ContainerPort: 80}}}
	first := setup(t, n, pod)
	link, err := netlink.LinkByName(n.vethName("pod-a"))
	if err != nil {
		t.Fatal(err)
	}
	second := setup(t, n, pod)
	if !reflect.DeepEqual(first, second) {
		t.Errorf("second Setup = %+v, first %+v", second, first)
	}
	again, err := netlink.LinkByName(n.vethName("pod-a"))
	if err != nil || again.Attrs().Index != link.Attrs().Index {
		t.Errorf("veth replaced by the second Setup (%v)", err)
	}
	if got := len(n.fams[0].ipam.allocations()); got != 1 {
		t.Errorf("%d allocations, want 1", got)
	}
	if got := tableRules(t, cfg)[chainHostPorts]; got != 1 {
		t.Errorf("%d hostPort rules, want 1", got)
	}
}

func TestSetupRejectsBadInput(t *testing.T) {
	cfg := testConfig(t)
	cfg.PodCIDR = netip.PrefixFrom(cfg.ClusterCIDR.Addr(), 29) // 5 pods
	n := newTestNetwork(t, cfg)
	tests := []struct {
		name    string
		pod     Pod
		wantErr string
	}{
		{"empty ID", Pod{}, "invalid pod sandbox ID"},
		{"ID with a slash", Pod{ID: "../etc"}, "invalid pod sandbox ID"},
		{"bad protocol", Pod{ID: "p", HostPorts: []HostPort{{Protocol: "ICMP", HostPort: 1, ContainerPort: 1}}}, `unsupported protocol "ICMP"`},
		{"port out of range", Pod{ID: "p", HostPorts: []HostPort{{HostPort: 70000, ContainerPort: 1}}}, "out of range"},
		{"IPv6 hostIP", Pod{ID: "p", HostPorts: []HostPort{{HostIP: "fd00::1", HostPort: 80, ContainerPort: 80}}}, "hostIP fd00::1: the pod network has no IPv6 pod CIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := n.Setup(ctx, tt.pod); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Setup: err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}

	t.Run("pod CIDR exhausted", func(t *testing.T) {
		for i := range 5 {
			setup(t, n, Pod{ID: fmt.Sprintf("p%d", i)})
		}
		_, err := n.Setup(ctx, Pod{ID: "p5", Namespace: "ns", Name: "sixth"})
		want := fmt.Sprintf("allocate IP for pod ns/sixth: pod CIDR %s exhausted", cfg.PodCIDR)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("sixth Setup: err = %v, want %q", err, want)
		}
		if _, err := os.Stat(filepath.Join(cfg.NetnsDir, "p5")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("netns of the failed pod: %v", err)
		}
	})
}

// assertGone checks that nothing of a pod is left.
func assertGone(t *testing.T, n *Network, id string, ip netip.Addr) {
	t.Helper()
	if linkExists(n.vethName(id)) {
		t.Errorf("pod %s: veth %s still there", id, n.vethName(id))
	}
	if _, err := os.Lstat(n.netnsPath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod %s: netns file still there (%v)", id, err)
	}
	if _, ok := n.Get(id); ok {
		t.Errorf("pod %s: Get still knows it", id)
	}
	if ip.IsValid() {
		if _, err := os.Stat(filepath.Join(n.cfg.DataDir, "ipam", ip.String())); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pod %s: allocation file of %s still there (%v)", id, ip, err)
		}
		if _, used := n.fams[0].ipam.allocations()[ip]; used {
			t.Errorf("pod %s: %s still allocated", id, ip)
		}
	}
	owners, err := n.fams[0].rules.ruleOwners()
	if err != nil {
		t.Fatal(err)
	}
	if owners[id] {
		t.Errorf("pod %s: nftables rules still there", id)
	}
}

func TestTeardown(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	port := freePort(t)
	a := setup(t, n, Pod{ID: "pod-a", HostPorts: []HostPort{{HostPort: port, ContainerPort: 80}}})
	b := setup(t, n, Pod{ID: "pod-b"})
	serveEcho(t, b.NetnsPath, "tcp", ":80", "b")

	if err := n.Teardown(ctx, "pod-a"); err != nil {
		t.Fatal(err)
	}
	assertGone(t, n, "pod-a", a.IP)
	if got := tableRules(t, cfg); got[chainHostPorts] != 0 || got[chainPostrouting] != 3 {
		t.Errorf("rules after Teardown: %v", got)
	}
	if err := n.Teardown(ctx, "pod-a"); err != nil {
		t.Errorf("second Teardown: %v", err)
	}
	if err := n.Teardown(ctx, "never-was"); err != nil {
		t.Errorf("Teardown of an unknown pod: %v", err)
	}
	// The other pod is untouched.
	mustAsk(t, "", "tcp", netip.AddrPortFrom(b.IP, 80).String(), "still", "b: still")
}

// A failing step undoes exactly what Setup did before it.
func TestSetupUndoesOnFailure(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	for _, step := range []string{"allocate IP", "create netns", "create veth", "configure eth0", "add hostPort rules", "finish"} {
		t.Run(step, func(t *testing.T) {
			n.setupHook = func(s string) error {
				if s == step {
					return errors.New("injected failure")
				}
				return nil
			}
			defer func() { n.setupHook = nil }()
			id := "pod-" + strings.ReplaceAll(step, " ", "-")
			_, err := n.Setup(ctx, Pod{ID: id, Namespace: "ns", Name: "web", HostPorts: []HostPort{{HostPort: 1, ContainerPort: 1}}})
			if want := step + " for pod ns/web: injected failure"; err == nil || err.Error() != want {
				t.Fatalf("Setup: err = %v, want %q", err, want)
			}
			assertGone(t, n, id, netip.Addr{})
			if got := len(n.fams[0].ipam.allocations()); got != 0 {
				t.Errorf("%d IPs allocated", got)
			}
			if got := tableRules(t, cfg)[chainHostPorts]; got != 0 {
				t.Errorf("%d hostPort rules", got)
			}
		})
	}
}

func TestGC(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	port := freePort(t)
	a := setup(t, n, Pod{ID: "pod-a", HostPorts: []HostPort{{HostPort: port, ContainerPort: 80}}})
	b := setup(t, n, Pod{ID: "pod-b"})
	c := setup(t, n, Pod{ID: "pod-c"})
	serveEcho(t, b.NetnsPath, "tcp", ":80", "b")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	// What crashes leave: an allocation whose Setup never got further,
	// an unreadable allocation, a namespace with no allocation.
	ipamDir := filepath.Join(cfg.DataDir, "ipam")
	leaked := netip.AddrFrom4([4]byte{cfg.PodCIDR.Addr().As4()[0], cfg.PodCIDR.Addr().As4()[1], 0, 200})
	if err := os.WriteFile(filepath.Join(ipamDir, leaked.String()), []byte(`{"id":"crashed-setup"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	garbled := leaked.Next()
	if err := os.WriteFile(filepath.Join(ipamDir, garbled.String()), []byte(`{"id`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CreateNetns(filepath.Join(cfg.NetnsDir, "orphan-netns")); err != nil {
		t.Fatal(err)
	}

	n = newTestNetwork(t, cfg)
	if _, ok := n.Get("crashed-setup"); !ok {
		t.Fatal("allocation of crashed-setup not loaded")
	}
	var asked []string
	if err := n.GC(ctx, func(id string) bool {
		asked = append(asked, id)
		return id == "pod-b"
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(asked)
	if diff := cmp.Diff([]string{"crashed-setup", "orphan-netns", "pod-a", "pod-b", "pod-c"}, asked); diff != "" {
		t.Errorf("pods GC asked about (-want +got):\n%s", diff)
	}
	assertGone(t, n, "pod-a", a.IP)
	assertGone(t, n, "pod-c", c.IP)
	assertGone(t, n, "crashed-setup", leaked)
	assertGone(t, n, "orphan-netns", netip.Addr{})
	if _, used := n.fams[0].ipam.allocations()[garbled]; used {
		t.Errorf("unreadable allocation %s not released", garbled)
	}
	if got, ok := n.Get("pod-b"); !ok || !reflect.DeepEqual(got, b) {
		t.Errorf("live pod-b: Get = %+v %v, want %+v", got, ok, b)
	}
	mustAsk(t, "", "tcp", netip.AddrPortFrom(b.IP, 80).String(), "alive", "b: alive")
}

// bonsai restarts without stopping pods: a new Network on the same state
// takes them over and disturbs nothing, not even open connections.
func TestRestartKeepsPods(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	port := freePort(t)
	pod := Pod{ID: "pod-a", HostPorts: []HostPort{{HostPort: port, ContainerPort: 8080}}}
	a := setup(t, n, pod)
	serveEcho(t, a.NetnsPath, "tcp", ":8080", "a")
	veth, err := netlink.LinkByName(n.vethName("pod-a"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got, err := converse(conn, "before"); err != nil || got != "a: before" {
		t.Fatalf("before restart: %q %v", got, err)
	}

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Setup(ctx, Pod{ID: "x"}); !errors.Is(err, errClosed) {
		t.Errorf("Setup after Close: err = %v, want %v", err, errClosed)
	}
	n = newTestNetwork(t, cfg)

	if got, ok := n.Get("pod-a"); !ok || !reflect.DeepEqual(got, a) {
		t.Fatalf("Get after restart = %+v %v, want %+v", got, ok, a)
	}
	if got, err := converse(conn, "during"); err != nil || got != "a: during" {
		t.Fatalf("connection opened before the restart: %q %v", got, err)
	}
	mustAsk(t, "", "tcp", fmt.Sprintf("127.0.0.1:%d", port), "after", "a: after")

	// A Setup of the running pod after the restart checks it and keeps it.
	if got := setup(t, n, pod); !reflect.DeepEqual(got, a) {
		t.Errorf("Setup after restart = %+v, want %+v", got, a)
	}
	again, err := netlink.LinkByName(n.vethName("pod-a"))
	if err != nil || again.Attrs().Index != veth.Attrs().Index {
		t.Errorf("veth replaced by the Setup after restart (%v)", err)
	}
	if got, err := converse(conn, "still"); err != nil || got != "a: still" {
		t.Fatalf("connection after a Setup of the running pod: %q %v", got, err)
	}
	if got := tableRules(t, cfg)[chainHostPorts]; got != 1 {
		t.Errorf("%d hostPort rules, want 1", got)
	}
	// A new pod does not get the address of the old one.
	if b := setup(t, n, Pod{ID: "pod-b"}); b.IP == a.IP {
		t.Errorf("pod-b got pod-a's %s", b.IP)
	}
}

func TestConcurrentPods(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	const pods = 30

	// Sequential first: the latency of one Setup with nothing else going on.
	var seqSetup, seqTeardown time.Duration
	for i := range 10 {
		id := fmt.Sprintf("seq-%d", i)
		start := time.Now()
		setup(t, n, Pod{ID: id})
		seqSetup += time.Since(start)
		start = time.Now()
		if err := n.Teardown(ctx, id); err != nil {
			t.Fatal(err)
		}
		seqTeardown += time.Since(start)
	}
	t.Logf("sequential: Setup %v/pod, Teardown %v/pod", seqSetup/10, seqTeardown/10)

	atts := make([]Attachment, pods)
	took := make([]time.Duration, pods)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			att, err := n.Setup(ctx, Pod{ID: fmt.Sprintf("pod-%02d", i), Namespace: "default", Name: fmt.Sprint(i)})
			took[i] = time.Since(s)
			if err != nil {
				t.Error(err)
			}
			atts[i] = att
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if t.Failed() {
		t.FailNow()
	}
	slices.Sort(took)
	t.Logf("%d concurrent Setups: %v wall, %v/pod, median %v, max %v", pods, wall, wall/pods, took[pods/2], took[pods-1])

	seen := map[netip.Addr]int{}
	for i, att := range atts {
		if j, dup := seen[att.IP]; dup {
			t.Errorf("pods %d and %d both got %s", i, j, att.IP)
		}
		seen[att.IP] = i
	}
	serveEcho(t, atts[0].NetnsPath, "tcp", ":80", "first")
	mustAsk(t, atts[pods-1].NetnsPath, "tcp", netip.AddrPortFrom(atts[0].IP, 80).String(), "hi", "first: hi")

	start = time.Now()
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Teardown(ctx, fmt.Sprintf("pod-%02d", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	wall = time.Since(start)
	t.Logf("%d concurrent Teardowns: %v wall, %v/pod", pods, wall, wall/pods)
	for i, att := range atts {
		assertGone(t, n, fmt.Sprintf("pod-%02d", i), att.IP)
	}

	// Loose bounds: they catch a Setup that got slow by design (a sleep,
	// a retry loop), not a busy machine.
	if per := seqSetup / 10; per > 250*time.Millisecond {
		t.Errorf("Setup takes %v per pod", per)
	}
}

func TestSetRoutes(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)

	// Other nodes live behind a veth pair (both ends on the host) on a
	// benchmarking-range subnet (198.18.0.0/15): routes to them carry no
	// traffic anywhere.
	suffix := randomHex(8)
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "bd" + suffix
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "bp" + suffix}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.deleteLink(attrs.Name) })
	link, err := netlink.LinkByName(attrs.Name)
	if err != nil {
		t.Fatal(err)
	}
	x := byte(cfg.ClusterCIDR.Addr().As4()[1])
	nodeNet := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, x, 1}), 24)
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: prefixToIPNet(nodeNet)}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bd" + suffix, "bp" + suffix} {
		l, err := netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	node := func(i byte) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, x, i}) }
	podCIDR := func(i byte) netip.Prefix { return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, x, i, 0}), 24) }

	ours := func() map[netip.Prefix]netip.Addr {
		t.Helper()
		routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: routeProtocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			t.Fatal(err)
		}
		out := map[netip.Prefix]netip.Addr{}
		for _, r := range routes {
			dst, _ := ipNetToPrefix(r.Dst)
			if cfg.ClusterCIDR.Contains(dst.Addr()) {
				gw, _ := netip.AddrFromSlice(r.Gw)
				out[dst] = gw
			}
		}
		return out
	}

	steps := []map[netip.Prefix]netip.Addr{
		{podCIDR(5): node(5), podCIDR(6): node(6)},
		{podCIDR(6): node(7), podCIDR(8): node(8)}, // 5 gone, 6 moved, 8 new
		{},
	}
	for i, want := range steps {
		if err := n.SetRoutes(ctx, want); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if diff := cmp.Diff(want, ours(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("step %d: routes (-want +got):\n%s", i, diff)
		}
	}

	bad := []struct {
		routes  map[netip.Prefix]netip.Addr
		wantErr string
	}{
		{map[netip.Prefix]netip.Addr{netip.MustParsePrefix("192.168.77.0/24"): node(5)}, "not inside the cluster CIDR"},
		{map[netip.Prefix]netip.Addr{cfg.PodCIDR: node(5)}, "overlaps this node's pod CIDR"},
		{map[netip.Prefix]netip.Addr{netip.PrefixFrom(podCIDR(9).Addr().Next(), 24): node(5)}, "canonical form"},
		{map[netip.Prefix]netip.Addr{podCIDR(9): netip.MustParseAddr("203.0.113.9")}, "route " + podCIDR(9).String() + " via 203.0.113.9"},
	}
	for _, tt := range bad {
		if err := n.SetRoutes(ctx, tt.routes); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("SetRoutes(%v): err = %v, want it to contain %q", tt.routes, err, tt.wantErr)
		}
	}

	if err := n.SetRoutes(ctx, steps[0]); err != nil {
		t.Fatal(err)
	}
	if err := n.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ours(); len(got) != 0 {
		t.Errorf("routes after Destroy: %v", got)
	}
}

func TestDestroy(t *testing.T) {
	cfg := testConfig(t)
	n := newTestNetwork(t, cfg)
	setup(t, n, Pod{ID: "pod-a"})
	if err := n.Teardown(ctx, "pod-a"); err != nil {
		t.Fatal(err)
	}
	if err := n.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if linkExists(cfg.Bridge) {
		t.Errorf("bridge %s still there", cfg.Bridge)
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListTableOfFamily(cfg.Table, nftables.TableFamilyIPv4); err == nil {
		t.Errorf("table %s still there", cfg.Table)
	}
	if err := n.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}
