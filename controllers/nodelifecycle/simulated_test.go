package nodelifecycle

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/kubelet/simulator"
)

// simEnv runs simulated nodes (Leases every 200 ms) and the controller
// on the real clock with the defaults scaled down 50 times: period
// 100 ms, grace 800 ms.
type simEnv struct {
	t   *testing.T
	ctx context.Context
	cs  kubernetes.Interface
}

func newSimEnv(t *testing.T) *simEnv {
	cfg := newAPI(t)
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(testLog{t}, nil))
	sim, err := simulator.New(simulator.Config{RESTConfig: cfg, Version: "test", KubeletVersion: "v1.37.2",
		LeaseInterval: 200 * time.Millisecond, LeaseDuration: time.Second, StatusInterval: time.Minute, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{RESTConfig: cfg, NodeMonitorPeriod: 100 * time.Millisecond, NodeMonitorGracePeriod: 800 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	simDone, cDone := make(chan error, 1), make(chan error, 1)
	go func() { simDone <- sim.Run(ctx) }()
	go func() { cDone <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-simDone; <-cDone })
	return &simEnv{t: t, ctx: ctx, cs: kubernetes.NewForConfigOrDie(cfg)}
}

func (e *simEnv) addNode(name, cidr string) {
	e.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{simulator.AnnotationSimulated: "true"}},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
	if _, err := e.cs.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(name+" Ready", 10*time.Second, func() bool { return e.ready(name) == corev1.ConditionTrue })
}

func (e *simEnv) addPod(name, node string, tolerationSeconds *int64) {
	e.t.Helper()
	if _, err := e.cs.CoreV1().Pods("default").Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: tolerationSeconds}}},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(name+" Ready", 10*time.Second, func() bool { return e.podState(name) == "True" })
}

func (e *simEnv) setHeartbeat(node string, on bool) {
	e.t.Helper()
	v := "false"
	if on {
		v = "true"
	}
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	n.Annotations[simulator.AnnotationHeartbeat] = v
	if _, err := e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *simEnv) node(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *simEnv) ready(name string) corev1.ConditionStatus { return readyStatus(e.node(name)) }

func (e *simEnv) podState(name string) string {
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

func (e *simEnv) waitFor(what string, timeout time.Duration, ok func() bool) time.Time {
	e.t.Helper()
	for deadline := time.Now().Add(timeout); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v", what, timeout)
		}
	}
	return time.Now()
}

// A simulated node whose heartbeats stop: Unknown after the grace
// period, unreachable taints, its pods not Ready; the pod tolerating
// unreachable for 1 s is evicted, the one tolerating it without a limit
// and the healthy node's pod stay; heartbeats back, taints off.
func TestSimulatedNodeFailure(t *testing.T) {
	e := newSimEnv(t)
	e.addNode("sim-a", "10.42.1.0/24")
	e.addNode("sim-b", "10.42.2.0/24")
	e.addNode("sim-c", "10.42.3.0/24")
	one := int64(1)
	e.addPod("doomed", "sim-b", &one)
	e.addPod("stays", "sim-b", nil)
	e.addPod("healthy", "sim-a", &one)

	stopped := time.Now()
	e.setHeartbeat("sim-b", false)
	at := e.waitFor("sim-b Unknown", 10*time.Second, func() bool { return e.ready("sim-b") == corev1.ConditionUnknown })
	// The last renewal was up to 200 ms before the stop.
	if d := at.Sub(stopped); d < 600*time.Millisecond {
		t.Errorf("sim-b Unknown %v after its heartbeats stopped; grace 800 ms", d)
	}
	e.waitFor("sim-b tainted unreachable", 5*time.Second, func() bool {
		n := e.node("sim-b")
		return hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule) && hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	})
	e.waitFor("stays not Ready", 5*time.Second, func() bool { return e.podState("stays") == "False" })
	e.waitFor("doomed evicted", 5*time.Second, func() bool { return e.podState("doomed") != "False" && e.podState("doomed") != "True" })
	time.Sleep(1500 * time.Millisecond)
	if s := e.podState("stays"); s != "False" {
		t.Errorf("pod tolerating unreachable without a limit: %s", s)
	}
	if s := e.podState("healthy"); s != "True" {
		t.Errorf("pod on a healthy node: %s", s)
	}
	for _, n := range []string{"sim-a", "sim-c"} {
		if node := e.node(n); len(node.Spec.Taints) != 0 || readyStatus(node) != corev1.ConditionTrue {
			t.Errorf("healthy node %s: taints %v, Ready %s", n, node.Spec.Taints, readyStatus(node))
		}
	}
	e.setHeartbeat("sim-b", true)
	e.waitFor("sim-b Ready without taints", 10*time.Second, func() bool {
		n := e.node("sim-b")
		return readyStatus(n) == corev1.ConditionTrue && len(n.Spec.Taints) == 0
	})
}

// The only node stops its heartbeats: Unknown and unreachable:NoSchedule,
// but every zone is down, so no NoExecute taint and its pods stay.
func TestSimulatedSingleNodeKeepsPods(t *testing.T) {
	e := newSimEnv(t)
	e.addNode("edge", "10.42.1.0/24")
	one := int64(1)
	e.addPod("app", "edge", &one)
	e.setHeartbeat("edge", false)
	e.waitFor("edge Unknown and tainted NoSchedule", 10*time.Second, func() bool {
		n := e.node("edge")
		return readyStatus(n) == corev1.ConditionUnknown && hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule)
	})
	time.Sleep(2 * time.Second)
	if n := e.node("edge"); hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
		t.Errorf("NoExecute taint on the only node: %v", n.Spec.Taints)
	}
	if s := e.podState("app"); s != "False" {
		t.Errorf("pod on the only node: %s, want still there, not Ready", s)
	}
}
