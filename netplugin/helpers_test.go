package netplugin

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// requireRoot skips a test that needs to create kernel network objects
// when it cannot, and fails it in CI, where a missing prerequisite must
// not look like a pass.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	reason := "needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) to create network namespaces, links and nftables tables"
	if os.Getenv("CI") == "true" {
		t.Fatal(reason)
	}
	t.Skip(reason)
}

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

var (
	cidrMu   sync.Mutex
	cidrUsed = map[int]bool{}
)

// freeClusterCIDR picks a 10.x.0.0/16 that no route of the host and no
// other test of this process uses.
func freeClusterCIDR(t *testing.T) netip.Prefix {
	t.Helper()
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		t.Fatal(err)
	}
	cidrMu.Lock()
	defer cidrMu.Unlock()
	for range 1000 {
		var b [1]byte
		rand.Read(b[:])
		x := 128 + int(b[0])%120
		if cidrUsed[x] {
			continue
		}
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(x), 0, 0}), 16)
		clash := false
		for _, r := range routes {
			if r.Dst == nil {
				continue
			}
			if d, ok := ipNetToPrefix(r.Dst); ok && d.Bits() > 0 && d.Overlaps(p) {
				clash = true
			}
		}
		if !clash {
			cidrUsed[x] = true
			t.Cleanup(func() { cidrMu.Lock(); delete(cidrUsed, x); cidrMu.Unlock() })
			return p
		}
	}
	t.Fatal("no free 10.x.0.0/16 for a test cluster CIDR")
	return netip.Prefix{}
}

// testConfig returns a config with a bridge, table, CIDRs and dirs of the
// test's own, and registers a cleanup that removes every kernel object
// such a network can leave, whatever state the test stopped in.
func testConfig(t *testing.T) Config {
	t.Helper()
	return testConfigIn(t, "")
}

