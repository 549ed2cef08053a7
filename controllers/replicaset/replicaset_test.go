package replicaset

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/kubelet/simulator"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const ns = "default"

// env is a running API server with simulated nodes and the controller.
type env struct {
	*clustertest.Env
	pods cache.SharedIndexInformer
}

func start(t *testing.T, nodes int) *env {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{Nodes: nodes})
	inf := client.NewInformers(e.Config)
	c, err := New(Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	pods := inf.For(&corev1.Pod{})
	inf.Start(e.Ctx)
	// Run ends with the environment's context, after the test.
	go c.Run(e.Ctx)
	return &env{Env: e, pods: pods}
}

func newRS(name string, replicas int32, labels map[string]string) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
}

func (e *env) create(rs *appsv1.ReplicaSet) *appsv1.ReplicaSet {
	e.T.Helper()
	out, err := e.Client.Apps.ReplicaSets(ns).Create(e.Ctx, rs, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return out
}

func (e *env) get(name string) *appsv1.ReplicaSet {
	e.T.Helper()
	rs, err := e.Client.Apps.ReplicaSets(ns).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return rs
}

func (e *env) scale(name string, n int32) {
	e.T.Helper()
	// As kubectl scale: read the scale, write it back, again on a
	// conflict with the controller's status writes.
	clustertest.Eventually(e.T, 10*time.Second, func() error {
		sc, err := e.Client.Apps.ReplicaSets(ns).GetScale(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		sc.Spec.Replicas = n
		_, err = e.Client.Apps.ReplicaSets(ns).UpdateScale(e.Ctx, name, sc, metav1.UpdateOptions{})
		return err
	})
}

// ownedPods are the live pods (not being deleted) whose controller is
// rs, from the API.
func (e *env) ownedPods(rs *appsv1.ReplicaSet) []corev1.Pod {
	e.T.Helper()
	list, err := e.Client.Core.Pods(ns).List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == rs.UID && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// waitStatus waits until rs's status, generation observed, is want.
func (e *env) waitStatus(name string, want appsv1.ReplicaSetStatus) {
	e.T.Helper()
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		rs := e.get(name)
		got := rs.Status
		got.Conditions = nil
		if rs.Status.ObservedGeneration != rs.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", rs.Status.ObservedGeneration, rs.Generation)
		}
		want.ObservedGeneration = rs.Generation
		if d := cmp.Diff(want, got); d != "" {
			return fmt.Errorf("status (-want +got):\n%s", d)
		}
		return nil
	})
}

func settled(n int32) appsv1.ReplicaSetStatus {
	return appsv1.ReplicaSetStatus{Replicas: n, FullyLabeledReplicas: n, ReadyReplicas: n, AvailableReplicas: n, TerminatingReplicas: ptr[int32](0)}
}

