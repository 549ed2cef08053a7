package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// The network policy truth table, as upstream's netpol e2e suite
// (kubernetes test/e2e/network/netpol) draws it: three namespaces x, y
// and z with pods a, b and c each, every pod serving TCP and UDP on
// ports 80 and 81; for each policy case every pod probes every pod on
// both ports and protocols, and the results must be what an independent
// model of the API's rules, written here, says.

const (
	agentControlPort = 9000
	agentImage       = "registry.bonsai.test/e2e/netpolagent:1"
	// probeTimeout is how long a probe waits before it calls a
	// connection stopped.
	truthProbeTimeout = 1500 * time.Millisecond
)

var (
	truthNamespaces = []string{"x", "y", "z"}
	truthPods       = []string{"a", "b", "c"}
	truthPorts      = []string{"tcp/80", "tcp/81", "udp/80", "udp/81"}
)

// truthPod is a pod of the table: "x/a".
type truthPod struct {
	ns, name string
	ip       netip.Addr
	labels   map[string]string
	ports    []corev1.ContainerPort
}

func (p truthPod) id() string { return p.ns + "/" + p.name }

// truthEnv is bonsai with the nine pods running.
type truthEnv struct {
	*podEnv
	pods     []truthPod
	nsLabels map[string]map[string]string
}

func buildTestProgram(t *testing.T, name string) []byte {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build testdata/%s: %v\n%s", name, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func startTruthEnv(t *testing.T) *truthEnv {
	t.Helper()
	e := &truthEnv{podEnv: startPodEnv(t), nsLabels: map[string]map[string]string{}}
	bb, err := testenv.BusyboxPath()
	testenv.Require(t, err == nil, "%v", err)
	layer, config, err := testenv.BusyboxLayer(bb, map[string][]byte{"bin/netpolagent": buildTestProgram(t, "netpolagent")})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.registry.Push("e2e/netpolagent", "1", layer, config); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, ns := range truthNamespaces {
		if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"ns": ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.nsLabels[ns] = map[string]string{"ns": ns, "kubernetes.io/metadata.name": ns}
	}
	for _, ns := range truthNamespaces {
		waitFor(t, 30*time.Second, "the default service account of "+ns, func() bool {
			_, err := e.cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		})
		for _, name := range truthPods {
			var ports []corev1.ContainerPort
			for _, p := range truthPorts {
				proto, num, _ := strings.Cut(p, "/")
				var n int32
				fmt.Sscan(num, &n)
				ports = append(ports, corev1.ContainerPort{Name: "serve-" + num + "-" + proto, ContainerPort: n, Protocol: corev1.Protocol(strings.ToUpper(proto))})
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pod": name}},
				Spec: corev1.PodSpec{
					NodeName:                      e.node,
					TerminationGracePeriodSeconds: ptr(int64(1)),
					Containers: []corev1.Container{{Name: "agent", Image: agentImage, Ports: ports,
						Command: []string{"/bin/netpolagent", ns + "/" + name, fmt.Sprint(agentControlPort), "80", "81"}}},
				},
			}
			if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			e.pods = append(e.pods, truthPod{ns: ns, name: name, labels: pod.Labels, ports: ports})
		}
	}
	for i := range e.pods {
		p := &e.pods[i]
		waitFor(t, 120*time.Second, "pod "+p.id()+" running", func() bool {
			got, err := e.cs.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
				return false
			}
			p.ip = netip.MustParseAddr(got.Status.PodIP)
			return true
		})
	}
	// The agents listen a moment after their containers start.
	for _, p := range e.pods {
		waitFor(t, 30*time.Second, "agent of "+p.id(), func() bool {
			_, err := e.probe(p, "tcp", p.ip.String(), 80)
			return err == nil
		})
	}
	return e
}

// probe has pod from carry out a probe, from inside its pod, through
// its agent's control port: the node always reaches its pods.
func (e *truthEnv) probe(from truthPod, proto, addr string, port int) (string, error) {
	c, err := net.DialTimeout("tcp4", net.JoinHostPort(from.ip.String(), fmt.Sprint(agentControlPort)), 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("control port of %s: %w", from.id(), err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(truthProbeTimeout + 5*time.Second))
	fmt.Fprintf(c, "%s %s %d %d\n", proto, addr, port, truthProbeTimeout.Milliseconds())
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("control port of %s: %w", from.id(), err)
	}
	line = strings.TrimSpace(line)
	if answer, ok := strings.CutPrefix(line, "ok "); ok {
		return answer, nil
	}
	return "", fmt.Errorf("%s", line)
}

