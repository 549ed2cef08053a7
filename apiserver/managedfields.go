package apiserver

import (
	"reflect"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	smdvalue "sigs.k8s.io/structured-merge-diff/v6/value"
)

// typeConverter is the schema the resource's field managers work with.
func (r *resource) typeConverter() managedfields.TypeConverter {
	if r.custom != nil {
		return r.custom.typeConverter()
	}
	if group, ok := groupTypeConverters[r.gvr.Group]; ok {
		return group()
	}
	return builtinTypeConverter()
}

// neverManaged are the fields kube-apiserver's field manager leaves out of
// every managedFields entry.
var neverManaged = fieldpath.NewSet(
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
	fieldpath.MakePathOrDie("metadata", "selfLink"),
	fieldpath.MakePathOrDie("metadata", "uid"),
	fieldpath.MakePathOrDie("metadata", "clusterName"),
	fieldpath.MakePathOrDie("metadata", "generation"),
	fieldpath.MakePathOrDie("metadata", "managedFields"),
	fieldpath.MakePathOrDie("metadata", "resourceVersion"),
)

// emptyFields are the managed-able fields an empty object of the kind
// already has (a Pod's spec.containers: null, say), nil when its schema
// cannot say.
type emptyFields struct {
	once sync.Once
	set  *fieldpath.Set
}

func (r *resource) emptyObjectFields() *fieldpath.Set {
	r.empty.once.Do(func() {
		obj := r.newObject()
		obj.GetObjectKind().SetGroupVersionKind(r.gvk())
		if tv, err := r.typeConverter().ObjectToTyped(obj, typed.AllowDuplicates); err == nil {
			if leaves, err := tv.ToFieldSet(); err == nil {
				r.empty.set = withAncestors(leaves).Difference(neverManaged)
			}
		}
	})
	return r.empty.set
}

// recordCreated sets the managedFields of a new built-in object created
// by manager without the full field manager, when the answer is plain:
// the object brings no managedFields of its own and shares no field with
// an empty object of its kind. The field manager would then compare it
// with that empty object and find every field it sets added, which is
// the object's field set. It says false, having changed nothing, when
// the field manager must decide. (The comparison and the type conversion
// of the empty object were a sixth of the API server's CPU in a burst of
// ConfigMap creates.)
func (r *resource) recordCreated(obj runtime.Object, manager string) bool {
	if r.custom != nil {
		return false
	}
	m, err := metaOf(obj)
	if err != nil || len(m.GetManagedFields()) > 0 {
		return false
	}
	empty := r.emptyObjectFields()
	if empty == nil {
		return false
	}
	tv, err := r.typeConverter().ObjectToTyped(obj, typed.AllowDuplicates)
	if err != nil {
		return false
	}
	leaves, err := tv.ToFieldSet()
	if err != nil {
		return false
	}
	// The comparison records every node on the way to an added leaf...
	set := withAncestors(leaves).Difference(neverManaged)
	// ...but a node the empty object has too is no addition. That is
	// plain only for an empty container there (a Lease's spec: {}) that
	// holds fields here: those are all added, the container is not. A
	// leaf both have may be equal or not: the field manager decides.
	shared := set.Intersection(empty)
	if !shared.Empty() {
		plain := true
		shared.Iterate(func(p fieldpath.Path) {
			if leaves.Has(p) || hasDescendant(empty, p) {
				plain = false
			}
		})
		if !plain {
			return false
		}
		set = set.Difference(shared)
	}
	if set.Empty() {
		return true // an entry without fields is dropped
	}
	raw, err := set.ToJSON()
	if err != nil {
		return false
	}
	m.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager:    manager,
		Operation:  metav1.ManagedFieldsOperationUpdate,
		APIVersion: r.gvk().GroupVersion().String(),
		Time:       &metav1.Time{Time: time.Now().UTC()},
		FieldsType: "FieldsV1",
		FieldsV1:   &metav1.FieldsV1{Raw: raw},
	}})
	return true
}

// withAncestors is leaves with every node on the way to each of them:
// the paths the field manager's comparison records for fields added.
func withAncestors(leaves *fieldpath.Set) *fieldpath.Set {
	set := fieldpath.NewSet()
	leaves.Iterate(func(p fieldpath.Path) {
		for i := 1; i <= len(p); i++ {
			set.Insert(p[:i])
		}
	})
	return set
}

// hasDescendant says whether set holds a path below p.
func hasDescendant(set *fieldpath.Set, p fieldpath.Path) bool {
	found := false
	set.Iterate(func(q fieldpath.Path) {
		if len(q) > len(p) && q[:len(p)].Equals(p) {
			found = true
		}
	})
	return found
}

