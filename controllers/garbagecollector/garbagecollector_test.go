package garbagecollector

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

const timeout = 30 * time.Second

// env is a running API server with the collector on it.
type env struct {
	*clustertest.Env
	gc *Controller
}

// start starts the API server and the collector.
func start(t *testing.T) *env {
	t.Helper()
	e := &env{Env: clustertest.New(t, clustertest.Options{})}
	e.run()
	return e
}

// run starts the collector.
func (e *env) run() {
	e.T.Helper()
	gc, err := New(Config{RESTConfig: e.Config, Client: e.Client, Logger: e.Log})
	if err != nil {
		e.T.Fatal(err)
	}
	e.gc = gc
	go func() {
		if err := gc.Run(e.Ctx); err != nil {
			e.T.Errorf("Run: %v", err)
		}
	}()
}

func (e *env) namespace(name string) {
	e.T.Helper()
	if _, err := e.Client.Core.Namespaces().Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

// configMap creates a ConfigMap owned by owners, held by finalizers.
func (e *env) configMap(ns, name string, owners []metav1.OwnerReference, finalizers ...string) *corev1.ConfigMap {
	e.T.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners, Finalizers: finalizers}}
	out, err := e.Client.Core.ConfigMaps(ns).Create(e.Ctx, cm, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return out
}

func ownedBy(o metav1.Object, kind string, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: kind, Name: o.GetName(), UID: o.GetUID(), BlockOwnerDeletion: &block}
}

func (e *env) get(ns, name string) (*corev1.ConfigMap, error) {
	return e.Client.Core.ConfigMaps(ns).Get(e.Ctx, name, metav1.GetOptions{})
}

func (e *env) delete(ns, name string, policy metav1.DeletionPropagation) {
	e.T.Helper()
	opts := metav1.DeleteOptions{}
	if policy != "" {
		opts.PropagationPolicy = &policy
	}
	if err := e.Client.Core.ConfigMaps(ns).Delete(e.Ctx, name, opts); err != nil {
		e.T.Fatal(err)
	}
}

func (e *env) waitGone(ns string, names ...string) {
	e.T.Helper()
	clustertest.Eventually(e.T, timeout, func() error {
		for _, n := range names {
			if _, err := e.get(ns, n); !apierrors.IsNotFound(err) {
				return fmt.Errorf("configmap %s/%s still there (%v)", ns, n, err)
			}
		}
		return nil
	})
}

// waitOwners waits until ns/name has exactly the owners named.
func (e *env) waitOwners(ns, name string, want ...string) {
	e.T.Helper()
	clustertest.Eventually(e.T, timeout, func() error {
		cm, err := e.get(ns, name)
		if err != nil {
			return err
		}
		got := []string{}
		for _, r := range cm.OwnerReferences {
			got = append(got, r.Name)
		}
		if want == nil {
			want = []string{}
		}
		if d := cmp.Diff(want, got); d != "" {
			return fmt.Errorf("owners of %s/%s (-want +got):\n%s", ns, name, d)
		}
		return nil
	})
}

