package kit_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// Against the real API server: adoption and release patch what they
// should, with finalizers, leave other controllers' objects alone, and a
// failed recheck of the owner stops adoption. From outside the package:
// the cluster harness runs controllers that use the kit.
func TestRefManagerAgainstAPIServer(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{})
	owner := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "owner-uid"}}
	kind := appsv1.SchemeGroupVersion.WithKind("DaemonSet")
	other := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "other", UID: "other-uid", Controller: new(true), BlockOwnerDeletion: new(true)}
	pods := e.Client.Core.Pods("default")
	mk := func(name, app string, refs ...metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}, OwnerReferences: refs},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}
		if len(refs) > 0 && refs[0].UID == owner.UID {
			p.Finalizers = []string{"example.com/tracking"}
		}
		p, err := pods.Create(e.Ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	objs := []*corev1.Pod{
		mk("orphan", "a"),
		mk("stranger", "b"),
		mk("leaving", "b", *metav1.NewControllerRef(owner, kind)),
		mk("staying", "a", *metav1.NewControllerRef(owner, kind)),
		mk("others", "a", other),
		{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "default", UID: "gone-uid", Labels: map[string]string{"app": "a"}}},
	}
	manager := func(recheck error) *kit.RefManager[*corev1.Pod] {
		return &kit.RefManager[*corev1.Pod]{
			Owner: owner, Kind: kind, Selector: labels.SelectorFromSet(labels.Set{"app": "a"}),
			Finalizers: []string{"example.com/tracking"},
			Patch:      kit.PatchWith(e.Client.Core.Pods),
			CanAdopt:   func(context.Context) error { return recheck },
		}
	}

	if got, err := manager(errors.New("owner is being deleted")).Claim(e.Ctx, objs[:1], nil); err == nil || len(got) != 0 {
		t.Fatalf("claim with a failed recheck: %v, %d claimed", err, len(got))
	}
	got, err := manager(nil).Claim(e.Ctx, objs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"orphan", "staying"}, names); diff != "" {
		t.Errorf("claimed (-want +got):\n%s", diff)
	}
	for name, want := range map[string]types.UID{"orphan": owner.UID, "stranger": "", "leaving": "", "staying": owner.UID, "others": other.UID} {
		p, err := pods.Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got types.UID
		if ref := metav1.GetControllerOf(p); ref != nil {
			got = ref.UID
			if ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
				t.Errorf("%s: controller reference without blockOwnerDeletion", name)
			}
		}
		if got != want {
			t.Errorf("%s: controller %q, want %q", name, got, want)
		}
		if tracked := slices.Contains(p.Finalizers, "example.com/tracking"); tracked != (want == owner.UID) {
			t.Errorf("%s: finalizers %v with controller %q", name, p.Finalizers, got)
		}
	}
	// Let the test's namespace go.
	for _, name := range []string{"orphan", "staying"} {
		_, _ = pods.Patch(e.Ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
}
