package nodelifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A node whose Lease stops at t=0 is still Ready at the 40 s pass and
// Unknown (every kubelet condition, NodeStatusUnknown, "Kubelet stopped
// posting node status.") at the 45 s one, tainted unreachable NoSchedule
// and NoExecute, its pods not Ready; when its kubelet posts Ready again
// the taints come off.
func TestUnknownAfterGracePeriod(t *testing.T) {
	e := newEnv(t, nil)
	e.addNode("alive", "", corev1.ConditionTrue)
	e.addNode("dying", "", corev1.ConditionTrue)
	e.addNode("other", "", corev1.ConditionTrue)
	e.addPod("web", "dying")
	e.step(0)
	// A minute of heartbeats every 5 s keeps it Ready.
	for i := 0; i < 12; i++ {
		e.step(5 * time.Second)
	}
	if got := e.taints("dying"); len(got) != 0 {
		t.Fatalf("taints of a live node: %v", got)
	}
	e.alive["dying"] = false
	for i := 1; i <= 8; i++ { // up to t=40s: not more than the grace period
		e.step(5 * time.Second)
		if s := readyStatus(e.node("dying")); s != corev1.ConditionTrue {
			t.Fatalf("Ready %s %ds after the last heartbeat", s, 5*i)
		}
	}
	e.step(5 * time.Second) // t=45s
	n := e.node("dying")
	for _, ct := range kubeletConditions {
		c := condition(n, ct)
		if c == nil || c.Status != corev1.ConditionUnknown || c.Reason != "NodeStatusUnknown" || c.Message != "Kubelet stopped posting node status." {
			t.Errorf("condition %s at 45s: %+v", ct, c)
		}
	}
	if got, want := e.taints("dying"), []string{"node.kubernetes.io/unreachable:NoExecute", "node.kubernetes.io/unreachable:NoSchedule"}; !cmp.Equal(got, want) {
		t.Errorf("taints at 45s: %v, want %v", got, want)
	}
	for _, ok := range []string{"alive", "other"} {
		if got := e.taints(ok); len(got) != 0 || readyStatus(e.node(ok)) != corev1.ConditionTrue {
			t.Errorf("healthy node %s: taints %v, Ready %s", ok, got, readyStatus(e.node(ok)))
		}
	}
	e.waitPod("web", "False")
	if tt := e.node("dying").Spec.Taints; tt[0].Effect == corev1.TaintEffectNoExecute && (tt[0].TimeAdded == nil || !tt[0].TimeAdded.Time.Equal(epoch.Add(105*time.Second))) {
		t.Errorf("NoExecute taint timeAdded %v, want the pass that added it", tt[0].TimeAdded)
	}

	// The kubelet is back: Lease and Ready status.
	e.alive["dying"] = true
	e.postStatus("dying", corev1.ConditionTrue)
	e.step(5 * time.Second)
	if got := e.taints("dying"); len(got) != 0 {
		t.Errorf("taints after recovery: %v", got)
	}
	if s := readyStatus(e.node("dying")); s != corev1.ConditionTrue {
		t.Errorf("Ready %s after recovery", s)
	}
}

// A node that says Ready=False gets the not-ready taints at once, and
// swaps them for unreachable ones when it then goes silent.
func TestNotReadyTaints(t *testing.T) {
	e := newEnv(t, nil)
	for _, n := range []string{"a", "b", "c"} {
		e.addNode(n, "", corev1.ConditionTrue)
	}
	e.step(0)
	e.postStatus("b", corev1.ConditionFalse)
	e.step(5 * time.Second)
	if got, want := e.taints("b"), []string{"node.kubernetes.io/not-ready:NoExecute", "node.kubernetes.io/not-ready:NoSchedule"}; !cmp.Equal(got, want) {
		t.Errorf("taints of a Ready=False node: %v, want %v", got, want)
	}
	e.alive["b"] = false
	for i := 0; i < 9; i++ {
		e.step(5 * time.Second)
	}
	if got, want := e.taints("b"), []string{"node.kubernetes.io/unreachable:NoExecute", "node.kubernetes.io/unreachable:NoSchedule"}; !cmp.Equal(got, want) {
		t.Errorf("taints of a silent node: %v, want %v", got, want)
	}
	e.alive["b"] = true
	e.postStatus("b", corev1.ConditionTrue)
	e.step(5 * time.Second)
	if got := e.taints("b"); len(got) != 0 {
		t.Errorf("taints after recovery: %v", got)
	}
}

