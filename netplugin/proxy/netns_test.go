package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"bonsai.dev/bonsai/netplugin"
)

// requireRoot skips a test that needs to make network namespaces, links
// and nftables tables when it cannot, and fails it in CI, where a missing
// prerequisite must not pass for a success (as testsupport/testenv.Require).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	reason := "missing prerequisite: root (CAP_NET_ADMIN, CAP_SYS_ADMIN) to create network namespaces and nftables tables"
	if os.Getenv("CI") == "true" {
		t.Fatal(reason + " (CI=true: prerequisites are mandatory)")
	}
	t.Skip(reason)
}

// newNetns makes an unnamed network namespace that lives until the test
// ends: closing the last handle frees it, and with it every link,
// address, route and nftables table inside.
func newNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	type result struct {
		ns  netns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		ns, err := netns.New() // moves this thread into it
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		if err := netns.Set(orig); err != nil {
			ch <- result{err: err}
			return // still locked: the thread dies with the goroutine
		}
		runtime.UnlockOSThread()
		ch <- result{ns: ns}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("create netns: %v", r.err)
	}
	t.Cleanup(func() { r.ns.Close() })
	return r.ns
}

// inNS runs fn on a thread inside ns; sockets fn makes stay there.
func inNS(ns netns.NsHandle, fn func() error) error { return netplugin.Within(ns, fn) }

func sysctlIn(t *testing.T, ns netns.NsHandle, key, value string) {
	t.Helper()
	if err := inNS(ns, func() error { return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644) }); err != nil {
		t.Fatalf("sysctl %s: %v", key, err)
	}
}

func handleIn(t *testing.T, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// testNetwork is a node, a client and endpoints, each in a namespace of
// its own:
//
//	client 10.201.0.2 ── veth ── 10.201.0.1 node 10.200.0.1 (bridge br0) ── veth ── endpoint i: 10.200.0.(10+i)
//
// The client is in a subnet of its own, so its traffic and the replies to
// it are routed through the node, where the rules are.
type testNetwork struct {
	node, client netns.NsHandle
	endpoints    []netns.NsHandle
	endpointIPs  []netip.Addr
}

const (
	nodeBridge   = "br0"
	nodeBridgeIP = "10.200.0.1"
	nodeClientIP = "10.201.0.1"
	clientIP     = "10.201.0.2"
)

func newTestNetwork(t *testing.T, endpoints int) *testNetwork {
	t.Helper()
	requireRoot(t)
	n := &testNetwork{node: newNetns(t), client: newNetns(t)}
	node := handleIn(t, n.node)
	up := func(h *netlink.Handle, name string) {
		l, err := h.LinkByName(name)
		must(t, "find "+name, err)
		must(t, "set "+name+" up", h.LinkSetUp(l))
	}
	addAddr := func(h *netlink.Handle, name, cidr string) {
		l, err := h.LinkByName(name)
		must(t, "find "+name, err)
		a, err := netlink.ParseAddr(cidr)
		must(t, "parse "+cidr, err)
		must(t, "address "+cidr, h.AddrAdd(l, a))
	}
	defaultVia := func(h *netlink.Handle, gw string) {
		must(t, "default route", h.RouteAdd(&netlink.Route{Gw: net.ParseIP(gw)}))
	}
	up(node, "lo")
	must(t, "add bridge", node.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: nodeBridge}}))
	addAddr(node, nodeBridge, nodeBridgeIP+"/24")
	up(node, nodeBridge)
	sysctlIn(t, n.node, "net/ipv4/ip_forward", "1")
	// A NodePort reached at 127.0.0.1 leaves DNAT'd with source
	// 127.0.0.1 until masqueraded; the kernel routes such a packet out
	// of the bridge only with route_localnet, as netplugin sets it.
	sysctlIn(t, n.node, "net/ipv4/conf/"+nodeBridge+"/route_localnet", "1")

	// The node's way out, as a real host has one: traffic to service
	// addresses that no rule DNATs is routed there, through the
	// forward hook, where the no-endpoint checks reject it.
	// (A veth with both ends here: this kernel may lack dummy links.)
	must(t, "add uplink", node.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink"}, PeerName: "uplink-peer"}))
	addAddr(node, "uplink", "10.202.0.1/24")
	up(node, "uplink")
	up(node, "uplink-peer")
	defaultVia(node, "10.202.0.254")

	veth := func(host string, peer netns.NsHandle) {
		must(t, "add veth "+host, node.LinkAdd(&netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(peer))}))
	}
	veth("c0", n.client)
	addAddr(node, "c0", nodeClientIP+"/24")
	up(node, "c0")
	client := handleIn(t, n.client)
	up(client, "lo")
	addAddr(client, "eth0", clientIP+"/24")
	up(client, "eth0")
	defaultVia(client, nodeClientIP)

	br, err := node.LinkByName(nodeBridge)
	must(t, "find "+nodeBridge, err)
	for i := range endpoints {
		ns := newNetns(t)
		name := fmt.Sprintf("e%d", i)
		veth(name, ns)
		l, err := node.LinkByName(name)
		must(t, "find "+name, err)
		must(t, "enslave "+name, node.LinkSetMaster(l, br))
		// With br_netfilter, an endpoint's packet to its own Service is
		// DNAT'd in the bridge and sent back out of the port it came
		// in on, which a bridge does only in hairpin mode (netplugin
		// sets it on every pod's port).
		must(t, "hairpin "+name, node.LinkSetHairpin(l, true))
		up(node, name)
		h := handleIn(t, ns)
		up(h, "lo")
		ip := netip.AddrFrom4([4]byte{10, 200, 0, byte(10 + i)})
		addAddr(h, "eth0", ip.String()+"/24")
		up(h, "eth0")
		defaultVia(h, nodeBridgeIP)
		n.endpoints = append(n.endpoints, ns)
		n.endpointIPs = append(n.endpointIPs, ip)
	}
	return n
}

