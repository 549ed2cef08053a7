package proxy

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
)

const testNode = "node-a"

// svcOpt changes a test Service.
type svcOpt func(*corev1.Service)

func newService(name, clusterIP string, port int32, opts ...svcOpt) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: clusterIP,
			Ports:     []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, o := range opts {
		o(svc)
	}
	return svc
}

func nodePort(np int32, policy corev1.ServiceExternalTrafficPolicy) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = np
		s.Spec.ExternalTrafficPolicy = policy
	}
}

func affinity(seconds int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &seconds}}
	}
}

func internalLocal(s *corev1.Service) {
	p := corev1.ServiceInternalTrafficPolicyLocal
	s.Spec.InternalTrafficPolicy = &p
}

// ep is a test endpoint: address, node, and conditions.
type ep struct {
	ip                          string
	node                        string
	ready, serving, terminating bool
}

func readyEP(ip, node string) ep { return ep{ip: ip, node: node, ready: true, serving: true} }

func newSlice(svc, name string, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(port)}},
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{e.ip},
			NodeName:  ptr(e.node),
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr(e.ready), Serving: ptr(e.serving), Terminating: ptr(e.terminating),
			},
		})
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// testIndexers are the stores the informers would fill.
func testIndexers() (services, slices cache.Indexer) {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{client.SliceServiceIndex: client.SliceServiceKeys})
}

func mustAdd(t *testing.T, store cache.Store, objs ...any) {
	t.Helper()
	for _, o := range objs {
		if err := store.Add(o); err != nil {
			t.Fatal(err)
		}
	}
}

func mustUpdate(t *testing.T, store cache.Store, obj any) {
	t.Helper()
	if err := store.Update(obj); err != nil {
		t.Fatal(err)
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func epAddrs(eps []endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = fmt.Sprint(e.addr)
	}
	return out
}

// metaNode is a Node's metadata with its zone label.
func metaNode(name, zone string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}}
}
