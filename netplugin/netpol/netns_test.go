package netpol

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"bonsai.dev/bonsai/netplugin"
)

// requireRoot skips a test that needs to make network namespaces, links
// and nftables tables when it cannot, and fails it in CI, where a missing
// prerequisite must not pass for a success.
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

// noICMPLimits lets ns send as many ICMP errors as probes ask for: the
// SCTP probe's answer is one.
func noICMPLimits(t *testing.T, ns netns.NsHandle) {
	t.Helper()
	sysctlIn(t, ns, "net/ipv4/icmp_ratelimit", "0")
	sysctlIn(t, ns, "net/ipv4/icmp_msgs_per_sec", "100000")
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

// testNode is a node with its pods, each in a namespace of its own, and
// a client outside the pod network (another node, or the world):
//
//	outside 10.201.0.2 ── veth ── 10.201.0.1 node 10.42.0.1 (bridge br0) ── veth ── pod i: 10.42.0.(10+i)
//
// The pods' ports on the bridge are named as testPortName names them.
type testNode struct {
	node, outside netns.NsHandle
	nl            *netlink.Handle
	pods          map[string]*testPod // by namespace/name
	e             *Enforcer
	objs          map[string]any // what the enforcer was fed, by kind/namespace/name
}

type testPod struct {
	ns  netns.NsHandle
	ip  netip.Addr
	obj *corev1.Pod
}

const (
	nodeBridge    = "br0"
	nodeBridgeIP  = "10.42.0.1"
	nodeOutsideIP = "10.201.0.1"
	outsideIP     = "10.201.0.2"
	outsideSeedIP = "10.0.0.5"
)

// servedPorts are the ports every test pod serves, on TCP and UDP: two
// of the probe suite's and those of the seed examples (the endPort one's
// ends, and either side of them).
var servedPorts = []int{80, 81, 6379, 5978, 31999, 32000, 32768, 32769}

func up(t *testing.T, h *netlink.Handle, name string) {
	t.Helper()
	l, err := h.LinkByName(name)
	must(t, "find "+name, err)
	must(t, "set "+name+" up", h.LinkSetUp(l))
}

func addAddr(t *testing.T, h *netlink.Handle, name, cidr string) {
	t.Helper()
	l, err := h.LinkByName(name)
	must(t, "find "+name, err)
	a, err := netlink.ParseAddr(cidr)
	must(t, "parse "+cidr, err)
	must(t, "address "+cidr, h.AddrAdd(l, a))
}

func newTestNode(t *testing.T, brnf string) *testNode {
	t.Helper()
	n := newNodeBase(t, brnf)
	must(t, "add bridge", n.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: nodeBridge}}))
	addAddr(t, n.nl, nodeBridge, nodeBridgeIP+"/24")
	up(t, n.nl, nodeBridge)
	conn, err := openConn(int(n.node))
	must(t, "nftables connection", err)
	t.Cleanup(func() { conn.Close() })
	n.e = newTestEnforcer(t, newKernelTables(conn, TableName(nodeBridge)))
	n.e.bridge = nodeBridge
	n.e.nl = handleIn(t, n.node)
	// The namespace dies with the test, and the tables with it; this
	// also checks that Cleanup's path deletes what the enforcer made.
	tables := n.e.tables // its connection reopens in the node's namespace
	t.Cleanup(func() {
		if err := tables.delete(); err != nil {
			t.Errorf("delete tables: %v", err)
		}
	})
	return n
}

