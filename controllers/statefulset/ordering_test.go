package statefulset

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// OrderedReady creates web-1 only once web-0 is Running and Ready, and so
// on; each pod has its stable identity.
func TestOrderedCreation(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	inf := start(t, e)
	log := watchPods(t, inf, func(event string, p *corev1.Pod, all map[string]*corev1.Pod) string {
		if event != "add" {
			return ""
		}
		o := ordinalOf(p)
		if o == 0 {
			return ""
		}
		prev := all["web-"+strconv.Itoa(o-1)]
		if prev == nil || !isRunningAndReady(prev) {
			return fmt.Sprintf("%s created before its predecessor was Running and Ready", p.Name)
		}
		return ""
	})
	set := create(t, e, newSet(3, readyDelay("300ms")))
	got := waitPods(t, e, nil, "web-0", "web-1", "web-2")
	if v := log.violations(); len(v) > 0 {
		t.Errorf("order: %v", v)
	}

	var status appsv1.StatefulSetStatus
	clustertest.Eventually(t, timeout, func() error {
		status = getSet(t, e).Status
		if status.ReadyReplicas != 3 || status.AvailableReplicas != 3 || status.CurrentReplicas != 3 || status.UpdatedReplicas != 3 || status.Replicas != 3 || status.ObservedGeneration != 1 {
			return fmt.Errorf("status %+v", status)
		}
		return nil
	})
	if status.CurrentRevision == "" || status.CurrentRevision != status.UpdateRevision {
		t.Errorf("revisions: current %q update %q", status.CurrentRevision, status.UpdateRevision)
	}
	p := got["web-1"]
	wantLabels := map[string]string{"app": "web", "controller-revision-hash": status.UpdateRevision,
		"statefulset.kubernetes.io/pod-name": "web-1", "apps.kubernetes.io/pod-index": "1"}
	if diff := cmp.Diff(wantLabels, p.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if p.Spec.Hostname != "web-1" || p.Spec.Subdomain != "web" {
		t.Errorf("hostname %q subdomain %q, want web-1 and web", p.Spec.Hostname, p.Spec.Subdomain)
	}
	wantRefs := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: set.UID, Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}
	if diff := cmp.Diff(wantRefs, p.OwnerReferences); diff != "" {
		t.Errorf("ownerReferences (-want +got):\n%s", diff)
	}
}

// Parallel creates every pod at once, without waiting for readiness, and
// spec.ordinals.start moves the names.
func TestParallel(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	inf := start(t, e)
	allAtOnce := make(chan struct{}, 1)
	watchPods(t, inf, func(event string, p *corev1.Pod, all map[string]*corev1.Pod) string {
		if len(all) < 3 {
			return ""
		}
		for _, q := range all {
			if kit.IsPodReady(q) {
				return ""
			}
		}
		select {
		case allAtOnce <- struct{}{}:
		default:
		}
		return ""
	})
	create(t, e, newSet(3, parallel, readyDelay("3s"), func(s *appsv1.StatefulSet) {
		s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 5}
	}))
	waitPods(t, e, nil, "web-5", "web-6", "web-7")
	select {
	case <-allAtOnce:
	default:
		t.Error("never saw all three pods before any was Ready")
	}
}

// OrderedReady scales down from the highest ordinal, one pod at a time:
// each deletion starts only once the pod above is gone.
func TestScaleDownInReverse(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	inf := start(t, e)
	create(t, e, newSet(4))
	waitPods(t, e, nil, "web-0", "web-1", "web-2", "web-3")
	var deleted []string
	log := watchPods(t, inf, func(event string, p *corev1.Pod, all map[string]*corev1.Pod) string {
		// A pod on a simulated node can go at once: the informer may see
		// its deletion only as the delete.
		if (event != "update" || p.DeletionTimestamp == nil) && event != "delete" {
			return ""
		}
		for _, d := range deleted {
			if d == p.Name {
				return ""
			}
		}
		deleted = append(deleted, p.Name)
		if above := all["web-"+strconv.Itoa(ordinalOf(p)+1)]; above != nil {
			return fmt.Sprintf("%s deleted while %s still exists", p.Name, above.Name)
		}
		return ""
	})
	modify(t, e, func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr[int32](1) })
	waitPods(t, e, nil, "web-0")
	// The list can be ahead of the informer: wait for its last event.
	clustertest.Eventually(t, 10*time.Second, func() error {
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(deleted) < 3 {
			return fmt.Errorf("deletions seen: %v", deleted)
		}
		return nil
	})
	if v := log.violations(); len(v) > 0 {
		t.Errorf("scale down: %v", v)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if diff := cmp.Diff([]string{"web-3", "web-2", "web-1"}, deleted); diff != "" {
		t.Errorf("deletion order (-want +got):\n%s", diff)
	}
}

// A deleted pod and a failed pod come back with the same name.
func TestRecreate(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	start(t, e)
	create(t, e, newSet(2))
	before := waitPods(t, e, nil, "web-0", "web-1")
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	failed := before["web-0"]
	failed.Status.Phase = corev1.PodFailed
	if _, err := e.Client.Core.Pods("default").UpdateStatus(e.Ctx, &failed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	newUID := func(p *corev1.Pod) error {
		if p.UID == before[p.Name].UID {
			return fmt.Errorf("not recreated")
		}
		return nil
	}
	waitPods(t, e, newUID, "web-0", "web-1")
}

// An orphan pod with a member's name and the set's labels is adopted, not
// replaced (OnDelete: a rolling update would replace it, as it has no
// revision label).
func TestAdoptsOrphan(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	start(t, e)
	orphan, err := e.Client.Core.Pods("default").Create(e.Ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set := create(t, e, newSet(1, func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}))
	waitPods(t, e, func(p *corev1.Pod) error {
		if p.UID != orphan.UID {
			return fmt.Errorf("replaced")
		}
		if !metav1.IsControlledBy(p, set) {
			return fmt.Errorf("not adopted: %v", p.OwnerReferences)
		}
		if p.Labels["statefulset.kubernetes.io/pod-name"] != "web-0" {
			return fmt.Errorf("identity labels not restored: %v", p.Labels)
		}
		return nil
	}, "web-0")
}

// Ready replicas become available minReadySeconds later, and OrderedReady
// waits for availability before the next pod.
func TestMinReadySeconds(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	start(t, e)
	create(t, e, newSet(2, func(s *appsv1.StatefulSet) { s.Spec.MinReadySeconds = 3 }))
	waitStatus(t, e, func(st appsv1.StatefulSetStatus) error {
		if st.Replicas != 1 || st.ReadyReplicas != 1 || st.AvailableReplicas != 0 {
			return fmt.Errorf("status %+v, want web-0 alone, Ready and not yet available", st)
		}
		return nil
	})
	waitPods(t, e, nil, "web-0", "web-1")
	waitStatus(t, e, func(st appsv1.StatefulSetStatus) error {
		if st.Replicas != 2 || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}
