package kit

import (
	"errors"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func TestResolveControllerRef(t *testing.T) {
	cached := map[string]*appsv1.ReplicaSet{"web": {ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "web-uid"}}}
	get := func(name string) (*appsv1.ReplicaSet, error) {
		if rs, ok := cached[name]; ok {
			return rs, nil
		}
		return nil, errors.New("not found")
	}
	ref := func(apiVersion, kind, name string, uid types.UID) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr(true)}
	}
	for _, tc := range []struct {
		name string
		ref  *metav1.OwnerReference
		want bool
	}{
		{"no reference", nil, false},
		{"cached with the uid", ref("apps/v1", "ReplicaSet", "web", "web-uid"), true},
		{"recreated under the name", ref("apps/v1", "ReplicaSet", "web", "old-uid"), false},
		{"not cached", ref("apps/v1", "ReplicaSet", "api", "api-uid"), false},
		{"another kind", ref("apps/v1", "DaemonSet", "web", "web-uid"), false},
		{"another group version", ref("extensions/v1beta1", "ReplicaSet", "web", "web-uid"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ResolveControllerRef(tc.ref, rsKind, get); (got != nil) != tc.want {
				t.Errorf("resolved %v, want found %v", got, tc.want)
			}
		})
	}
}

func TestSelecting(t *testing.T) {
	rs := func(name string, sel *metav1.LabelSelector) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.ReplicaSetSpec{Selector: sel}}
	}
	owners := []*appsv1.ReplicaSet{
		rs("web", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}),
		rs("any-tier", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}}),
		rs("empty", &metav1.LabelSelector{}),
		rs("none", nil),
		rs("invalid", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}),
	}
	var names []string
	for _, o := range Selecting(owners, func(rs *appsv1.ReplicaSet) *metav1.LabelSelector { return rs.Spec.Selector }, map[string]string{"app": "web", "tier": "front"}) {
		names = append(names, o.Name)
	}
	if want := []string{"web", "any-tier"}; !slices.Equal(names, want) {
		t.Errorf("selecting %v, want %v", names, want)
	}
}

func TestControllerIndex(t *testing.T) {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, cache.Indexers{})
	for range 2 { // a second controller of the process asks again
		if err := AddControllerIndex(inf); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(ns, name string, owner types.UID) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{UID: owner, Controller: ptr(true)}}
		}
		return p
	}
	for _, p := range []*corev1.Pod{pod("a", "mine", "rs-uid"), pod("b", "mine-too", "rs-uid"), pod("a", "orphan", ""), pod("b", "orphan", ""), pod("a", "other", "other-uid")} {
		if err := inf.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	names := func(pods []*corev1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(ControlledBy[*corev1.Pod](inf, "rs-uid")), []string{"a/mine", "b/mine-too"}; !slices.Equal(got, want) {
		t.Errorf("controlled by rs-uid: %v, want %v", got, want)
	}
	if got, want := names(Orphans[*corev1.Pod](inf, "a")), []string{"a/orphan"}; !slices.Equal(got, want) {
		t.Errorf("orphans of a: %v, want %v", got, want)
	}
}

func TestWakeOwners(t *testing.T) {
	owners := map[types.UID]*appsv1.ReplicaSet{
		"a-uid": {ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "a-uid"}},
		"b-uid": {ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "b-uid"}},
	}
	owner := func(obj metav1.Object) *appsv1.ReplicaSet {
		if ref := metav1.GetControllerOf(obj); ref != nil {
			return owners[ref.UID]
		}
		return nil
	}
	adopters := func(metav1.Object) []*appsv1.ReplicaSet {
		return []*appsv1.ReplicaSet{{ObjectMeta: metav1.ObjectMeta{Name: "adopter"}}}
	}
	pod := func(rv, app string, controller types.UID) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv, Labels: map[string]string{"app": app}}}
		if controller != "" {
			p.OwnerReferences = []metav1.OwnerReference{{UID: controller, Controller: ptr(true)}}
		}
		return p
	}
	for _, tc := range []struct {
		name      string
		old, cur  *corev1.Pod
		wantWoken []string
		wantOwner string
	}{
		{"a resync", pod("1", "x", "a-uid"), pod("1", "x", "a-uid"), nil, ""},
		{"owned", pod("1", "x", "a-uid"), pod("2", "y", "a-uid"), []string{"a"}, "a"},
		{"controller changed", pod("1", "x", "a-uid"), pod("2", "x", "b-uid"), []string{"a", "b"}, "b"},
		{"controlled by an owner not cached", pod("1", "x", "gone-uid"), pod("2", "y", "gone-uid"), nil, ""},
		{"released", pod("1", "x", "a-uid"), pod("2", "x", ""), []string{"a", "adopter"}, ""},
		{"orphan relabelled", pod("1", "x", ""), pod("2", "y", ""), []string{"adopter"}, ""},
		{"orphan otherwise changed", pod("1", "x", ""), pod("2", "x", ""), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var woken []string
			got := WakeOwners(tc.old, tc.cur, owner, adopters, func(rs *appsv1.ReplicaSet) { woken = append(woken, rs.Name) })
			if !slices.Equal(woken, tc.wantWoken) {
				t.Errorf("woken %v, want %v", woken, tc.wantWoken)
			}
			var gotName string
			if got != nil {
				gotName = got.Name
			}
			if gotName != tc.wantOwner {
				t.Errorf("returned owner %q, want %q", gotName, tc.wantOwner)
			}
		})
	}
}