// newNodeBase is a node with no pod network yet, and the outside.
func newNodeBase(t *testing.T, brnf string) *testNode {
	t.Helper()
	requireRoot(t)
	n := &testNode{node: newNetns(t), outside: newNetns(t), pods: map[string]*testPod{}, objs: map[string]any{}}
	n.nl = handleIn(t, n.node)
	node := n.nl
	up(t, node, "lo")
	sysctlIn(t, n.node, "net/bridge/bridge-nf-call-iptables", brnf)
	sysctlIn(t, n.node, "net/ipv4/ip_forward", "1")
	must(t, "add veth to outside", node.LinkAdd(&netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: "out0"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(n.outside))}))
	addAddr(t, node, "out0", nodeOutsideIP+"/24")
	up(t, node, "out0")
	out := handleIn(t, n.outside)
	up(t, out, "lo")
	addAddr(t, out, "eth0", outsideIP+"/24")
	up(t, out, "eth0")
	must(t, "outside's default route", out.RouteAdd(&netlink.Route{Gw: net.ParseIP(nodeOutsideIP)}))
	// The seed examples' egress goes to 10.0.0.0/24: the outside has an
	// address there too, routed through it.
	addAddr(t, out, "eth0", outsideSeedIP+"/32")
	must(t, "route to the seed CIDR", node.RouteAdd(&netlink.Route{Dst: &net.IPNet{IP: net.ParseIP("10.0.0.0").To4(), Mask: net.CIDRMask(24, 32)},
		Gw: net.ParseIP(outsideIP)}))
	// A socket per address, so that each answers from the address it
	// was reached at.
	n.serve(t, n.outside, "outside", outsideIP, outsideSeedIP)
	noICMPLimits(t, n.outside)
	noICMPLimits(t, n.node)
	return n
}

// addPod makes a pod: its namespace and veth on the bridge, its servers
// and its API object (fed to the enforcer by set).
func (n *testNode) addPod(t *testing.T, p *corev1.Pod) *testPod {
	t.Helper()
	ip := netip.MustParseAddr(p.Status.PodIP)
	ns := newNetns(t)
	port := testPortName(string(p.UID))
	must(t, "add veth "+port, n.nl.LinkAdd(&netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: port}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}))
	l, err := n.nl.LinkByName(port)
	must(t, "find "+port, err)
	br, err := n.nl.LinkByName(nodeBridge)
	must(t, "find bridge", err)
	must(t, "enslave "+port, n.nl.LinkSetMaster(l, br))
	// As netplugin sets it: with br_netfilter, a pod's packet to its
	// own Service goes back out of the port it came in on.
	must(t, "hairpin "+port, n.nl.LinkSetHairpin(l, true))
	must(t, "set "+port+" up", n.nl.LinkSetUp(l))
	h := handleIn(t, ns)
	lo, _ := h.LinkByName("lo")
	must(t, "lo up", h.LinkSetUp(lo))
	eth0, err := h.LinkByName("eth0")
	must(t, "find eth0", err)
	must(t, "address", h.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(24, 32)}}))
	must(t, "eth0 up", h.LinkSetUp(eth0))
	must(t, "default route", h.RouteAdd(&netlink.Route{Gw: net.ParseIP(nodeBridgeIP)}))
	noICMPLimits(t, ns)
	tp := &testPod{ns: ns, ip: ip, obj: p}
	n.pods[p.Namespace+"/"+p.Name] = tp
	n.serve(t, ns, p.Namespace+"/"+p.Name)
	return tp
}

// serve answers, on every served port of addrs (every address when
// none), TCP connections and UDP datagrams with the server's name.
func (n *testNode) serve(t *testing.T, ns netns.NsHandle, name string, addrs ...string) {
	t.Helper()
	if len(addrs) == 0 {
		addrs = []string{""}
	}
	for _, port := range servedPorts {
		for _, a := range addrs {
			n.serveOn(t, ns, name, net.JoinHostPort(a, fmt.Sprint(port)))
		}
	}
}

