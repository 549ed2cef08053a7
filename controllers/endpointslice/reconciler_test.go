package endpointslice

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Builders of the inputs: a Service selecting app=web on port 80 → the
// pods' "http" port, and pods on node-a (zone z1) with that port.

func testService(mod func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "svc-uid", Labels: map[string]string{"team": "blue"}},
		Spec: corev1.ServiceSpec{
			Selector:   map[string]string{"app": "web"},
			ClusterIP:  "10.43.0.9",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
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
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%04d", i), Namespace: "ns", UID: types.UID(fmt.Sprintf("uid-%d", i)), Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func testPods(from, to int, mod func(*corev1.Pod)) []*corev1.Pod {
	var out []*corev1.Pod
	for i := from; i < to; i++ {
		out = append(out, testPod(i, mod))
	}
	return out
}

var testNodes = map[string]*corev1.Node{
	"node-a": {ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{corev1.LabelTopologyZone: "z1"}}},
	"node-b": {ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
}

func testReconciler(max int) *reconciler {
	return &reconciler{maxPerSlice: max, node: func(name string) (*corev1.Node, error) {
		if n, ok := testNodes[name]; ok {
			return n, nil
		}
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}}
}

// existingSlices plans the slices of pods from scratch and names them as
// the API server would, for tests that start from a steady state.
func existingSlices(t *testing.T, svc *corev1.Service, pods []*corev1.Pod, max int) []*discoveryv1.EndpointSlice {
	t.Helper()
	p, err := testReconciler(max).reconcile(svc, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range p.create {
		s.Name = fmt.Sprintf("web-%d", i)
		s.ResourceVersion = "1"
	}
	return p.create
}

// sizes are the endpoint counts of slices, by name ("" for new ones).
func sizes(ss []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s:%d", s.Name, len(s.Endpoints)))
	}
	return out
}

