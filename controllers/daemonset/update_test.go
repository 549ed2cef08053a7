package daemonset

import (
	"fmt"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// rolloutWatch follows a DaemonSet's pods through an informer and
// remembers the worst moments of a rollout: the most nodes without a
// Ready pod, and the most nodes with two live pods.
type rolloutWatch struct {
	mu             sync.Mutex
	armed          bool
	maxUnavailable int
	maxDoubled     int
	// count is what the informer's cache shows now: nodes without a
	// Ready pod, and nodes with two live pods.
	count func() (unavailable, doubled int)
}

func watchRollout(t *testing.T, e *clustertest.Env, inf *client.Informers, app string, nodes []string) *rolloutWatch {
	t.Helper()
	w := &rolloutWatch{}
	podInf := inf.For(&corev1.Pod{})
	sel := labels.SelectorFromSet(labels.Set{"app": app})
	w.count = func() (unavailable, doubled int) {
		ready, live := map[string]int{}, map[string]int{}
		for _, obj := range podInf.GetStore().List() {
			p := obj.(*corev1.Pod)
			if !sel.Matches(labels.Set(p.Labels)) || p.DeletionTimestamp != nil {
				continue
			}
			node, _ := targetNode(p)
			live[node]++
			if kit.IsPodReady(p) {
				ready[node]++
			}
		}
		for _, n := range nodes {
			if ready[n] == 0 {
				unavailable++
			}
			if live[n] > 1 {
				doubled++
			}
		}
		return unavailable, doubled
	}
	observe := func(any) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.armed {
			return
		}
		unavailable, doubled := w.count()
		w.maxUnavailable = max(w.maxUnavailable, unavailable)
		w.maxDoubled = max(w.maxDoubled, doubled)
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, o any) { observe(o) }, DeleteFunc: observe}); err != nil {
		t.Fatal(err)
	}
	return w
}

// arm starts the count once the informer's cache has caught up with the
// API (a pod Ready on every node, as the caller saw through a list): a
// cache still behind would count a node without a Ready pod that never
// was one.
func (w *rolloutWatch) arm(t *testing.T) {
	t.Helper()
	clustertest.Eventually(t, timeout, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if u, d := w.count(); u != 0 || d != 0 {
			return fmt.Errorf("the informer's cache shows %d nodes without a Ready pod and %d with two", u, d)
		}
		w.armed = true
		return nil
	})
}

func (w *rolloutWatch) worst() (unavailable, doubled int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxUnavailable, w.maxDoubled
}

// waitImage waits until every pod of app runs img, Ready, one per node.
func waitImage(t *testing.T, e *clustertest.Env, app, img string, nodes ...string) {
	t.Helper()
	clustertest.Eventually(t, timeout, func() error {
		for _, p := range pods(t, e, app) {
			if p.Spec.Containers[0].Image != img {
				return fmt.Errorf("pod %s on %s runs %s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image)
			}
		}
		return nil
	})
	waitPlaced(t, e, app, nodes...)
}

// A rolling update replaces every pod, never with more nodes down than
// maxUnavailable (and, with surge, never down at all, with at most
// maxSurge nodes running two pods).
func TestRollingUpdate(t *testing.T) {
	nodes := []string{"sim-0", "sim-1", "sim-2"}
	for _, tc := range []struct {
		name                     string
		maxUnavailable, maxSurge int
		wantUnavailable          int
		wantDoubled              int
	}{
		{"maxUnavailable 1", 1, 0, 1, 0},
		{"maxUnavailable 2", 2, 0, 2, 0},
		{"maxSurge 1", 0, 1, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := clustertest.New(t, clustertest.Options{Nodes: 3})
			inf := start(t, e)
			w := watchRollout(t, e, inf, "agent", nodes)
			create(t, e, newDS("agent", func(ds *appsv1.DaemonSet) {
				readyDelay("500ms")(ds)
				rolling(tc.maxUnavailable, tc.maxSurge)(ds)
			}))
			waitPlaced(t, e, "agent", nodes...)
			w.arm(t)
			modify(t, e, "agent", func(ds *appsv1.DaemonSet) { image(ds, "busybox:2") })
			waitImage(t, e, "agent", "busybox:2", nodes...)
			waitStatus(t, e, "agent", appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, NumberReady: 3, NumberAvailable: 3, UpdatedNumberScheduled: 3})
			if u, d := w.worst(); u != tc.wantUnavailable || d != tc.wantDoubled {
				t.Errorf("worst moment: %d nodes without a Ready pod, %d with two pods; want %d and %d", u, d, tc.wantUnavailable, tc.wantDoubled)
			}
		})
	}
}

// OnDelete leaves old pods alone; a pod deleted by hand comes back new.
func TestOnDelete(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	start(t, e)
	create(t, e, newDS("agent", func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	}))
	waitPlaced(t, e, "agent", "sim-0", "sim-1")
	modify(t, e, "agent", func(ds *appsv1.DaemonSet) { image(ds, "busybox:2") })
	// The controller has seen the new template and updated nothing.
	waitStatus(t, e, "agent", appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 2, NumberAvailable: 2})
	var victim corev1.Pod
	for _, p := range pods(t, e, "agent") {
		if p.Spec.Containers[0].Image != "busybox:1" {
			t.Fatalf("pod %s updated under OnDelete", p.Name)
		}
		if p.Spec.NodeName == "sim-0" {
			victim = p
		}
	}
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, e, "agent", appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 2, NumberAvailable: 2, UpdatedNumberScheduled: 1})
	for _, p := range waitPlaced(t, e, "agent", "sim-0", "sim-1") {
		want := map[string]string{"sim-0": "busybox:2", "sim-1": "busybox:1"}[p.Spec.NodeName]
		if got := p.Spec.Containers[0].Image; got != want {
			t.Errorf("pod on %s runs %s, want %s", p.Spec.NodeName, got, want)
		}
	}
}

// With surge, a node the DaemonSet has left (here a new NoSchedule taint
// its old pod survives) gets no new pod, and its old pod goes once the
// pods elsewhere are available.
func TestSurgeLeavesNodeThatNoLongerFits(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 3})
	start(t, e)
	create(t, e, newDS("agent", rolling(0, 1)))
	waitPlaced(t, e, "agent", "sim-0", "sim-1", "sim-2")
	modifyNode(t, e, "sim-2", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	})
	waitStatus(t, e, "agent", appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberMisscheduled: 1, NumberReady: 2, NumberAvailable: 2, UpdatedNumberScheduled: 2})
	modify(t, e, "agent", func(ds *appsv1.DaemonSet) { image(ds, "busybox:2") })
	waitImage(t, e, "agent", "busybox:2", "sim-0", "sim-1")
	waitStatus(t, e, "agent", appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 2, NumberAvailable: 2, UpdatedNumberScheduled: 2})
}