// policyCase is a set of policies and what the table must show.
type policyCase struct {
	name     string
	policies func(e *truthEnv) []*networkingv1.NetworkPolicy
	// check, when set, makes probes of its own after the table's.
	check func(t *testing.T, e *truthEnv, policies []*networkingv1.NetworkPolicy)
}

// TestNetworkPolicyTruthTable is the truth table test.
func TestNetworkPolicyTruthTable(t *testing.T) {
	e := startTruthEnv(t)
	ctx := t.Context()
	var applied []*networkingv1.NetworkPolicy
	failed := 0
	for _, tc := range truthCases() {
		t.Run(tc.name, func(t *testing.T) {
			for _, np := range applied {
				if err := e.netpols(np.Namespace).Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			applied = tc.policies(e)
			for _, np := range applied {
				if _, err := e.netpols(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
					t.Fatalf("create policy %s/%s: %v", np.Namespace, np.Name, err)
				}
			}
			e.checkTable(t, applied)
			if tc.check != nil {
				tc.check(t, e, applied)
			}
			if t.Failed() {
				failed++
			}
		})
	}
	t.Logf("%d policy cases, %d failed", len(truthCases()), failed)
}

// checkTable probes every pair on every port until the table matches
// the model, for a few seconds at most (a change takes effect within
// 100 ms, the probes that see the old rules aside), and prints the table
// if it never does.
func (e *truthEnv) checkTable(t *testing.T, policies []*networkingv1.NetworkPolicy) {
	t.Helper()
	type key struct{ from, to, port string }
	var keys []key
	want := map[key]bool{}
	for _, from := range e.pods {
		for _, to := range e.pods {
			for _, port := range truthPorts {
				k := key{from.id(), to.id(), port}
				keys = append(keys, k)
				want[k] = modelAllows(policies, e.nsLabels, from, to, port)
			}
		}
	}
	got := map[key]bool{}
	probeAll := func(ks []key) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		slots := make(chan struct{}, 48)
		for _, k := range ks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				slots <- struct{}{}
				defer func() { <-slots }()
				proto, num, _ := strings.Cut(k.port, "/")
				var n int
				fmt.Sscan(num, &n)
				answer, err := e.probe(e.pod(k.from), proto, e.pod(k.to).ip.String(), n)
				ok := err == nil && answer == k.to
				if err != nil && strings.Contains(err.Error(), "control port") {
					t.Errorf("%s: %v", k.from, err)
				}
				mu.Lock()
				got[k] = ok
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	// Give the change its 100 ms, then probe; probe again what
	// disagrees, in case the probe met the old rules.
	time.Sleep(200 * time.Millisecond)
	todo := keys
	for attempt := 0; attempt < 3 && len(todo) > 0; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Second)
		}
		probeAll(todo)
		var wrong []key
		for _, k := range todo {
			if got[k] != want[k] {
				wrong = append(wrong, k)
			}
		}
		if len(wrong) > 0 && attempt < 2 {
			var names []string
			for _, k := range wrong {
				names = append(names, fmt.Sprintf("%s->%s %s (model %v)", k.from, k.to, k.port, want[k]))
			}
			t.Logf("attempt %d: %d probes disagree, probing them again: %s", attempt+1, len(wrong), strings.Join(names, ", "))
		}
		todo = wrong
	}
	if len(todo) == 0 {
		return
	}
	// The table, upstream's way: a row per source, a column per
	// destination, "." where they agree, "X" (allowed, should not be) or
	// "-" (stopped, should not be) where they do not.
	var b strings.Builder
	for _, port := range truthPorts {
		fmt.Fprintf(&b, "\n%s (expected / observed; X: allowed but should be stopped, -: stopped but should be allowed)\n%-5s", port, "")
		for _, to := range e.pods {
			fmt.Fprintf(&b, " %-4s", to.id())
		}
		b.WriteString("\n")
		for _, from := range e.pods {
			fmt.Fprintf(&b, "%-5s", from.id())
			for _, to := range e.pods {
				k := key{from.id(), to.id(), port}
				c := "."
				switch {
				case got[k] && !want[k]:
					c = "X"
				case !got[k] && want[k]:
					c = "-"
				}
				fmt.Fprintf(&b, " %-4s", c)
			}
			b.WriteString("\n")
		}
	}
	t.Errorf("%d of %d probes disagree with the model:%s", len(todo), len(keys), b.String())
}