// testConfigIn is testConfig for a network in the node namespace at node
// (from nodeNetns), "" for the host's: its cleanup runs there.
func testConfigIn(t *testing.T, node string) Config {
	t.Helper()
	requireRoot(t)
	suffix := randomHex(8)
	cluster := freeClusterCIDR(t)
	pod := netip.PrefixFrom(cluster.Addr(), 24)
	cfg := Config{
		DataDir:     t.TempDir(),
		NetnsDir:    filepath.Join(t.TempDir(), "netns"),
		Bridge:      "bt" + suffix,
		Table:       "bonsai_test_" + suffix,
		ClusterCIDR: cluster,
		PodCIDR:     pod,
		Logger:      slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	t.Cleanup(func() {
		if node == "" {
			removeEverything(t, cfg)
			return
		}
		if err := inNetns(node, func() error { removeEverything(t, cfg); return nil }); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return cfg
}

// nodeNetns makes a network namespace to be a test's node, with lo up and
// the bridge netfilter sysctls (bridge-nf-call-iptables and -ip6tables,
// which are per namespace) set to brnf, "0" or "1". It is bind-mounted
// under the test's temp dir, and goes when the test ends, with what the
// network left in it.
func nodeNetns(t *testing.T, brnf string) string {
	t.Helper()
	requireRoot(t)
	path := filepath.Join(t.TempDir(), "node")
	if err := CreateNetns(path); err != nil {
		t.Fatalf("create node netns: %v", err)
	}
	t.Cleanup(func() {
		if err := RemoveNetns(path); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := inNetns(path, func() error {
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
		for _, key := range []string{"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables"} {
			if err := os.WriteFile("/proc/sys/"+key, []byte(brnf), 0o644); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("node netns: %v", err)
	}
	return path
}

// newTestNetworkIn starts a network on cfg inside the node namespace
// node: its sockets stay there, and so does all it makes but the pods'
// namespaces.
func newTestNetworkIn(t *testing.T, cfg Config, node string) *Network {
	t.Helper()
	var n *Network
	if err := inNetns(node, func() (err error) {
		n, err = New(context.Background(), cfg)
		return err
	}); err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// removeEverything deletes what a test network may have created, straight
// through the kernel, so that it works even when the Network under test
// is broken or closed.
func removeEverything(t *testing.T, cfg Config) {
	n := &Network{cfg: cfg, nl: &netlink.Handle{}}
	ids := map[string]bool{}
	for _, dir := range []string{ipamDir(cfg.DataDir, false), ipamDir(cfg.DataDir, true)} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			var rec ipamRecord
			if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && json.Unmarshal(data, &rec) == nil {
				ids[rec.ID] = true
			}
		}
	}
	if entries, err := os.ReadDir(cfg.NetnsDir); err == nil {
		for _, e := range entries {
			ids[e.Name()] = true
			if err := RemoveNetns(filepath.Join(cfg.NetnsDir, e.Name())); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	}
	for id := range ids {
		n.deleteLink(n.vethName(id))
	}
	if br, err := netlink.LinkByName(cfg.Bridge); err == nil {
		if links, err := netlink.LinkList(); err == nil {
			for _, l := range links {
				if l.Attrs().MasterIndex == br.Attrs().Index {
					netlink.LinkDel(l)
				}
			}
		}
		if err := netlink.LinkDel(br); err != nil {
			t.Errorf("cleanup: delete bridge %s: %v", cfg.Bridge, err)
		}
	}
	if err := unix.Unmount(cfg.NetnsDir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		t.Errorf("cleanup: unmount %s: %v", cfg.NetnsDir, err)
	}
	if c, err := nftables.New(); err == nil {
		for _, v6 := range []bool{false, true} {
			table := &nftables.Table{Name: cfg.Table, Family: tableFamily(v6)}
			c.AddTable(table)
			c.DelTable(table)
		}
		if err := c.Flush(); err != nil {
			t.Errorf("cleanup: delete nftables table %s: %v", cfg.Table, err)
		}
	}
	if routes, err := retryDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: routeProtocol}, netlink.RT_FILTER_PROTOCOL)
	}); err == nil {
		for _, r := range routes {
			if d, ok := ipNetToPrefix(r.Dst); ok && (cfg.ClusterCIDR.Contains(d.Addr()) || slices.ContainsFunc(cfg.ClusterCIDRs, func(p netip.Prefix) bool { return p.Contains(d.Addr()) })) {
				netlink.RouteDel(&r)
			}
		}
	}
}

// newTestNetwork starts a network on cfg and closes it at the end of the
// test.
func newTestNetwork(t *testing.T, cfg Config) *Network {
	t.Helper()
	n, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func setup(t *testing.T, n *Network, pod Pod) Attachment {
	t.Helper()
	if pod.Namespace == "" {
		pod.Namespace, pod.Name = "default", pod.ID
	}
	att, err := n.Setup(context.Background(), pod)
	if err != nil {
		t.Fatalf("Setup %s: %v", pod.ID, err)
	}
	return att
}

// serveEcho listens inside a pod's namespace (the socket is created
// there, and stays there) and answers each line with "<name>: <line>".
// network is "tcp" or "udp".
func serveEcho(t *testing.T, nsPath, network, addr, name string) {
	t.Helper()
	switch network {
	case "tcp":
		var l net.Listener
		if err := inNetns(nsPath, func() (err error) {
			l, err = net.Listen("tcp", addr)
			return err
		}); err != nil {
			t.Fatalf("listen in %s: %v", nsPath, err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(30 * time.Second))
					r := bufio.NewReader(c)
					for {
						line, err := r.ReadString('\n')
						if err != nil {
							return
						}
						fmt.Fprintf(c, "%s: %s", name, line)
					}
				}()
			}
		}()
	case "udp":
		var pc net.PacketConn
		if err := inNetns(nsPath, func() (err error) {
			pc, err = net.ListenPacket("udp", addr)
			return err
		}); err != nil {
			t.Fatalf("listen in %s: %v", nsPath, err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo(fmt.Appendf(nil, "%s: %s", name, buf[:n]), from)
			}
		}()
	}
}

// serveWho listens on TCP inside a pod's namespace and answers each line
// with the address the connection came from.
func serveWho(t *testing.T, nsPath, addr string) {
	t.Helper()
	var l net.Listener
	if err := inNetns(nsPath, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", nsPath, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
					return
				}
				host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
				fmt.Fprintf(c, "%s\n", host)
			}()
		}
	}()
}

// ask sends one line over a new connection to addr, made from the pod
// namespace nsPath ("" for the host), and returns the answer.
func ask(nsPath, network, addr, line string) (string, error) {
	var c net.Conn
	dial := func() (err error) {
		c, err = net.DialTimeout(network, addr, 2*time.Second)
		return err
	}
	var err error
	if nsPath == "" {
		err = dial()
	} else {
		err = inNetns(nsPath, dial)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	return converse(c, line)
}

func converse(c net.Conn, line string) (string, error) {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(buf[:n]), "\n"), nil
}

func mustAsk(t *testing.T, nsPath, network, addr, line, want string) {
	t.Helper()
	got, err := ask(nsPath, network, addr, line)
	if err != nil {
		t.Fatalf("%s %s from %q: %v", network, addr, nsPath, err)
	}
	if got != want {
		t.Fatalf("%s %s from %q: answer %q, want %q", network, addr, nsPath, got, want)
	}
}

// freePort returns a port nothing on the host listens on, for both TCP
// and UDP, so that a hostPort rule on it hijacks nobody's traffic.
func freePort(t *testing.T) int32 {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if u, err := net.ListenPacket("udp", fmt.Sprintf("0.0.0.0:%d", port)); err == nil {
			u.Close()
			if l, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", port)); err == nil {
				l.Close()
				return int32(port)
			}
		}
	}
	t.Fatal("no free port")
	return 0
}

func linkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}
