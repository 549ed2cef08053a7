package netpol

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// testCast are the test node's pods: all on this node, with named ports
// ("serve" is TCP 81, "dns" is UDP 80).
func testCast() []*corev1.Pod {
	named := []podOpt{withPort("serve", tcp, 81), withPort("dns", udp, 80)}
	return []*corev1.Pod{
		newPod("default", "db", "10.42.0.10", map[string]string{"role": "db"}, named...),
		newPod("default", "frontend", "10.42.0.11", map[string]string{"role": "frontend"}, named...),
		newPod("default", "backend", "10.42.0.12", map[string]string{"role": "backend"}, named...),
		newPod("other", "client", "10.42.0.20", map[string]string{"role": "client"}, named...),
		newPod("plain", "frontend", "10.42.0.30", map[string]string{"role": "frontend"}, named...),
	}
}

func testNamespaces() []any {
	return []any{
		newNamespace("default", nil),
		newNamespace("other", map[string]string{"project": "myproject"}),
		newNamespace("plain", nil),
	}
}

// newCastNode is a test node with the namespaces and pods of the cast,
// known to the enforcer.
func newCastNode(t *testing.T, brnf string) *testNode {
	t.Helper()
	n := newTestNode(t, brnf)
	objs := testNamespaces()
	for _, p := range testCast() {
		n.addPod(t, p)
		objs = append(objs, p)
	}
	n.set(t, objs...)
	return n
}

// policyCases are policies whose every connection the kernel must treat
// as the model says.
func policyCases() []struct {
	name     string
	policies []*networkingv1.NetworkPolicy
} {
	return []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
	}{
		{"no policies", nil},
		{"test-network-policy", []*networkingv1.NetworkPolicy{testNetworkPolicy()}},
		{"default-deny ingress", []*networkingv1.NetworkPolicy{defaultDenyIngress("default")}},
		{"allow-all ingress", []*networkingv1.NetworkPolicy{defaultDenyIngress("default"), allowAllIngress("default")}},
		{"default-deny egress", []*networkingv1.NetworkPolicy{defaultDenyEgress("default")}},
		{"allow-all egress", []*networkingv1.NetworkPolicy{defaultDenyEgress("default"), allowAllEgress("default")}},
		{"default-deny all", []*networkingv1.NetworkPolicy{defaultDenyAll("default")}},
		{"endPort", []*networkingv1.NetworkPolicy{
			newPolicy("default", "range", sel("role", "db"), types_(tEgress),
				egressRules(egressRule(ports(portRangeOf(tcp, 79, 80), portRangeOf(udp, 5000, 6000)), blockPeer("10.0.0.0/8")))),
		}},
		{"ipBlock with except, ingress and egress", []*networkingv1.NetworkPolicy{
			newPolicy("default", "blocks", sel(), types_(tIngress, tEgress),
				ingressRules(ingressRule(nil, blockPeer("10.42.0.0/24", "10.42.0.11/32"), blockPeer("10.201.0.0/24"))),
				egressRules(egressRule(ports(port(tcp, 80)), blockPeer("0.0.0.0/0", "10.42.0.20/32")))),
		}},
		{"named ports", []*networkingv1.NetworkPolicy{
			newPolicy("default", "named", sel("role", "db"),
				ingressRules(ingressRule(ports(namedPortRef(tcp, "serve"), namedPortRef(udp, "dns")), nsPeer(sel()))),
				egressRules(egressRule(ports(namedPortRef(tcp, "serve")), bothPeer(sel(), sel("role", "frontend"))))),
		}},
		{"pods and namespaces, together and apart", []*networkingv1.NetworkPolicy{
			newPolicy("default", "and", sel("role", "db"), ingressRules(ingressRule(ports(port(tcp, 80)),
				bothPeer(sel("kubernetes.io/metadata.name", "plain"), sel("role", "frontend"))))),
			newPolicy("default", "or", sel("role", "backend"), ingressRules(ingressRule(ports(port(udp, 81)),
				nsPeer(sel("project", "myproject")), podPeer(sel("role", "frontend"))))),
		}},
		{"both ends must allow", []*networkingv1.NetworkPolicy{
			allowAllIngress("default"),
			newPolicy("plain", "no-egress", sel(), types_(tEgress)),
			newPolicy("other", "egress-to-db", sel(), types_(tEgress), egressRules(egressRule(nil, bothPeer(sel(), sel("role", "db"))))),
		}},
	}
}

