package netpol

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const testNodeName = "node-a"

// Test objects, built the way a user writes them.

type podOpt func(*corev1.Pod)

func newPod(ns, name, ip string, lbls map[string]string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Labels: lbls},
		Spec:       corev1.PodSpec{NodeName: testNodeName, Containers: []corev1.Container{{Name: "c"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
	if ip == "" {
		p.Status.PodIPs = nil
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func onNode(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

func withPort(name string, proto corev1.Protocol, port int32) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: name, Protocol: proto, ContainerPort: port})
	}
}

func newNamespace(name string, lbls map[string]string) *corev1.Namespace {
	l := map[string]string{"kubernetes.io/metadata.name": name}
	for k, v := range lbls {
		l[k] = v
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func podPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: s}
}

func nsPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: s}
}

func bothPeer(ns, pod *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pod}
}

func blockPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func port(proto corev1.Protocol, p int) networkingv1.NetworkPolicyPort {
	v := intstr.FromInt32(int32(p))
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
}

func portRangeOf(proto corev1.Protocol, lo, hi int) networkingv1.NetworkPolicyPort {
	p := port(proto, lo)
	end := int32(hi)
	p.EndPort = &end
	return p
}

func namedPortRef(proto corev1.Protocol, name string) networkingv1.NetworkPolicyPort {
	v := intstr.FromString(name)
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
}

func protoOnly(proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: &proto}
}

func ingressRule(ports []networkingv1.NetworkPolicyPort, from ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{Ports: ports, From: from}
}

func egressRule(ports []networkingv1.NetworkPolicyPort, to ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{Ports: ports, To: to}
}

func ports(p ...networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort { return p }

type policyOpt func(*networkingv1.NetworkPolicy)

func newPolicy(ns, name string, podSel *metav1.LabelSelector, opts ...policyOpt) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if podSel != nil {
		np.Spec.PodSelector = *podSel
	}
	for _, o := range opts {
		o(np)
	}
	return np
}

func types_(t ...networkingv1.PolicyType) policyOpt {
	return func(np *networkingv1.NetworkPolicy) { np.Spec.PolicyTypes = t }
}

func ingressRules(r ...networkingv1.NetworkPolicyIngressRule) policyOpt {
	return func(np *networkingv1.NetworkPolicy) { np.Spec.Ingress = append(np.Spec.Ingress, r...) }
}

func egressRules(r ...networkingv1.NetworkPolicyEgressRule) policyOpt {
	return func(np *networkingv1.NetworkPolicy) { np.Spec.Egress = append(np.Spec.Egress, r...) }
}

const (
	tIngress = networkingv1.PolicyTypeIngress
	tEgress  = networkingv1.PolicyTypeEgress
	tcp      = corev1.ProtocolTCP
	udp      = corev1.ProtocolUDP
	sctp     = corev1.ProtocolSCTP
)

// The seed examples of the issue, from the Kubernetes documentation.

// testNetworkPolicy is the documentation's "test-network-policy".
func testNetworkPolicy() *networkingv1.NetworkPolicy {
	return newPolicy("default", "test-network-policy", sel("role", "db"),
		types_(tIngress, tEgress),
		ingressRules(ingressRule(ports(port(tcp, 6379)),
			blockPeer("172.17.0.0/16", "172.17.1.0/24"),
			nsPeer(sel("project", "myproject")),
			podPeer(sel("role", "frontend")))),
		egressRules(egressRule(ports(port(tcp, 5978)), blockPeer("10.0.0.0/24"))))
}

func defaultDenyIngress(ns string) *networkingv1.NetworkPolicy {
	return newPolicy(ns, "default-deny-ingress", sel(), types_(tIngress))
}

func allowAllIngress(ns string) *networkingv1.NetworkPolicy {
	return newPolicy(ns, "allow-all-ingress", sel(), types_(tIngress), ingressRules(ingressRule(nil)))
}

func defaultDenyEgress(ns string) *networkingv1.NetworkPolicy {
	return newPolicy(ns, "default-deny-egress", sel(), types_(tEgress))
}

func allowAllEgress(ns string) *networkingv1.NetworkPolicy {
	return newPolicy(ns, "allow-all-egress", sel(), types_(tEgress), egressRules(egressRule(nil)))
}

func defaultDenyAll(ns string) *networkingv1.NetworkPolicy {
	return newPolicy(ns, "default-deny-all", sel(), types_(tIngress, tEgress))
}

// multiPortEgress is the documentation's endPort example.
func multiPortEgress() *networkingv1.NetworkPolicy {
	return newPolicy("default", "multi-port-egress", sel("role", "db"), types_(tEgress),
		egressRules(egressRule(ports(portRangeOf(tcp, 32000, 32768)), blockPeer("10.0.0.0/24"))))
}

// testWorld is a world made of API objects.
func testWorld(t *testing.T, objs ...any) *world {
	t.Helper()
	w := newWorld()
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Namespace:
			w.namespaces[o.Name] = o.Labels
		case *corev1.Pod:
			if p, ok := podFromAPI(o, testNodeName, netip.Addr{}); ok {
				w.setPod(p)
			}
		}
	}
	return w
}

func compileAll(w *world, policies ...*networkingv1.NetworkPolicy) []*compiledPolicy {
	var out []*compiledPolicy
	sets := newSharedSets()
	for _, np := range policies {
		out = append(out, compile(parsePolicy(np), w, sets))
	}
	return out
}
