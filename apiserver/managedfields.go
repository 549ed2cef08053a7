package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
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
		return r.custom.TypeConverter()
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

// resetFilter leaves out of a write's managedFields the fields the
// strategy resets on that subresource, as kube-apiserver's strategies'
// GetResetFields do: a built-in kind with a status subresource keeps its
// status on writes of the main resource, so no writer of the main
// resource owns it. nil when nothing is reset (status writes keep the
// spec by copying it from the stored object before the field manager
// runs). Custom resources are left as they were.
func (r *resource) resetFilter(subresource string) fieldpath.Filter {
	if subresource != "" || r.custom != nil || !r.hasSubresource("status") {
		return nil
	}
	return statusReset
}

var statusReset = fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie("status")))

// resetFields is resetFilter as the field manager takes it.
func (r *resource) resetFields(subresource string) map[fieldpath.APIVersion]fieldpath.Filter {
	f := r.resetFilter(subresource)
	if f == nil {
		return nil
	}
	return map[fieldpath.APIVersion]fieldpath.Filter{fieldpath.APIVersion(r.gvk().GroupVersion().String()): f}
}

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
	if empty == nil || holdsEmptyList(reflect.ValueOf(obj)) {
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
	if reset := r.resetFilter(""); reset != nil {
		set = reset.Filter(set)
	}
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

// equalFields are the top-level fields (spec, data, ...) a built-in
// object's update left exactly as they were, by index; metadata always
// counts as changed. The field manager finds nothing added, changed or
// removed in a field both sides hold equal, and nothing in a field
// neither holds, so it records the same managedFields without them,
// without converting and comparing what did not change: a Pod's spec in
// every status write of its kubelet was most of the API server's CPU
// for those writes.
func equalFields(live, obj runtime.Object) []int {
	lv, nv := reflect.ValueOf(live), reflect.ValueOf(obj)
	if lv.Kind() != reflect.Pointer || lv.Type() != nv.Type() || lv.Elem().Kind() != reflect.Struct {
		return nil
	}
	lv, nv = lv.Elem(), nv.Elem()
	t := lv.Type()
	var equal []int
	for i := 0; i < t.NumField(); i++ {
		switch f := t.Field(i); {
		case f.Type == typeMetaType || f.Type == objectMetaType || !f.IsExported():
		case reflect.DeepEqual(lv.Field(i).Addr().Interface(), nv.Field(i).Addr().Interface()):
			equal = append(equal, i)
		}
	}
	return equal
}

// withoutFields are shallow copies of live and obj without the fields
// drop (equalFields'), for the field manager; ok is false when there are
// none.
func withoutFields(live, obj runtime.Object, drop []int) (pl, pn runtime.Object, ok bool) {
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

// jsonNames are the names the fields of struct type t at indices have
// in JSON.
func jsonNames(t reflect.Type, indices []int) []string {
	names := make([]string, 0, len(indices))
	for _, i := range indices {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
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
	s, ok, err := c.shape(obj.GetObjectKind().GroupVersionKind())
	if err != nil {
		return nil, err
	}
	if !ok {
		return c.TypeConverter.ObjectToTyped(obj, opts...)
	}
	v, err := smdvalue.NewValueReflect(withoutManagedFields(obj))
	if err != nil {
		return nil, err
	}
	return typed.AsTypedUnvalidated(v, s.schema, s.typeRef), nil
}

// shape is the schema of the typed values of kind gvk, false if gvk is
// not a Go type of the scheme.
func (c *fastTypeConverter) shape(gvk kschema.GroupVersionKind) (typedShape, bool, error) {
	if shape, ok := c.shapes.Load(gvk); ok {
		return shape.(typedShape), true, nil
	}
	// The kind's schema, from a checked conversion of an empty object.
	empty, err := scheme.Scheme.New(gvk)
	if err != nil {
		return typedShape{}, false, nil
	}
	empty.GetObjectKind().SetGroupVersionKind(gvk)
	tv, err := c.TypeConverter.ObjectToTyped(empty)
	if err != nil {
		return typedShape{}, false, err
	}
	shape, _ := c.shapes.LoadOrStore(gvk, typedShape{schema: tv.Schema(), typeRef: tv.TypeRef()})
	return shape.(typedShape), true, nil
}

// withoutManagedFields is obj, or a shallow copy of it without
// metadata.managedFields when it has some.
func withoutManagedFields(obj runtime.Object) runtime.Object {
	if m, err := metaOf(obj); err == nil && len(m.GetManagedFields()) > 0 {
		if cp := shallowCopy(obj); cp != nil {
			if cm, err := metaOf(cp); err == nil {
				cm.SetManagedFields(nil)
				return cp
			}
		}
	}
	return obj
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
	// peers convert between a kind and the kind shown as it
	// (autoscaling/v1 and v2 HorizontalPodAutoscalers), which the
	// scheme cannot: the managedFields of one object hold entries of
	// both versions.
	peers []peerConversion
}

// peerConversion converts objects of kind from to kind to.
type peerConversion struct {
	from, to kschema.GroupVersionKind
	convert  func(runtime.Object) runtime.Object
}

// peerConversions are the conversions between r and the resources that
// share its objects: its storage, or those shown as it.
func (r *resource) peerConversions() []peerConversion {
	var out []peerConversion
	if s := r.storage; s != nil {
		out = append(out, peerConversion{r.gvk(), s.gvk(), r.toStorage}, peerConversion{s.gvk(), r.gvk(), r.fromStorage})
	}
	for _, v := range r.shownAs {
		out = append(out, peerConversion{r.gvk(), v.gvk(), v.fromStorage}, peerConversion{v.gvk(), r.gvk(), v.toStorage})
	}
	return out
}

func (c sameVersion) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	if _, unstructured := in.(runtime.Unstructured); unstructured {
		return c.ObjectConvertor.ConvertToVersion(in, gv) // to a typed object
	}
	if gvk := in.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		if target, ok := gv.KindForGroupVersionKinds([]kschema.GroupVersionKind{gvk}); ok && target == gvk {
			return in, nil
		}
		for _, p := range c.peers {
			if target, ok := gv.KindForGroupVersionKinds([]kschema.GroupVersionKind{p.to}); ok && p.from == gvk && target == p.to {
				out := p.convert(in)
				out.GetObjectKind().SetGroupVersionKind(p.to)
				return out, nil
			}
		}
	}
	return c.ObjectConvertor.ConvertToVersion(in, gv)
}

// keepValidManagedFields puts back the managedFields recorded before
// mutating admission when admission (a webhook's patch) left them
// invalid, with kube-apiserver's warning; valid ones a webhook wrote
// stay, as there.
func keepValidManagedFields(ctx context.Context, m metav1.Object, before []metav1.ManagedFieldsEntry) {
	after := m.GetManagedFields()
	if sameEntries(after, before) {
		return // the field manager's own, untouched
	}
	if err := managedfields.ValidateManagedFields(after); err != nil {
		m.SetManagedFields(before)
		addWarningTo(ctx, fmt.Sprintf(".metadata.managedFields was in an invalid state after admission; this could be caused by an outdated mutating admission controller; please fix your requests: %v", err))
	}
}

// holdsEmptyList says whether v holds an empty, non-nil list in a field
// that is not omitted when empty (a Role's "rules": [], say). The field
// manager's comparison records such a list as a field added, but a typed
// value's field set has no path for it, so recordCreated leaves those
// objects to the field manager. Types that cannot hold one are known
// after their first look.
func holdsEmptyList(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && holdsEmptyList(v.Elem())
	case reflect.Struct:
		for _, f := range listFieldsOf(v.Type()) {
			fv := v.Field(f.index)
			if f.list && !f.omitEmpty && !fv.IsNil() && fv.Len() == 0 {
				return true
			}
			if holdsEmptyList(fv) {
				return true
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 || !mayHoldList(v.Type().Elem()) {
			return false
		}
		for i := 0; i < v.Len(); i++ {
			if holdsEmptyList(v.Index(i)) {
				return true
			}
		}
	case reflect.Map:
		if !mayHoldList(v.Type().Elem()) {
			return false
		}
		for it := v.MapRange(); it.Next(); {
			if holdsEmptyList(it.Value()) {
				return true
			}
		}
	}
	return false
}

// listField is a struct field that is, or may hold, a list.
type listField struct {
	index           int
	list, omitEmpty bool
}

var listFields sync.Map // reflect.Type -> []listField

// listFieldsOf are the exported fields of struct type t that may hold a
// list ([]byte is a string to the schema, not a list).
func listFieldsOf(t reflect.Type) []listField {
	if fs, ok := listFields.Load(t); ok {
		return fs.([]listField)
	}
	var fs []listField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" || !mayHoldList(f.Type) {
			continue
		}
		fs = append(fs, listField{
			index:     i,
			list:      f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() != reflect.Uint8,
			omitEmpty: strings.Contains(tag, ",omitempty"),
		})
	}
	fs2, _ := listFields.LoadOrStore(t, fs)
	return fs2.([]listField)
}