// TestEnforcement checks the kernel against the model, probe by probe,
// for policy sets covering the API's semantics, with bridged traffic
// reaching the IP hooks (bridge-nf-call-iptables=1) and not (0).
func TestEnforcement(t *testing.T) {
	for _, brnf := range []string{"0", "1"} {
		t.Run("bridge-nf-call-iptables="+brnf, func(t *testing.T) {
			t.Parallel()
			n := newCastNode(t, brnf)
			var current []*networkingv1.NetworkPolicy
			for _, tc := range policyCases() {
				t.Run(tc.name, func(t *testing.T) {
					for _, np := range current {
						n.remove(t, np)
					}
					current = tc.policies
					var objs []any
					for _, np := range tc.policies {
						objs = append(objs, np)
					}
					n.set(t, objs...)
					n.checkAgainstModel(t, "tcp/80", "udp/80", "tcp/81", "udp/81")
				})
			}
			t.Run("seed ports", func(t *testing.T) {
				for _, np := range current {
					n.remove(t, np)
				}
				current = nil
				n.set(t, testNetworkPolicy())
				current = []*networkingv1.NetworkPolicy{testNetworkPolicy()}
				n.checkAgainstModel(t, "tcp/6379", "udp/6379", "tcp/5978")
				n.expect(t, "default/frontend", "default/db", "tcp/6379", true)
				n.expect(t, "other/client", "default/db", "tcp/6379", true)
				n.expect(t, "plain/frontend", "default/db", "tcp/6379", false)
				n.expect(t, "default/backend", "default/db", "tcp/6379", false)
				n.expect(t, "default/db", "default/frontend", "tcp/80", false)
				n.expect(t, "default/db", "outside-seed", "tcp/5978", true)
				n.expect(t, "default/db", "outside-seed", "tcp/6379", false)
				n.expect(t, "default/db", "outside", "tcp/5978", false)

				// The endPort example, as written.
				n.remove(t, testNetworkPolicy())
				n.set(t, multiPortEgress())
				current = []*networkingv1.NetworkPolicy{multiPortEgress()}
				n.checkAgainstModel(t, "tcp/31999", "tcp/32000", "tcp/32768", "tcp/32769", "udp/32000")
				n.expect(t, "default/db", "outside-seed", "tcp/32000", true)
				n.expect(t, "default/db", "outside-seed", "tcp/32768", true)
				n.expect(t, "default/db", "outside-seed", "tcp/31999", false)
				n.expect(t, "default/db", "outside-seed", "tcp/32769", false)
				n.expect(t, "default/db", "outside-seed", "udp/32000", false)
				n.expect(t, "default/db", "outside", "tcp/32000", false)
			})
			t.Run("the node reaches its pods, replies pass", func(t *testing.T) {
				for _, np := range current {
					n.remove(t, np)
				}
				current = []*networkingv1.NetworkPolicy{defaultDenyAll("default"),
					newPolicy("default", "frontend-to-db", sel("role", "db"), ingressRules(ingressRule(nil, podPeer(sel("role", "frontend")))))}
				n.set(t, current[0], current[1])
				for _, to := range []string{"default/db", "default/frontend"} {
					n.expect(t, "node", to, "tcp/80", true)
					n.expect(t, "node", to, "udp/80", true)
				}
				// db may send nothing of its own, yet answers frontend.
				n.expect(t, "default/frontend", "default/db", "tcp/80", false) // frontend's own egress is isolated
				n.remove(t, current[0])
				current = current[1:]
				n.set(t, newPolicy("default", "db-no-egress", sel("role", "db"), types_(tEgress)))
				current = append(current, newPolicy("default", "db-no-egress", sel("role", "db"), types_(tEgress)))
				n.expect(t, "default/frontend", "default/db", "tcp/80", true)
				n.expect(t, "default/frontend", "default/db", "udp/80", true)
				n.expect(t, "default/db", "default/frontend", "tcp/80", false)
				n.expect(t, "default/backend", "default/db", "tcp/80", false)
			})
			t.Run("through a Service", func(t *testing.T) {
				// A Service's DNAT, as the proxy does it: a pod that
				// may not reach the endpoint may not through the
				// Service either, whether the node routes the reply
				// back (masqueraded) or br_netfilter bridges it.
				serviceNAT(t, n, netip.MustParseAddr("10.96.0.10"), n.pods["default/db"].ip)
				svc := netip.MustParseAddr("10.96.0.10")
				for _, port := range []string{"tcp/80", "udp/80"} {
					if err := probe(n.pods["default/frontend"].ns, svc, "default/db", port); err != nil {
						t.Errorf("frontend -> Service of db %s: %v, want allowed", port, err)
					}
					if err := probe(n.pods["default/backend"].ns, svc, "default/db", port); err == nil {
						t.Errorf("backend -> Service of db %s: allowed, want stopped", port)
					}
				}
				// And the pod reaches itself through its Service:
				// loopback follows no policy.
				if err := probe(n.pods["default/db"].ns, svc, "default/db", "tcp/80"); err != nil {
					t.Errorf("db -> its own Service: %v", err)
				}
			})
		})
	}
}

