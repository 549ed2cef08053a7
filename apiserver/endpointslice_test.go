package apiserver

import (
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// exampleSlice is the documentation's example EndpointSlice.
func exampleSlice() *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "example-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "example"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Protocol: ptrTo(corev1.ProtocolTCP), Port: ptrTo[int32](80)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.1.2.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)},
			Hostname: ptrTo("pod-1"), NodeName: ptrTo("node-1"), Zone: ptrTo("us-west2-a"),
		}},
	}
}

func TestEndpointSliceRoundTrip(t *testing.T) {
	e := newTestEnv(t)
	want := exampleSlice()
	if _, err := e.cs.DiscoveryV1().EndpointSlices("default").Create(e.ctx, want, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := e.cs.DiscoveryV1().EndpointSlices("default").Get(e.ctx, "example-abc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Endpoints, got.Endpoints); diff != "" {
		t.Errorf("endpoints (-sent +read):\n%s", diff)
	}
	if diff := cmp.Diff(want.Ports, got.Ports); diff != "" {
		t.Errorf("ports (-sent +read):\n%s", diff)
	}
	if got.AddressType != want.AddressType || !cmp.Equal(got.Labels, want.Labels) {
		t.Errorf("addressType %s labels %v", got.AddressType, got.Labels)
	}
}

func TestEndpointSliceValidation(t *testing.T) {
	e := newTestEnv(t)
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "10.0.0.1"
		}
		return out
	}
	tests := []struct {
		name   string
		mod    func(*discoveryv1.EndpointSlice)
		causes []string
	}{
		{name: "valid", mod: func(*discoveryv1.EndpointSlice) {}},
		{name: "FQDN", mod: func(s *discoveryv1.EndpointSlice) {
			s.AddressType, s.Endpoints[0].Addresses = discoveryv1.AddressTypeFQDN, []string{"db.example.com"}
		}},
		{name: "no address type", mod: func(s *discoveryv1.EndpointSlice) { s.AddressType = "" }, causes: []string{"addressType"}},
		{name: "unknown address type", mod: func(s *discoveryv1.EndpointSlice) { s.AddressType = "IP" }, causes: []string{"addressType"}},
		{name: "address of the wrong family", mod: func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"fd00::1"} },
			causes: []string{"endpoints[0].addresses[0]"}},
		{name: "not an IP", mod: func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"010.1.2.3"} },
			causes: []string{"endpoints[0].addresses[0]"}},
		{name: "no addresses", mod: func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = nil }, causes: []string{"endpoints[0].addresses"}},
		{name: "101 addresses", mod: func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = many(101) }, causes: []string{"endpoints[0].addresses"}},
		{name: "1001 endpoints", mod: func(s *discoveryv1.EndpointSlice) {
			for range 1000 {
				s.Endpoints = append(s.Endpoints, s.Endpoints[0])
			}
		}, causes: []string{"endpoints"}},
		{name: "bad hostname and node", mod: func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Hostname, s.Endpoints[0].NodeName = ptrTo("Pod_1"), ptrTo("Node_1")
		}, causes: []string{"endpoints[0].hostname", "endpoints[0].nodeName"}},
		{name: "duplicate port names and bad protocol", mod: func(s *discoveryv1.EndpointSlice) {
			s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptrTo("http"), Protocol: ptrTo(corev1.Protocol("ICMP")), Port: ptrTo[int32](81)})
		}, causes: []string{"ports[1].name", "ports[1].protocol"}},
		{name: "port out of range", mod: func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptrTo[int32](70000) }, causes: []string{"ports[0].port"}},
		{name: "9 zone hints", mod: func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: make([]discoveryv1.ForZone, 9)}
		}, causes: []string{"endpoints[0].hints.forZones"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := exampleSlice()
			s.Name = ""
			s.GenerateName = "v-"
			tc.mod(s)
			_, err := e.cs.DiscoveryV1().EndpointSlices("default").Create(e.ctx, s, metav1.CreateOptions{})
			if tc.causes == nil {
				if err != nil {
					t.Fatalf("valid slice refused: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want 422 Invalid, got %v", err)
			}
			var got []string
			for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
				got = append(got, c.Field)
			}
			sort.Strings(got)
			got = slices.Compact(got)
			if diff := cmp.Diff(tc.causes, got); diff != "" {
				t.Errorf("causes (-want +got):\n%s", diff)
			}
		})
	}

	s, err := e.cs.DiscoveryV1().EndpointSlices("default").Create(e.ctx, exampleSlice(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.AddressType = discoveryv1.AddressTypeIPv6
	s.Endpoints[0].Addresses = []string{"fd00::1"}
	if _, err := e.cs.DiscoveryV1().EndpointSlices("default").Update(e.ctx, s, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("changing the address type: %v, want 422 Invalid", err)
	}
}
