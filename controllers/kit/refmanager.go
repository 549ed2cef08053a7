package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// RefManager claims for one owner the objects of one kind its selector
// picks, as upstream's ControllerRefManager: an object the owner controls
// stays its own while the selector matches and is released when it stops
// matching (unless the owner is being deleted); an orphan that matches is
// adopted unless the owner or the orphan is being deleted; an object
// another controller controls is never touched. Build one per sync:
// CanAdopt runs at most once.
type RefManager[T metav1.Object] struct {
	Owner metav1.Object
	// Kind is the owner's, for the ownerReference an adoption writes.
	Kind     schema.GroupVersionKind
	Selector labels.Selector
	// Finalizers go on an object with its adoption and come off with its
	// release (the Job's tracking finalizer).
	Finalizers []string
	// Patch sends a strategic merge patch to obj and returns obj as
	// patched; PatchWith makes one of a typed client.
	Patch func(ctx context.Context, obj T, patch []byte) (T, error)
	// CanAdopt reads the owner afresh and fails when it is gone, replaced
	// or being deleted: the cache may lag a delete, and an object adopted
	// then would go with the deleted owner. It runs once, before the
	// first adoption; RecheckOwner makes one. Nil adopts without a check.
	CanAdopt func(ctx context.Context) error

	checked     bool
	canAdoptErr error
}

// Claim returns the objects of objs the owner controls once it has
// adopted and released: those it already controlled as they are, those it
// adopted as the patch left them (so a later write of the same sync does
// not conflict). filter, when not nil, narrows what matches beyond the
// selector. The errors of single objects are joined; the objects claimed
// despite them are still returned.
func (m *RefManager[T]) Claim(ctx context.Context, objs []T, filter func(T) bool) ([]T, error) {
	var (
		owned []T
		errs  []error
	)
	for _, obj := range objs {
		match := m.Selector.Matches(labels.Set(obj.GetLabels())) && (filter == nil || filter(obj))
		got, ok, err := m.claim(ctx, obj, match)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			owned = append(owned, got)
		}
	}
	return owned, errors.Join(errs...)
}

func (m *RefManager[T]) claim(ctx context.Context, obj T, match bool) (T, bool, error) {
	var none T
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		switch {
		case ref.UID != m.Owner.GetUID():
			return none, false, nil
		case match:
			return obj, true, nil
		case m.Owner.GetDeletionTimestamp() != nil:
			return none, false, nil
		}
		return none, false, m.release(ctx, obj)
	}
	if !match || m.Owner.GetDeletionTimestamp() != nil || obj.GetDeletionTimestamp() != nil || obj.GetNamespace() != m.Owner.GetNamespace() {
		return none, false, nil
	}
	if !m.checked && m.CanAdopt != nil {
		m.canAdoptErr = m.CanAdopt(ctx)
	}
	m.checked = true
	if m.canAdoptErr != nil {
		return none, false, fmt.Errorf("adopt %s/%s: %w", obj.GetNamespace(), obj.GetName(), m.canAdoptErr)
	}
	adopted, err := m.Patch(ctx, obj, adoptPatch(m.Owner, m.Kind, obj.GetUID(), m.Finalizers...))
	switch {
	case apierrors.IsNotFound(err):
		return none, false, nil
	case err != nil:
		return none, false, fmt.Errorf("adopt %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return adopted, true, nil
}

// release drops the owner's reference. An object gone, or replaced by one
// of the same name (the patch's uid then fails validation), needs nothing.
func (m *RefManager[T]) release(ctx context.Context, obj T) error {
	_, err := m.Patch(ctx, obj, releasePatch(m.Owner.GetUID(), obj.GetUID(), m.Finalizers...))
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
		return nil
	}
	return fmt.Errorf("release %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
}

// adoptPatch is the strategic merge patch that makes owner (of kind) the
// controller of the object with uid and adds finalizers to it; the uid
// makes it fail on an object of the same name created since.
func adoptPatch(owner metav1.Object, kind schema.GroupVersionKind, uid types.UID, finalizers ...string) []byte {
	meta := map[string]any{
		"ownerReferences": []metav1.OwnerReference{*metav1.NewControllerRef(owner, kind)},
		"uid":             uid,
	}
	if len(finalizers) > 0 {
		meta["finalizers"] = finalizers
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta})
	return b
}

// releasePatch is the strategic merge patch that removes the reference to
// owner, and finalizers, from the object with uid.
func releasePatch(owner, uid types.UID, finalizers ...string) []byte {
	meta := map[string]any{
		"ownerReferences": []map[string]any{{"$patch": "delete", "uid": owner}},
		"uid":             uid,
	}
	if len(finalizers) > 0 {
		meta["$deleteFromPrimitiveList/finalizers"] = finalizers
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta})
	return b
}

// patcher is the Patch of a typed client-go client of one namespace.
type patcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// PatchWith is a RefManager.Patch through a typed client, given as the
// function that makes it for a namespace: PatchWith(cs.Core.Pods).
func PatchWith[T metav1.Object, C patcher[T]](client func(namespace string) C) func(context.Context, T, []byte) (T, error) {
	return func(ctx context.Context, obj T, patch []byte) (T, error) {
		return client(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	}
}

// RecheckOwner is a RefManager.CanAdopt that reads owner through get (a
// typed client's Get, not a lister's) and fails when its uid changed or
// it is being deleted.
func RecheckOwner[T metav1.Object](owner metav1.Object, get func(ctx context.Context, name string, opts metav1.GetOptions) (T, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		fresh, err := get(ctx, owner.GetName(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("recheck %s/%s before adopting: %w", owner.GetNamespace(), owner.GetName(), err)
		}
		if fresh.GetUID() != owner.GetUID() {
			return fmt.Errorf("%s/%s was replaced (uid %s, want %s): not adopting", owner.GetNamespace(), owner.GetName(), fresh.GetUID(), owner.GetUID())
		}
		if fresh.GetDeletionTimestamp() != nil {
			return fmt.Errorf("%s/%s is being deleted: not adopting", owner.GetNamespace(), owner.GetName())
		}
		return nil
	}
}