// A user's NoExecute taint evicts the pods that do not tolerate it at
// once, those tolerating it for 30 s 30 s after it was added (not at
// 29 s), those with the default 300 s tolerations of unreachable 300 s
// after that taint, and never those tolerating it without a limit. The
// event names the taint.
func TestTolerationSeconds(t *testing.T) {
	e := newEnv(t, nil)
	for _, n := range []string{"a", "b", "c"} {
		e.addNode(n, "", corev1.ConditionTrue)
	}
	e.step(0)
	secs := func(s int64) *int64 { return &s }
	e.addPod("plain", "a")
	e.addPod("for30", "a", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(30)})
	e.addPod("forever", "a", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	n := e.node("a")
	added := metav1.NewTime(e.clock.Now())
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoExecute, TimeAdded: &added})
	if _, err := e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod("plain", "terminating")
	e.stillPod("for30", "True")
	e.clock.Step(29 * time.Second)
	e.stillPod("for30", "True")
	e.clock.Step(time.Second)
	e.waitPodDue("for30", "terminating")
	e.clock.Step(10 * time.Minute)
	e.stillPod("forever", "True")
	evs, err := e.cs.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs.Items {
		if ev.Reason == "TaintManagerEviction" && ev.InvolvedObject.Name == "plain" {
			found = cmp.Equal(ev.Message, "Marking for deletion Pod default/plain: node a has taint dedicated:NoExecute, which the pod does not tolerate")
		}
	}
	if !found {
		t.Errorf("no TaintManagerEviction event naming the taint for pod plain: %+v", evs.Items)
	}
}

// The API server's default tolerations (300 s) keep a pod 300 s after its
// node is tainted unreachable, not a second less.
func TestDefaultTolerations(t *testing.T) {
	e := newEnv(t, nil)
	for _, n := range []string{"a", "b", "c"} {
		e.addNode(n, "", corev1.ConditionTrue)
	}
	e.step(0)
	e.addPod("web", "b")
	e.alive["b"] = false
	for i := 0; i < 9; i++ {
		e.step(5 * time.Second)
	}
	if got := e.noExecuteTainted(); !cmp.Equal(got, []string{"b"}) {
		t.Fatalf("NoExecute-tainted nodes: %v", got)
	}
	e.waitPod("web", "False")
	e.clock.Step(299 * time.Second)
	e.stillPod("web", "False")
	e.clock.Step(time.Second)
	e.waitPodDue("web", "terminating")
}

