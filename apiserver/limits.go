package apiserver

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/store"
)

// The limits on what one request may make the server build, each
// kube-apiserver's own: a hostile request of a few KB must not take
// hundreds of MB. Nesting depth needs none here: every decoder of request
// bodies (encoding/json under the patch libraries, sigs.k8s.io/json, the
// YAML decoder) refuses documents nested deeper than 10,000.
const (
	// maxJSONPatchOperations is k8s.io/apiserver's
	// handlers.maxJSONPatchOperations.
	maxJSONPatchOperations = 10000
	// maxJSONPatchCopyBytes bounds what a JSON patch's copy operations
	// may add, as kube-apiserver's JSONPatchMaxCopyBytes (3 MiB, its body
	// limit) does: a map copied into itself doubles with every copy.
	maxJSONPatchCopyBytes = maxBodyBytes
	// DefaultMaxObjectSize is the largest object stored unless
	// Config.MaxObjectSize says otherwise: etcd's default request limit,
	// which bounds objects on any kube-apiserver.
	DefaultMaxObjectSize = store.DefaultMaxValueBytes
)

var limitJSONPatchCopies sync.Once

// setJSONPatchCopyLimit sets the patch library's copy limit, a process
// global in json-patch v4 (read without synchronisation by every Apply,
// so set once, before any request is served), as kube-apiserver's
// server config does: only ever lowered, never raised over a lower limit
// set by another user of the library in this process.
func setJSONPatchCopyLimit() {
	limitJSONPatchCopies.Do(func() {
		for {
			existing := atomic.LoadInt64(&jsonpatch.AccumulatedCopySizeLimit)
			if existing > 0 && existing <= maxJSONPatchCopyBytes {
				return
			}
			if atomic.CompareAndSwapInt64(&jsonpatch.AccumulatedCopySizeLimit, existing, maxJSONPatchCopyBytes) {
				return
			}
		}
	})
}

// tooManyJSONPatchOperations is kube-apiserver's answer to a JSON patch
// of more than maxJSONPatchOperations operations.
func tooManyJSONPatchOperations(n int) error {
	return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOperations, n))
}

// objectTooLarge is the answer to a write of an object over limit, the
// one kube-apiserver gives a write etcd refuses as too large.
func objectTooLarge(limit int) error {
	return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", limit))
}

func (s *Server) maxObjectSize() int {
	if s.cfg.MaxObjectSize > 0 {
		return s.cfg.MaxObjectSize
	}
	return DefaultMaxObjectSize
}

// checkObjectSize refuses an object whose stored encoding, without its
// managedFields, is over the limit: it can never be stored (a write over
// the limit is retried without managedFields, kube-apiserver's rule), so
// it is refused as soon as it is decoded, before the field manager,
// admission and validation build several times its size.
func (s *Server) checkObjectSize(res *resource, obj runtime.Object) error {
	m, err := metaOf(obj)
	if err != nil {
		return nil
	}
	if mf := m.GetManagedFields(); len(mf) > 0 {
		m.SetManagedFields(nil)
		defer m.SetManagedFields(mf)
	}
	if n := storedSize(res, obj); n > s.maxObjectSize() {
		return objectTooLarge(s.maxObjectSize())
	}
	return nil
}

// storedSize is the size of obj's stored encoding, or a little under it:
// a built-in object's protobuf size without its envelope, a custom
// object's JSON. An object that cannot be encoded counts as empty: the
// write's own encoding reports it.
func storedSize(res *resource, obj runtime.Object) int {
	if res.storage == nil && res.custom == nil {
		if p, ok := obj.(interface{ Size() int }); ok {
			return p.Size()
		}
	}
	if u, ok := obj.(*unstructured.Unstructured); ok && res.custom != nil {
		b, err := json.Marshal(u.Object)
		if err != nil {
			return 0
		}
		return len(b)
	}
	b, err := encodeForStore(res, obj)
	if err != nil {
		return 0
	}
	return len(b)
}

// encodeWithinLimit encodes obj for the store, refusing it when over the
// limit. Over it, a write that was not an apply is retried without
// managedFields, which can be most of an object and are not the
// client's, as kube-apiserver retries a write etcd refuses as too large.
func (s *Server) encodeWithinLimit(res *resource, obj runtime.Object, applied bool) ([]byte, error) {
	data, err := encodeForStore(res, obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if len(data) <= s.maxObjectSize() {
		return data, nil
	}
	m, merr := metaOf(obj)
	if applied || merr != nil || len(m.GetManagedFields()) == 0 {
		return nil, objectTooLarge(s.maxObjectSize())
	}
	m.SetManagedFields(nil)
	if data, err = encodeForStore(res, obj); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if len(data) > s.maxObjectSize() {
		return nil, objectTooLarge(s.maxObjectSize())
	}
	return data, nil
}
