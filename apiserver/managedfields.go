package apiserver

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
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
