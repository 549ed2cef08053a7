// Package registry is the contract between the API server's generic
// handlers and the kinds they serve: a Kind describes one served
// resource (its names, scope, subresources, strategy, defaults, table
// columns and field selectors), a Strategy holds the kind's rules, and a
// WriteCtx is all a strategy learns of the write in progress.
//
// The rule: kind K of group G is defined, defaulted, validated, printed
// and made selectable in apiserver/registry/G/ (the core group's in
// registry/core), whose Kinds() returns its rows of the table of served
// kinds; apiserver/resources.go assembles them. Neither this package nor
// a group's may import the API server: a strategy gets what it may use
// through the WriteCtx (the Service allocator behind a small interface,
// the service ranges, the reserved host ports), never the server, and the
// compiler keeps it so.
package registry

import (
	"reflect"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Strategy holds one kind's rules: what a client may set, defaults, and
// validation. The generic handlers call it; it never touches the store.
type Strategy interface {
	// PrepareForCreate clears what clients may not set on create (status,
	// mostly) and applies defaults.
	PrepareForCreate(w *WriteCtx, obj runtime.Object) error
	// PrepareForUpdate carries over what an update of the main resource
	// may not change (status) and applies defaults.
	PrepareForUpdate(w *WriteCtx, obj, old runtime.Object) error
	Validate(w *WriteCtx, obj runtime.Object) field.ErrorList
	ValidateUpdate(w *WriteCtx, obj, old runtime.Object) field.ErrorList
	// TracksGeneration: metadata.generation starts at 1 and grows with
	// every spec change.
	TracksGeneration() bool
}

// StatusPreparer is implemented by kinds with rules for status writes.
type StatusPreparer interface {
	PrepareForStatusUpdate(w *WriteCtx, obj, old runtime.Object) error
}

// StatusValidator is implemented by kinds whose status writes are
// validated (a custom object's status against its schema).
type StatusValidator interface {
	ValidateStatusUpdate(w *WriteCtx, obj, old runtime.Object) field.ErrorList
}

// ApprovalStrategy is implemented by kinds with an approval subresource
// (CertificateSigningRequests): an approval write keeps old but for what
// PrepareForApprovalUpdate takes from the request's object, and is
// validated by ValidateApprovalUpdate.
type ApprovalStrategy interface {
	PrepareForApprovalUpdate(w *WriteCtx, obj, old runtime.Object) runtime.Object
	ValidateApprovalUpdate(w *WriteCtx, obj, old runtime.Object) field.ErrorList
}

// StatusAnnotationsWriter is implemented by kinds whose status writes may
// change annotations too, as kube-apiserver's status strategies for them
// allow: the Deployment controller records a rollout's revision on the
// Deployment that way.
type StatusAnnotationsWriter interface{ StatusWritesAnnotations() }

// GracefulDeleter is implemented by kinds whose deletion waits (pods).
// GracePeriod returns how long, given what the client asked for.
type GracefulDeleter interface {
	GracePeriod(obj runtime.Object, requested *int64) int64
}

// DeletionBlocker is implemented by kinds with their own finalizers
// outside metadata (namespaces' spec.finalizers).
type DeletionBlocker interface {
	BlocksDeletion(obj runtime.Object) bool
	// MarkDeleting records the start of deletion on the object.
	MarkDeleting(obj runtime.Object)
}

// DefaultStrategy suits kinds without rules of their own: status (if any)
// is reset on create and kept on update of the main resource.
type DefaultStrategy struct{}

func (DefaultStrategy) PrepareForCreate(w *WriteCtx, obj runtime.Object) error {
	if w.Kind.HasSubresource("status") {
		ResetField(obj, "Status")
	}
	return nil
}

func (DefaultStrategy) PrepareForUpdate(w *WriteCtx, obj, old runtime.Object) error {
	if w.Kind.HasSubresource("status") {
		CopyField(obj, old, "Status")
	}
	return nil
}

func (DefaultStrategy) Validate(*WriteCtx, runtime.Object) field.ErrorList { return nil }
func (DefaultStrategy) ValidateUpdate(*WriteCtx, runtime.Object, runtime.Object) field.ErrorList {
	return nil
}
func (DefaultStrategy) TracksGeneration() bool { return false }

// GenerationStrategy is DefaultStrategy for kinds whose generation counts
// spec changes.
type GenerationStrategy struct{ DefaultStrategy }

func (GenerationStrategy) TracksGeneration() bool { return true }

// StructField returns obj's exported field name, if obj is a pointer to a
// struct that has it.
func StructField(obj runtime.Object, name string) (reflect.Value, bool) {
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

// ResetField zeroes obj's field name (a typed object's struct field, an
// unstructured object's JSON field).
func ResetField(obj runtime.Object, name string) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		delete(u.Object, jsonField(name))
		return
	}
	if f, ok := StructField(obj, name); ok {
		f.Set(reflect.Zero(f.Type()))
	}
}

// CopyField sets dst's field name to src's.
func CopyField(dst, src runtime.Object, name string) {
	if du, ok := dst.(*unstructured.Unstructured); ok {
		k := jsonField(name)
		if v, ok := src.(*unstructured.Unstructured).Object[k]; ok {
			du.Object[k] = runtime.DeepCopyJSONValue(v)
		} else {
			delete(du.Object, k)
		}
		return
	}
	d, ok1 := StructField(dst, name)
	s, ok2 := StructField(src, name)
	if ok1 && ok2 {
		d.Set(s)
	}
}

// ValidateLabelSelector checks that sel is a valid label selector.
func ValidateLabelSelector(sel *metav1.LabelSelector, p *field.Path) field.ErrorList {
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return field.ErrorList{field.Invalid(p, sel, err.Error())}
	}
	return nil
}

// WithoutMetadataErrors drops upstream's metadata errors from the errors
// of one of upstream's validation functions: the generic handlers
// validate metadata already, and would report each twice.
func WithoutMetadataErrors(errs field.ErrorList) field.ErrorList {
	out := errs[:0]
	for _, e := range errs {
		if !strings.HasPrefix(e.Field, "metadata") {
			out = append(out, e)
		}
	}
	return out
}
