package endpoints

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/kubelet/simulator"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const waitFor = 90 * time.Second

type env struct {
	*clustertest.Env
	t *testing.T
}

func newEnv(t *testing.T, nodes int) *env {
	t.Helper()
	e := &env{Env: clustertest.New(t, clustertest.Options{Nodes: nodes}), t: t}
	e.start()
	return e
}

// start runs the controller.
func (e *env) start() {
	t := e.t
	inf := client.NewInformers(e.Config)
	c, err := New(Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go func() {
		if err := c.Run(e.Ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
}

func (e *env) service(name string, mod func(*corev1.Service)) {
	e.t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"team": "blue"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
		},
	}
	if mod != nil {
		mod(s)
	}
	if _, err := e.Client.Core.Services("default").Create(e.Ctx, s, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) pod(name, app string, mod func(*corev1.Pod)) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
	}
	if mod != nil {
		mod(p)
	}
	_, err := e.Client.Core.Pods("default").Create(e.Ctx, p, metav1.CreateOptions{})
	return err
}

// waitEndpoints polls the Endpoints named name until check passes.
func (e *env) waitEndpoints(name string, check func(*corev1.Endpoints) error) *corev1.Endpoints {
	e.t.Helper()
	var ep *corev1.Endpoints
	clustertest.Eventually(e.t, waitFor, func() error {
		var err error
		if ep, err = e.Client.Core.Endpoints("default").Get(e.Ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		return check(ep)
	})
	return ep
}

// counts are the ready and not-ready addresses of ep.
func counts(ep *corev1.Endpoints) (ready, notReady int) {
	for _, s := range ep.Subsets {
		ready += len(s.Addresses)
		notReady += len(s.NotReadyAddresses)
	}
	return ready, notReady
}

func wantCounts(ready, notReady int) func(*corev1.Endpoints) error {
	return func(ep *corev1.Endpoints) error {
		if r, n := counts(ep); r != ready || n != notReady {
			return fmt.Errorf("%d ready and %d not-ready addresses, want %d and %d", r, n, ready, notReady)
		}
		return nil
	}
}

func TestEndpointsLifecycle(t *testing.T) {
	e := newEnv(t, 1)
	e.service("web", nil)
	e.service("headless", func(s *corev1.Service) {
		s.Spec.ClusterIP = corev1.ClusterIPNone
		s.Spec.Selector = map[string]string{"app": "web"}
	})
	for i := range 2 {
		if err := e.pod(fmt.Sprintf("web-%d", i), "web", nil); err != nil {
			t.Fatal(err)
		}
	}
	// One pod never gets Ready.
	if err := e.pod("web-slow", "web", func(p *corev1.Pod) {
		p.Annotations = map[string]string{simulator.AnnotationReadyDelay: "1h"}
	}); err != nil {
		t.Fatal(err)
	}
	ep := e.waitEndpoints("web", wantCounts(2, 1))
	if diff := cmp.Diff(map[string]string{"team": "blue", LabelManagedBy: ControllerName}, ep.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if len(ep.Subsets) != 1 || !cmp.Equal(ep.Subsets[0].Ports, []corev1.EndpointPort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}) {
		t.Errorf("subsets %+v, want one on http 8080", ep.Subsets)
	}
	for _, a := range append(ep.Subsets[0].Addresses, ep.Subsets[0].NotReadyAddresses...) {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, a.TargetRef.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a.IP != p.Status.PodIP || a.NodeName == nil || *a.NodeName != p.Spec.NodeName || a.TargetRef.UID != p.UID {
			t.Errorf("address %+v does not match pod %s", a, p.Name)
		}
	}
	for _, a := range ep.Subsets[0].NotReadyAddresses {
		if a.TargetRef.Name != "web-slow" {
			t.Errorf("not-ready address of %s", a.TargetRef.Name)
		}
	}
	hl := e.waitEndpoints("headless", wantCounts(2, 1))
	if _, ok := hl.Labels[corev1.IsHeadlessService]; !ok {
		t.Errorf("headless Service's Endpoints labels %v, want %s", hl.Labels, corev1.IsHeadlessService)
	}

	// A pod goes: its address does too.
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEndpoints("web", wantCounts(1, 1))

	// The Service goes: so do its Endpoints.
	if err := e.Client.Core.Services("default").Delete(e.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, waitFor, func() error {
		_, err := e.Client.Core.Endpoints("default").Get(e.Ctx, "web", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("Endpoints of the deleted Service: %v", err)
		}
		return nil
	})
}

// TestSelectorlessServiceLeftAlone: Endpoints a user wrote for a Service
// without a selector stay as written.
func TestSelectorlessServiceLeftAlone(t *testing.T) {
	e := newEnv(t, 1)
	e.service("manual", func(s *corev1.Service) { s.Spec.Selector = nil })
	mine, err := e.Client.Core.Endpoints("default").Create(e.Ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "manual"},
		Subsets:    []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.42"}}, Ports: []corev1.EndpointPort{{Port: 9376}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A positive event first: another Service's Endpoints are written.
	e.service("auto", nil)
	if err := e.pod("auto-0", "auto", nil); err != nil {
		t.Fatal(err)
	}
	e.waitEndpoints("auto", wantCounts(1, 0))
	got, err := e.Client.Core.Endpoints("default").Get(e.Ctx, "manual", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != mine.ResourceVersion {
		t.Errorf("the user's Endpoints were changed: %+v", got.Subsets)
	}
}

func TestEndpointsTruncatedAt1000(t *testing.T) {
	const n = 1005
	e := newEnv(t, 10)
	e.service("big", nil)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				if err := e.pod(fmt.Sprintf("big-%04d", i), "big", nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	e.waitEndpoints("big", func(ep *corev1.Endpoints) error {
		if ep.Annotations[corev1.EndpointsOverCapacity] != "truncated" {
			return fmt.Errorf("annotations %v, want %s: truncated", ep.Annotations, corev1.EndpointsOverCapacity)
		}
		return wantCounts(1000, 0)(ep)
	})
	// Back under capacity, the annotation goes.
	for i := range 10 {
		if err := e.Client.Core.Pods("default").Delete(e.Ctx, fmt.Sprintf("big-%04d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitEndpoints("big", func(ep *corev1.Endpoints) error {
		if v, ok := ep.Annotations[corev1.EndpointsOverCapacity]; ok {
			return fmt.Errorf("annotation %s: %q still set", corev1.EndpointsOverCapacity, v)
		}
		return wantCounts(n-10, 0)(ep)
	})
}

// TestLeftoverEndpointsDeleted: Endpoints whose Service went while the
// controller was not running are deleted when it starts, but not the
// leader-election ones.
func TestLeftoverEndpointsDeleted(t *testing.T) {
	e := &env{Env: clustertest.New(t, clustertest.Options{}), t: t}
	for _, ep := range []*corev1.Endpoints{
		{ObjectMeta: metav1.ObjectMeta{Name: "lock", Annotations: map[string]string{LeaderAnnotation: "{}"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "orphan"}},
	} {
		if _, err := e.Client.Core.Endpoints("default").Create(e.Ctx, ep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	clustertest.Eventually(t, waitFor, func() error {
		_, err := e.Client.Core.Endpoints("default").Get(e.Ctx, "orphan", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("Endpoints without a Service: %v", err)
		}
		return nil
	})
	if _, err := e.Client.Core.Endpoints("default").Get(e.Ctx, "lock", metav1.GetOptions{}); err != nil {
		t.Errorf("leader-election Endpoints: %v", err)
	}
}

// TestTriggerTimeAnnotation writes a pod's status as its kubelet on a
// node of the test's own: the Endpoints that show it carry the time of
// its Ready transition (or the Service's creation, if one sync saw both).
func TestTriggerTimeAnnotation(t *testing.T) {
	e := newEnv(t, 0)
	if _, err := e.Client.Core.Nodes().Create(e.Ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.service("tt", nil)
	if err := e.pod("tt-0", "tt", func(p *corev1.Pod) { p.Spec.NodeName = "plain" }); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, waitFor, func() error {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, "tt-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.9.0.1", PodIPs: []corev1.PodIP{{IP: "10.9.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
		_, err = e.Client.Core.Pods("default").UpdateStatus(e.Ctx, p, metav1.UpdateOptions{})
		return err
	})
	ep := e.waitEndpoints("tt", wantCounts(1, 0))
	p, err := e.Client.Core.Pods("default").Get(e.Ctx, "tt-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := e.Client.Core.Services("default").Get(e.Ctx, "tt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339Nano, ep.Annotations[corev1.EndpointsLastChangeTriggerTime])
	if err != nil || !(at.Equal(p.Status.Conditions[0].LastTransitionTime.Time) || at.Equal(svc.CreationTimestamp.Time)) {
		t.Errorf("%s %q (%v), want the pod's Ready transition %s or the Service's creation %s", corev1.EndpointsLastChangeTriggerTime,
			ep.Annotations[corev1.EndpointsLastChangeTriggerTime], err, p.Status.Conditions[0].LastTransitionTime, svc.CreationTimestamp)
	}
}
