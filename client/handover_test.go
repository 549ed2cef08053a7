package client

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/randfill"
)

// scribble changes, in place, every string, number and map value v
// reaches.
func scribble(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			scribble(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				scribble(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			scribble(v.Index(i))
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			e := reflect.New(it.Value().Type()).Elem()
			e.Set(it.Value())
			scribble(e)
			v.SetMapIndex(it.Key(), e)
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(v.String() + "!")
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		if v.CanSet() {
			v.SetInt(v.Int() + 1)
		}
	}
}

// TestCacheCopy checks an informer's copy of a handed-over object, for
// the kinds copied field by field and for the others: everything but
// managedFields and the kind, sharing nothing with the server's object.
func TestCacheCopy(t *testing.T) {
	for seed := int64(0); seed < 50; seed++ {
		f := randfill.NewWithSeed(seed).NilChance(0.2).NumElements(1, 2).MaxDepth(6)
		for _, obj := range []runtime.Object{&corev1.Pod{}, &metav1.PartialObjectMetadata{}, &corev1.ConfigMap{}, &corev1.Node{}} {
			f.Fill(obj)
			m, _ := meta.Accessor(obj)
			m.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{}`)}}})
			obj.GetObjectKind().SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Kind"))
			server := obj.DeepCopyObject()

			got := cacheCopy(obj)
			want := obj.DeepCopyObject()
			wm, _ := meta.Accessor(want)
			wm.SetManagedFields(nil)
			want.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			if !apiequality.Semantic.DeepEqual(got, want) {
				t.Fatalf("seed %d %T: (-want +got)\n%s", seed, obj, cmp.Diff(want, got, cmpopts.EquateEmpty(), cmp.Exporter(func(reflect.Type) bool { return true })))
			}
			// The copy is the informer's own: changing every string and
			// number in it, in place, leaves the server's object as it
			// was.
			scribble(reflect.ValueOf(got))
			if !apiequality.Semantic.DeepEqual(obj, server) {
				t.Fatalf("seed %d %T: changing the copy changed the server's object", seed, obj)
			}
		}
	}
}
