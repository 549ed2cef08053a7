package endpointslicemirroring

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/endpoints"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const waitFor = 60 * time.Second

type env struct {
	*clustertest.Env
	t *testing.T
}

// newEnv starts the API server and the controller with workers (0: the
// default).
func newEnv(t *testing.T, workers int) *env {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{})
	inf := client.NewInformers(e.Config)
	c, err := New(Config{Client: e.Client, Informers: inf, Logger: e.Log, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go func() {
		if err := c.Run(e.Ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	return &env{Env: e, t: t}
}

// service creates a Service on port 80, without a selector unless one
// is given.
func (e *env) service(name string, selector map[string]string) {
	e.t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := e.Client.Core.Services("default").Create(e.Ctx, s, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// endpoints writes Endpoints name with n addresses on port 9376.
func (e *env) endpoints(name string, n int, mod func(*corev1.Endpoints)) {
	e.t.Helper()
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	s := corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Port: 9376, Protocol: corev1.ProtocolTCP}}}
	for i := range n {
		s.Addresses = append(s.Addresses, corev1.EndpointAddress{IP: fmt.Sprintf("192.0.%d.%d", i/250, i%250+1)})
	}
	ep.Subsets = []corev1.EndpointSubset{s}
	if mod != nil {
		mod(ep)
	}
	if _, err := e.Client.Core.Endpoints("default").Create(e.Ctx, ep, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) mirroredSlices(name string) []discoveryv1.EndpointSlice {
	e.t.Helper()
	l, err := e.Client.Discovery.EndpointSlices("default").List(e.Ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: ControllerName}).String()})
	if err != nil {
		e.t.Fatal(err)
	}
	return l.Items
}

// waitMirrored waits until name's mirrored slices hold n endpoints in
// total (0: no slices at all).
func (e *env) waitMirrored(name string, n int) []discoveryv1.EndpointSlice {
	e.t.Helper()
	var ss []discoveryv1.EndpointSlice
	clustertest.Eventually(e.t, waitFor, func() error {
		ss = e.mirroredSlices(name)
		got := 0
		for _, s := range ss {
			got += len(s.Endpoints)
		}
		if got != n || (n == 0 && len(ss) > 0) {
			return fmt.Errorf("%d slices with %d endpoints, want %d endpoints", len(ss), got, n)
		}
		return nil
	})
	return ss
}

func TestMirroring(t *testing.T) {
	e := newEnv(t, 0)
	e.service("ext", nil)
	e.endpoints("ext", 2, func(ep *corev1.Endpoints) { ep.Labels = map[string]string{"team": "blue"} })
	ss := e.waitMirrored("ext", 2)
	if len(ss) != 1 {
		t.Fatalf("%d slices, want 1", len(ss))
	}
	s := ss[0]
	ep, err := e.Client.Core.Endpoints("default").Get(e.Ctx, "ext", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Labels["team"] != "blue" || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != ep.UID || s.OwnerReferences[0].Kind != "Endpoints" ||
		s.AddressType != discoveryv1.AddressTypeIPv4 || len(s.Ports) != 1 || *s.Ports[0].Port != 9376 {
		t.Errorf("mirrored slice %+v", s)
	}

	// Changes follow.
	ep.Subsets[0].Addresses = ep.Subsets[0].Addresses[:1]
	if _, err := e.Client.Core.Endpoints("default").Update(e.Ctx, ep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitMirrored("ext", 1)

	// A skip-mirror label removes what was mirrored.
	clustertest.Eventually(t, waitFor, func() error {
		ep, err := e.Client.Core.Endpoints("default").Get(e.Ctx, "ext", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ep.Labels[discoveryv1.LabelSkipMirror] = "true"
		_, err = e.Client.Core.Endpoints("default").Update(e.Ctx, ep, metav1.UpdateOptions{})
		return err
	})
	e.waitMirrored("ext", 0)

	// So does deleting the Endpoints.
	e.service("gone", nil)
	e.endpoints("gone", 1, nil)
	e.waitMirrored("gone", 1)
	if err := e.Client.Core.Endpoints("default").Delete(e.Ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitMirrored("gone", 0)
}

func TestMirroringMax1000PerSubset(t *testing.T) {
	e := newEnv(t, 0)
	e.service("big", nil)
	e.endpoints("big", 1001, nil)
	e.waitMirrored("big", 1000)
	clustertest.Eventually(t, waitFor, func() error {
		evs, err := e.Client.Core.Events("default").List(e.Ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == reasonTooManyAddressesToMirror && ev.InvolvedObject.Kind == "Endpoints" && ev.InvolvedObject.Name == "big" {
				return nil
			}
		}
		return fmt.Errorf("no %s event on the Endpoints among %d events", reasonTooManyAddressesToMirror, len(evs.Items))
	})
}

// TestNotMirrored: the skip rules. Each case's Endpoints must stay
// unmirrored; a mirrored one written last shows the controller, with one
// worker taking the queue in order, has processed the others.
func TestNotMirrored(t *testing.T) {
	e := newEnv(t, 1)
	e.service("skip", nil)
	e.endpoints("skip", 1, func(ep *corev1.Endpoints) { ep.Labels = map[string]string{discoveryv1.LabelSkipMirror: "true"} })
	e.service("leader", nil)
	e.endpoints("leader", 1, func(ep *corev1.Endpoints) { ep.Annotations = map[string]string{endpoints.LeaderAnnotation: "{}"} })
	e.endpoints("noservice", 1, nil)
	e.service("selector", map[string]string{"app": "x"})
	e.endpoints("selector", 1, nil)
	e.service("control", nil)
	e.endpoints("control", 1, nil)
	e.waitMirrored("control", 1)
	for _, name := range []string{"skip", "leader", "noservice", "selector"} {
		if ss := e.mirroredSlices(name); len(ss) != 0 {
			t.Errorf("Endpoints %s mirrored into %d slices", name, len(ss))
		}
	}
	// A Service appearing later for the Endpoints starts the mirroring.
	e.service("noservice", nil)
	e.waitMirrored("noservice", 1)
}
