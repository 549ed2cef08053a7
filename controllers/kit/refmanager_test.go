package kit

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var rsKind = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")

func testOwner(deleting bool) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "owner-uid"}}
	if deleting {
		rs.DeletionTimestamp = &metav1.Time{}
	}
	return rs
}

type podOpt func(*corev1.Pod)

func testPod(name, app string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid"), Labels: map[string]string{"app": app}}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ownedBy(uid types.UID) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "x", UID: uid, Controller: ptr(true)}}
	}
}
func deleting(p *corev1.Pod)              { p.DeletionTimestamp = &metav1.Time{} }
func inNamespace(ns string) podOpt        { return func(p *corev1.Pod) { p.Namespace = ns } }
func ptr[T any](v T) *T                   { return &v }
func patchOf(b []byte) (m map[string]any) { _ = json.Unmarshal(b, &m); return m }

// The claiming rules, as upstream's ControllerRefManager: each case
// claims one object and says what it must be sent and what comes back.
func TestRefManagerClaim(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ownerDeleting bool
		pod           *corev1.Pod
		filter        func(*corev1.Pod) bool
		canAdopt      error
		patchErr      error
		wantPatch     string // "", "adopt" or "release"
		wantClaimed   bool
		wantErr       bool
	}{
		{name: "orphan that matches is adopted", pod: testPod("p", "a"), wantPatch: "adopt", wantClaimed: true},
		{name: "orphan that does not match is left alone", pod: testPod("p", "b")},
		{name: "orphan the filter refuses is left alone", pod: testPod("p", "a"), filter: func(*corev1.Pod) bool { return false }},
		{name: "owner being deleted adopts nothing", ownerDeleting: true, pod: testPod("p", "a")},
		{name: "orphan being deleted is not adopted", pod: testPod("p", "a", deleting)},
		{name: "orphan of another namespace is not adopted", pod: testPod("p", "a", inNamespace("other"))},
		{name: "owner gone or being deleted in the API: no adoption", pod: testPod("p", "a"), canAdopt: errors.New("being deleted"), wantErr: true},
		{name: "orphan gone before the adoption", pod: testPod("p", "a"), patchErr: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p"), wantPatch: "adopt"},
		{name: "adoption refused", pod: testPod("p", "a"), patchErr: apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", nil), wantPatch: "adopt", wantErr: true},
		{name: "owned and matching is kept", pod: testPod("p", "a", ownedBy("owner-uid")), wantClaimed: true},
		{name: "owned and no longer matching is released", pod: testPod("p", "b", ownedBy("owner-uid")), wantPatch: "release"},
		{name: "owned but filtered out is released", pod: testPod("p", "a", ownedBy("owner-uid")), filter: func(*corev1.Pod) bool { return false }, wantPatch: "release"},
		{name: "owner being deleted releases nothing", ownerDeleting: true, pod: testPod("p", "b", ownedBy("owner-uid"))},
		{name: "owner being deleted keeps what matches", ownerDeleting: true, pod: testPod("p", "a", ownedBy("owner-uid")), wantClaimed: true},
		{name: "released object gone", pod: testPod("p", "b", ownedBy("owner-uid")), patchErr: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p"), wantPatch: "release"},
		{name: "released object replaced under its name", pod: testPod("p", "b", ownedBy("owner-uid")), patchErr: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil), wantPatch: "release"},
		{name: "release refused", pod: testPod("p", "b", ownedBy("owner-uid")), patchErr: apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", nil), wantPatch: "release", wantErr: true},
		{name: "another controller's object that matches is never touched", pod: testPod("p", "a", ownedBy("other-uid"))},
		{name: "another controller's object that does not match is never touched", pod: testPod("p", "b", ownedBy("other-uid"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent []string
			m := &RefManager[*corev1.Pod]{
				Owner: testOwner(tc.ownerDeleting), Kind: rsKind, Selector: labels.SelectorFromSet(labels.Set{"app": "a"}),
				Patch: func(_ context.Context, p *corev1.Pod, patch []byte) (*corev1.Pod, error) {
					refs := patchOf(patch)["metadata"].(map[string]any)["ownerReferences"].([]any)
					if refs[0].(map[string]any)["$patch"] == "delete" {
						sent = append(sent, "release")
					} else {
						sent = append(sent, "adopt")
					}
					if tc.patchErr != nil {
						return nil, tc.patchErr
					}
					out := p.DeepCopy()
					out.ResourceVersion = "patched"
					return out, nil
				},
				CanAdopt: func(context.Context) error { return tc.canAdopt },
			}
			got, err := m.Claim(context.Background(), []*corev1.Pod{tc.pod}, tc.filter)
			if (err != nil) != tc.wantErr {
				t.Errorf("err %v, want error %v", err, tc.wantErr)
			}
			var want []string
			if tc.wantPatch != "" {
				want = []string{tc.wantPatch}
			}
			if diff := cmp.Diff(want, sent); diff != "" {
				t.Errorf("patches sent (-want +got):\n%s", diff)
			}
			if (len(got) == 1) != tc.wantClaimed {
				t.Fatalf("claimed %d objects, want claimed %v", len(got), tc.wantClaimed)
			}
			if tc.wantClaimed && tc.wantPatch == "adopt" && got[0].ResourceVersion != "patched" {
				t.Error("adopted object returned as cached, want as patched")
			}
		})
	}
}

// CanAdopt is asked once per RefManager however many orphans there are,
// and only when there is one to adopt; its failure does not stop the
// owned objects from being claimed.
func TestRefManagerCanAdoptOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pods      []*corev1.Pod
		canAdopt  error
		wantCalls int
		wantNames []string
	}{
		{"no orphan", []*corev1.Pod{testPod("o", "a", ownedBy("owner-uid"))}, nil, 0, []string{"o"}},
		{"two orphans", []*corev1.Pod{testPod("x", "a"), testPod("y", "a")}, nil, 1, []string{"x", "y"}},
		{"two orphans, owner going", []*corev1.Pod{testPod("x", "a"), testPod("o", "a", ownedBy("owner-uid")), testPod("y", "a")}, errors.New("gone"), 1, []string{"o"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			m := &RefManager[*corev1.Pod]{
				Owner: testOwner(false), Kind: rsKind, Selector: labels.SelectorFromSet(labels.Set{"app": "a"}),
				Patch:    func(_ context.Context, p *corev1.Pod, _ []byte) (*corev1.Pod, error) { return p, nil },
				CanAdopt: func(context.Context) error { calls++; return tc.canAdopt },
			}
			got, err := m.Claim(context.Background(), tc.pods, nil)
			if (err != nil) != (tc.canAdopt != nil) {
				t.Errorf("err %v, want one: %v", err, tc.canAdopt != nil)
			}
			var names []string
			for _, p := range got {
				names = append(names, p.Name)
			}
			if calls != tc.wantCalls || !slices.Equal(names, tc.wantNames) {
				t.Errorf("CanAdopt called %d times, claimed %v; want %d, %v", calls, names, tc.wantCalls, tc.wantNames)
			}
		})
	}
}

// What the patches say: the controller reference (with
// blockOwnerDeletion) and the finalizers on adoption, their removal on
// release, both guarded by the object's uid.
func TestRefManagerPatches(t *testing.T) {
	owner := testOwner(false)
	adopt := patchOf(adoptPatch(owner, rsKind, "pod-uid", "f"))
	wantAdopt := map[string]any{"metadata": map[string]any{
		"uid": "pod-uid",
		"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "owner-uid",
			"controller": true, "blockOwnerDeletion": true}},
		"finalizers": []any{"f"},
	}}
	if diff := cmp.Diff(wantAdopt, adopt); diff != "" {
		t.Errorf("adopt patch (-want +got):\n%s", diff)
	}
	release := patchOf(releasePatch("owner-uid", "pod-uid"))
	wantRelease := map[string]any{"metadata": map[string]any{
		"uid":             "pod-uid",
		"ownerReferences": []any{map[string]any{"$patch": "delete", "uid": "owner-uid"}},
	}}
	if diff := cmp.Diff(wantRelease, release); diff != "" {
		t.Errorf("release patch (-want +got):\n%s", diff)
	}
}
