package apiserver

import (
	"errors"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Regressions found by driving real kubectl through an app's life
// (e2e/kubectl_test.go); each test names the kubectl step that broke.

// kubectl replace of an exported object rewrites last-applied with the
// object's resourceVersion; the next kubectl apply then patches
// "resourceVersion":null. kube-apiserver reads a missing resourceVersion as
// an unconditional update, for PUT and PATCH alike.
func TestUpdateWithoutResourceVersionIsUnconditional(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	c, err := cms.Create(e.ctx, cm("settings", map[string]string{"mode": "fast"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	put := cm("settings", map[string]string{"mode": "put"})
	got, err := cms.Update(e.ctx, put, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("PUT without resourceVersion: %v", err)
	}
	if got.Data["mode"] != "put" || got.ResourceVersion == "" || got.ResourceVersion == c.ResourceVersion || got.UID != c.UID {
		t.Fatalf("PUT without resourceVersion stored %+v", got)
	}

	for _, p := range []struct {
		pt   types.PatchType
		body string
	}{
		{types.MergePatchType, `{"metadata":{"resourceVersion":null,"uid":null,"creationTimestamp":null},"data":{"mode":"merge"}}`},
		{types.StrategicMergePatchType, `{"metadata":{"resourceVersion":null},"data":{"mode":"strategic"}}`},
		{types.JSONPatchType, `[{"op":"remove","path":"/metadata/resourceVersion"},{"op":"replace","path":"/data/mode","value":"json"}]`},
	} {
		prev := got
		got, err = cms.Patch(e.ctx, "settings", p.pt, []byte(p.body), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("%s patch removing resourceVersion: %v", p.pt, err)
		}
		if got.ResourceVersion == prev.ResourceVersion || got.UID != c.UID || !got.CreationTimestamp.Equal(&c.CreationTimestamp) {
			t.Errorf("%s patch removing resourceVersion: %+v", p.pt, got.ObjectMeta)
		}
	}

	// A resourceVersion the patch does pin is still checked.
	_, err = cms.Patch(e.ctx, "settings", types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"`+c.ResourceVersion+`"},"data":{"mode":"stale"}}`), metav1.PatchOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("patch pinning a stale resourceVersion: %v", err)
	}
	_, err = cms.Patch(e.ctx, "settings", types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"`+got.ResourceVersion+`"},"data":{"mode":"current"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch pinning the current resourceVersion: %v", err)
	}
}

// kubectl patch --type=json with a failing "test" operation: kube-apiserver
// answers 422 Invalid with a fixed message and no resource or name, so
// kubectl prints "The request is invalid: the server rejected our request
// due to an error in our request".
func TestFailedJSONPatchTestOperation(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(e.ctx, cm("settings", map[string]string{"mode": "fast"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cms.Patch(e.ctx, "settings", types.JSONPatchType, []byte(`[{"op":"test","path":"/data/mode","value":"slow"}]`), metav1.PatchOptions{})
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("failed test operation: %v", err)
	}
	st := se.ErrStatus
	if st.Code != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid ||
		st.Message != "the server rejected our request due to an error in our request" {
		t.Errorf("failed test operation: %d %s %q", st.Code, st.Reason, st.Message)
	}
	if d := st.Details; d != nil && (d.Name != "" || d.Kind != "" || d.Group != "" || len(d.Causes) != 0) {
		t.Errorf("failed test operation details %+v, want none", d)
	}
	if got, _ := cms.Get(e.ctx, "settings", metav1.GetOptions{}); got.Data["mode"] != "fast" {
		t.Errorf("failed patch changed the object: %+v", got.Data)
	}
}

// kubectl delete --cascade=orphan|foreground of an object that another
// finalizer already holds in deletion: kube-apiserver sets the garbage
// collector's finalizers on every delete (they are not subject to the
// update rule against new finalizers on a deleting object), so the
// collector later orphans or deletes the dependents as asked.
func TestDeleteCascadeOfADeletingObject(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	held := cm("held", nil)
	held.Finalizers = []string{"example.com/hold"}
	if _, err := cms.Create(e.ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	finalizers := func() []string {
		t.Helper()
		got, err := cms.Get(e.ctx, "held", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.DeletionTimestamp == nil {
			t.Fatalf("no deletionTimestamp after a delete: %+v", got.ObjectMeta)
		}
		return got.Finalizers
	}
	for _, step := range []struct {
		policy metav1.DeletionPropagation
		want   []string
	}{
		{metav1.DeletePropagationBackground, []string{"example.com/hold"}},
		{metav1.DeletePropagationOrphan, []string{"example.com/hold", metav1.FinalizerOrphanDependents}},
		{metav1.DeletePropagationForeground, []string{"example.com/hold", metav1.FinalizerDeleteDependents}},
		{metav1.DeletePropagationBackground, []string{"example.com/hold"}},
	} {
		if err := cms.Delete(e.ctx, "held", metav1.DeleteOptions{PropagationPolicy: &step.policy}); err != nil {
			t.Fatalf("delete %s: %v", step.policy, err)
		}
		if got := finalizers(); !equalStrings(got, step.want) {
			t.Errorf("finalizers after a %s delete: %v, want %v", step.policy, got, step.want)
		}
	}
	// The no-new-finalizers rule still holds for updates.
	got, _ := cms.Get(e.ctx, "held", metav1.GetOptions{})
	got.Finalizers = append(got.Finalizers, "example.com/late")
	if _, err := cms.Update(e.ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("update adding a finalizer to a deleting object: %v, want Invalid", err)
	}
}
