package scheduler

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/kubelet/simulator"
)

// startSimulator runs the node simulator, so that a graceful delete of a
// pod on a simulated node completes as a kubelet's would.
func (a *testAPI) startSimulator(t *testing.T) {
	t.Helper()
	s, err := simulator.New(simulator.Config{RESTConfig: a.cfg, Version: "test", KubeletVersion: "v1.37.2"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func simulatedNode(name string, alloc corev1.ResourceList) *corev1.Node {
	return node(name, alloc, func(n *corev1.Node) {
		n.Annotations = map[string]string{"bonsai.dev/simulated": "true"}
		n.Spec.PodCIDR = "10.42.7.0/24"
		n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
	})
}

// TestPreemption: a high-priority pod that fits nowhere evicts the one
// lower-priority pod it needs gone (not both), is nominated to the node,
// and lands there; with preemptionPolicy Never it waits instead.
func TestPreemption(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	a.startSimulator(t)
	a.createNode(t, simulatedNode("n0", corev1.ResourceList{gpu: resource.MustParse("2")}))
	for name, v := range map[string]int32{"high": 1000, "mid": 500} {
		if _, err := a.cs.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a.startScheduler(t, Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	one := corev1.ResourceList{gpu: resource.MustParse("1")}
	// The API server does not yet resolve a user PriorityClass into
	// spec.priority (Kubernetes' Priority admission); set both, as that
	// admission would.
	class := func(name string, v int32) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.PriorityClassName, p.Spec.Priority = name, &v }
	}
	a.createPod(t, pod("low", one))
	a.createPod(t, pod("mid", one, class("mid", 500)))
	a.waitPods(t, "low and mid bound", func(ps []corev1.Pod) bool {
		return byName(ps, "low").Spec.NodeName == "n0" && byName(ps, "mid").Spec.NodeName == "n0"
	})

	// Never: no victims, it waits.
	never := corev1.PreemptNever
	a.createPod(t, pod("polite", one, class("high", 1000), func(p *corev1.Pod) { p.Spec.PreemptionPolicy = &never }))
	a.waitPods(t, "polite unschedulable", func(ps []corev1.Pod) bool {
		return unschedulableWith(byName(ps, "polite"), "0/1 nodes are available: 1 Insufficient vendor.example/gpu.")
	})
	time.Sleep(500 * time.Millisecond)
	if ps := a.waitPods(t, "", func([]corev1.Pod) bool { return true }); byName(ps, "low").Name == "" || byName(ps, "low").DeletionTimestamp != nil {
		t.Fatalf("preemptionPolicy Never evicted a pod")
	}
	if err := a.cs.CoreV1().Pods("default").Delete(ctx, "polite", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The default policy: the lowest-priority pod goes, mid stays.
	a.createPod(t, pod("vip", one, class("high", 1000)))
	ps := a.waitPods(t, "vip bound in place of low", func(ps []corev1.Pod) bool {
		return byName(ps, "vip").Spec.NodeName == "n0" && byName(ps, "low").Name == ""
	})
	if byName(ps, "mid").Spec.NodeName != "n0" || byName(ps, "mid").DeletionTimestamp != nil {
		t.Errorf("mid was evicted too")
	}
	if got := byName(ps, "vip").Status.NominatedNodeName; got != "n0" {
		t.Errorf("vip's nominatedNodeName %q, want n0", got)
	}
	waitEvent(t, a, "Preempting", "Preempting 1 pod(s) on node n0")
}