// serve answers every connection to port in endpoint i with
// "<name> <client address>" and closes it.
func (n *testNetwork) serve(t *testing.T, i int, port int, name string) {
	t.Helper()
	var l net.Listener
	must(t, "listen", inNS(n.endpoints[i], func() (err error) {
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}))
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "%s %s\n", name, host)
			c.Close()
		}
	}()
}

// dial connects from ns to addr and returns the server's answer: the
// endpoint's name and the client address it saw.
func dial(ns netns.NsHandle, addr string) (name, seenFrom string, err error) {
	var c net.Conn
	if err := inNS(ns, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		return "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", "", fmt.Errorf("read from %s: %w", addr, err)
	}
	name, seenFrom, _ = strings.Cut(strings.TrimSpace(line), " ")
	return name, seenFrom, nil
}

// hits connects n times and counts the answers by endpoint name.
func hits(t *testing.T, ns netns.NsHandle, addr string, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for range n {
		name, _, err := dial(ns, addr)
		if err != nil {
			t.Fatalf("connect to %s: %v", addr, err)
		}
		out[name]++
	}
	return out
}

func dialTimeout(addr string, d time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, d)
}

// serveUDP answers every datagram to port in endpoint i with its name.
func (n *testNetwork) serveUDP(t *testing.T, i int, port int, name string) {
	t.Helper()
	var pc net.PacketConn
	must(t, "listen udp", inNS(n.endpoints[i], func() (err error) {
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	}))
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(name), from)
		}
	}()
}

// udpClient is one UDP socket in ns: every datagram it sends to a Service
// is the same flow to conntrack.
type udpClient struct{ pc net.PacketConn }

func newUDPClient(t *testing.T, ns netns.NsHandle) *udpClient {
	t.Helper()
	var pc net.PacketConn
	must(t, "udp socket", inNS(ns, func() (err error) {
		pc, err = net.ListenPacket("udp", ":0")
		return err
	}))
	t.Cleanup(func() { pc.Close() })
	return &udpClient{pc: pc}
}

// ask sends one datagram to addr and returns the answer.
func (c *udpClient) ask(addr string) (string, error) {
	answer, _, err := c.askFrom(addr)
	return answer, err
}

// askFrom sends one datagram to addr and returns the answer and the
// address it came from.
func (c *udpClient) askFrom(addr string) (answer, from string, err error) {
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return "", "", err
	}
	if _, err := c.pc.WriteTo([]byte("?"), to); err != nil {
		return "", "", err
	}
	c.pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, src, err := c.pc.ReadFrom(buf)
	if err != nil {
		return "", "", err
	}
	return string(buf[:n]), src.String(), nil
}