func TestReconcilePacking(t *testing.T) {
	svc := testService(nil)
	tests := []struct {
		name     string
		max      int
		existing func(t *testing.T) []*discoveryv1.EndpointSlice
		pods     []*corev1.Pod
		// want: creates, updates, deletes as "name:endpoints".
		create, update, delete []string
	}{{
		name:   "250 pods make 3 slices of at most 100",
		max:    100,
		pods:   testPods(0, 250, nil),
		create: []string{":100", ":100", ":50"},
	}, {
		name:   "max 1000 holds 250 in one slice",
		max:    1000,
		pods:   testPods(0, 250, nil),
		create: []string{":250"},
	}, {
		// S-28: two slices with room for 5 each and 10 new endpoints:
		// one new slice, the others untouched.
		name: "10 new endpoints and 2 slices with 5 free: one new slice",
		max:  100,
		existing: func(t *testing.T) []*discoveryv1.EndpointSlice {
			a := existingSlices(t, svc, testPods(0, 95, nil), 100)
			b := existingSlices(t, svc, testPods(95, 190, nil), 100)
			b[0].Name = "web-b"
			return append(a, b...)
		},
		pods:   testPods(0, 200, nil),
		create: []string{":10"},
	}, {
		name: "new endpoints that fit go into the unchanged slice they fill best",
		max:  100,
		existing: func(t *testing.T) []*discoveryv1.EndpointSlice {
			a := existingSlices(t, svc, testPods(0, 90, nil), 100) // room for 10
			b := existingSlices(t, svc, testPods(90, 185, nil), 100)
			b[0].Name = "web-b" // room for 5
			return append(a, b...)
		},
		pods:   testPods(0, 190, nil),
		update: []string{"web-b:100"},
	}, {
		name: "a slice that lost endpoints is filled with the new ones first",
		max:  100,
		existing: func(t *testing.T) []*discoveryv1.EndpointSlice {
			return existingSlices(t, svc, testPods(0, 100, nil), 100)
		},
		pods:   append(testPods(10, 100, nil), testPods(100, 130, nil)...),
		update: []string{"web-0:100"},
		create: []string{":20"},
	}, {
		name: "a changed endpoint updates its slice in place",
		max:  100,
		existing: func(t *testing.T) []*discoveryv1.EndpointSlice {
			return existingSlices(t, svc, testPods(0, 150, nil), 100)
		},
		pods: append(testPods(0, 149, nil), testPod(149, func(p *corev1.Pod) {
			p.Status.Conditions[0].Status = corev1.ConditionFalse
		})),
		update: []string{"web-1:50"},
	}, {
		name: "nothing changed: no writes",
		max:  100,
		existing: func(t *testing.T) []*discoveryv1.EndpointSlice {
			return existingSlices(t, svc, testPods(0, 150, nil), 100)
		},
		pods: testPods(0, 150, nil),
	}, {
		name: "a slice left empty is deleted",
		max:  100,
		existing: func(t *testing.T) []*discoveryv1.EndpointSlice {
			return existingSlices(t, svc, testPods(0, 150, nil), 100)
		},
		pods:   testPods(0, 100, nil),
		delete: []string{"web-1:50"},
	}, {
		name: "when every endpoint goes, a slice stays as the empty placeholder",
		max:  100,
		existing: func(t *testing.T) []*discoveryv1.EndpointSlice {
			return existingSlices(t, svc, testPods(0, 10, nil), 100)
		},
		update: []string{"web-0:0"},
	}, {
		name:   "a Service without pods gets a placeholder",
		max:    100,
		create: []string{":0"},
	}, {
		name: "an existing placeholder is kept as it is",
		max:  100,
		existing: func(t *testing.T) []*discoveryv1.EndpointSlice {
			return existingSlices(t, svc, nil, 100)
		},
	}, {
		name: "the placeholder is reused for the first endpoints",
		max:  100,
		existing: func(t *testing.T) []*discoveryv1.EndpointSlice {
			return existingSlices(t, svc, nil, 100)
		},
		pods:   testPods(0, 3, nil),
		update: []string{"web-0:3"},
	}, {
		name: "pods resolving a named port differently get separate slices",
		max:  100,
		pods: append(testPods(0, 2, nil), testPods(2, 5, func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports[0].ContainerPort = 9090
		})...),
		create: []string{":2", ":3"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var existing []*discoveryv1.EndpointSlice
			if tc.existing != nil {
				existing = tc.existing(t)
			}
			p, err := testReconciler(tc.max).reconcile(svc, tc.pods, existing)
			if err != nil {
				t.Fatal(err)
			}
			got := [3][]string{sizes(p.create), sizes(p.update), sizes(p.delete)}
			want := [3][]string{tc.create, tc.update, tc.delete}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("create/update/delete (-want +got):\n%s", diff)
			}
			for _, s := range append(p.create, p.update...) {
				if len(s.Endpoints) > tc.max {
					t.Errorf("slice %q has %d endpoints, more than %d", s.Name, len(s.Endpoints), tc.max)
				}
			}
		})
	}
}

func TestReconcileNamedPortsResolvedPerPod(t *testing.T) {
	svc := testService(nil)
	pods := append(testPods(0, 1, nil), testPods(1, 2, func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports[0].ContainerPort = 9090
	})...)
	p, err := testReconciler(100).reconcile(svc, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]string{}
	for _, s := range p.create {
		if len(s.Ports) != 1 || len(s.Endpoints) != 1 {
			t.Fatalf("slice ports %v endpoints %d, want one of each", s.Ports, len(s.Endpoints))
		}
		if *s.Ports[0].Name != "http" || *s.Ports[0].Protocol != corev1.ProtocolTCP {
			t.Errorf("port %v, want http/TCP", s.Ports[0])
		}
		got[*s.Ports[0].Port] = s.Endpoints[0].TargetRef.Name
	}
	if diff := cmp.Diff(map[int32]string{8080: "pod-0000", 9090: "pod-0001"}, got); diff != "" {
		t.Errorf("pod by resolved port (-want +got):\n%s", diff)
	}
}

