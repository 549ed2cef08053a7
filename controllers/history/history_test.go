package history

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

func TestName(t *testing.T) {
	long := strings.Repeat("a", 300)
	for _, tc := range []struct{ parent, want string }{
		{"web", "web-abc"},
		{long, long[:223] + "-abc"},
	} {
		if got := Name(tc.parent, "abc"); got != tc.want {
			t.Errorf("Name(%d chars) = %d chars, want %d", len(tc.parent), len(got), len(tc.want))
		}
	}
}

func TestHashes(t *testing.T) {
	rev := &appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: []byte(`{"a":1}`)}}
	other := &appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: []byte(`{"a":2}`)}}
	one := int32(1)
	hashes := []string{HashRevision(rev, nil), HashRevision(rev, &one), HashRevision(other, nil)}
	if hashes[0] != HashRevision(rev.DeepCopy(), nil) {
		t.Error("HashRevision is not stable")
	}
	if len(slices.Compact(slices.Sorted(slices.Values(hashes)))) != 3 {
		t.Errorf("hashes of other data or probe collide: %v", hashes)
	}
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if HashObject(&tmpl, nil) == HashObject(&tmpl, &one) {
		t.Error("the collision count does not change HashObject")
	}
}

func TestSort(t *testing.T) {
	at := func(s int64) metav1.Time { return metav1.Unix(s, 0) }
	rev := func(name string, n int64, created int64) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created)}, Revision: n}
	}
	revs := []*appsv1.ControllerRevision{rev("d", 3, 0), rev("c", 1, 5), rev("b", 1, 5), rev("a", 1, 9), rev("e", 2, 0)}
	Sort(revs)
	var got []string
	for _, r := range revs {
		got = append(got, r.Name)
	}
	if diff := cmp.Diff([]string{"b", "c", "a", "e", "d"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if MaxRevision(revs) != 3 || MaxRevision(nil) != 0 {
		t.Errorf("MaxRevision %d, %d", MaxRevision(revs), MaxRevision(nil))
	}
}

// A revision whose name is taken by other data is a hash collision: the
// collision count goes up until a free name is found; equal data reuses
// the existing revision.
func TestCreateCollision(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{})
	parent := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "1234"}}
	kind := appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	var count int32
	want := New(parent, kind, map[string]string{"app": "web"}, []byte(`{"want":1}`), 1, &count)
	squatter := want.DeepCopy()
	squatter.Data.Raw = []byte(`{"other":1}`)
	if _, err := e.Client.Apps.ControllerRevisions("default").Create(e.Ctx, squatter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := Create(e.Ctx, e.Client.Apps, parent, want, &count)
	if err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	if count != 1 || got.Name != Name("web", HashRevision(want, &one)) || got.Labels[HashLabel] != HashRevision(want, &one) {
		t.Fatalf("after a collision: count %d, revision %s labelled %s", count, got.Name, got.Labels[HashLabel])
	}
	again, err := Create(e.Ctx, e.Client.Apps, parent, want, &count)
	if err != nil || again.UID != got.UID || count != 1 {
		t.Fatalf("creating equal data again: %v, uid %s (want %s), count %d", err, again.UID, got.UID, count)
	}
}

// A template patch replaces spec.template whole: what it holds is the
// template, marked for replacement, and nothing else.
func TestTemplatePatch(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	b, err := TemplatePatch(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"spec": map[string]any{"template": map[string]any{
		"$patch":   "replace",
		"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x", "resources": map[string]any{}}}},
	}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
}