// withoutEqualFields are shallow copies of a built-in object before and
// after an update, without the top-level fields (spec, data, ...) the
// update left exactly as they were; metadata always stays. The field
// manager finds nothing added, changed or removed in a field both sides
// hold equal, and nothing in a field neither holds, so it records the
// same managedFields for the copies as for the whole objects, without
// converting and comparing what did not change: a Pod's spec in every
// status write of its kubelet was most of the API server's CPU for
// those writes. ok is false when no such field can be dropped.
func withoutEqualFields(live, obj runtime.Object) (pl, pn runtime.Object, ok bool) {
	lv, nv := reflect.ValueOf(live), reflect.ValueOf(obj)
	if lv.Kind() != reflect.Pointer || lv.Type() != nv.Type() || lv.Elem().Kind() != reflect.Struct {
		return nil, nil, false
	}
	lv, nv = lv.Elem(), nv.Elem()
	t := lv.Type()
	var drop []int
	for i := 0; i < t.NumField(); i++ {
		switch f := t.Field(i); {
		case f.Type == typeMetaType || f.Type == objectMetaType || !f.IsExported():
		case reflect.DeepEqual(lv.Field(i).Addr().Interface(), nv.Field(i).Addr().Interface()):
			drop = append(drop, i)
		}
	}
	if len(drop) == 0 {
		return nil, nil, false
	}
	pl, pn = shallowCopy(live), shallowCopy(obj)
	if pl == nil || pn == nil {
		return nil, nil, false
	}
	lc, nc := reflect.ValueOf(pl).Elem(), reflect.ValueOf(pn).Elem()
	for _, i := range drop {
		lc.Field(i).SetZero()
		nc.Field(i).SetZero()
	}
	return pl, pn, true
}

var (
	typeMetaType   = reflect.TypeFor[metav1.TypeMeta]()
	objectMetaType = reflect.TypeFor[metav1.ObjectMeta]()
)

// copyManagedFields gives to the managedFields from.
func copyManagedFields(from, to runtime.Object) error {
	fm, err := metaOf(from)
	if err != nil {
		return err
	}
	tm, err := metaOf(to)
	if err != nil {
		return err
	}
	tm.SetManagedFields(fm.GetManagedFields())
	return nil
}

// fastTypeConverter is the field manager's type converter for objects of
// Go types, without two costs that change nothing in what it records:
//   - checking the value against the schema: a Go type cannot hold what
//     its schema forbids, and every caller allows duplicates anyway
//     (unstructured objects, server-side apply's patches among them,
//     are still checked);
//   - metadata.managedFields, which the comparison would parse from JSON
//     every time, while the field manager never records them as owned:
//     the entries come from the object's accessor, not its value.
//
// A status write of a Pod spent two thirds of its field-manager time in
// those two.
type fastTypeConverter struct {
	managedfields.TypeConverter
	shapes sync.Map // schema.GroupVersionKind -> typedShape
}

type typedShape struct {
	schema  *schema.Schema
	typeRef schema.TypeRef
}

func (c *fastTypeConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if _, ok := obj.(*unstructured.Unstructured); ok {
		return c.TypeConverter.ObjectToTyped(obj, opts...)
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	shape, ok := c.shapes.Load(gvk)
	if !ok {
		// The kind's schema, from a checked conversion of an empty object.
		empty, err := scheme.Scheme.New(gvk)
		if err != nil {
			return c.TypeConverter.ObjectToTyped(obj, opts...)
		}
		empty.GetObjectKind().SetGroupVersionKind(gvk)
		tv, err := c.TypeConverter.ObjectToTyped(empty, opts...)
		if err != nil {
			return nil, err
		}
		shape, _ = c.shapes.LoadOrStore(gvk, typedShape{schema: tv.Schema(), typeRef: tv.TypeRef()})
	}
	if m, err := metaOf(obj); err == nil && len(m.GetManagedFields()) > 0 {
		if cp := shallowCopy(obj); cp != nil {
			if cm, err := metaOf(cp); err == nil {
				cm.SetManagedFields(nil)
				obj = cp
			}
		}
	}
	v, err := smdvalue.NewValueReflect(obj)
	if err != nil {
		return nil, err
	}
	s := shape.(typedShape)
	return typed.AsTypedUnvalidated(v, s.schema, s.typeRef), nil
}

// shallowCopy is a copy of the struct obj points to, sharing everything
// it refers to; nil when obj is not a pointer to a struct.
func shallowCopy(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	out, _ := c.Interface().(runtime.Object)
	return out
}

// sameVersion gives the field manager a typed object already of the
// version it converts to as it is, where the scheme deep-copies it: a
// built-in kind has no other version here, and the field manager only
// reads what it converts (into typed values) or converts what it made
// itself.
// Every update copied the old and the new object twice for nothing.
type sameVersion struct {
	runtime.ObjectConvertor
}

func (c sameVersion) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	if _, unstructured := in.(runtime.Unstructured); unstructured {
		return c.ObjectConvertor.ConvertToVersion(in, gv) // to a typed object
	}
	if gvk := in.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		if target, ok := gv.KindForGroupVersionKinds([]kschema.GroupVersionKind{gvk}); ok && target == gvk {
			return in, nil
		}
	}
	return c.ObjectConvertor.ConvertToVersion(in, gv)
}
