package apiserver

import (
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// blend makes dst a mix of a and b, both of dst's type: each struct
// field, map entry and list element comes from one of them, or, where
// both hold a struct, a blend of the two, so the two results share some
// subtrees and differ deep inside others.
func blend(rng *rand.Rand, dst, a, b reflect.Value) {
	pick := func() reflect.Value {
		if rng.IntN(2) == 0 {
			return a
		}
		return b
	}
	switch a.Kind() {
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !dst.Field(i).CanSet() {
				continue
			}
			blend(rng, dst.Field(i), a.Field(i), b.Field(i))
		}
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() || rng.IntN(3) == 0 {
			dst.Set(pick())
			return
		}
		p := reflect.New(a.Type().Elem())
		blend(rng, p.Elem(), a.Elem(), b.Elem())
		dst.Set(p)
	case reflect.Slice:
		if a.IsNil() || b.IsNil() || a.Type().Elem().Kind() == reflect.Uint8 || rng.IntN(3) == 0 {
			dst.Set(pick())
			return
		}
		// a's elements, one of them blended with b's first, some
		// dropped, b's appended.
		out := reflect.MakeSlice(a.Type(), 0, a.Len()+b.Len())
		for i := 0; i < a.Len(); i++ {
			switch rng.IntN(4) {
			case 0:
				continue
			case 1:
				if b.Len() > 0 {
					e := reflect.New(a.Type().Elem()).Elem()
					blend(rng, e, a.Index(i), b.Index(0))
					out = reflect.Append(out, e)
					continue
				}
			}
			out = reflect.Append(out, a.Index(i))
		}
		if rng.IntN(2) == 0 {
			out = reflect.AppendSlice(out, b)
		}
		dst.Set(out)
	case reflect.Map:
		if a.IsNil() || b.IsNil() || rng.IntN(3) == 0 {
			dst.Set(pick())
			return
		}
		out := reflect.MakeMap(a.Type())
		for _, m := range []reflect.Value{a, b} {
			it := m.MapRange()
			for it.Next() {
				if rng.IntN(3) > 0 {
					out.SetMapIndex(it.Key(), it.Value())
				}
			}
		}
		dst.Set(out)
	default:
		dst.Set(pick())
	}
}

// TestCompareTypedAgrees holds compareTyped to structured-merge-diff's
// comparison: random objects of every built-in kind, against blends of
// them with other random objects, and the other way round. Where it
// answers, every set must be the comparison's; it may decline, but not
// for most Pods.
func TestCompareTypedAgrees(t *testing.T) {
	s, _ := newTestServer(t)
	tc := builtinTypeConverter().(*fastTypeConverter)
	taken, declined := map[string]int{}, map[string]int{}
	skipped := 0
	for gvr, res := range s.reg.byGVR {
		if res.custom != nil || res.typeConverter() != builtinTypeConverter() {
			continue
		}
		shape, ok, err := tc.shape(res.gvk())
		if err != nil || !ok {
			continue // kinds without a schema (reviews) are never updated
		}
		for seed := int64(0); seed < 40; seed++ {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			a, b := randomObject(res, seed), randomObject(res, seed+1000)
			mixed := res.newObject()
			blend(rng, reflect.ValueOf(mixed).Elem(), reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem())
			if seed%4 == 0 {
				m, _ := metaOf(mixed)
				m.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate}})
			}
			for _, pair := range [][2]runtime.Object{{a, mixed}, {mixed, a}, {a, a.DeepCopyObject()}, {mixed, b}} {
				lt, err := tc.ObjectToTyped(pair[0], typed.AllowDuplicates)
				if err != nil {
					t.Fatal(err)
				}
				rt, err := tc.ObjectToTyped(pair[1], typed.AllowDuplicates)
				if err != nil {
					t.Fatal(err)
				}
				want, wantErr := lt.Compare(rt)
				got, ok := compareTyped(shape.schema, shape.typeRef, pair[0], pair[1], nil)
				if !ok {
					declined[gvr.Resource]++
					continue
				}
				taken[gvr.Resource]++
				if wantErr != nil {
					t.Fatalf("%s seed %d: compareTyped answered where the comparison fails: %v", gvr, seed, wantErr)
				}
				if !got.Added.Equals(want.Added) || !got.Modified.Equals(want.Modified) || !got.Removed.Equals(want.Removed) {
					t.Fatalf("%s seed %d:\ngot  %v\nwant %v", gvr, seed, got, want)
				}
				// Leaving out the top-level fields both hold equal
				// changes nothing.
				if equal := equalFields(pair[0], pair[1]); len(equal) > 0 {
					skipped++
					if got, ok := compareTyped(shape.schema, shape.typeRef, pair[0], pair[1], equal); !ok ||
						!got.Added.Equals(want.Added) || !got.Modified.Equals(want.Modified) || !got.Removed.Equals(want.Removed) {
						t.Fatalf("%s seed %d, without fields %v: %v\ngot  %v\nwant %v", gvr, seed, equal, ok, got, want)
					}
				}
			}
		}
	}
	var kinds []string
	for k := range taken {
		kinds = append(kinds, k)
	}
	for k := range declined {
		if taken[k] == 0 {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.Logf("%s: %d compared, %d left to structured-merge-diff", k, taken[k], declined[k])
	}
	if skipped < 1000 {
		t.Errorf("only %d comparisons left fields out", skipped)
	}
	if taken["pods"] < 3*declined["pods"] {
		t.Errorf("pods: %d compared, %d declined", taken["pods"], declined["pods"])
	}
}

