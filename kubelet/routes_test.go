package kubelet

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/kubelet/simulator"
)

func routeNode(name, cidr string, addrs ...corev1.NodeAddress) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	if cidr != "" {
		n.Spec.PodCIDRs = []string{cidr}
	}
	n.Status.Addresses = addrs
	return n
}

func TestNodeRoutes(t *testing.T) {
	internal := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	external := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: a} }
	sim := routeNode("sim-0", "10.42.9.0/24", internal("10.42.9.1"))
	sim.Annotations = map[string]string{simulator.AnnotationSimulated: "true"}
	nodes := []*corev1.Node{
		routeNode("self", "10.42.0.0/24", internal("192.0.2.1")),
		routeNode("b", "10.42.1.0/24", external("198.51.100.2"), internal("fd00::2"), internal("192.0.2.2"), internal("192.0.2.22")),
		routeNode("c", "10.42.2.0/24"),                        // no address yet
		routeNode("d", "", internal("192.0.2.4")),             // no pod CIDR yet
		routeNode("e", "10.42.5.7/24", internal("192.0.2.5")), // not canonical: masked
		sim,
		// Dual-stack: each pod CIDR via the InternalIP of its family.
		routeNode("f", "10.42.6.0/24", internal("fd00::6"), internal("192.0.2.6")),
		routeNode("g", "10.42.7.0/24", internal("192.0.2.7")), // no IPv6 address: no IPv6 route
	}
	nodes[len(nodes)-2].Spec.PodCIDRs = []string{"10.42.6.0/24", "fd42:0:0:6::/64"}
	nodes[len(nodes)-1].Spec.PodCIDRs = []string{"10.42.7.0/24", "fd42:0:0:7::/64"}
	got := nodeRoutes("self", nodes)
	want := map[netip.Prefix]netip.Addr{
		netip.MustParsePrefix("10.42.1.0/24"):    netip.MustParseAddr("192.0.2.2"),
		netip.MustParsePrefix("10.42.5.0/24"):    netip.MustParseAddr("192.0.2.5"),
		netip.MustParsePrefix("10.42.6.0/24"):    netip.MustParseAddr("192.0.2.6"),
		netip.MustParsePrefix("fd42:0:0:6::/64"): netip.MustParseAddr("fd00::6"),
		netip.MustParsePrefix("10.42.7.0/24"):    netip.MustParseAddr("192.0.2.7"),
	}
	if len(got) != len(want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("routes %v, want %v", got, want)
		}
	}

	// Heartbeats do not resync routes; a new address or pod CIDR does.
	b := nodes[1]
	hb := b.DeepCopy()
	hb.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if routesDiffer(b, hb) {
		t.Fatal("a status heartbeat counted as a route change")
	}
	moved := b.DeepCopy()
	moved.Status.Addresses = []corev1.NodeAddress{internal("192.0.2.99")}
	if !routesDiffer(b, moved) {
		t.Fatal("a new InternalIP did not count as a route change")
	}
	simd := b.DeepCopy()
	simd.Annotations = map[string]string{simulator.AnnotationSimulated: "true"}
	if !routesDiffer(b, simd) {
		t.Fatal("a node becoming simulated did not count as a route change")
	}
}
