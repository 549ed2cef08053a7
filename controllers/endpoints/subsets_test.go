package endpoints

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func testService(mod func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"}, ClusterIP: "10.43.0.9", IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
		},
	}
	if mod != nil {
		mod(s)
	}
	return s
}

func testPod(i int, mod func(*corev1.Pod)) *corev1.Pod {
	ip := fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "ns", UID: types.UID(fmt.Sprintf("uid-%d", i))},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func addr(i int, host string) corev1.EndpointAddress {
	return corev1.EndpointAddress{IP: fmt.Sprintf("10.1.0.%d", i+1), Hostname: host, NodeName: ptr("node-a"),
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("pod-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
}

func port(n int32) []corev1.EndpointPort {
	return []corev1.EndpointPort{{Name: "http", Port: n, Protocol: corev1.ProtocolTCP}}
}

func TestDesiredSubsets(t *testing.T) {
	deleted := metav1.NewTime(time.Unix(100, 0))
	notReady := func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
	tests := []struct {
		name string
		svc  func(*corev1.Service)
		pods []*corev1.Pod
		want []corev1.EndpointSubset
	}{{
		name: "ready and not-ready pods share a subset",
		pods: []*corev1.Pod{testPod(0, nil), testPod(1, notReady), testPod(2, nil)},
		want: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr(0, ""), addr(2, "")}, NotReadyAddresses: []corev1.EndpointAddress{addr(1, "")}, Ports: port(8080)}},
	}, {
		name: "a named port resolved differently makes another subset",
		pods: []*corev1.Pod{testPod(0, nil), testPod(1, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 9090 })},
		want: []corev1.EndpointSubset{
			{Addresses: []corev1.EndpointAddress{addr(0, "")}, Ports: port(8080)},
			{Addresses: []corev1.EndpointAddress{addr(1, "")}, Ports: port(9090)},
		},
	}, {
		name: "terminating, finished and IP-less pods are left out",
		pods: []*corev1.Pod{testPod(0, nil), testPod(1, func(p *corev1.Pod) { p.DeletionTimestamp = &deleted }),
			testPod(2, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
			testPod(3, func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil })},
		want: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr(0, "")}, Ports: port(8080)}},
	}, {
		name: "publishNotReadyAddresses: not-ready and terminating pods are ready",
		svc:  func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true },
		pods: []*corev1.Pod{testPod(0, notReady), testPod(1, func(p *corev1.Pod) { p.DeletionTimestamp = &deleted })},
		want: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr(0, ""), addr(1, "")}, Ports: port(8080)}},
	}, {
		name: "hostname when the pod's subdomain is the Service",
		pods: []*corev1.Pod{testPod(0, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "h", "web" })},
		want: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr(0, "h")}, Ports: port(8080)}},
	}, {
		name: "headless Service without ports still lists its pods",
		svc:  func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.Ports = corev1.ClusterIPNone, nil },
		pods: []*corev1.Pod{testPod(0, nil)},
		want: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr(0, "")}}},
	}, {
		name: "IPv6 Service takes the pod's IPv6 address",
		svc:  func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} },
		pods: []*corev1.Pod{testPod(0, func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::1"}) })},
		want: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{func() corev1.EndpointAddress { a := addr(0, ""); a.IP = "fd00::1"; return a }()}, Ports: port(8080)}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := desiredSubsets(testService(tc.svc), tc.pods)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("subsets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRepackSubsets(t *testing.T) {
	a0, a1 := addr(0, ""), addr(1, "")
	in := []corev1.EndpointSubset{
		{Addresses: []corev1.EndpointAddress{a1}, Ports: port(80)},
		{NotReadyAddresses: []corev1.EndpointAddress{a0}, Ports: port(80)},
		{Addresses: []corev1.EndpointAddress{a0}, Ports: port(80)}, // ready wins
		{Addresses: []corev1.EndpointAddress{a0, a1}, Ports: port(81)},
	}
	want := []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{a0, a1}, Ports: append(port(80), port(81)...)}}
	if diff := cmp.Diff(want, RepackSubsets(in)); diff != "" {
		t.Errorf("repacked (-want +got):\n%s", diff)
	}
}

func TestTruncate(t *testing.T) {
	addrs := func(n int) []corev1.EndpointAddress {
		out := make([]corev1.EndpointAddress, n)
		for i := range out {
			out[i] = corev1.EndpointAddress{IP: fmt.Sprintf("10.2.%d.%d", i/250, i%250)}
		}
		return out
	}
	tests := []struct {
		name            string
		in              []corev1.EndpointSubset
		cut             bool
		ready, notReady []int // per subset, after
	}{
		{name: "1000 fits", in: []corev1.EndpointSubset{{Addresses: addrs(1000)}}, ready: []int{1000}, notReady: []int{0}},
		{name: "1001 ready", in: []corev1.EndpointSubset{{Addresses: addrs(1001)}}, cut: true, ready: []int{1000}, notReady: []int{0}},
		{name: "not-ready addresses go first", in: []corev1.EndpointSubset{{Addresses: addrs(900), NotReadyAddresses: addrs(300)}},
			cut: true, ready: []int{900}, notReady: []int{100}},
		{name: "too many ready: shared in proportion, no not-ready left",
			in:  []corev1.EndpointSubset{{Addresses: addrs(600), NotReadyAddresses: addrs(5)}, {Addresses: addrs(900)}},
			cut: true, ready: []int{400, 600}, notReady: []int{0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cut := truncate(tc.in)
			var ready, notReady []int
			for _, s := range tc.in {
				ready, notReady = append(ready, len(s.Addresses)), append(notReady, len(s.NotReadyAddresses))
			}
			if cut != tc.cut || !cmp.Equal(ready, tc.ready) || !cmp.Equal(notReady, tc.notReady) {
				t.Errorf("cut %v ready %v notReady %v, want %v %v %v", cut, ready, notReady, tc.cut, tc.ready, tc.notReady)
			}
		})
	}
}
