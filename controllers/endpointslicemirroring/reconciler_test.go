package endpointslicemirroring

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ips(prefix string, n int) []corev1.EndpointAddress {
	out := make([]corev1.EndpointAddress, n)
	for i := range out {
		out[i] = corev1.EndpointAddress{IP: fmt.Sprintf("%s%d.%d", prefix, i/250, i%250+1)}
	}
	return out
}

func testEndpoints(subsets ...corev1.EndpointSubset) *corev1.Endpoints {
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "ns", UID: "ep-uid",
			Labels: map[string]string{"team": "blue"},
			Annotations: map[string]string{"note": "x", corev1.EndpointsLastChangeTriggerTime: "2026-01-01T00:00:00Z",
				corev1.LastAppliedConfigAnnotation: "{}"}},
		Subsets: subsets,
	}
}

func tcp(n int32) []corev1.EndpointPort {
	return []corev1.EndpointPort{{Name: "p", Port: n, Protocol: corev1.ProtocolTCP}}
}

// summary is "<type>/<port>:<endpoints>" of each slice.
func summary(ss []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		port := int32(0)
		if len(s.Ports) > 0 {
			port = *s.Ports[0].Port
		}
		out = append(out, fmt.Sprintf("%s%s/%d:%d", s.Name, s.AddressType, port, len(s.Endpoints)))
	}
	return out
}

func TestMirror(t *testing.T) {
	tests := []struct {
		name             string
		ep               *corev1.Endpoints
		create           []string
		invalid, skipped int
	}{{
		name:   "one subset, one slice",
		ep:     testEndpoints(corev1.EndpointSubset{Addresses: ips("10.0.", 3), NotReadyAddresses: ips("10.1.", 1), Ports: tcp(80)}),
		create: []string{"IPv4/80:4"},
	}, {
		name: "subsets of different ports and families: a slice each",
		ep: testEndpoints(
			corev1.EndpointSubset{Addresses: append(ips("10.0.", 2), corev1.EndpointAddress{IP: "fd00::1"}), Ports: tcp(80)},
			corev1.EndpointSubset{Addresses: ips("10.2.", 1), Ports: tcp(81)}),
		create: []string{"IPv4/80:2", "IPv4/81:1", "IPv6/80:1"},
	}, {
		name:    "at most 1000 addresses of a subset",
		ep:      testEndpoints(corev1.EndpointSubset{Addresses: ips("10.0.", 1200), Ports: tcp(80)}),
		create:  []string{"IPv4/80:1000"},
		skipped: 200,
	}, {
		name:    "invalid IPs are skipped",
		ep:      testEndpoints(corev1.EndpointSubset{Addresses: append(ips("10.0.", 1), corev1.EndpointAddress{IP: "nope"}), Ports: tcp(80)}),
		create:  []string{"IPv4/80:1"},
		invalid: 1, skipped: 1,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := reconcile(tc.ep, nil, DefaultMaxEndpointsPerSubset)
			if diff := cmp.Diff(tc.create, summary(p.create)); diff != "" {
				t.Errorf("creates (-want +got):\n%s", diff)
			}
			if p.invalid != tc.invalid || p.skipped != tc.skipped || len(p.update)+len(p.delete) != 0 {
				t.Errorf("invalid %d skipped %d updates %d deletes %d, want %d %d 0 0", p.invalid, p.skipped, len(p.update), len(p.delete), tc.invalid, tc.skipped)
			}
		})
	}
}

func TestMirroredSliceContent(t *testing.T) {
	node := "n1"
	ep := testEndpoints(corev1.EndpointSubset{
		Addresses:         []corev1.EndpointAddress{{IP: "10.0.0.1", Hostname: "h", NodeName: &node, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "a", Namespace: "ns"}}},
		NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.0.0.2"}},
		Ports:             []corev1.EndpointPort{{Name: "p", Port: 80, Protocol: corev1.ProtocolTCP, AppProtocol: ptr("http")}},
	})
	p := reconcile(ep, nil, DefaultMaxEndpointsPerSubset)
	if len(p.create) != 1 {
		t.Fatalf("creates %v, want one", summary(p.create))
	}
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "ext-", Namespace: "ns",
			Labels:      map[string]string{"team": "blue", discoveryv1.LabelServiceName: "ext", discoveryv1.LabelManagedBy: ControllerName},
			Annotations: map[string]string{"note": "x"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Endpoints", Name: "ext", UID: "ep-uid",
				Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("p"), Port: ptr(int32(80)), Protocol: ptr(corev1.ProtocolTCP), AppProtocol: ptr("http")}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}, Hostname: ptr("h"), NodeName: &node,
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "a", Namespace: "ns"}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}},
		},
	}
	if diff := cmp.Diff(want, p.create[0]); diff != "" {
		t.Errorf("slice (-want +got):\n%s", diff)
	}
}

func TestReconcileExisting(t *testing.T) {
	ep := testEndpoints(corev1.EndpointSubset{Addresses: ips("10.0.", 3), Ports: tcp(80)})
	steady := func() []*discoveryv1.EndpointSlice {
		ss := reconcile(ep, nil, DefaultMaxEndpointsPerSubset).create
		ss[0].Name, ss[0].GenerateName, ss[0].ResourceVersion = "ext-a", "", "5"
		return ss
	}
	t.Run("in sync: no writes", func(t *testing.T) {
		p := reconcile(ep, steady(), DefaultMaxEndpointsPerSubset)
		if len(p.create)+len(p.update)+len(p.delete) != 0 {
			t.Errorf("plan %v %v %v, want nothing", summary(p.create), summary(p.update), summary(p.delete))
		}
	})
	t.Run("changed addresses: updated in place, duplicate deleted", func(t *testing.T) {
		dup := steady()[0].DeepCopy()
		dup.Name = "ext-b"
		changed := ep.DeepCopy()
		changed.Subsets[0].Addresses = ips("10.0.", 4)
		p := reconcile(changed, append(steady(), dup), DefaultMaxEndpointsPerSubset)
		got := [3][]string{summary(p.create), summary(p.update), summary(p.delete)}
		if want := [3][]string{nil, {"ext-aIPv4/80:4"}, {"ext-bIPv4/80:3"}}; !cmp.Equal(want, got) {
			t.Errorf("create/update/delete %v, want %v", got, want)
		}
	})
	t.Run("ports changed: the old slice is reused", func(t *testing.T) {
		changed := ep.DeepCopy()
		changed.Subsets[0].Ports = tcp(8080)
		p := reconcile(changed, steady(), DefaultMaxEndpointsPerSubset)
		got := [3][]string{summary(p.create), summary(p.update), summary(p.delete)}
		if want := [3][]string{nil, {"ext-aIPv4/8080:3"}, nil}; !cmp.Equal(want, got) {
			t.Errorf("create/update/delete %v, want %v", got, want)
		}
	})
	t.Run("annotation changed: updated", func(t *testing.T) {
		changed := ep.DeepCopy()
		changed.Annotations["note"] = "y"
		p := reconcile(changed, steady(), DefaultMaxEndpointsPerSubset)
		if len(p.update) != 1 || p.update[0].Annotations["note"] != "y" {
			t.Errorf("updates %v, want the slice with the new annotation", summary(p.update))
		}
	})
}
