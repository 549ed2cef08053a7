package apiserver

import (
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/apiextensions"
	"bonsai.dev/bonsai/apiserver/registry"
)

// writeCtx is a write in progress: what its strategy may consult
// (registry.WriteCtx) and what only the server's own steps use.
type writeCtx struct {
	registry.WriteCtx
	s   *Server
	res *resource
	// stored is the stored encoding of the object an update replaces,
	// when the request read it: the no-op check compares with it rather
	// than encoding the old object again.
	stored []byte
	// requestSpec, set when a status write was decoded without its spec,
	// decodes the spec into the request's object for admission that
	// reads the whole of it.
	requestSpec func() error
}

// newWriteCtx starts a write of res.
func (s *Server) newWriteCtx(res *resource, dryRun bool) *writeCtx {
	return &writeCtx{WriteCtx: registry.WriteCtx{Kind: res.def, Env: &s.env, DryRun: dryRun}, s: s, res: res}
}

// finish runs the undo or the release steps of a write that failed or
// was stored. A step that fails leaves a record the repair loop frees.
func (w *writeCtx) finish(stored bool) {
	w.Finish(stored, func(err error) {
		w.s.log.Warn("service allocation not given back; the repair loop will", "resource", w.res.gvr.Resource, "err", err)
	})
}

// specChanged reports whether obj's Spec differs from old's; kinds without a
// Spec compare everything but metadata and status.
func specChanged(obj, old runtime.Object) bool {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return apiextensions.SpecChanged(u, old.(*unstructured.Unstructured))
	}
	a, ok1 := registry.StructField(obj, "Spec")
	b, ok2 := registry.StructField(old, "Spec")
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
