package proxy

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func lbService(name string, age int, class *string, ports ...int32) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name),
			CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+age), 0))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: class},
	}
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: p})
	}
	return s
}

func TestLBPortTaken(t *testing.T) {
	other := "example.com/other"
	first := lbService("first", 0, nil, 80, 443)
	services := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	mustAdd(t, services, first, lbService("classed", -1, &other, 8080), lbService("later", 5, nil, 9090))
	c := &lbStatusController{services: services}
	tests := []struct {
		name string
		svc  *corev1.Service
		want bool
	}{
		{"itself", first, false},
		{"a newer one on a port the older has", lbService("second", 1, nil, 443), true},
		{"a newer one on other ports", lbService("third", 1, nil, 8443), false},
		{"another class's port does not count", lbService("fourth", 1, nil, 8080), false},
		{"an older one keeps its port", lbService("zeroth", 3, nil, 9090), false},
		{"same age: by name", lbService("a-early", 5, nil, 9090), false},
		{"udp is another port", func() *corev1.Service {
			s := lbService("udp", 1, nil, 80)
			s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
			return s
		}(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.portTaken(tt.svc); got != tt.want {
				t.Errorf("portTaken = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLBIngress(t *testing.T) {
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	c := &lbStatusController{nodes: nodes, nodeIPs: []netip.Addr{addr("192.0.2.9")}}
	vip := corev1.LoadBalancerIPModeVIP
	// No Node lists an address yet: this node's own.
	if diff := cmp.Diff([]corev1.LoadBalancerIngress{{IP: "192.0.2.9", IPMode: &vip}}, c.ingress()); diff != "" {
		t.Errorf("without Nodes (-want +got):\n%s", diff)
	}
	node := func(name string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	gone := node("gone", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.4"})
	gone.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	mustAdd(t, nodes,
		node("b", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.2"}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.1"}),
		node("a", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::1"}),
		gone)
	want := []corev1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: &vip}, {IP: "192.0.2.2", IPMode: &vip}}
	if diff := cmp.Diff(want, c.ingress()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
