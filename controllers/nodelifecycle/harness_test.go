package nodelifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

// env is a real API server in-process over a badger store in a temp dir,
// a controller on a fake clock whose passes the test runs one by one, and
// the test acting as the kubelets of its nodes.
type env struct {
	t     *testing.T
	ctx   context.Context
	cfg   *rest.Config
	cs    kubernetes.Interface
	clock *clocktesting.FakeClock
	c     *Controller
	// alive nodes get their Lease renewed before each pass.
	alive map[string]bool
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newAPI starts a real API server in-process, and nothing beside it; it
// stops when the test ends. The config reaches it as the controller
// manager.
func newAPI(t *testing.T) *rest.Config {
	t.Helper()
	return clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true}).Config
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	cfg := newAPI(t)
	var err error
	e := &env{t: t, cfg: cfg, cs: kubernetes.NewForConfigOrDie(cfg), clock: clocktesting.NewFakeClock(epoch), alive: map[string]bool{}}
	ccfg := Config{RESTConfig: cfg, Clock: e.clock, Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))}
	if mod != nil {
		mod(&ccfg)
	}
	e.c, err = New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.ctx = ctx
	stop, err := e.c.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); stop() })
	return e
}

// addNode registers a node as a kubelet would: Ready (or the given
// status) with its kubelet conditions, and a Lease. zone "" means no
// zone label.
func (e *env) addNode(name, zone string, ready corev1.ConditionStatus) {
	e.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if zone != "" {
		n.Labels[corev1.LabelTopologyZone] = zone
	}
	n, err := e.cs.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.postStatus(n.Name, ready)
	renew := metav1.NewMicroTime(e.clock.Now())
	if _, err := e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(e.ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: ptrTo[int32](40), RenewTime: &renew},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.alive[name] = true
}

// postStatus writes the kubelet's conditions: Ready as given, the
// pressures False.
func (e *env) postStatus(name string, ready corev1.ConditionStatus) {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	now := metav1.NewTime(e.clock.Now())
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	for _, t := range kubeletConditions[1:] {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now})
	}
	if _, err := e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) renew(name string) {
	e.t.Helper()
	l, err := e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	now := metav1.NewMicroTime(e.clock.Now())
	l.Spec.RenewTime = &now
	if _, err := e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(e.ctx, l, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// settle waits until the controller's caches hold what the API holds.
func (e *env) settle() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if e.synced() {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal("controller caches did not catch up in 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *env) synced() bool {
	nodes, err := e.cs.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(e.c.nodes.GetStore().ListKeys()) != len(nodes.Items) {
		return false
	}
	for _, n := range nodes.Items {
		obj, ok, _ := e.c.nodes.GetStore().GetByKey(n.Name)
		if !ok || obj.(*corev1.Node).ResourceVersion != n.ResourceVersion {
			return false
		}
	}
	leases, err := e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, l := range leases.Items {
		obj, ok, _ := e.c.leases.GetStore().GetByKey(l.Namespace + "/" + l.Name)
		if !ok || obj.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
			return false
		}
	}
	return true
}

// step moves the clock on by d, renews the alive nodes' Leases (as their
// kubelets would have), and runs one monitor pass on settled caches.
func (e *env) step(d time.Duration) {
	e.t.Helper()
	e.clock.Step(d)
	for name, ok := range e.alive {
		if ok {
			e.renew(name)
		}
	}
	e.settle()
	e.c.monitor(e.ctx)
	e.settle()
}

func (e *env) node(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// taints lists a node's taints as key:Effect, sorted.
func (e *env) taints(name string) []string {
	out := []string{}
	for _, t := range e.node(name).Spec.Taints {
		out = append(out, t.Key+":"+string(t.Effect))
	}
	sort.Strings(out)
	return out
}

// noExecuteTainted counts nodes with a not-ready or unreachable NoExecute
// taint.
func (e *env) noExecuteTainted() []string {
	e.t.Helper()
	nodes, err := e.cs.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) || hasTaint(n, corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute) {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}

// addPod creates a pod bound to node and reports it Running and Ready, as
// the node's kubelet would.
func (e *env) addPod(name, node string, tolerations ...corev1.Toleration) *corev1.Pod {
	e.t.Helper()
	p, err := e.cs.CoreV1().Pods("default").Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: tolerations,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	p, err = e.cs.CoreV1().Pods("default").UpdateStatus(e.ctx, p, metav1.UpdateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// podState is "gone", "terminating" or the pod's Ready status.
func (e *env) podState(name string) string {
	e.t.Helper()
	p, err := e.cs.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "gone"
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if p.DeletionTimestamp != nil {
		return "terminating"
	}
	return string(podReady(p))
}

// waitPod waits (real time: the pod workers run on their own) until the
// pod is in state want.
func (e *env) waitPod(name, want string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := e.podState(name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pod %s: %s after 10s, want %s", name, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitPodDue waits for a state that a delayed work item brings once the
// fake clock has reached its time. The workqueue's delaying loop reads
// the clock, then sets a timer for what is left: when a step falls in
// between, the timer lands that much past the due time, where no later
// step takes the clock. So while waiting, the clock moves on by a
// millisecond every 100 ms, at most 50 ms in all: well short of any
// period the tests count on.
func (e *env) waitPodDue(name, want string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	nudged := time.Duration(0)
	for i := 1; ; i++ {
		got := e.podState(name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pod %s: %s after 10s, want %s", name, got, want)
		}
		if i%20 == 0 && nudged < 50*time.Millisecond {
			e.clock.Step(time.Millisecond)
			nudged += time.Millisecond
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stillPod checks the pod stays in state want for a moment: the workers
// had their chance to act and did not.
func (e *env) stillPod(name, want string) {
	e.t.Helper()
	for i := 0; i < 10; i++ {
		if got := e.podState(name); got != want {
			e.t.Fatalf("pod %s: %s, want %s", name, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// testLog sends the controller's log to the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
