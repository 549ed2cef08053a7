package statefulset

import (
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

func setImage(img string) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = img }
}

func partition(n int32) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: &n}}
	}
}

// waitStatus waits until the set's status, seen at its generation,
// passes check.
func waitStatus(t *testing.T, e *clustertest.Env, check func(appsv1.StatefulSetStatus) error) appsv1.StatefulSetStatus {
	t.Helper()
	var st appsv1.StatefulSetStatus
	clustertest.Eventually(t, timeout, func() error {
		s := getSet(t, e)
		st = s.Status
		if st.ObservedGeneration != s.Generation {
			return fmt.Errorf("observedGeneration %d of %d", st.ObservedGeneration, s.Generation)
		}
		return check(st)
	})
	return st
}

// recreatedOrder records the order in which pods come back at a new image.
func recreatedOrder(t *testing.T, e *clustertest.Env, img string) func() []string {
	var order []string
	log := watchPods(t, start(t, e), func(event string, p *corev1.Pod, _ map[string]*corev1.Pod) string {
		if event == "add" && p.Spec.Containers[0].Image == img {
			order = append(order, p.Name)
		}
		return ""
	})
	return func() []string {
		log.mu.Lock()
		defer log.mu.Unlock()
		return slices.Clone(order)
	}
}

// A rolling update replaces pods from the highest ordinal down and stops
// at the partition; lowering it finishes the update, which then becomes
// the current revision.
func TestPartitionedRollingUpdate(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	order := recreatedOrder(t, e, "busybox:2")
	create(t, e, newSet(3, partition(1)))
	waitPods(t, e, nil, "web-0", "web-1", "web-2")
	first := waitStatus(t, e, func(st appsv1.StatefulSetStatus) error {
		if st.CurrentReplicas != 3 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	}).CurrentRevision

	modify(t, e, setImage("busybox:2"))
	waitPods(t, e, nil, "web-0", "web-1", "web-2")
	clustertest.Eventually(t, timeout, func() error {
		ps := pods(t, e)
		for name, img := range map[string]string{"web-0": "busybox:1", "web-1": "busybox:2", "web-2": "busybox:2"} {
			p, ok := ps[name]
			if !ok {
				return fmt.Errorf("no %s", name)
			}
			if got := p.Spec.Containers[0].Image; got != img || !isHealthy(&p) {
				return fmt.Errorf("%s runs %s (healthy %v), want %s", name, got, isHealthy(&p), img)
			}
		}
		return nil
	})
	st := waitStatus(t, e, func(st appsv1.StatefulSetStatus) error {
		if st.UpdatedReplicas != 2 || st.CurrentReplicas != 1 || st.ReadyReplicas != 3 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if st.CurrentRevision != first || st.UpdateRevision == first {
		t.Errorf("mid-update revisions: current %s update %s; first was %s", st.CurrentRevision, st.UpdateRevision, first)
	}
	if got := pods(t, e)["web-0"].Labels["controller-revision-hash"]; got != first {
		t.Errorf("web-0 below the partition at revision %s, want %s", got, first)
	}

	modify(t, e, partition(0))
	waitPods(t, e, image("busybox:2"), "web-0", "web-1", "web-2")
	done := waitStatus(t, e, func(st appsv1.StatefulSetStatus) error {
		if st.UpdatedReplicas != 3 || st.CurrentReplicas != 3 || st.CurrentRevision != st.UpdateRevision {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if done.UpdateRevision != st.UpdateRevision {
		t.Errorf("update revision changed from %s to %s", st.UpdateRevision, done.UpdateRevision)
	}
	if diff := slices.Compare(order(), []string{"web-2", "web-1", "web-0"}); diff != 0 {
		t.Errorf("update order %v, want web-2, web-1, web-0", order())
	}
}

// maxUnavailable lets that many pods be replaced at once, never more.
func TestRollingUpdateMaxUnavailable(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	inf := start(t, e)
	armed, worst := false, 0
	log := watchPods(t, inf, func(_ string, _ *corev1.Pod, all map[string]*corev1.Pod) string {
		if !armed {
			return ""
		}
		down := 3
		for _, p := range all {
			if isHealthy(p) {
				down--
			}
		}
		worst = max(worst, down)
		return ""
	})
	create(t, e, newSet(3, readyDelay("500ms"), func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: ptr(intstr.FromInt32(2))}}
	}))
	waitPods(t, e, nil, "web-0", "web-1", "web-2")
	log.mu.Lock()
	armed = true
	log.mu.Unlock()
	modify(t, e, setImage("busybox:2"))
	waitPods(t, e, image("busybox:2"), "web-0", "web-1", "web-2")
	log.mu.Lock()
	defer log.mu.Unlock()
	if worst != 2 {
		t.Errorf("at worst %d pods down, want maxUnavailable 2", worst)
	}
}

// OnDelete leaves pods alone until they are deleted; each comes back at
// the update revision.
func TestOnDelete(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	start(t, e)
	create(t, e, newSet(2, func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}))
	waitPods(t, e, nil, "web-0", "web-1")
	modify(t, e, setImage("busybox:2"))
	waitStatus(t, e, func(st appsv1.StatefulSetStatus) error {
		if st.UpdateRevision == st.CurrentRevision || st.UpdatedReplicas != 0 || st.CurrentReplicas != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	waitPods(t, e, image("busybox:1"), "web-0", "web-1")
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, e, func(p *corev1.Pod) error {
		return image(map[string]string{"web-0": "busybox:2", "web-1": "busybox:1"}[p.Name])(p)
	}, "web-0", "web-1")
}

// Templates are ControllerRevisions numbered in order; kubectl rollout
// undo (the revision's data patched onto the set) brings an old one back
// as the newest revision, and the pods with it.
func TestHistoryAndRollback(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	start(t, e)
	set := create(t, e, newSet(2))
	waitPods(t, e, nil, "web-0", "web-1")
	first := waitStatus(t, e, func(st appsv1.StatefulSetStatus) error {
		if st.CurrentReplicas != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	}).CurrentRevision
	modify(t, e, setImage("busybox:2"))
	waitPods(t, e, image("busybox:2"), "web-0", "web-1")

	revisions := func() map[string]appsv1.ControllerRevision {
		list, err := e.Client.Apps.ControllerRevisions("default").List(e.Ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]appsv1.ControllerRevision{}
		for _, r := range list.Items {
			if metav1.IsControlledBy(&r, set) {
				out[r.Name] = r
			}
		}
		return out
	}
	revs := revisions()
	if len(revs) != 2 || revs[first].Revision != 1 {
		t.Fatalf("revisions %v, want 2 with %s as revision 1", revs, first)
	}
	if _, err := e.Client.Apps.StatefulSets("default").Patch(e.Ctx, "web", types.StrategicMergePatchType, revs[first].Data.Raw, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, e, image("busybox:1"), "web-0", "web-1")
	waitStatus(t, e, func(st appsv1.StatefulSetStatus) error {
		if st.CurrentRevision != first || st.UpdateRevision != first || st.UpdatedReplicas != 2 {
			return fmt.Errorf("status %+v, want revision %s current and updated", st, first)
		}
		return nil
	})
	if r := revisions()[first]; r.Revision != 3 {
		t.Errorf("rolled-back revision numbered %d, want 3", r.Revision)
	}
}