// serviceNAT makes the node DNAT svc to endpoint on every port, in a
// table of the test's, with the masquerade the service proxy applies to
// Service traffic that leaves through the bridge it came in on.
func serviceNAT(t *testing.T, n *testNode, svc, endpoint netip.Addr) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.node)))
	must(t, "nftables", err)
	table := c.AddTable(&nftables.Table{Name: "svc-test", Family: nftables.TableFamilyIPv4})
	accept := nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{Name: "pre", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	post := c.AddChain(&nftables.Chain{Name: "post", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: table, Chain: pre, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: svc.AsSlice()},
		&expr.Immediate{Register: 1, Data: endpoint.AsSlice()},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}})
	dnat := []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(1 << 5), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
	// A pod that reaches itself through the Service.
	c.AddRule(&nftables.Rule{Table: table, Chain: post, Exprs: append(append([]expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: endpoint.AsSlice()},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: endpoint.AsSlice()},
	}, dnat...), &expr.Masq{})})
	br := make([]byte, unix.IFNAMSIZ)
	copy(br, nodeBridge)
	c.AddRule(&nftables.Rule{Table: table, Chain: post, Exprs: append(append([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: br},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: br},
	}, dnat...), &expr.Masq{})})
	must(t, "write the Service's table", c.Flush())
	t.Cleanup(func() {
		c.DelTable(table)
		if err := c.Flush(); err != nil {
			t.Errorf("delete the Service's table: %v", err)
		}
	})
}

// TestSCTP probes SCTP, which this kernel only routes and tracks: a
// policy that allows SCTP on a port does not allow TCP there, and the
// other way round.
func TestSCTP(t *testing.T) {
	for _, brnf := range []string{"0", "1"} {
		t.Run("bridge-nf-call-iptables="+brnf, func(t *testing.T) {
			t.Parallel()
			n := newCastNode(t, brnf)
			n.expect(t, "default/frontend", "default/db", "sctp/80", true)
			n.set(t, newPolicy("default", "sctp-only", sel("role", "db"), ingressRules(ingressRule(ports(port(sctp, 80))))),
				newPolicy("default", "tcp-only", sel("role", "backend"), ingressRules(ingressRule(ports(port(tcp, 80))))))
			n.checkAgainstModel(t, "sctp/80", "sctp/81", "tcp/80")
			n.expect(t, "default/frontend", "default/db", "sctp/80", true)
			n.expect(t, "default/frontend", "default/db", "sctp/81", false)
			n.expect(t, "default/frontend", "default/db", "tcp/80", false)
			n.expect(t, "default/frontend", "default/backend", "sctp/80", false)
			n.expect(t, "default/frontend", "default/backend", "tcp/80", true)
		})
	}
}