func (n *testNode) serveOn(t *testing.T, ns netns.NsHandle, name, addr string) {
	t.Helper()
	{
		var l net.Listener
		var pc net.PacketConn
		must(t, "listen", inNS(ns, func() (err error) {
			if l, err = net.Listen("tcp4", addr); err != nil {
				return err
			}
			pc, err = net.ListenPacket("udp4", addr)
			return err
		}))
		t.Cleanup(func() { l.Close(); pc.Close() })
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
}

// set feeds objects to the enforcer, as informers would, and syncs.
func (n *testNode) set(t *testing.T, objs ...any) {
	t.Helper()
	for _, o := range objs {
		n.objs[objKey(o)] = o
	}
	feed(n.e, objs...)
	must(t, "sync", n.e.sync())
}

// remove deletes objects from the enforcer's view and syncs.
func (n *testNode) remove(t *testing.T, objs ...any) {
	t.Helper()
	for _, o := range objs {
		delete(n.objs, objKey(o))
		switch o := o.(type) {
		case *corev1.Pod:
			n.e.push(event{kind: podEvent, namespace: o.Namespace, name: o.Name})
		case *corev1.Namespace:
			n.e.push(event{kind: namespaceEvent, name: o.Name})
		default:
			np := o.(interface {
				GetNamespace() string
				GetName() string
			})
			n.e.push(event{kind: policyEvent, namespace: np.GetNamespace(), name: np.GetName()})
		}
	}
	must(t, "sync", n.e.sync())
}

func objKey(o any) string {
	m := o.(interface {
		GetNamespace() string
		GetName() string
	})
	return fmt.Sprintf("%T/%s/%s", o, m.GetNamespace(), m.GetName())
}

// probeTimeout is how long a probe waits before it calls a connection
// dropped; an allowed one answers in well under a millisecond.
const probeTimeout = 500 * time.Millisecond

// probeTCP connects from ns to addr and says whether the server
// answered with want.
func probeTCP(ns netns.NsHandle, addr, want string) error {
	var c net.Conn
	if err := inNS(ns, func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, probeTimeout)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(line); want != "" && got != want {
		return fmt.Errorf("answered by %s, not %s", got, want)
	}
	return nil
}

// udpProbePorts numbers the UDP probes' source ports.
var udpProbePorts atomic.Uint32

// probeUDP sends a datagram from ns to addr and says whether the server
// answered with want.
func probeUDP(ns netns.NsHandle, addr, want string) error {
	var pc net.PacketConn
	if err := inNS(ns, func() (err error) {
		// A source port no earlier probe of this test run used: an
		// ephemeral one may be reused while conntrack still holds an
		// earlier probe's flow, which an earlier case allowed, and
		// established flows pass whatever the policies now say.
		for range 100 {
			port := 10000 + udpProbePorts.Add(1)%20000
			if pc, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", port)); err == nil {
				break
			}
		}
		return err
	}); err != nil {
		return err
	}
	defer pc.Close()
	to, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return err
	}
	if _, err := pc.WriteTo([]byte("?"), to); err != nil {
		return err
	}
	pc.SetReadDeadline(time.Now().Add(probeTimeout))
	buf := make([]byte, 64)
	n, _, err := pc.ReadFrom(buf)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); want != "" && got != want {
		return fmt.Errorf("answered by %s, not %s", got, want)
	}
	return nil
}

