package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestNodeLifecycle: three simulated nodes with short monitor flags
// (period 1 s, grace 15 s: the simulator renews Leases every 10 s). One
// node's heartbeats stop: it goes Unknown after the grace period, gets
// the unreachable taints, its pods go not Ready, the one tolerating
// unreachable for 5 s is evicted 5 s after the NoExecute taint (with an
// event naming it) while the one tolerating it without a limit stays, and
// the healthy nodes and their pods are untouched. Heartbeats back: Ready
// again and no taints.
func TestNodeLifecycle(t *testing.T) {
	requireBinary(t)
	dir := t.TempDir()
	s := startServer(t, dir, "--simulated-nodes=3", "--node-monitor-period=1s", "--node-monitor-grace-period=15s")
	defer s.sigterm(t)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.kubeconfig(t).raw)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	ready := func(name string) corev1.ConditionStatus {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status
			}
		}
		return ""
	}
	waitFor := func(what string, timeout time.Duration, ok func() bool) time.Time {
		t.Helper()
		for deadline := time.Now().Add(timeout); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v\n%s", what, timeout, s.stderrText())
			}
		}
		return time.Now()
	}
	nodes := []string{"sim-0", "sim-1", "sim-2"}
	waitFor("3 simulated nodes Ready", time.Minute, func() bool {
		for _, n := range nodes {
			if _, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err != nil || ready(n) != corev1.ConditionTrue {
				return false
			}
		}
		return true
	})

	secs := func(s int64) *int64 { return &s }
	unreachable := func(s *int64) []corev1.Toleration {
		return []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: s}}
	}
	for _, p := range []struct {
		name, node string
		tol        []corev1.Toleration
	}{
		{"doomed", "sim-1", unreachable(secs(5))},
		{"stays", "sim-1", unreachable(nil)},
		{"healthy", "sim-0", unreachable(secs(5))},
	} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec:       corev1.PodSpec{NodeName: p.node, Tolerations: p.tol, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name string) *corev1.Pod {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	podReady := func(p *corev1.Pod) corev1.ConditionStatus {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status
			}
		}
		return ""
	}
	waitFor("pods Ready", 30*time.Second, func() bool {
		for _, n := range []string{"doomed", "stays", "healthy"} {
			if p := pod(n); p == nil || podReady(p) != corev1.ConditionTrue {
				return false
			}
		}
		return true
	})

	stopped := time.Now()
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "sim-1", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"bonsai.dev/simulated-heartbeat":"false"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	unknownAt := waitFor("sim-1 Unknown", 45*time.Second, func() bool { return ready("sim-1") == corev1.ConditionUnknown })
	// The last Lease renewal was up to 10 s before the heartbeats stopped.
	if d := unknownAt.Sub(stopped); d < 4*time.Second {
		t.Errorf("sim-1 Unknown %v after its heartbeats stopped; grace is 15 s and renewals 10 s apart", d)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "sim-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && (c.Reason != "NodeStatusUnknown" || c.Message != "Kubelet stopped posting node status.") {
			t.Errorf("Ready condition %+v", c)
		}
	}
	var taintAdded time.Time
	waitFor("sim-1 tainted unreachable NoSchedule and NoExecute", 10*time.Second, func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "sim-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		have := map[corev1.TaintEffect]bool{}
		for _, tt := range n.Spec.Taints {
			if tt.Key == corev1.TaintNodeUnreachable {
				have[tt.Effect] = true
				if tt.Effect == corev1.TaintEffectNoExecute && tt.TimeAdded != nil {
					taintAdded = tt.TimeAdded.Time
				}
			}
		}
		return have[corev1.TaintEffectNoSchedule] && have[corev1.TaintEffectNoExecute]
	})
	waitFor("pods on sim-1 not Ready", 10*time.Second, func() bool {
		p := pod("stays")
		return p != nil && podReady(p) == corev1.ConditionFalse
	})
	evictedAt := waitFor("doomed evicted", 20*time.Second, func() bool {
		p := pod("doomed")
		return p == nil || p.DeletionTimestamp != nil
	})
	// timeAdded has second precision on the wire.
	if d := evictedAt.Sub(taintAdded); d < 4*time.Second {
		t.Errorf("doomed evicted %v after the NoExecute taint; it tolerates it for 5 s", d)
	}
	evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		found = found || e.Reason == "TaintManagerEviction" && e.InvolvedObject.Name == "doomed" && strings.Contains(e.Message, "node.kubernetes.io/unreachable:NoExecute")
	}
	if !found {
		t.Errorf("no TaintManagerEviction event naming the taint for doomed")
	}
	time.Sleep(2 * time.Second)
	if p := pod("stays"); p == nil || p.DeletionTimestamp != nil {
		t.Errorf("pod tolerating unreachable without a limit was evicted")
	}
	if p := pod("healthy"); p == nil || p.DeletionTimestamp != nil || podReady(p) != corev1.ConditionTrue {
		t.Errorf("pod on a healthy node: %+v", p)
	}
	for _, name := range []string{"sim-0", "sim-2"} {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Spec.Taints) != 0 || ready(name) != corev1.ConditionTrue {
			t.Errorf("healthy node %s: taints %v, Ready %s", name, n.Spec.Taints, ready(name))
		}
	}

	// Heartbeats back: Ready, and the taints come off.
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "sim-1", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"bonsai.dev/simulated-heartbeat":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("sim-1 Ready without taints", 30*time.Second, func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "sim-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ready("sim-1") == corev1.ConditionTrue && len(n.Spec.Taints) == 0
	})
}