func TestPodEndpoint(t *testing.T) {
	now := metav1.NewTime(time.Unix(100, 0))
	notReady := func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
	terminating := func(p *corev1.Pod) { p.DeletionTimestamp = &now }
	tests := []struct {
		name                        string
		svc                         func(*corev1.Service)
		pod                         func(*corev1.Pod)
		ready, serving, terminating bool
	}{
		{name: "ready pod", ready: true, serving: true},
		{name: "not ready pod", pod: notReady},
		{name: "terminating ready pod: serving but never ready", pod: terminating, serving: true, terminating: true},
		{name: "terminating not ready pod", pod: func(p *corev1.Pod) { notReady(p); terminating(p) }, terminating: true},
		{name: "publishNotReadyAddresses: not ready pod is ready", svc: func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true }, pod: notReady, ready: true},
		{name: "publishNotReadyAddresses: terminating pod is ready", svc: func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true },
			pod: terminating, ready: true, serving: true, terminating: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := testReconciler(100).reconcile(testService(tc.svc), []*corev1.Pod{testPod(0, tc.pod)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.create) != 1 || len(p.create[0].Endpoints) != 1 {
				t.Fatalf("plan %v, want one slice with one endpoint", sizes(p.create))
			}
			c := p.create[0].Endpoints[0].Conditions
			got := [3]bool{*c.Ready, *c.Serving, *c.Terminating}
			if want := [3]bool{tc.ready, tc.serving, tc.terminating}; got != want {
				t.Errorf("ready/serving/terminating = %v, want %v", got, want)
			}
		})
	}
}

func TestPodEndpointFields(t *testing.T) {
	svc := testService(nil)
	pods := []*corev1.Pod{
		testPod(0, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "h0", "web" }),
		testPod(1, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "h1", "other" }),
		testPod(2, func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }),
	}
	p, err := testReconciler(100).reconcile(svc, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []discoveryv1.Endpoint{{
		Addresses:  []string{"10.1.0.1"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
		Hostname:   ptr("h0"),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-0000", UID: "uid-0"},
		NodeName:   ptr("node-a"),
		Zone:       ptr("z1"),
	}, {
		Addresses:  []string{"10.1.0.2"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-0001", UID: "uid-1"},
		NodeName:   ptr("node-a"),
		Zone:       ptr("z1"),
	}, {
		Addresses:  []string{"10.1.0.3"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-0002", UID: "uid-2"},
		NodeName:   ptr("node-b"),
	}}
	if len(p.create) != 1 {
		t.Fatalf("plan %v, want one slice", sizes(p.create))
	}
	s := p.create[0]
	if diff := cmp.Diff(want, s.Endpoints); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	wantMeta := metav1.ObjectMeta{
		GenerateName: "web-", Namespace: "ns",
		Labels: map[string]string{"team": "blue", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ControllerName},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "svc-uid",
			Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
	}
	if diff := cmp.Diff(wantMeta, s.ObjectMeta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	if s.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("addressType %s, want IPv4", s.AddressType)
	}
}

func TestPodsLeftOut(t *testing.T) {
	now := metav1.NewTime(time.Unix(100, 0))
	tests := []struct {
		name    string
		svc     func(*corev1.Service)
		pod     func(*corev1.Pod)
		wantErr bool
		want    int
	}{
		{name: "no IP yet", pod: func(p *corev1.Pod) { p.Spec.NodeName, p.Status = "", corev1.PodStatus{Phase: corev1.PodPending} }},
		{name: "succeeded", pod: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }},
		{name: "failed", pod: func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }},
		{name: "terminating stays", pod: func(p *corev1.Pod) { p.DeletionTimestamp = &now }, want: 1},
		{name: "unknown node: left out and retried", pod: func(p *corev1.Pod) { p.Spec.NodeName = "gone" }, wantErr: true},
		{name: "unknown node with publishNotReadyAddresses: kept",
			svc: func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true }, pod: func(p *corev1.Pod) { p.Spec.NodeName = "gone" }, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := testReconciler(100).reconcile(testService(tc.svc), []*corev1.Pod{testPod(0, tc.pod)}, nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if len(p.create) != 1 || len(p.create[0].Endpoints) != tc.want {
				t.Errorf("plan %v, want one slice with %d endpoints", sizes(p.create), tc.want)
			}
		})
	}
}