// probeSCTP sends an SCTP INIT from ns to addr:port over a raw socket
// and says whether it got there. This kernel has no SCTP sockets, so
// nothing listens: a host that receives the packet answers "protocol
// unreachable", which conntrack relates to the flow and lets back. The
// packet goes out of an IPPROTO_RAW socket, which receives nothing: a
// raw SCTP socket would take in the probes of other pods, and its host
// would then not answer them.
func probeSCTP(ns netns.NsHandle, addr netip.Addr, port uint16) error {
	var out, in int
	if err := inNS(ns, func() (err error) {
		if out, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW); err != nil {
			return err
		}
		in, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
		return err
	}); err != nil {
		return err
	}
	defer unix.Close(out)
	defer unix.Close(in)
	// The IP header, which the kernel completes (source, ID, checksum,
	// length), then SCTP's.
	ip := make([]byte, 20+12+20)
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_SCTP
	dst := addr.As4()
	copy(ip[16:], dst[:])
	pkt := ip[20:]
	binary.BigEndian.PutUint16(pkt[0:], 40000)
	binary.BigEndian.PutUint16(pkt[2:], port)
	// The INIT chunk: type 1, flags, length 20, initiate tag, a_rwnd,
	// streams out and in, initial TSN.
	chunk := pkt[12:]
	chunk[0] = 1
	binary.BigEndian.PutUint16(chunk[2:], 20)
	binary.BigEndian.PutUint32(chunk[4:], 0x01020304)
	binary.BigEndian.PutUint32(chunk[8:], 65535)
	binary.BigEndian.PutUint16(chunk[12:], 1)
	binary.BigEndian.PutUint16(chunk[14:], 1)
	binary.BigEndian.PutUint32(chunk[16:], 1)
	binary.LittleEndian.PutUint32(pkt[8:], crc32.Checksum(pkt, crc32.MakeTable(crc32.Castagnoli)))
	to := &unix.SockaddrInet4{Addr: addr.As4()}
	if err := unix.Sendto(out, ip, 0, to); err != nil {
		return err
	}
	tv := unix.NsecToTimeval(probeTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(in, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := unix.Recvfrom(in, buf, 0)
		if err != nil {
			return err
		}
		f, ok := from.(*unix.SockaddrInet4)
		ihl := int(buf[0]&0xf) * 4
		// Destination unreachable, protocol unreachable, about this
		// probe: the error quotes the packet's IP header and ports.
		icmp := buf[ihl:n]
		if !ok || netip.AddrFrom4(f.Addr) != addr || len(icmp) < 8+20+4 || icmp[0] != 3 || icmp[1] != 2 {
			continue
		}
		orig := icmp[8:]
		oihl := int(orig[0]&0xf) * 4
		if len(orig) >= oihl+4 && orig[9] == unix.IPPROTO_SCTP && binary.BigEndian.Uint16(orig[oihl+2:]) == port {
			return nil
		}
	}
}

// probe says whether a connection from ns to dst (answering as name)
// on "tcp/80", "udp/81" or "sctp/80" goes through.
func probe(ns netns.NsHandle, dst netip.Addr, name, port string) error {
	proto, num, _ := strings.Cut(port, "/")
	addr := net.JoinHostPort(dst.String(), num)
	switch proto {
	case "tcp":
		return probeTCP(ns, addr, name)
	case "udp":
		return probeUDP(ns, addr, name)
	case "sctp":
		var p uint16
		fmt.Sscan(num, &p)
		return probeSCTP(ns, dst, p)
	}
	return fmt.Errorf("unknown protocol %q", proto)
}

// peer is one end of a probe: a pod, the node or the outside client.
type peer struct {
	name string
	ns   netns.NsHandle
	ip   netip.Addr
	pod  *pod // nil off the pod network
}

// answer is the name the peer's servers answer with.
func (p peer) answer() string {
	if strings.HasPrefix(p.name, "outside") {
		return "outside"
	}
	return p.name
}

func (n *testNode) peers(t *testing.T) []peer {
	t.Helper()
	var out []peer
	for _, k := range slices.Sorted(mapsKeys(n.pods)) {
		tp := n.pods[k]
		out = append(out, peer{name: k, ns: tp.ns, ip: tp.ip})
	}
	return append(out, peer{name: "outside", ns: n.outside, ip: netip.MustParseAddr(outsideIP)},
		peer{name: "outside-seed", ns: n.outside, ip: netip.MustParseAddr(outsideSeedIP)})
}