func (e *env) removeFinalizers(ns, name string) {
	e.T.Helper()
	if _, err := e.Client.Core.ConfigMaps(ns).Patch(e.Ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

// Background (the default): once the owner is gone, its dependents go.
func TestBackgroundCascade(t *testing.T) {
	e := start(t)
	for _, policy := range []metav1.DeletionPropagation{"", metav1.DeletePropagationBackground} {
		owner := e.configMap("default", "owner", nil)
		e.configMap("default", "dep-1", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", false)})
		e.configMap("default", "dep-2", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", true)})
		e.delete("default", "owner", policy)
		e.waitGone("default", "owner", "dep-1", "dep-2")
	}
}

// A dependent whose owner never existed, or whose named owner has
// another uid, is garbage.
func TestAbsentOwnerMatchedByUID(t *testing.T) {
	e := start(t)
	other := e.configMap("default", "reborn", nil)
	stale := ownedBy(other, "ConfigMap", false)
	stale.UID = "00000000-0000-0000-0000-000000000001"
	e.configMap("default", "dep-stale-uid", []metav1.OwnerReference{stale})
	never := ownedBy(other, "ConfigMap", false)
	never.Name, never.UID = "never-was", "00000000-0000-0000-0000-000000000002"
	e.configMap("default", "dep-no-owner", []metav1.OwnerReference{never})
	e.waitGone("default", "dep-stale-uid", "dep-no-owner")
	if _, err := e.get("default", "reborn"); err != nil {
		t.Errorf("the object with the owner's name but another uid: %v", err)
	}
}

// A dependent with one live owner left only loses the reference to the
// one that went.
func TestMultipleOwners(t *testing.T) {
	e := start(t)
	alive := e.configMap("default", "alive", nil)
	gone := e.configMap("default", "gone", nil)
	e.configMap("default", "dep", []metav1.OwnerReference{ownedBy(alive, "ConfigMap", false), ownedBy(gone, "ConfigMap", true)})
	e.delete("default", "gone", "")
	e.waitOwners("default", "dep", "alive")
	e.delete("default", "alive", "")
	e.waitGone("default", "dep")

	// An owner deleting in the foreground does not take a dependent that
	// has another live owner: it loses that reference, and the owner goes.
	alive = e.configMap("default", "alive", nil)
	fg := e.configMap("default", "foreground", nil)
	e.configMap("default", "dep", []metav1.OwnerReference{ownedBy(alive, "ConfigMap", false), ownedBy(fg, "ConfigMap", true)})
	e.delete("default", "foreground", metav1.DeletePropagationForeground)
	e.waitOwners("default", "dep", "alive")
	e.waitGone("default", "foreground")
}

// Foreground: the owner stays, readable with its deletionTimestamp,
// while a dependent with blockOwnerDeletion exists; one without does not
// hold it.
func TestForeground(t *testing.T) {
	e := start(t)
	owner := e.configMap("default", "owner", nil)
	e.configMap("default", "blocking", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", true)}, "example.com/hold")
	e.configMap("default", "free", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", false)})
	e.delete("default", "owner", metav1.DeletePropagationForeground)
	// Every dependent is deleted; the held one stays, deleting.
	e.waitGone("default", "free")
	clustertest.Eventually(t, timeout, func() error {
		cm, err := e.get("default", "blocking")
		if err != nil || cm.DeletionTimestamp == nil {
			return fmt.Errorf("blocking dependent not deleting: %v", err)
		}
		return nil
	})
	got, err := e.get("default", "owner")
	if err != nil {
		t.Fatalf("owner while a blocking dependent exists: %v", err)
	}
	if got.DeletionTimestamp == nil || !hasFinalizer(got, metav1.FinalizerDeleteDependents) {
		t.Fatalf("owner while a blocking dependent exists: %+v", got.ObjectMeta)
	}
	e.removeFinalizers("default", "blocking")
	e.waitGone("default", "blocking", "owner")
}

// Foreground with only non-blocking dependents: the owner goes even
// while such a dependent is still there.
func TestForegroundNonBlockingDependentDoesNotHold(t *testing.T) {
	e := start(t)
	owner := e.configMap("default", "owner", nil)
	e.configMap("default", "free", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", false)}, "example.com/hold")
	e.delete("default", "owner", metav1.DeletePropagationForeground)
	e.waitGone("default", "owner")
	// The dependent's delete may come just after the owner is gone (it
	// does not block it), but it comes.
	clustertest.Eventually(t, 10*time.Second, func() error {
		cm, err := e.get("default", "free")
		if err != nil {
			return fmt.Errorf("held non-blocking dependent: %w", err)
		}
		if cm.DeletionTimestamp == nil {
			return fmt.Errorf("non-blocking dependent of a foreground deletion not deleted: %+v", cm.ObjectMeta)
		}
		return nil
	})
	e.removeFinalizers("default", "free")
	e.waitGone("default", "free")
}

// Orphan: the owner goes, the dependents stay without its reference.
func TestOrphan(t *testing.T) {
	e := start(t)
	owner := e.configMap("default", "owner", nil)
	keep := e.configMap("default", "keep", nil)
	e.configMap("default", "dep-1", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", true)})
	e.configMap("default", "dep-2", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", false), ownedBy(keep, "ConfigMap", false)})
	e.delete("default", "owner", metav1.DeletePropagationOrphan)
	e.waitGone("default", "owner")
	e.waitOwners("default", "dep-1")
	e.waitOwners("default", "dep-2", "keep")
}

// A namespaced dependent may name a cluster-scoped owner.
func TestClusterScopedOwner(t *testing.T) {
	e := start(t)
	node, err := e.Client.Core.Nodes().Create(e.Ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "owner-node"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.namespace("other")
	// The reference to an absent node going shows the collector judged
	// the live node a valid owner.
	never := ownedBy(node, "Node", false)
	never.Name, never.UID = "no-such-node", "00000000-0000-0000-0000-000000000003"
	e.configMap("other", "dep", []metav1.OwnerReference{ownedBy(node, "Node", false), never})
	e.waitOwners("other", "dep", "owner-node")
	// A node's Lease, as the kubelet makes it, goes with its node.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "owner-node", Namespace: corev1.NamespaceNodeLease,
		OwnerReferences: []metav1.OwnerReference{ownedBy(node, "Node", false)}}}
	if _, err := e.Client.Coordination.Leases(corev1.NamespaceNodeLease).Create(e.Ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Core.Nodes().Delete(e.Ctx, "owner-node", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone("other", "dep")
	clustertest.Eventually(t, timeout, func() error {
		if _, err := e.Client.Coordination.Leases(corev1.NamespaceNodeLease).Get(e.Ctx, "owner-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("lease of a deleted node: %v", err)
		}
		return nil
	})
}

// A namespaced owner in another namespace than its dependent counts as
// absent, and the dependent gets an OwnerRefInvalidNamespace warning; a
// cluster-scoped dependent naming a namespaced owner gets the warning
// too but is left alone.
func TestInvalidNamespaceOwner(t *testing.T) {
	e := start(t)
	e.namespace("a")
	e.namespace("b")
	owner := e.configMap("a", "owner", nil)
	dep := e.configMap("b", "dep", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", false)})
	e.waitGone("b", "dep")
	e.waitEvent("b", dep.UID)
	if _, err := e.get("a", "owner"); err != nil {
		t.Errorf("owner in the other namespace: %v", err)
	}

	ns, err := e.Client.Core.Namespaces().Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "owned-ns", OwnerReferences: []metav1.OwnerReference{ownedBy(owner, "ConfigMap", false)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitEvent("default", ns.UID)
	got, err := e.Client.Core.Namespaces().Get(e.Ctx, "owned-ns", metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp != nil {
		t.Errorf("cluster-scoped dependent of a namespaced owner: %v %+v", err, got.ObjectMeta)
	}
}

// waitEvent waits for an OwnerRefInvalidNamespace warning about uid in
// ns, found as the documentation finds them:
// kubectl get events -A --field-selector=reason=OwnerRefInvalidNamespace.
func (e *env) waitEvent(ns string, uid types.UID) {
	e.T.Helper()
	clustertest.Eventually(e.T, timeout, func() error {
		list, err := e.Client.Core.Events("").List(e.Ctx, metav1.ListOptions{FieldSelector: "reason=OwnerRefInvalidNamespace"})
		if err != nil {
			return err
		}
		for _, ev := range list.Items {
			if ev.Namespace == ns && ev.InvolvedObject.UID == uid && ev.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return errors.New("no OwnerRefInvalidNamespace event")
	})
}

// Garbage from before the collector started is collected when it starts;
// dependents of live owners are left alone.
func TestCollectsOnStart(t *testing.T) {
	e := &env{Env: clustertest.New(t, clustertest.Options{})}
	owner := e.configMap("default", "owner", nil)
	gone := e.configMap("default", "gone", nil)
	e.configMap("default", "live-dep", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", true), ownedBy(gone, "ConfigMap", true)})
	e.configMap("default", "orphaned", []metav1.OwnerReference{ownedBy(gone, "ConfigMap", true)})
	e.delete("default", "gone", "")
	e.run()
	e.waitGone("default", "orphaned")
	e.waitOwners("default", "live-dep", "owner")
}

// An owner of a kind discovery does not list is left alone: its
// dependent stays, whatever its other references say.
func TestUnknownOwnerKind(t *testing.T) {
	e := start(t)
	unknown := metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "00000000-0000-0000-0000-000000000004"}
	absent := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "absent", UID: "00000000-0000-0000-0000-000000000005"}
	dep := e.configMap("default", "dep", []metav1.OwnerReference{unknown, absent})
	// It is retried (quietly, with back-off) until discovery knows the kind.
	ref := objectRef{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), kind: "ConfigMap", namespace: "default", name: "dep", uid: dep.UID}
	clustertest.Eventually(t, timeout, func() error {
		if e.gc.attemptToDelete.NumRequeues(ref) < 2 {
			return errors.New("dependent not retried yet")
		}
		return nil
	})
	cm, err := e.get("default", "dep")
	if err != nil {
		t.Fatalf("dependent of an owner of unknown kind: %v", err)
	}
	if len(cm.OwnerReferences) != 2 || cm.DeletionTimestamp != nil {
		t.Errorf("dependent of an owner of unknown kind changed: %+v", cm.ObjectMeta)
	}
}

// Rediscovery keeps the informers of resources still served (restarting
// them would list everything again every 30 s), stops those of resources
// no longer served, and watches every listable, watchable, deletable one
// but events.
func TestRediscovery(t *testing.T) {
	e := start(t)
	clustertest.Eventually(t, timeout, func() error {
		if e.gc.monitorCount() == 0 {
			return errors.New("no monitors yet")
		}
		return nil
	})
	gone := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	stopped := false
	e.gc.mu.Lock()
	before := maps.Clone(e.gc.monitors)
	e.gc.monitors[gone] = &monitor{stop: func() { stopped = true }}
	e.gc.mu.Unlock()

	if err := e.gc.resync(e.Ctx); err != nil {
		t.Fatal(err)
	}
	e.gc.mu.RLock()
	after := maps.Clone(e.gc.monitors)
	e.gc.mu.RUnlock()
	if !stopped || after[gone] != nil {
		t.Errorf("monitor of a resource no longer served: stopped %v, still there %v", stopped, after[gone] != nil)
	}
	for gvr, m := range before {
		if after[gvr] != m {
			t.Errorf("monitor of %s replaced by rediscovery", gvr)
		}
	}
	for _, want := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "nodes"},
		{Group: "apps", Version: "v1", Resource: "replicasets"}, {Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
	} {
		if after[want] == nil {
			t.Errorf("%s not watched", want)
		}
	}
	for gvr := range after {
		if gvr.Resource == "events" {
			t.Errorf("%s watched", gvr)
		}
	}
}

// Foreground through a tree of real workload kinds: a Deployment waits
// for its ReplicaSet, which (deleted in the foreground in turn, having
// dependents) waits for its Pods.
func TestForegroundTree(t *testing.T) {
	e := start(t)
	labels := map[string]string{"app": "tree"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	d, err := e.Client.Apps.Deployments("default").Create(e.Ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := e.Client.Apps.ReplicaSets("default").Create(e.Ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs",
		OwnerReferences: []metav1.OwnerReference{controlledBy(d, "apps/v1", "Deployment")}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"p-held", "p-1", "p-2"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{controlledBy(rs, "apps/v1", "ReplicaSet")}}, Spec: template.Spec}
		if name == "p-held" {
			pod.Finalizers = []string{"example.com/hold"}
		}
		if _, err := e.Client.Core.Pods("default").Create(e.Ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	foreground := metav1.DeletePropagationForeground
	if err := e.Client.Apps.Deployments("default").Delete(e.Ctx, "d", metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, timeout, func() error {
		for _, name := range []string{"p-1", "p-2"} {
			if _, err := e.Client.Core.Pods("default").Get(e.Ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s: %v", name, err)
			}
		}
		got, err := e.Client.Apps.ReplicaSets("default").Get(e.Ctx, "rs", metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp == nil || !hasFinalizer(got, metav1.FinalizerDeleteDependents) {
			return fmt.Errorf("replicaset not deleting in the foreground: %v", err)
		}
		return nil
	})
	if got, err := e.Client.Apps.Deployments("default").Get(e.Ctx, "d", metav1.GetOptions{}); err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("deployment while its tree is deleting: %v", err)
	}
	if _, err := e.Client.Core.Pods("default").Patch(e.Ctx, "p-held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, timeout, func() error {
		if _, err := e.Client.Core.Pods("default").Get(e.Ctx, "p-held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod: %v", err)
		}
		if _, err := e.Client.Apps.ReplicaSets("default").Get(e.Ctx, "rs", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("replicaset: %v", err)
		}
		if _, err := e.Client.Apps.Deployments("default").Get(e.Ctx, "d", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("deployment: %v", err)
		}
		return nil
	})
}

func controlledBy(o metav1.Object, apiVersion, kind string) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: o.GetName(), UID: o.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes}
}

// Two objects blocking each other's foreground deletion: the collector
// unblocks the cycle and both go.
func TestForegroundCycle(t *testing.T) {
	e := start(t)
	x := e.configMap("default", "x", nil)
	y := e.configMap("default", "y", []metav1.OwnerReference{ownedBy(x, "ConfigMap", true)})
	x.OwnerReferences = []metav1.OwnerReference{ownedBy(y, "ConfigMap", true)}
	if _, err := e.Client.Core.ConfigMaps("default").Update(e.Ctx, x, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.delete("default", "x", metav1.DeletePropagationForeground)
	e.waitGone("default", "x", "y")
}