func (e *truthEnv) netpols(ns string) networkingclient.NetworkPolicyInterface {
	return e.cs.NetworkingV1().NetworkPolicies(ns)
}

// The independent model: what the NetworkPolicy API says of one
// connection, from the documentation's words, with nothing shared with
// bonsai's own code.

// modelAllows says whether from may open a connection to to on port
// ("tcp/80"): a pod always reaches itself; otherwise from's egress and
// to's ingress must both allow it.
func modelAllows(policies []*networkingv1.NetworkPolicy, nsLabels map[string]map[string]string, from, to truthPod, port string) bool {
	if from.id() == to.id() {
		return true
	}
	return sideAllows(policies, nsLabels, from, to, port, networkingv1.PolicyTypeEgress) &&
		sideAllows(policies, nsLabels, to, from, port, networkingv1.PolicyTypeIngress)
}

// sideAllows: "traffic is allowed ... if there are no NetworkPolicies
// selecting the pod, ... OR if the traffic matches at least one rule
// across all of the NetworkPolicy objects whose podSelector matches the
// pod", for the policies whose types include dir.
func sideAllows(policies []*networkingv1.NetworkPolicy, nsLabels map[string]map[string]string, pod, peer truthPod, port string, dir networkingv1.PolicyType) bool {
	// The destination, on whose pod a named port is looked up.
	dest := pod
	if dir == networkingv1.PolicyTypeEgress {
		dest = peer
	}
	selected := false
	for _, np := range policies {
		if np.Namespace != pod.ns || !hasType(np, dir) || !selectorMatches(&np.Spec.PodSelector, pod.labels) {
			continue
		}
		selected = true
		if dir == networkingv1.PolicyTypeIngress {
			for _, r := range np.Spec.Ingress {
				if peersMatch(r.From, np.Namespace, nsLabels, peer) && portsMatch(r.Ports, dest, port) {
					return true
				}
			}
		} else {
			for _, r := range np.Spec.Egress {
				if peersMatch(r.To, np.Namespace, nsLabels, peer) && portsMatch(r.Ports, dest, port) {
					return true
				}
			}
		}
	}
	return !selected
}

// hasType: "If this field is not specified, it will default based on
// the existence of ingress or egress rules".
func hasType(np *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return t == networkingv1.PolicyTypeIngress || len(np.Spec.Egress) > 0
	}
	return slices.Contains(np.Spec.PolicyTypes, t)
}

func selectorMatches(s *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	return err == nil && sel.Matches(labels.Set(l))
}

// peersMatch: "If this field is empty or missing, this rule matches all
// sources"; else any peer.
func peersMatch(peers []networkingv1.NetworkPolicyPeer, policyNS string, nsLabels map[string]map[string]string, p truthPod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		switch {
		case peer.IPBlock != nil:
			cidr := netip.MustParsePrefix(peer.IPBlock.CIDR)
			in := cidr.Contains(p.ip)
			for _, ex := range peer.IPBlock.Except {
				if netip.MustParsePrefix(ex).Contains(p.ip) {
					in = false
				}
			}
			if in {
				return true
			}
		case peer.NamespaceSelector != nil:
			if selectorMatches(peer.NamespaceSelector, nsLabels[p.ns]) &&
				(peer.PodSelector == nil || selectorMatches(peer.PodSelector, p.labels)) {
				return true
			}
		case peer.PodSelector != nil:
			if p.ns == policyNS && selectorMatches(peer.PodSelector, p.labels) {
				return true
			}
		}
	}
	return false
}

// portsMatch: an empty list is every port; a port is a protocol (TCP
// when absent) and a number, a range to endPort, or the name of a
// container port of the destination pod.
func portsMatch(ports []networkingv1.NetworkPolicyPort, dest truthPod, port string) bool {
	if len(ports) == 0 {
		return true
	}
	proto, num, _ := strings.Cut(port, "/")
	var n int32
	fmt.Sscan(num, &n)
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if !strings.EqualFold(string(pp), proto) {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			for _, cp := range dest.ports {
				if cp.Name == p.Port.StrVal && cp.Protocol == pp && cp.ContainerPort == n {
					return true
				}
			}
		case p.EndPort != nil:
			if n >= p.Port.IntVal && n <= *p.EndPort {
				return true
			}
		default:
			if n == p.Port.IntVal {
				return true
			}
		}
	}
	return false
}