// TestIncremental changes what policies depend on, one thing at a time,
// and checks each change takes effect at the next sync, by elements
// alone where no policy changed, and that a connection the policies
// deny never goes through while they change.
func TestIncremental(t *testing.T) {
	for _, brnf := range []string{"0", "1"} {
		t.Run("bridge-nf-call-iptables="+brnf, func(t *testing.T) {
			t.Parallel()
			n := newCastNode(t, brnf)
			policy := newPolicy("default", "db", sel("role", "db"), ingressRules(
				ingressRule(ports(port(tcp, 80)), podPeer(sel("role", "frontend"))),
				ingressRule(ports(namedPortRef(tcp, "serve")), nsPeer(sel("team", "blue")))))
			n.set(t, policy)
			n.expect(t, "default/frontend", "default/db", "tcp/80", true)
			n.expect(t, "default/backend", "default/db", "tcp/80", false)

			// A prober that may never get through, running all along.
			var leaks, probes atomic.Int64
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				src, dst := n.pods["plain/frontend"], n.pods["default/db"]
				for {
					select {
					case <-stop:
						return
					default:
					}
					for _, port := range []string{"tcp/80", "udp/80"} {
						probes.Add(1)
						if probe(src.ns, dst.ip, "default/db", port) == nil {
							leaks.Add(1)
						}
					}
				}
			}()

			step := func(what string, objs ...any) time.Duration {
				t.Helper()
				start := time.Now()
				n.set(t, objs...)
				took := time.Since(start)
				t.Logf("%s: synced in %v", what, took)
				return took
			}
			chainsBefore := n.chainCount(t)

			backend := n.pods["default/backend"].obj.DeepCopy()
			backend.Labels = map[string]string{"role": "frontend"}
			step("pod labels", backend)
			n.expect(t, "default/backend", "default/db", "tcp/80", true)
			backend.Labels = map[string]string{"role": "backend"}
			step("pod labels back", backend)
			n.expect(t, "default/backend", "default/db", "tcp/80", false)

			step("namespace labels", newNamespace("other", map[string]string{"project": "myproject", "team": "blue"}))
			n.expect(t, "other/client", "default/db", "tcp/81", true)
			n.expect(t, "other/client", "default/db", "tcp/80", false)

			// A new pod, selected by the policy: isolated at once,
			// reachable as the policy says.
			np := newPod("default", "db-2", "10.42.0.13", map[string]string{"role": "db"}, withPort("serve", tcp, 80))
			n.addPod(t, np)
			step("new pod", np)
			n.expect(t, "default/backend", "default/db-2", "tcp/80", false)
			n.expect(t, "default/frontend", "default/db-2", "tcp/80", true)
			// Its "serve" is port 80: the namespace rule now opens 80.
			n.expect(t, "other/client", "default/db-2", "tcp/80", true)
			n.expect(t, "other/client", "default/db-2", "tcp/81", false)
			if got := n.chainCount(t); got != chainsBefore {
				t.Errorf("pods' and namespaces' changes wrote chains: %d chains, were %d", got, chainsBefore)
			}

			edited := policy.DeepCopy()
			edited.Spec.Ingress[0].Ports = ports(port(tcp, 81))
			step("policy edit", edited)
			n.expect(t, "default/frontend", "default/db", "tcp/80", false)
			n.expect(t, "default/frontend", "default/db", "tcp/81", true)

			for i := range 20 {
				edited = edited.DeepCopy()
				edited.Spec.Ingress[0].Ports = ports(port(tcp, int(80+i%2)))
				step("policy edit", edited)
			}
			n.remove(t, policy)
			n.set(t, defaultDenyIngress("default"))
			n.expect(t, "default/frontend", "default/db", "tcp/80", false)
			n.checkAgainstModel(t, "tcp/80", "udp/81")
			close(stop)
			<-done
			if leaks.Load() > 0 {
				t.Errorf("%d of %d probes from a pod the policies always denied went through", leaks.Load(), probes.Load())
			}
			if probes.Load() < 4 {
				t.Errorf("only %d probes ran while the policies changed", probes.Load())
			}
		})
	}
}

// chainCount counts the chains of the ip table in the kernel.
func (n *testNode) chainCount(t *testing.T) int {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.node)))
	must(t, "nftables", err)
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	must(t, "list chains", err)
	count := 0
	for _, ch := range chains {
		if ch.Table.Name == TableName(nodeBridge) {
			count++
		}
	}
	return count
}

// TestRestartKeepsTheRules stops an enforcer and starts another on the
// same node: the rules hold in between, and the new one replaces them
// with what the policies now say.
func TestRestartKeepsTheRules(t *testing.T) {
	n := newCastNode(t, "0")
	n.set(t, defaultDenyIngress("default"))
	n.expect(t, "default/frontend", "default/db", "tcp/80", false)

	// Stopped: its connection closes, the tables stay.
	n.e.tables.conn.Close()
	n.expect(t, "default/frontend", "default/db", "tcp/80", false)
	n.expect(t, "plain/frontend", "other/client", "tcp/80", true)

	conn, err := openConn(int(n.node))
	must(t, "nftables connection", err)
	t.Cleanup(func() { conn.Close() })
	old := n.e
	n.e = newTestEnforcer(t, newKernelTables(conn, TableName(nodeBridge)))
	n.e.bridge, n.e.nl = nodeBridge, old.nl
	// While it was down the policy changed.
	var objs []any
	for _, o := range n.objs {
		if np, ok := o.(*networkingv1.NetworkPolicy); ok && np.Name == "default-deny-ingress" {
			continue
		}
		objs = append(objs, o)
	}
	objs = append(objs, allowAllIngress("default"), defaultDenyIngress("other"))
	n.set(t, objs...)
	n.expect(t, "default/frontend", "default/db", "tcp/80", true)
	n.expect(t, "plain/frontend", "other/client", "tcp/80", false)
	n.checkAgainstModel(t, "tcp/80")
}

