package namespace

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

func start(t *testing.T) *clustertest.Env {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{})
	clustertest.Start(e, func(inf *client.Informers) (*Controller, error) {
		return New(Config{RESTConfig: e.Config, Client: e.Client, Informers: inf, Logger: e.Log})
	})
	return e
}

func createNamespace(t *testing.T, e *clustertest.Env, name string) {
	t.Helper()
	if _, err := e.Client.Core.Namespaces().Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitNamespaceGone(t *testing.T, e *clustertest.Env, name string, timeout time.Duration) {
	t.Helper()
	clustertest.Eventually(t, timeout, func() error {
		ns, err := e.Client.Core.Namespaces().Get(e.Ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("namespace %s still there: %s %v", name, ns.Status.Phase, ns.Status.Conditions)
	})
}

// A deleted namespace is emptied of every kind of object, gets the
// all-clear conditions on the way, and goes.
func TestNamespaceDeletionRemovesContent(t *testing.T) {
	e := start(t)
	createNamespace(t, e, "doomed")
	createNamespace(t, e, "bystander")
	for _, ns := range []string{"doomed", "bystander"} {
		if _, err := e.Client.Core.ConfigMaps(ns).Create(e.Ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Client.Core.Secrets(ns).Create(e.Ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs"}, Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
		if _, err := e.Client.Apps.ReplicaSets(ns).Create(e.Ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Watch the namespace to see the conditions it passes through.
	var mu sync.Mutex
	var seen []corev1.NamespaceCondition
	w, err := e.Client.Core.Namespaces().Watch(e.Ctx, metav1.ListOptions{FieldSelector: "metadata.name=doomed"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			if ns, ok := ev.Object.(*corev1.Namespace); ok && len(ns.Status.Conditions) > 0 {
				mu.Lock()
				seen = ns.Status.Conditions
				mu.Unlock()
			}
		}
	}()
	if err := e.Client.Core.Namespaces().Delete(e.Ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamespaceGone(t, e, "doomed", 30*time.Second)
	for _, check := range []func() error{
		func() error {
			_, err := e.Client.Core.ConfigMaps("doomed").Get(e.Ctx, "cm", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := e.Client.Core.Secrets("doomed").Get(e.Ctx, "s", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := e.Client.Apps.ReplicaSets("doomed").Get(e.Ctx, "rs", metav1.GetOptions{})
			return err
		},
	} {
		if err := check(); !apierrors.IsNotFound(err) {
			t.Errorf("object of the deleted namespace: %v", err)
		}
	}
	if _, err := e.Client.Apps.ReplicaSets("bystander").Get(e.Ctx, "rs", metav1.GetOptions{}); err != nil {
		t.Errorf("object of another namespace: %v", err)
	}
	clustertest.Eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		want := []corev1.NamespaceCondition{
			{Type: corev1.NamespaceDeletionDiscoveryFailure, Status: corev1.ConditionFalse, Reason: "ResourcesDiscovered", Message: "All resources successfully discovered"},
			{Type: corev1.NamespaceDeletionGVParsingFailure, Status: corev1.ConditionFalse, Reason: "ParsedGroupVersions", Message: "All legacy kube types successfully parsed"},
			{Type: corev1.NamespaceDeletionContentFailure, Status: corev1.ConditionFalse, Reason: "ContentDeleted", Message: "All content successfully deleted, may be waiting on finalization"},
			{Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionFalse, Reason: "ContentRemoved", Message: "All content successfully removed"},
			{Type: corev1.NamespaceFinalizersRemaining, Status: corev1.ConditionFalse, Reason: "ContentHasNoFinalizers", Message: "All content-preserving finalizers finished"},
		}
		if d := cmp.Diff(want, seen, cmpopts.IgnoreFields(corev1.NamespaceCondition{}, "LastTransitionTime")); d != "" {
			return fmt.Errorf("conditions (-want +got):\n%s", d)
		}
		return nil
	})
}

// An object with a finalizer keeps its namespace Terminating, with the
// remaining-content conditions, until the finalizer is removed.
func TestNamespaceWaitsForFinalizers(t *testing.T) {
	e := start(t)
	createNamespace(t, e, "held")
	for _, name := range []string{"p1", "p2"} {
		// No grace period: the pods' finalizer is all that holds them.
		grace := int64(0)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{"example.com/hold"}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := e.Client.Core.Pods("held").Create(e.Ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Client.Core.Namespaces().Delete(e.Ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[corev1.NamespaceConditionType]corev1.NamespaceCondition{
		corev1.NamespaceContentRemaining: {Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionTrue, Reason: "SomeResourcesRemain",
			Message: "Some resources are remaining: pods. has 2 resource instances"},
		corev1.NamespaceFinalizersRemaining: {Type: corev1.NamespaceFinalizersRemaining, Status: corev1.ConditionTrue, Reason: "SomeFinalizersRemain",
			Message: "Some content in the namespace has finalizers remaining: example.com/hold in 2 resource instances"},
		corev1.NamespaceDeletionContentFailure: {Type: corev1.NamespaceDeletionContentFailure, Status: corev1.ConditionFalse, Reason: "ContentDeleted",
			Message: "All content successfully deleted, may be waiting on finalization"},
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		ns, err := e.Client.Core.Namespaces().Get(e.Ctx, "held", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ns.Status.Phase != corev1.NamespaceTerminating {
			return fmt.Errorf("phase %s", ns.Status.Phase)
		}
		got := map[corev1.NamespaceConditionType]corev1.NamespaceCondition{}
		for _, c := range ns.Status.Conditions {
			if _, ok := want[c.Type]; ok {
				c.LastTransitionTime = metav1.Time{}
				got[c.Type] = c
			}
		}
		if d := cmp.Diff(want, got); d != "" {
			return fmt.Errorf("conditions (-want +got):\n%s", d)
		}
		return nil
	})
	for _, name := range []string{"p1", "p2"} {
		pod, err := e.Client.Core.Pods("held").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil || pod.DeletionTimestamp == nil {
			t.Fatalf("pod %s with a finalizer in a terminating namespace: %v %+v", name, err, pod.ObjectMeta)
		}
		if _, err := e.Client.Core.Pods("held").Patch(e.Ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The next check comes within the finalizers' estimate (15 s / 2 + 1).
	waitNamespaceGone(t, e, "held", 45*time.Second)
}

// Deleting a namespace of 5,000 ConfigMaps: logs how long it takes.
func TestNamespaceWithManyObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 5,000 objects")
	}
	e := start(t)
	createNamespace(t, e, "big")
	const n = 5000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"k": "v"}}
			if _, err := e.Client.Core.ConfigMaps("big").Create(e.Ctx, cm, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := e.Client.Core.Namespaces().Delete(e.Ctx, "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamespaceGone(t, e, "big", 2*time.Minute)
	t.Logf("namespace of %d configmaps deleted in %s", n, time.Since(begin))
	list, err := e.Client.Core.ConfigMaps("big").List(e.Ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("configmaps left: %v %d", err, len(list.Items))
	}
}
