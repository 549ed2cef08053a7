package apiserver

import (
	"reflect"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"
)

// TestCreateShortcutAgreesWithTheFieldManager: for random objects of every
// built-in kind, when recordCreated takes a create's managedFields into
// its own hands it records exactly what kube-apiserver's field manager
// records, and when it declines it leaves the object alone.
func TestCreateShortcutAgreesWithTheFieldManager(t *testing.T) {
	s, _ := newTestServer(t)
	var names []string
	for gvr, r := range s.reg.byGVR {
		if r.custom == nil {
			names = append(names, gvr.String())
		}
	}
	sort.Strings(names)
	taken := map[string]int{}
	for _, name := range names {
		var res *resource
		for gvr, r := range s.reg.byGVR {
			if gvr.String() == name {
				res = r
			}
		}
		fm, err := res.fieldManager("")
		if err != nil {
			t.Fatal(err)
		}
		for seed := int64(0); seed < 30; seed++ {
			f := randfill.NewWithSeed(seed).NilChance(0.6).NumElements(0, 2).MaxDepth(6).Funcs(
				func(r *runtime.RawExtension, c randfill.Continue) {
					if c.Bool() {
						r.Raw = []byte(`{"k":"v"}`)
					}
				})
			obj := res.newObject()
			if seed > 0 {
				f.Fill(obj)
			}
			m, err := metaOf(obj)
			if err != nil {
				t.Fatal(err)
			}
			m.SetManagedFields(nil)
			m.SetName("x")
			obj.GetObjectKind().SetGroupVersionKind(res.gvk())
			fast := obj.DeepCopyObject()
			if !res.recordCreated(fast, "tester") {
				if !cmp.Equal(fast, obj, cmp.Exporter(func(reflect.Type) bool { return true })) {
					t.Fatalf("%s seed %d: declined but changed the object", name, seed)
				}
				continue
			}
			taken[name]++
			live := res.newObject()
			live.GetObjectKind().SetGroupVersionKind(res.gvk())
			slow := fm.UpdateNoErrors(live, obj.DeepCopyObject(), "tester")
			if diff := cmp.Diff(managedFieldsOf(t, slow), managedFieldsOf(t, fast)); diff != "" {
				t.Fatalf("%s seed %d: field manager vs shortcut:\n%s", name, seed, diff)
			}
		}
	}
	for _, must := range []string{"/v1, Resource=configmaps", "/v1, Resource=secrets", "coordination.k8s.io/v1, Resource=leases", "/v1, Resource=namespaces"} {
		if taken[must] == 0 {
			t.Errorf("the shortcut never served %s", must)
		}
	}
	t.Logf("shortcut taken: %v", taken)
}

// managedFieldsOf is obj's managedFields without their times.
func managedFieldsOf(t *testing.T, obj runtime.Object) []metav1.ManagedFieldsEntry {
	m, err := metaOf(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]metav1.ManagedFieldsEntry(nil), m.GetManagedFields()...)
	for i := range out {
		out[i].Time = nil
	}
	return out
}