// TestCompareTypedEdges holds compareTyped to structured-merge-diff's
// comparison where its rules are least obvious: null against empty (a
// leaf, modified), duplicate keys on one side or both, a key field left
// to its schema default, the object's own managedFields against a
// template's.
func TestCompareTypedEdges(t *testing.T) {
	tc := builtinTypeConverter().(*fastTypeConverter)
	pod := func(edit func(*corev1.Pod)) runtime.Object {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "i", Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}}}
		edit(p)
		return p
	}
	scaleIO := func(ref *corev1.LocalObjectReference) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{ScaleIO: &corev1.ScaleIOVolumeSource{System: "s", SecretRef: ref}}}}
		}
	}
	twice := func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) }
	udp := func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolUDP }
	tcp := func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolTCP }
	managed := func(p *corev1.Pod) {
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	}
	role := func(rules []rbacv1.PolicyRule) runtime.Object {
		return &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}, ObjectMeta: metav1.ObjectMeta{Name: "r"}, Rules: rules}
	}
	template := func(managed bool) runtime.Object {
		rs := &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"}, ObjectMeta: metav1.ObjectMeta{Name: "rs"}}
		if managed {
			rs.Spec.Template.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
		}
		return rs
	}
	for _, c := range []struct {
		name      string
		lhs, rhs  runtime.Object
		unchanged bool
	}{
		{name: "null against empty struct", lhs: pod(scaleIO(nil)), rhs: pod(scaleIO(&corev1.LocalObjectReference{}))},
		{name: "null against empty list", lhs: role(nil), rhs: role([]rbacv1.PolicyRule{})},
		{name: "duplicates appear", lhs: pod(func(*corev1.Pod) {}), rhs: pod(twice)},
		{name: "duplicates go", lhs: pod(twice), rhs: pod(func(*corev1.Pod) {})},
		{name: "duplicates change", lhs: pod(twice), rhs: pod(func(p *corev1.Pod) { twice(p); p.Spec.Containers[1].Image = "j" })},
		{name: "key default", lhs: pod(tcp), rhs: pod(udp)},
		{name: "key left to its default", lhs: pod(func(*corev1.Pod) {}), rhs: pod(tcp)},
		{name: "own managedFields", lhs: pod(func(*corev1.Pod) {}), rhs: pod(managed), unchanged: true},
		{name: "a template's managedFields", lhs: template(false), rhs: template(true)},
	} {
		shape, _, err := tc.shape(c.lhs.GetObjectKind().GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		lt, _ := tc.ObjectToTyped(c.lhs)
		rt, _ := tc.ObjectToTyped(c.rhs)
		want, err := lt.Compare(rt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, ok := compareTyped(shape.schema, shape.typeRef, c.lhs, c.rhs, nil)
		if !ok {
			t.Errorf("%s: declined", c.name)
			continue
		}
		if !got.Added.Equals(want.Added) || !got.Modified.Equals(want.Modified) || !got.Removed.Equals(want.Removed) {
			t.Errorf("%s:\ngot  %v\nwant %v", c.name, got, want)
		}
		if got.IsSame() != c.unchanged {
			t.Errorf("%s: %v, want a change: %v", c.name, got, !c.unchanged)
		}
	}
}

// statusWrite is a bound Pod and the status a kubelet writes for it
// once its container runs.
func statusWrite() (live, next *corev1.Pod) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	live = &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc-xyz", GenerateName: "web-abc-", Namespace: "default", UID: "1234", ResourceVersion: "100",
			CreationTimestamp: now, Labels: map[string]string{"app": "web", "pod-template-hash": "abc"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec: corev1.PodSpec{NodeName: "sim-1", Containers: []corev1.Container{{
			Name: "c", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: 80}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("10m")}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}}},
	}
	next = live.DeepCopy()
	next.ResourceVersion = "101"
	next.Status = corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable, PodIP: "10.42.0.9", HostIP: "10.0.0.1", StartTime: &now,
		HostIPs: []corev1.HostIP{{IP: "10.0.0.1"}}, PodIPs: []corev1.PodIP{{IP: "10.42.0.9"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Image: "busybox", ContainerID: "simulated://abc", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	return live, next
}

// TestCompareTypedStatusWrite checks the write the fast path is for: a
// kubelet's first status of a running Pod, compared by compareTyped
// itself, with the sets structured-merge-diff gives.
func TestCompareTypedStatusWrite(t *testing.T) {
	tc := builtinTypeConverter().(*fastTypeConverter)
	live, next := statusWrite()
	shape, _, err := tc.shape(live.GroupVersionKind())
	if err != nil {
		t.Fatal(err)
	}
	got, ok := compareTyped(shape.schema, shape.typeRef, live, next, equalFields(live, next))
	if !ok {
		t.Fatal("compareTyped declined a Pod's status write")
	}
	lt, _ := tc.ObjectToTyped(live)
	nt, _ := tc.ObjectToTyped(next)
	want, err := lt.Compare(nt)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Added.Equals(want.Added) || !got.Modified.Equals(want.Modified) || !got.Removed.Equals(want.Removed) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if got.Added.Empty() || got.Modified.Empty() {
		t.Fatalf("a status write with nothing added or modified: %v", got)
	}
}

func BenchmarkCompareStatusWrite(b *testing.B) {
	tc := builtinTypeConverter().(*fastTypeConverter)
	live, next := statusWrite()
	shape, _, _ := tc.shape(live.GroupVersionKind())
	b.Run("compareTyped", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, ok := compareTyped(shape.schema, shape.typeRef, live, next, equalFields(live, next)); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("structured-merge-diff", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			lt, _ := tc.ObjectToTyped(live)
			nt, _ := tc.ObjectToTyped(next)
			if _, err := lt.Compare(nt); err != nil {
				b.Fatal(err)
			}
		}
	})
}
