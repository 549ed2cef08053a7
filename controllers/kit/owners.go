package kit

import (
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// object is what an owner is: a metav1.Object that can be told from the
// zero value (a pointer to an API type).
type object interface {
	comparable
	metav1.Object
}

// ResolveControllerRef is the owner ref names when ref is of kind and get
// (a lister's, of the object's namespace) has it with ref's UID; the zero
// T otherwise, nil ref included. A reference to an owner deleted and
// created again under the same name resolves to nothing, as upstream's
// resolveControllerRef.
func ResolveControllerRef[T object](ref *metav1.OwnerReference, kind schema.GroupVersionKind, get func(name string) (T, error)) T {
	var none T
	if ref == nil || ref.Kind != kind.Kind || ref.APIVersion != kind.GroupVersion().String() {
		return none
	}
	owner, err := get(ref.Name)
	if err != nil || owner.GetUID() != ref.UID {
		return none
	}
	return owner
}

// Selecting are the owners whose selector picks an object labelled lbls:
// those that may adopt it when it is an orphan. An owner whose selector is
// invalid or empty picks nothing.
func Selecting[T any](owners []T, selector func(T) *metav1.LabelSelector, lbls map[string]string) []T {
	var out []T
	for _, o := range owners {
		sel, err := metav1.LabelSelectorAsSelector(selector(o))
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(lbls)) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// WakeOwners wakes the owners of kind T that an update of an object from
// old to cur concerns, as upstream's update handlers do: the controller it
// had, when its controller changed; the controller it has, which it
// returns; or, when it has none and its labels or its controller changed,
// every owner that may adopt it. owner resolves an object's controller
// (ResolveControllerRef through a lister), adopters are the owners whose
// selector picks it (Selecting). A resync, which changed nothing, wakes
// nobody.
func WakeOwners[T object](old, cur metav1.Object, owner func(metav1.Object) T, adopters func(metav1.Object) []T, wake func(T)) T {
	var none T
	if old.GetResourceVersion() == cur.GetResourceVersion() {
		return none
	}
	oldRef, curRef := metav1.GetControllerOfNoCopy(old), metav1.GetControllerOfNoCopy(cur)
	refChanged := !reflect.DeepEqual(oldRef, curRef)
	if refChanged && oldRef != nil {
		if o := owner(old); o != none {
			wake(o)
		}
	}
	if curRef != nil {
		o := owner(cur)
		if o != none {
			wake(o)
		}
		return o
	}
	if refChanged || !reflect.DeepEqual(old.GetLabels(), cur.GetLabels()) {
		for _, o := range adopters(cur) {
			wake(o)
		}
	}
	return none
}

// ControllerIndex indexes an informer's objects by their controller's
// UID, and orphans by their namespace, so that a sync reads only the
// objects its owner may claim rather than its whole namespace.
const ControllerIndex = "bonsai.dev/controller-uid"

// AddControllerIndex adds ControllerIndex to inf unless it has it already
// (another controller of the process asked first).
func AddControllerIndex(inf cache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[ControllerIndex]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{ControllerIndex: func(obj any) ([]string, error) {
		m, ok := obj.(metav1.Object)
		if !ok {
			return nil, nil
		}
		if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
			return []string{string(ref.UID)}, nil
		}
		return []string{orphanKey(m.GetNamespace())}, nil
	}})
}

func orphanKey(namespace string) string { return "orphan/" + namespace }

// ControlledBy are the objects of inf (indexed by AddControllerIndex)
// whose controller has uid.
func ControlledBy[T any](inf cache.SharedIndexInformer, uid string) []T {
	return indexed[T](inf, uid)
}

// Orphans are the objects of inf (indexed by AddControllerIndex) in
// namespace that have no controller.
func Orphans[T any](inf cache.SharedIndexInformer, namespace string) []T {
	return indexed[T](inf, orphanKey(namespace))
}

func indexed[T any](inf cache.SharedIndexInformer, key string) []T {
	objs, _ := inf.GetIndexer().ByIndex(ControllerIndex, key)
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// Unwrap is an informer handler's object as a T, a tombstone's
// (cache.DeletedFinalStateUnknown, a delete the informer missed)
// included; false when it is not a T.
func Unwrap[T any](obj any) (T, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	t, ok := obj.(T)
	return t, ok
}