// TestSpoofedSources: a pod may not pass for another, neither to get in
// where the other is allowed nor to get out where it is not.
func TestSpoofedSources(t *testing.T) {
	for _, brnf := range []string{"0", "1"} {
		t.Run("bridge-nf-call-iptables="+brnf, func(t *testing.T) {
			t.Parallel()
			n := newCastNode(t, brnf)
			n.set(t, newPolicy("default", "db-from-frontend", sel("role", "db"),
				ingressRules(ingressRule(ports(port(udp, 9999)), podPeer(sel("role", "frontend"))))),
				newPolicy("default", "backend-no-egress", sel("role", "backend"), types_(tEgress)))
			db, frontend, backend := n.pods["default/db"], n.pods["default/frontend"], n.pods["default/backend"]
			plain := n.pods["plain/frontend"]
			inDB := newUDPSink(t, db.ns, ":9999")
			outside := newUDPSink(t, n.outside, ":9998")

			// The real frontend gets in.
			if !inDB.reached(t, frontend.ns, frontend.ip, netip.AddrPortFrom(db.ip, 9999), true) {
				t.Fatal("frontend's own datagrams did not reach db")
			}
			// backend, saying it is frontend, does not.
			if inDB.reached(t, backend.ns, frontend.ip, netip.AddrPortFrom(db.ip, 9999), false) {
				t.Error("backend, with frontend's address, reached db, which admits frontend alone")
			}
			// Nor does backend, which may send nothing, get out as a
			// pod no policy holds.
			toOutside := netip.AddrPortFrom(netip.MustParseAddr(outsideIP), 9998)
			if outside.reached(t, backend.ns, plain.ip, toOutside, false) {
				t.Error("backend, isolated for egress, got out with plain/frontend's address")
			}
			if !outside.reached(t, plain.ns, plain.ip, toOutside, true) {
				t.Error("plain/frontend's own datagrams did not get out")
			}
		})
	}
}

// udpSink is a UDP socket in a namespace that notes what arrives: each
// datagram carries a tag, so that a late copy of an earlier probe's is
// not taken for the current one's.
type udpSink struct {
	c    chan string
	tags atomic.Uint32
}

func newUDPSink(t *testing.T, ns netns.NsHandle, addr string) *udpSink {
	t.Helper()
	var pc net.PacketConn
	must(t, "listen", inNS(ns, func() (err error) {
		pc, err = net.ListenPacket("udp4", addr)
		return err
	}))
	t.Cleanup(func() { pc.Close() })
	s := &udpSink{c: make(chan string, 64)}
	go func() {
		buf := make([]byte, 64)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case s.c <- string(buf[:n]):
			default: // nobody waits for that many
			}
		}
	}()
	return s
}

// reached sends datagrams from ns with the source address src to dst
// and says whether one arrived. One expected to pass is sent again
// every 200 ms for up to 5 s (the first may wait for the neighbour to
// answer ARP, a second on a busy machine); one expected to be dropped is
// sent three times and waited for probeTimeout after the last.
func (s *udpSink) reached(t *testing.T, ns netns.NsHandle, src netip.Addr, dst netip.AddrPort, expected bool) bool {
	t.Helper()
	tag := fmt.Sprintf("probe-%d", s.tags.Add(1))
	sends, every, wait := 3, 100*time.Millisecond, probeTimeout
	if expected {
		sends, every, wait = 25, 200*time.Millisecond, 200*time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	sent := 0
	var last <-chan time.Time
	send := func() {
		must(t, "send", sendUDP(ns, src, dst, tag))
		if sent++; sent == sends {
			last = time.After(wait)
		}
	}
	send()
	for {
		select {
		case got := <-s.c:
			if got == tag {
				return true
			}
		case <-tick.C:
			if sent < sends {
				send()
			}
		case <-last:
			return false
		}
	}
}

// sendUDP sends one datagram from ns with the source address src,
// whatever the sender's own, through a raw socket.
func sendUDP(ns netns.NsHandle, src netip.Addr, dst netip.AddrPort, payload string) error {
	pkt := make([]byte, 20+8+len(payload))
	pkt[0], pkt[8], pkt[9] = 0x45, 64, unix.IPPROTO_UDP
	s, d := src.As4(), dst.Addr().As4()
	copy(pkt[12:], s[:])
	copy(pkt[16:], d[:])
	binary.BigEndian.PutUint16(pkt[20:], 40001)
	binary.BigEndian.PutUint16(pkt[22:], dst.Port())
	binary.BigEndian.PutUint16(pkt[24:], uint16(8+len(payload))) // the checksum stays 0: none
	copy(pkt[28:], payload)
	return inNS(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: d})
	})
}
