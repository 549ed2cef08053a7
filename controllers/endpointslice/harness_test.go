package endpointslice

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const waitFor = 60 * time.Second

type env struct {
	*clustertest.Env
	t *testing.T
}

// newEnv starts the API server with nodes simulated nodes and the
// controller; mod may change its Config.
func newEnv(t *testing.T, nodes int, mod func(*Config)) *env {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{Nodes: nodes})
	inf := client.NewInformers(e.Config)
	cfg := Config{Client: e.Client, Informers: inf, Logger: e.Log}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
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

// service creates a ClusterIP Service selecting app=<name> on port 80 →
// the pods' "http" port.
func (e *env) service(name string, mod func(*corev1.Service)) *corev1.Service {
	e.t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
		},
	}
	if mod != nil {
		mod(s)
	}
	s, err := e.Client.Core.Services("default").Create(e.Ctx, s, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// pod creates a pod labelled app=<app> with container port "http" 8080,
// left to the scheduler and the simulated nodes unless mod sets its node.
func (e *env) pod(name, app string, mod func(*corev1.Pod)) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
	}
	if mod != nil {
		mod(p)
	}
	p, err := e.Client.Core.Pods("default").Create(e.Ctx, p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// plainNode creates a node no simulator runs, in zone, so that the test
// writes its pods' status as their kubelet.
func (e *env) plainNode(name, zone string) {
	e.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}}}
	if _, err := e.Client.Core.Nodes().Create(e.Ctx, n, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// setStatus writes a pod's status as its kubelet: Running with ip, Ready
// as ready since now.
func (e *env) setStatus(name, ip string, ready bool) {
	e.t.Helper()
	e.setStatusAt(name, ip, ready, time.Now())
}

// setStatusAt is setStatus with the Ready condition's transition at
// since.
func (e *env) setStatusAt(name, ip string, ready bool, since time.Time) {
	e.t.Helper()
	clustertest.Eventually(e.t, waitFor, func() error {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(since)}}}
		_, err = e.Client.Core.Pods("default").UpdateStatus(e.Ctx, p, metav1.UpdateOptions{})
		return err
	})
}

// slices lists the slices of a Service this controller manages.
func (e *env) slices(svc string) []discoveryv1.EndpointSlice {
	e.t.Helper()
	l, err := e.Client.Discovery.EndpointSlices("default").List(e.Ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: ControllerName}).String()})
	if err != nil {
		e.t.Fatal(err)
	}
	return l.Items
}

// endpointState is an endpoint as the tests compare it.
type endpointState struct {
	Pod                         string
	Ready, Serving, Terminating bool
}

// endpoints is every endpoint of the Service's slices, sorted by pod.
func endpoints(ss []discoveryv1.EndpointSlice) []endpointState {
	var out []endpointState
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			c := ep.Conditions
			out = append(out, endpointState{Pod: ep.TargetRef.Name, Ready: *c.Ready, Serving: *c.Serving, Terminating: *c.Terminating})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

// waitSlices polls the Service's slices until check passes.
func (e *env) waitSlices(svc string, check func([]discoveryv1.EndpointSlice) error) []discoveryv1.EndpointSlice {
	e.t.Helper()
	var got []discoveryv1.EndpointSlice
	clustertest.Eventually(e.t, waitFor, func() error {
		got = e.slices(svc)
		return check(got)
	})
	return got
}

// readyPods waits until the slices hold exactly the named pods, all ready.
func (e *env) waitReadyPods(svc string, pods ...string) []discoveryv1.EndpointSlice {
	e.t.Helper()
	want := make([]endpointState, len(pods))
	for i, p := range pods {
		want[i] = endpointState{Pod: p, Ready: true, Serving: true}
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Pod < want[j].Pod })
	return e.waitSlices(svc, func(ss []discoveryv1.EndpointSlice) error {
		if got := endpoints(ss); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("endpoints %v, want %v", got, want)
		}
		return nil
	})
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func sliceSummary(ss []discoveryv1.EndpointSlice) string {
	var b []string
	for _, s := range ss {
		b = append(b, fmt.Sprintf("%s(%s,%d)", s.Name, s.AddressType, len(s.Endpoints)))
	}
	return strings.Join(b, " ")
}