var mayHold sync.Map // reflect.Type -> bool

// mayHoldList says whether a value of type t can be or contain a list.
func mayHoldList(t reflect.Type) bool {
	if b, ok := mayHold.Load(t); ok {
		return b.(bool)
	}
	mayHold.Store(t, true) // a recursive type: assume it may, while looking
	var b bool
	switch t.Kind() {
	case reflect.Pointer, reflect.Map:
		b = mayHoldList(t.Elem())
	case reflect.Slice:
		b = t.Elem().Kind() != reflect.Uint8
	case reflect.Interface:
		b = true
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.IsExported() && mayHoldList(f.Type) {
				b = true
				break
			}
		}
	}
	mayHold.Store(t, b)
	return b
}

// sameEntries says whether two lists of managedFields entries are the
// same, entry for entry.
func sameEntries(a, b []metav1.ManagedFieldsEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Manager != y.Manager || x.Operation != y.Operation || x.APIVersion != y.APIVersion ||
			x.Subresource != y.Subresource || x.FieldsType != y.FieldsType ||
			(x.Time == nil) != (y.Time == nil) || (x.Time != nil && !x.Time.Equal(y.Time)) ||
			(x.FieldsV1 == nil) != (y.FieldsV1 == nil) || (x.FieldsV1 != nil && !bytes.Equal(x.FieldsV1.Raw, y.FieldsV1.Raw)) {
			return false
		}
	}
	return true
}