func TestAddressTypesAndLabels(t *testing.T) {
	dual := func(p *corev1.Pod) {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::" + strings.TrimPrefix(p.Status.PodIP, "10.1.0.")})
	}
	tests := []struct {
		name   string
		svc    func(*corev1.Service)
		want   map[discoveryv1.AddressType][]string // addresses by slice type
		labels map[string]string
	}{{
		name: "IPv4 Service",
		want: map[discoveryv1.AddressType][]string{discoveryv1.AddressTypeIPv4: {"10.1.0.1"}},
	}, {
		name: "IPv6 Service",
		svc:  func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} },
		want: map[discoveryv1.AddressType][]string{discoveryv1.AddressTypeIPv6: {"fd00::1"}},
	}, {
		name: "dual-stack Service: one slice per family",
		svc: func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		},
		want: map[discoveryv1.AddressType][]string{discoveryv1.AddressTypeIPv4: {"10.1.0.1"}, discoveryv1.AddressTypeIPv6: {"fd00::1"}},
	}, {
		name: "Service without families: its cluster IP's",
		svc:  func(s *corev1.Service) { s.Spec.IPFamilies = nil },
		want: map[discoveryv1.AddressType][]string{discoveryv1.AddressTypeIPv4: {"10.1.0.1"}},
	}, {
		name: "headless Service gets the headless label and no copied reserved label",
		svc: func(s *corev1.Service) {
			s.Spec.ClusterIP = corev1.ClusterIPNone
			s.Labels[discoveryv1.LabelManagedBy] = "me"
		},
		want:   map[discoveryv1.AddressType][]string{discoveryv1.AddressTypeIPv4: {"10.1.0.1"}},
		labels: map[string]string{"team": "blue", corev1.IsHeadlessService: "", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ControllerName},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := testService(tc.svc)
			p, err := testReconciler(100).reconcile(svc, []*corev1.Pod{testPod(0, dual)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[discoveryv1.AddressType][]string{}
			for _, s := range p.create {
				for _, ep := range s.Endpoints {
					got[s.AddressType] = append(got[s.AddressType], ep.Addresses...)
				}
				if tc.labels != nil {
					if diff := cmp.Diff(tc.labels, s.Labels); diff != "" {
						t.Errorf("labels (-want +got):\n%s", diff)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("addresses by type (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReconcileDropsLostFamilyAndRelabels(t *testing.T) {
	dualSvc := testService(func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	})
	pods := testPods(0, 3, func(p *corev1.Pod) {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::" + strings.TrimPrefix(p.Status.PodIP, "10.1.0.")})
	})
	existing := existingSlices(t, dualSvc, pods, 100)
	svc := testService(func(s *corev1.Service) { s.Labels["tier"] = "front" })
	p, err := testReconciler(100).reconcile(svc, pods, existing)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.delete) != 1 || p.delete[0].AddressType != discoveryv1.AddressTypeIPv6 {
		t.Errorf("deletes %v, want the IPv6 slice", sizes(p.delete))
	}
	if len(p.update) != 1 || p.update[0].Labels["tier"] != "front" || len(p.create) != 0 {
		t.Errorf("updates %v creates %v, want the IPv4 slice relabelled", sizes(p.update), sizes(p.create))
	}
}

func TestReuseDeletedNeedsSameOwner(t *testing.T) {
	svc := testService(nil)
	old := existingSlices(t, svc, testPods(0, 2, nil), 100)
	old[0].OwnerReferences[0].UID = "earlier-service"
	old[0].Ports[0].Port = ptr(int32(7070)) // a port no pod has now
	p, err := testReconciler(100).reconcile(svc, testPods(0, 2, nil), old)
	if err != nil {
		t.Fatal(err)
	}
	got := [3][]string{sizes(p.create), sizes(p.update), sizes(p.delete)}
	if want := [3][]string{{":2"}, nil, {"web-0:2"}}; !cmp.Equal(want, got) {
		t.Errorf("create/update/delete %v, want %v", got, want)
	}
}

func TestTrafficDistributionHints(t *testing.T) {
	zoneHint := &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}}
	tests := []struct {
		dist string
		node string
		want *discoveryv1.EndpointHints
	}{
		{dist: "", node: "node-a"},
		{dist: corev1.ServiceTrafficDistributionPreferClose, node: "node-a", want: zoneHint},
		{dist: corev1.ServiceTrafficDistributionPreferSameZone, node: "node-a", want: zoneHint},
		{dist: corev1.ServiceTrafficDistributionPreferSameNode, node: "node-a",
			want: &discoveryv1.EndpointHints{ForNodes: []discoveryv1.ForNode{{Name: "node-a"}}, ForZones: []discoveryv1.ForZone{{Name: "z1"}}}},
		{dist: corev1.ServiceTrafficDistributionPreferClose, node: "node-b"}, // no zone: no hint
	}
	for _, tc := range tests {
		t.Run(tc.dist+"/"+tc.node, func(t *testing.T) {
			svc := testService(func(s *corev1.Service) {
				if tc.dist != "" {
					s.Spec.TrafficDistribution = ptr(tc.dist)
				}
			})
			p, err := testReconciler(100).reconcile(svc, []*corev1.Pod{testPod(0, func(p *corev1.Pod) { p.Spec.NodeName = tc.node })}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, p.create[0].Endpoints[0].Hints); diff != "" {
				t.Errorf("hints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDualStackServiceWithIPv4OnlyPods: until pods get IPv6 addresses a
// dual-stack Service has its pods in the IPv4 slice and an empty IPv6
// placeholder slice, as upstream's reconciler leaves one per address type.
func TestDualStackServiceWithIPv4OnlyPods(t *testing.T) {
	for _, fams := range [][]corev1.IPFamily{{corev1.IPv4Protocol, corev1.IPv6Protocol}, {corev1.IPv6Protocol, corev1.IPv4Protocol}} {
		svc := testService(func(s *corev1.Service) { s.Spec.IPFamilies = fams })
		p, err := testReconciler(100).reconcile(svc, testPods(0, 3, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[discoveryv1.AddressType][]string{}
		slices := map[discoveryv1.AddressType]int{}
		for _, s := range p.create {
			slices[s.AddressType]++
			for _, ep := range s.Endpoints {
				got[s.AddressType] = append(got[s.AddressType], ep.Addresses...)
			}
			if s.AddressType == discoveryv1.AddressTypeIPv6 && (len(s.Endpoints) != 0 || len(s.Ports) != 0) {
				t.Errorf("%v: IPv6 slice %+v, want an empty placeholder", fams, s)
			}
		}
		want := map[discoveryv1.AddressType][]string{discoveryv1.AddressTypeIPv4: {"10.1.0.1", "10.1.0.2", "10.1.0.3"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%v: addresses by type (-want +got):\n%s", fams, diff)
		}
		if diff := cmp.Diff(map[discoveryv1.AddressType]int{discoveryv1.AddressTypeIPv4: 1, discoveryv1.AddressTypeIPv6: 1}, slices); diff != "" {
			t.Errorf("%v: slices by type (-want +got):\n%s", fams, diff)
		}
	}
}