// A ReplicaSet gets its pods, named after it and owned by it, scales up
// and down, and reports its status.
func TestCreateAndScale(t *testing.T) {
	e := start(t, 2)
	rs := e.create(newRS("web", 3, map[string]string{"app": "web"}))
	e.waitStatus("web", settled(3))
	pods := e.ownedPods(rs)
	if len(pods) != 3 {
		t.Fatalf("%d pods, want 3", len(pods))
	}
	for _, p := range pods {
		ref := metav1.GetControllerOf(&p)
		if !strings.HasPrefix(p.Name, "web-") || len(p.Name) != len("web-")+5 {
			t.Errorf("pod name %q, want web-<5 chars>", p.Name)
		}
		if ref.Kind != "ReplicaSet" || ref.Name != "web" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Errorf("pod %s ownerReference %+v", p.Name, ref)
		}
		if p.Labels["app"] != "web" {
			t.Errorf("pod %s labels %v", p.Name, p.Labels)
		}
	}
	e.scale("web", 5)
	e.waitStatus("web", settled(5))
	e.scale("web", 1)
	e.waitStatus("web", settled(1))
	clustertest.Eventually(t, 10*time.Second, func() error {
		if n := len(e.ownedPods(rs)); n != 1 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	e.scale("web", 0)
	e.waitStatus("web", settled(0))
}

// A pod of the ReplicaSet deleted by someone else is replaced.
func TestReplacesDeletedPod(t *testing.T) {
	e := start(t, 1)
	rs := e.create(newRS("web", 2, map[string]string{"app": "web"}))
	e.waitStatus("web", settled(2))
	victim := e.ownedPods(rs)[0]
	if err := e.Client.Core.Pods(ns).Delete(e.Ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 20*time.Second, func() error {
		pods := e.ownedPods(rs)
		if len(pods) != 2 {
			return fmt.Errorf("%d pods", len(pods))
		}
		for _, p := range pods {
			if p.Name == victim.Name {
				return fmt.Errorf("victim %s still there", p.Name)
			}
		}
		return nil
	})
	e.waitStatus("web", settled(2))
}

func orphan(name string, labels map[string]string, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

// A ReplicaSet adopts matching orphans (and so creates fewer pods), never
// a pod another controller owns nor a terminating one, and releases an
// owned pod whose labels stop matching.
func TestAdoptAndRelease(t *testing.T) {
	e := start(t, 1)
	sel := map[string]string{"app": "web"}
	if _, err := e.Client.Core.Pods(ns).Create(e.Ctx, orphan("stray", sel, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod another controller owns.
	other := orphan("owned-elsewhere", sel, "absent-node")
	other.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "other", UID: "0000-other", Controller: ptr(true)}}
	if _, err := e.Client.Core.Pods(ns).Create(e.Ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A terminating pod: a finalizer holds it after its delete.
	// On a node that does not exist, so that no scheduler or kubelet
	// writes it meanwhile.
	term := orphan("terminating", sel, "absent-node")
	term.Finalizers = []string{"bonsai.dev/test-hold"}
	if _, err := e.Client.Core.Pods(ns).Create(e.Ctx, term, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Core.Pods(ns).Delete(e.Ctx, "terminating", metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p, err := e.Client.Core.Pods(ns).Get(context.Background(), "terminating", metav1.GetOptions{})
		if err == nil {
			p.Finalizers = nil
			e.Client.Core.Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{})
		}
	})

	rs := e.create(newRS("web", 2, sel))
	e.waitStatus("web", settled(2))
	owned := e.ownedPods(rs)
	names := []string{}
	for _, p := range owned {
		names = append(names, p.Name)
	}
	if len(owned) != 2 || !contains(names, "stray") {
		t.Fatalf("owned pods %v, want stray and one created", names)
	}
	for _, name := range []string{"owned-elsewhere", "terminating"} {
		p, err := e.Client.Core.Pods(ns).Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == rs.UID {
			t.Errorf("%s was adopted", name)
		}
	}

	// Relabel the adopted pod: it is released, and replaced.
	p, err := e.Client.Core.Pods(ns).Get(e.Ctx, "stray", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels = map[string]string{"app": "gone"}
	if _, err := e.Client.Core.Pods(ns).Update(e.Ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 20*time.Second, func() error {
		p, err := e.Client.Core.Pods(ns).Get(e.Ctx, "stray", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.OwnerReferences) != 0 {
			return fmt.Errorf("stray still has ownerReferences %v", p.OwnerReferences)
		}
		if n := len(e.ownedPods(rs)); n != 2 {
			return fmt.Errorf("%d owned pods, want 2", n)
		}
		return nil
	})
	e.waitStatus("web", settled(2))
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Terminating pods of the ReplicaSet show in status.terminatingReplicas,
// and are replaced at once.
func TestTerminatingReplicas(t *testing.T) {
	e := start(t, 1)
	rs := e.create(newRS("web", 2, map[string]string{"app": "web"}))
	e.waitStatus("web", settled(2))
	victim := e.ownedPods(rs)[0]
	victim.Finalizers = []string{"bonsai.dev/test-hold"}
	if _, err := e.Client.Core.Pods(ns).Update(e.Ctx, &victim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Core.Pods(ns).Delete(e.Ctx, victim.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)}); err != nil {
		t.Fatal(err)
	}
	want := settled(2)
	want.TerminatingReplicas = ptr[int32](1)
	e.waitStatus("web", want)
	p, err := e.Client.Core.Pods(ns).Get(e.Ctx, victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Finalizers = nil
	if _, err := e.Client.Core.Pods(ns).Update(e.Ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("web", settled(2))
}

// With minReadySeconds, Ready pods count as available only after that
// long.
func TestMinReadySeconds(t *testing.T) {
	e := start(t, 1)
	r := newRS("web", 2, map[string]string{"app": "web"})
	r.Spec.MinReadySeconds = 3
	e.create(r)
	e.waitStatus("web", appsv1.ReplicaSetStatus{Replicas: 2, FullyLabeledReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 0, TerminatingReplicas: ptr[int32](0)})
	readyAt := time.Now()
	e.waitStatus("web", settled(2))
	// Ready times are whole seconds: at least 2 s must have passed.
	if d := time.Since(readyAt); d < 2*time.Second {
		t.Errorf("available %s after Ready, want about 3 s", d)
	}
}

// A create refused by the API (a ResourceQuota's admission) sets the
// ReplicaFailure condition; it goes once creates succeed.
func TestReplicaFailureCondition(t *testing.T) {
	e := start(t, 1)
	setPodQuota(e.Env, 1)
	e.create(newRS("web", 3, map[string]string{"app": "web"}))
	clustertest.Eventually(t, 20*time.Second, func() error {
		rs := e.get("web")
		for _, c := range rs.Status.Conditions {
			if c.Type == appsv1.ReplicaSetReplicaFailure && c.Status == corev1.ConditionTrue && c.Reason == "FailedCreate" && strings.Contains(c.Message, "exceeded quota") {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", rs.Status.Conditions)
	})
	setPodQuota(e.Env, 3)
	e.waitStatus("web", settled(3))
	clustertest.Eventually(t, 10*time.Second, func() error {
		if c := e.get("web").Status.Conditions; len(c) != 0 {
			return fmt.Errorf("conditions %+v", c)
		}
		return nil
	})
}

// setPodQuota creates or raises a ResourceQuota of n pods in ns. With no
// quota controller running, admission charges status.used itself.
func setPodQuota(e *clustertest.Env, n int64) {
	e.T.Helper()
	quotas := e.Client.Core.ResourceQuotas(ns)
	hard := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(n, resource.DecimalSI)}
	_, err := quotas.Get(e.Ctx, "pods", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		q, err := quotas.Create(e.Ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "pods"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
		if err != nil {
			e.T.Fatal(err)
		}
		q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
		if _, err := quotas.UpdateStatus(e.Ctx, q, metav1.UpdateOptions{}); err != nil {
			e.T.Fatal(err)
		}
		return
	}
	if err != nil {
		e.T.Fatal(err)
	}
	// Admission writes status.used as pods come: retry on conflicts.
	clustertest.Eventually(e.T, 10*time.Second, func() error {
		q, err := quotas.Get(e.Ctx, "pods", metav1.GetOptions{})
		if err != nil {
			return err
		}
		q.Spec.Hard = hard
		_, err = quotas.Update(e.Ctx, q, metav1.UpdateOptions{})
		return err
	})
}

// On scale-down the ReplicaSet deletes its unscheduled and not-Ready pods
// before its Ready ones.
func TestDeletesWorstPodsFirst(t *testing.T) {
	e := start(t, 2)
	sel := map[string]string{"app": "web"}
	rs := e.create(newRS("web", 3, sel))
	e.waitStatus("web", settled(3))
	var good []string
	for _, p := range e.ownedPods(rs) {
		good = append(good, p.Name)
	}
	// Two matching orphans, adopted, to be deleted: one no node fits,
	// one that never becomes Ready.
	unsched := orphan("unschedulable", sel, "")
	unsched.Spec.NodeSelector = map[string]string{"no-such": "node"}
	notReady := orphan("not-ready", sel, "")
	notReady.Annotations = map[string]string{simulator.AnnotationReadyDelay: "1h"}
	for _, p := range []*corev1.Pod{notReady, unsched} {
		if _, err := e.Client.Core.Pods(ns).Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clustertest.Eventually(t, 20*time.Second, func() error {
		var names []string
		for _, p := range e.ownedPods(rs) {
			names = append(names, p.Name)
		}
		if d := cmp.Diff(good, names, cmpopts.SortSlices(func(a, b string) bool { return a < b })); d != "" {
			return fmt.Errorf("pods (-want +got):\n%s", d)
		}
		for _, n := range []string{"unschedulable", "not-ready"} {
			if _, err := e.Client.Core.Pods(ns).Get(e.Ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s not deleted: %v", n, err)
			}
		}
		return nil
	})
	e.waitStatus("web", settled(3))
}

// Expectations: a burst of creates is not repeated while the informer
// catches up; the ReplicaSet never has more pods than it asked for.
func TestBurstNotDuplicated(t *testing.T) {
	e := start(t, 4)
	const n = 300
	var peak atomic.Int32
	count := func() {
		live := int32(0)
		for _, o := range e.pods.GetStore().List() {
			if p := o.(*corev1.Pod); p.DeletionTimestamp == nil && p.Labels["app"] == "burst" {
				live++
			}
		}
		for {
			old := peak.Load()
			if live <= old || peak.CompareAndSwap(old, live) {
				return
			}
		}
	}
	if _, err := e.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { count() }}); err != nil {
		t.Fatal(err)
	}
	e.create(newRS("burst", n, map[string]string{"app": "burst"}))
	e.waitStatus("burst", settled(n))
	if p := peak.Load(); p != n {
		t.Fatalf("peak of %d pods, want %d", p, n)
	}
}

// fullyLabeledReplicas counts the pods that carry every template label,
// not just the selector's.
func TestFullyLabeledReplicas(t *testing.T) {
	e := start(t, 1)
	// An orphan with the selector's label only, adopted.
	if _, err := e.Client.Core.Pods(ns).Create(e.Ctx, orphan("partial", map[string]string{"app": "web"}, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs := newRS("web", 2, map[string]string{"app": "web"})
	rs.Spec.Template.Labels = map[string]string{"app": "web", "tier": "front"}
	e.create(rs)
	e.waitStatus("web", appsv1.ReplicaSetStatus{Replicas: 2, FullyLabeledReplicas: 1, ReadyReplicas: 2, AvailableReplicas: 2, TerminatingReplicas: ptr[int32](0)})
}