// Deleting a Node force-deletes its pods after pod GC's 40 s quarantine; the out-of-service taint
// force-deletes the pods that do not tolerate it, terminating ones too,
// and leaves the ones that do.
func TestNodeDeletionAndOutOfService(t *testing.T) {
	e := newEnv(t, nil)
	for _, n := range []string{"a", "b", "c"} {
		e.addNode(n, "", corev1.ConditionTrue)
	}
	e.step(0)
	e.addPod("on-a", "a")
	e.addPod("on-b", "b")
	e.addPod("tolerant", "b", corev1.Toleration{Key: "node.kubernetes.io/out-of-service", Operator: corev1.TolerationOpExists})
	if err := e.cs.CoreV1().Nodes().Delete(e.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.stillPod("on-a", "True")
	e.clock.Step(39 * time.Second)
	e.stillPod("on-a", "True")
	e.clock.Step(time.Second)
	e.waitPodDue("on-a", "gone")
	// A graceful delete a dead node would never finish.
	if err := e.cs.CoreV1().Pods("default").Delete(e.ctx, "on-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod("on-b", "terminating")
	n := e.node("b")
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if _, err := e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod("on-b", "gone")
	e.stillPod("tolerant", "True")
	// The controller never takes the user's taint off.
	e.step(5 * time.Second)
	if got := e.taints("b"); !cmp.Equal(got, []string{"node.kubernetes.io/out-of-service:NoExecute"}) {
		t.Errorf("taints %v", got)
	}
}

// Pod GC: terminated pods over the threshold go, oldest first; pods bound
// to a node that never existed go.
func TestPodGC(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TerminatedPodGCThreshold = 2 })
	e.addNode("a", "", corev1.ConditionTrue)
	e.step(0)
	for _, name := range []string{"done-0", "done-1", "done-2", "done-3"} {
		p := e.addPod(name, "a")
		p.Status.Phase = corev1.PodSucceeded
		if _, err := e.cs.CoreV1().Pods("default").UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // creationTimestamp has second precision
	}
	if _, err := e.cs.CoreV1().Pods("default").Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ghost"},
		Spec:       corev1.PodSpec{NodeName: "no-such-node", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.settle()
	for deadline := time.Now().Add(10 * time.Second); len(e.c.pods.GetStore().ListKeys()) != 5 || e.c.pods.GetStore().List()[0].(*corev1.Pod).Status.Phase == ""; {
		if time.Now().After(deadline) {
			t.Fatal("pod cache did not catch up")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.clock.Step(40 * time.Second)
	e.waitPodDue("ghost", "gone")
	waitPhases := func() {
		for deadline := time.Now().Add(10 * time.Second); ; {
			n := 0
			for _, obj := range e.c.pods.GetStore().List() {
				if obj.(*corev1.Pod).Status.Phase == corev1.PodSucceeded {
					n++
				}
			}
			if n == 4 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d succeeded pods in the cache", n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitPhases()
	e.c.gcPods(e.ctx)
	e.waitPod("done-0", "gone")
	e.waitPod("done-1", "gone")
	e.stillPod("done-2", "True")
	e.stillPod("done-3", "True")
}

// A Node no kubelet ever posted for gets its conditions Unknown with
// NodeStatusNeverUpdated a grace period after the controller first saw
// it (a restart of the controller starts that period again).
func TestNeverPostedNode(t *testing.T) {
	e := newEnv(t, nil)
	e.addNode("a", "", corev1.ConditionTrue)
	if _, err := e.cs.CoreV1().Nodes().Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.step(0)
	for i := 0; i < 8; i++ {
		e.step(5 * time.Second)
	}
	if n := e.node("bare"); len(n.Status.Conditions) != 0 || len(n.Spec.Taints) != 0 {
		t.Fatalf("at 40 s: conditions %v, taints %v", n.Status.Conditions, n.Spec.Taints)
	}
	e.step(5 * time.Second)
	n := e.node("bare")
	for _, ct := range kubeletConditions {
		c := condition(n, ct)
		if c == nil || c.Status != corev1.ConditionUnknown || c.Reason != "NodeStatusNeverUpdated" || c.Message != "Kubelet never posted node status." {
			t.Errorf("condition %s at 45 s: %+v", ct, c)
		}
	}
	if !hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule) {
		t.Errorf("taints %v", n.Spec.Taints)
	}
}

// The pressure conditions a kubelet reports taint the node NoSchedule
// (TaintNodesByCondition: memory-pressure, disk-pressure, pid-pressure),
// and the taint goes when the condition does; a Ready node under pressure
// gets no NoExecute taint.
func TestPressureTaints(t *testing.T) {
	e := newEnv(t, nil)
	e.addNode("a", "", corev1.ConditionTrue)
	e.step(0)
	setPressure := func(types ...corev1.NodeConditionType) {
		t.Helper()
		n := e.node("a")
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			if c.Type != corev1.NodeReady {
				c.Status = corev1.ConditionFalse
			}
			for _, ty := range types {
				if c.Type == ty {
					c.Status = corev1.ConditionTrue
				}
			}
		}
		if _, err := e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setPressure(corev1.NodeMemoryPressure, corev1.NodePIDPressure)
	e.step(5 * time.Second)
	if got, want := e.taints("a"), []string{"node.kubernetes.io/memory-pressure:NoSchedule", "node.kubernetes.io/pid-pressure:NoSchedule"}; !cmp.Equal(got, want) {
		t.Errorf("taints under memory and pid pressure: %v, want %v", got, want)
	}
	setPressure(corev1.NodeDiskPressure)
	e.step(5 * time.Second)
	if got, want := e.taints("a"), []string{"node.kubernetes.io/disk-pressure:NoSchedule"}; !cmp.Equal(got, want) {
		t.Errorf("taints under disk pressure: %v, want %v", got, want)
	}
	setPressure()
	e.step(5 * time.Second)
	if got := e.taints("a"); len(got) != 0 {
		t.Errorf("taints once the pressure is gone: %v", got)
	}
}
