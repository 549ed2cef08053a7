package apiserver

import (
	"reflect"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// strategy holds one kind's rules: what a client may set, defaults, and
// validation. The generic handlers call it; it never touches the store.
type strategy interface {
	// prepareForCreate clears what clients may not set on create (status,
	// mostly) and applies defaults.
	prepareForCreate(w *writeCtx, obj runtime.Object) error
	// prepareForUpdate carries over what an update of the main resource
	// may not change (status) and applies defaults.
	prepareForUpdate(w *writeCtx, obj, old runtime.Object) error
	validate(w *writeCtx, obj runtime.Object) field.ErrorList
	validateUpdate(w *writeCtx, obj, old runtime.Object) field.ErrorList
	// tracksGeneration: metadata.generation starts at 1 and grows with
	// every spec change.
	tracksGeneration() bool
}

// writeCtx is what a strategy may consult about the write in progress.
type writeCtx struct {
	s      *Server
	res    *resource
	dryRun bool
	// generatedName: the object's name was made from its generateName
	// by this request.
	generatedName bool
	// stored is the stored encoding of the object an update replaces,
	// when the request read it: the no-op check compares with it rather
	// than encoding the old object again.
	stored []byte
	// requestSpec, set when a status write was decoded without its spec,
	// decodes the spec into the request's object for admission that
	// reads the whole of it.
	requestSpec func() error
	// undo gives back what the strategy took in the store for this write
	// (a Service's cluster IP and node ports) if the write fails; release
	// gives back what the stored object no longer holds once it is stored.
	undo, release []func() error
}

// onFailure registers an undo step; a dry run takes nothing to undo.
func (w *writeCtx) onFailure(f func() error) {
	if !w.dryRun {
		w.undo = append(w.undo, f)
	}
}
func (w *writeCtx) onSuccess(f func() error) { w.release = append(w.release, f) }

// finish runs the undo or the release steps of a write that failed or
// was stored. A step that fails leaves a record the repair loop frees.
func (w *writeCtx) finish(stored bool) {
	steps := w.undo
	if stored {
		steps = w.release
	}
	for _, f := range steps {
		if err := f(); err != nil {
			w.s.log.Warn("service allocation not given back; the repair loop will", "resource", w.res.gvr.Resource, "err", err)
		}
	}
	w.undo, w.release = nil, nil
}

// defaultStrategy suits kinds without rules of their own: status (if any)
// is reset on create and kept on update of the main resource.
type defaultStrategy struct{}

func (defaultStrategy) prepareForCreate(w *writeCtx, obj runtime.Object) error {
	if w.res.hasSubresource("status") {
		resetField(obj, "Status")
	}
	return nil
}

func (defaultStrategy) prepareForUpdate(w *writeCtx, obj, old runtime.Object) error {
	if w.res.hasSubresource("status") {
		copyField(obj, old, "Status")
	}
	return nil
}

func (defaultStrategy) validate(*writeCtx, runtime.Object) field.ErrorList { return nil }
func (defaultStrategy) validateUpdate(*writeCtx, runtime.Object, runtime.Object) field.ErrorList {
	return nil
}
func (defaultStrategy) tracksGeneration() bool { return false }

// generationStrategy is defaultStrategy for kinds whose generation counts
// spec changes.
type generationStrategy struct{ defaultStrategy }

func (generationStrategy) tracksGeneration() bool { return true }

// structField returns obj's exported field name, if obj is a pointer to a
// struct that has it.
func structField(obj runtime.Object, name string) (reflect.Value, bool) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	f := v.Elem().FieldByName(name)
	return f, f.IsValid() && f.CanSet()
}

// jsonField is a struct field's name in the JSON of an unstructured
// object ("Status" → "status").
func jsonField(name string) string { return strings.ToLower(name[:1]) + name[1:] }

func resetField(obj runtime.Object, name string) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		delete(u.Object, jsonField(name))
		return
	}
	if f, ok := structField(obj, name); ok {
		f.Set(reflect.Zero(f.Type()))
	}
}

func copyField(dst, src runtime.Object, name string) {
	if du, ok := dst.(*unstructured.Unstructured); ok {
		k := jsonField(name)
		if v, ok := src.(*unstructured.Unstructured).Object[k]; ok {
			du.Object[k] = runtime.DeepCopyJSONValue(v)
		} else {
			delete(du.Object, k)
		}
		return
	}
	d, ok1 := structField(dst, name)
	s, ok2 := structField(src, name)
	if ok1 && ok2 {
		d.Set(s)
	}
}

// specChanged reports whether obj's Spec differs from old's; kinds without a
// Spec compare everything but metadata and status.
func specChanged(obj, old runtime.Object) bool {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return customSpecChanged(u, old.(*unstructured.Unstructured))
	}
	a, ok1 := structField(obj, "Spec")
	b, ok2 := structField(old, "Spec")
	if ok1 && ok2 {
		return !apiequality.Semantic.DeepEqual(a.Interface(), b.Interface())
	}
	return false
}

// resetMetaForStatus keeps what a status write may not change, as
// kube-apiserver's ResetObjectMetaForStatus does.
func resetMetaForStatus(m, old metav1.Object) {
	m.SetDeletionTimestamp(old.GetDeletionTimestamp())
	m.SetGeneration(old.GetGeneration())
	m.SetLabels(old.GetLabels())
	m.SetAnnotations(old.GetAnnotations())
	m.SetFinalizers(old.GetFinalizers())
	m.SetOwnerReferences(old.GetOwnerReferences())
}