// Policy builders.

func np(ns, name string, podSel *metav1.LabelSelector, types []networkingv1.PolicyType, ingress []networkingv1.NetworkPolicyIngressRule, egress []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: types, Ingress: ingress, Egress: egress}}
	if podSel != nil {
		p.Spec.PodSelector = *podSel
	}
	return p
}

func labelSel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func podsOf(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: s}
}

func nsOf(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: s}
}

func podsInNS(ns, pods *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pods}
}

func cidrOf(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func npPort(proto corev1.Protocol, port int32) networkingv1.NetworkPolicyPort {
	v := intstr.FromInt32(port)
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
}

func npRange(proto corev1.Protocol, port, end int32) networkingv1.NetworkPolicyPort {
	p := npPort(proto, port)
	p.EndPort = &end
	return p
}

func npNamed(proto corev1.Protocol, name string) networkingv1.NetworkPolicyPort {
	v := intstr.FromString(name)
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
}

func npProto(proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: &proto}
}

func in(ports []networkingv1.NetworkPolicyPort, from ...networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyIngressRule {
	return []networkingv1.NetworkPolicyIngressRule{{Ports: ports, From: from}}
}

func out(ports []networkingv1.NetworkPolicyPort, to ...networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyEgressRule {
	return []networkingv1.NetworkPolicyEgressRule{{Ports: ports, To: to}}
}

func portList(p ...networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort { return p }

var (
	ingressOnly = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egressOnly  = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	bothWays    = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	tcpProto    = corev1.ProtocolTCP
	udpProto    = corev1.ProtocolUDP
	sctpProto   = corev1.ProtocolSCTP
)

func (e *truthEnv) pod(id string) truthPod {
	for _, p := range e.pods {
		if p.id() == id {
			return p
		}
	}
	panic("no pod " + id)
}

// policies is a case's policies that need nothing of the environment.
func policies(ps ...*networkingv1.NetworkPolicy) func(*truthEnv) []*networkingv1.NetworkPolicy {
	return func(*truthEnv) []*networkingv1.NetworkPolicy { return ps }
}

// truthCases are the policy cases, after upstream's netpol suite.
func truthCases() []policyCase {
	all := labelSel()
	return []policyCase{
		{name: "no policies", policies: policies()},
		{name: "default-deny ingress", policies: policies(np("x", "deny-ingress", all, ingressOnly, nil, nil))},
		{name: "default-deny egress", policies: policies(np("x", "deny-egress", all, egressOnly, nil, nil))},
		{name: "default-deny all", policies: policies(np("x", "deny-all", all, bothWays, nil, nil))},
		{name: "allow by pod label", policies: policies(
			np("x", "a-from-b", labelSel("pod", "a"), ingressOnly, in(nil, podsOf(labelSel("pod", "b"))), nil))},
		{name: "allow by namespace label", policies: policies(
			np("x", "a-from-y", labelSel("pod", "a"), ingressOnly, in(nil, nsOf(labelSel("ns", "y"))), nil))},
		{name: "allow by namespace and pod label together", policies: policies(
			np("x", "a-from-y-b", labelSel("pod", "a"), ingressOnly, in(nil, podsInNS(labelSel("ns", "y"), labelSel("pod", "b"))), nil))},
		{name: "allow by namespace or pod label", policies: policies(
			np("x", "a-from-y-or-c", labelSel("pod", "a"), ingressOnly, in(nil, nsOf(labelSel("ns", "y")), podsOf(labelSel("pod", "c"))), nil))},
		{name: "allow from every namespace", policies: policies(
			np("x", "a-from-all", labelSel("pod", "a"), ingressOnly, in(nil, nsOf(all)), nil))},
		{name: "allow pods b of every namespace", policies: policies(
			np("x", "a-from-any-b", labelSel("pod", "a"), ingressOnly, in(nil, podsInNS(all, labelSel("pod", "b"))), nil))},
		{name: "matchExpressions", policies: policies(
			np("x", "ab-not-from-x", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "pod", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}, ingressOnly,
				in(nil, nsOf(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "ns", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"x"}}}})), nil))},
		{name: "default namespace label", policies: policies(
			np("x", "a-from-z", labelSel("pod", "a"), ingressOnly, in(nil, nsOf(labelSel("kubernetes.io/metadata.name", "z"))), nil))},
		{name: "one port", policies: policies(
			np("x", "a-tcp-80", labelSel("pod", "a"), ingressOnly, in(portList(npPort(tcpProto, 80))), nil))},
		{name: "one protocol, every port", policies: policies(
			np("x", "a-udp", labelSel("pod", "a"), ingressOnly, in(portList(npProto(udpProto))), nil))},
		{name: "UDP does not allow TCP", policies: policies(
			np("x", "a-udp-81", labelSel("pod", "a"), ingressOnly, in(portList(npPort(udpProto, 81))), nil))},
		{name: "SCTP isolates and allows neither TCP nor UDP", policies: policies(
			np("x", "a-sctp", labelSel("pod", "a"), ingressOnly, in(portList(npPort(sctpProto, 80))), nil))},
		{name: "named port", policies: policies(
			np("x", "a-named", labelSel("pod", "a"), ingressOnly, in(portList(npNamed(tcpProto, "serve-81-tcp"))), nil))},
		{name: "named port from a namespace", policies: policies(
			np("x", "all-named-from-y", all, ingressOnly, in(portList(npNamed(udpProto, "serve-80-udp")), nsOf(labelSel("ns", "y"))), nil))},
		{name: "named port egress", policies: policies(
			np("x", "a-to-named", labelSel("pod", "a"), egressOnly, nil, out(portList(npNamed(tcpProto, "serve-81-tcp")))))},
		{name: "endPort range", policies: policies(
			np("x", "range-80-81", all, ingressOnly, in(portList(npRange(tcpProto, 80, 81)), nsOf(labelSel("ns", "y"))), nil))},
		{name: "endPort range over one of the ports", policies: policies(
			np("x", "range-81-90", all, ingressOnly, in(portList(npRange(tcpProto, 81, 90), npRange(udpProto, 1, 80))), nil))},
		{name: "ipBlock with except", policies: func(e *truthEnv) []*networkingv1.NetworkPolicy {
			cidr := netip.PrefixFrom(e.pod("x/a").ip, 16).Masked()
			return []*networkingv1.NetworkPolicy{np("x", "a-from-cidr", labelSel("pod", "a"), ingressOnly,
				in(nil, cidrOf(cidr.String(), netip.PrefixFrom(e.pod("y/b").ip, 32).String())), nil)}
		}},
		{name: "ipBlock egress with except", policies: func(e *truthEnv) []*networkingv1.NetworkPolicy {
			var except []string
			for _, p := range e.pods {
				if p.ns == "z" {
					except = append(except, netip.PrefixFrom(p.ip, 32).String())
				}
			}
			cidr := netip.PrefixFrom(e.pod("x/a").ip, 16).Masked()
			return []*networkingv1.NetworkPolicy{np("x", "to-cidr", all, egressOnly, nil,
				out(portList(npPort(tcpProto, 80), npPort(udpProto, 81)), cidrOf(cidr.String(), except...)))}
		}},
		{name: "egress to DNS only",
			policies: policies(np("x", "dns-only", all, egressOnly, nil,
				out(portList(npPort(udpProto, 53), npPort(tcpProto, 53))))),
			check: func(t *testing.T, e *truthEnv, _ []*networkingv1.NetworkPolicy) {
				// Cluster DNS is the node's: a pod under the policy still
				// resolves names.
				for _, from := range []string{"x/a", "y/a"} {
					if addr, err := e.probe(e.pod(from), "dns", "kubernetes.default.svc.cluster.local", 0); err != nil {
						t.Errorf("%s: DNS lookup under %q: %v", from, "dns-only", err)
					} else {
						t.Logf("%s resolved kubernetes.default: %s", from, addr)
					}
				}
			}},
		{name: "policies add up", policies: policies(
			np("x", "a-from-b-80", labelSel("pod", "a"), ingressOnly, in(portList(npPort(tcpProto, 80)), podsOf(labelSel("pod", "b"))), nil),
			np("x", "a-from-z-81", labelSel("pod", "a"), ingressOnly, in(portList(npPort(tcpProto, 81), npPort(udpProto, 81)), nsOf(labelSel("ns", "z"))), nil))},
		{name: "allow-all beside deny-all", policies: policies(
			np("x", "deny-ingress", all, ingressOnly, nil, nil),
			np("x", "allow-ingress", all, ingressOnly, in(nil), nil))},
		{name: "egress denied on the client side", policies: policies(
			np("x", "a-no-egress", labelSel("pod", "a"), egressOnly, nil, nil),
			np("y", "allow-all", all, ingressOnly, in(nil), nil))},
		{name: "ingress and egress together", policies: policies(
			np("x", "a-y-in-z-out", labelSel("pod", "a"), bothWays, in(nil, nsOf(labelSel("ns", "y"))), out(nil, nsOf(labelSel("ns", "z")))))},
		{name: "policies in two namespaces", policies: policies(
			np("x", "deny-ingress", all, ingressOnly, nil, nil),
			np("y", "from-x-only", all, ingressOnly, in(nil, nsOf(labelSel("ns", "x"))), nil),
			np("z", "b-egress-to-x-a", labelSel("pod", "b"), egressOnly, nil, out(nil, podsInNS(labelSel("ns", "x"), labelSel("pod", "a")))))},
		{name: "through a Service",
			policies: policies(np("x", "a-from-b", labelSel("pod", "a"), ingressOnly, in(nil, podsOf(labelSel("pod", "b"))), nil)),
			check: func(t *testing.T, e *truthEnv, _ []*networkingv1.NetworkPolicy) {
				// Policies apply to the pod the proxy sends a Service's
				// connection to: the Service is no way around them.
				svc, err := e.cs.CoreV1().Services("x").Create(t.Context(), &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: "a"},
					Spec: corev1.ServiceSpec{Selector: map[string]string{"pod": "a"},
						Ports: []corev1.ServicePort{{Name: "tcp", Port: 8080, TargetPort: intstr.FromInt32(80)},
							{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 8080, TargetPort: intstr.FromInt32(80)}}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer e.cs.CoreV1().Services("x").Delete(t.Context(), "a", metav1.DeleteOptions{})
				waitFor(t, 30*time.Second, "x/b through the Service", func() bool {
					answer, err := e.probe(e.pod("x/b"), "tcp", svc.Spec.ClusterIP, 8080)
					return err == nil && answer == "x/a"
				})
				for _, c := range []struct {
					from, proto string
					want        bool
				}{{"x/b", "udp", true}, {"y/b", "tcp", false}, {"x/c", "tcp", false}, {"y/a", "tcp", false}, {"z/c", "udp", false}, {"x/a", "tcp", true}} {
					answer, err := e.probe(e.pod(c.from), c.proto, svc.Spec.ClusterIP, 8080)
					if got := err == nil && answer == "x/a"; got != c.want {
						t.Errorf("%s -> Service x/a %s: allowed %v, want %v (%v)", c.from, c.proto, got, c.want, err)
					}
				}
			}},
		{name: "rules hold across a restart",
			policies: policies(np("x", "deny-all", all, bothWays, nil, nil),
				np("y", "b-from-z", labelSel("pod", "b"), ingressOnly, in(nil, nsOf(labelSel("ns", "z"))), nil)),
			check: func(t *testing.T, e *truthEnv, policies []*networkingv1.NetworkPolicy) {
				if code, _ := e.s.sigterm(t); code != 0 {
					t.Fatalf("bonsai exited %d on SIGTERM:\n%s", code, e.s.stderrText())
				}
				// The pods run on, and so do the rules.
				for _, c := range []struct {
					from, to string
					want     bool
				}{{"y/a", "x/a", false}, {"x/a", "y/a", false}, {"z/a", "y/b", true}, {"x/b", "y/b", false}, {"y/a", "z/c", true}} {
					answer, err := e.probe(e.pod(c.from), "tcp", e.pod(c.to).ip.String(), 80)
					if got := err == nil && answer == c.to; got != c.want {
						t.Errorf("while bonsai was stopped: %s -> %s allowed %v, want %v (%v)", c.from, c.to, got, c.want, err)
					}
				}
				e.s = startServer(e.t, e.s.dataDir, e.args...)
				cfg, err := clientcmd.RESTConfigFromKubeConfig(e.s.kubeconfig(t).raw)
				if err != nil {
					t.Fatal(err)
				}
				e.cs = kubernetes.NewForConfigOrDie(cfg)
				e.waitNodeReady(t)
				e.checkTable(t, policies)
			}},
		{name: "policies deleted: everything again", policies: policies()},
	}
}
