package registry

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is one row of the table of served kinds: everything the generic
// handlers need to serve a resource besides its objects' Go type, which
// the scheme knows.
type Kind struct {
	GVR  schema.GroupVersionResource
	Kind string
	// ListKind defaults to Kind+"List", Singular to Kind in lower case.
	ListKind   string
	Singular   string
	Namespaced bool
	ShortNames []string
	Categories []string
	// Subresources served besides the main resource ("status", "scale",
	// "binding", ...).
	Subresources []string
	// NoCollection: no deletecollection (every resource is get/list/watch/
	// create/update/patch/delete/deletecollection otherwise).
	NoCollection bool
	// CreateOnly: a review kind (SubjectAccessReview, TokenReview ...)
	// that is only ever created, answered and never stored.
	CreateOnly bool
	// Strategy holds the kind's rules; nil is DefaultStrategy.
	Strategy Strategy
	// Defaulter applies the kind's defaults, as the generated SetDefaults
	// functions of kube-apiserver do; nil if it has none.
	Defaulter func(obj runtime.Object)
	// Printer gives the kind's table columns; nil is upstream's default
	// (Name and Created At).
	Printer *Printer
	// ReturnDeleted: DELETE that removes the object answers with it rather
	// than a Status (pods do).
	ReturnDeleted bool
	// AllowCreateOnUpdate: PUT of a missing object creates it.
	AllowCreateOnUpdate bool
	// Fields lists the field selector labels beyond metadata.name and
	// metadata.namespace, with how to read each from an object.
	Fields map[string]func(runtime.Object) string
	// StoredAs names another resource whose objects this one shows in
	// another form (events.k8s.io Events are core Events): keys, storage
	// encoding and watch events are that resource's, converted with
	// ToStorage and FromStorage.
	StoredAs               schema.GroupVersionResource
	ToStorage, FromStorage func(runtime.Object) runtime.Object
	// Reader serves a kind whose objects are computed, never stored
	// (metrics.k8s.io's NodeMetrics and PodMetrics): get and list only.
	Reader Reader
	// Warning goes with every answer about the kind, as kube-apiserver
	// warns of a deprecated kind.
	Warning string
}

// Reader reads the objects of a kind that is not stored.
type Reader interface {
	// Get is one object, or the kind's NotFound error.
	Get(ctx context.Context, namespace, name string) (runtime.Object, error)
	// List is the objects in namespace ("": all of them); the caller
	// filters them by label and field.
	List(ctx context.Context, namespace string) ([]runtime.Object, error)
}

// HasSubresource reports whether the kind serves subresource s.
func (k *Kind) HasSubresource(s string) bool {
	for _, x := range k.Subresources {
		if x == s {
			return true
		}
	}
	return false
}

// GVR is a GroupVersionResource.
func GVR(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}