func mapsKeys[M ~map[string]V, V any](m M) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkAgainstModel probes every pair of peers on every served port of
// TCP and UDP, in parallel, and compares with what the model says of the
// policies the enforcer compiled.
func (n *testNode) checkAgainstModel(t *testing.T, portsToProbe ...string) {
	t.Helper()
	if len(portsToProbe) == 0 {
		for _, p := range servedPorts {
			portsToProbe = append(portsToProbe, fmt.Sprintf("tcp/%d", p), fmt.Sprintf("udp/%d", p))
		}
	}
	// The model, of what the test gave the enforcer.
	var objs []any
	var nps []*networkingv1.NetworkPolicy
	for _, o := range n.objs {
		objs = append(objs, o)
		if np, ok := o.(*networkingv1.NetworkPolicy); ok {
			nps = append(nps, np)
		}
	}
	w := testWorld(t, objs...)
	policies := compileAll(w, nps...)
	peers := n.peers(t)
	for i := range peers {
		if tp := n.pods[peers[i].name]; tp != nil {
			peers[i].pod = w.pod(tp.obj.Namespace, tp.obj.Name)
		}
	}
	type result struct {
		line     string
		mismatch bool
	}
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	// Each probe holds a thread in a namespace; denied ones wait out
	// probeTimeout.
	slots := make(chan struct{}, 64)
	for _, src := range peers {
		for _, dst := range peers {
			// The outside's second address receives probes only: what
			// it sends leaves from its first.
			if src.name == dst.name || src.name == "outside-seed" || strings.HasPrefix(src.name+dst.name, "outsideoutside") {
				continue
			}
			for _, port := range portsToProbe {
				wg.Add(1)
				go func() {
					defer wg.Done()
					slots <- struct{}{}
					defer func() { <-slots }()
					proto, num := parsePortT(port)
					want := allowed(policies, connection{src: src.ip, dst: dst.ip, srcPod: src.pod, dstPod: dst.pod, proto: proto, port: num})
					err := probe(src.ns, dst.ip, dst.answer(), port)
					got := err == nil
					line := fmt.Sprintf("%-16s -> %-16s %-8s allowed=%-5v model=%v", src.name, dst.name, port, got, want)
					if got != want && err != nil {
						line += " (" + err.Error() + ")"
					}
					mu.Lock()
					results = append(results, result{line, got != want})
					mu.Unlock()
				}()
			}
		}
	}
	wg.Wait()
	slices.SortFunc(results, func(a, b result) int { return strings.Compare(a.line, b.line) })
	bad := 0
	for _, r := range results {
		if r.mismatch {
			bad++
		}
	}
	if bad > 0 {
		var b strings.Builder
		for _, r := range results {
			mark := "  "
			if r.mismatch {
				mark = "! "
			}
			b.WriteString(mark + r.line + "\n")
		}
		t.Errorf("%d of %d probes disagree with the model:\n%s", bad, len(results), b.String())
	}
}

func parsePortT(s string) (protocol, uint16) {
	proto, num, _ := strings.Cut(s, "/")
	var n uint16
	fmt.Sscan(num, &n)
	return map[string]protocol{"tcp": protoTCP, "udp": protoUDP, "sctp": protoSCTP}[proto], n
}

// expect probes one connection and fails the test unless it goes
// through (want) or is stopped (!want).
func (n *testNode) expect(t *testing.T, from, to, port string, want bool) {
	t.Helper()
	src, dst := n.peer(t, from), n.peer(t, to)
	err := probe(src.ns, dst.ip, dst.answer(), port)
	if got := err == nil; got != want {
		t.Errorf("%s -> %s %s: allowed %v, want %v (%v)", from, to, port, got, want, err)
	}
}

func (n *testNode) peer(t *testing.T, name string) peer {
	t.Helper()
	if name == "node" {
		return peer{name: "node", ns: n.node, ip: netip.MustParseAddr(nodeBridgeIP)}
	}
	for _, p := range n.peers(t) {
		if p.name == name {
			return p
		}
	}
	t.Fatalf("no peer %s", name)
	return peer{}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EAGAIN)
}
