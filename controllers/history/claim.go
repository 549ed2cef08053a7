package history

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

// Claimer sorts the objects a controller selects into its own, adopting
// orphans that match and releasing owned ones that no longer do, as
// upstream's ControllerRefManager.
type Claimer struct {
	Owner    metav1.Object
	Kind     schema.GroupVersionKind
	Selector labels.Selector
	// Patch sends a strategic merge patch to an object of the claimed
	// kind.
	Patch func(ctx context.Context, namespace, name string, patch []byte) error
	// Recheck reads the owner afresh and fails when it is gone, replaced
	// or being deleted: a controller must not adopt for a dead owner its
	// cache still shows. It runs once, before the first adoption.
	Recheck func(ctx context.Context) error

	rechecked error
	checked   bool
}

// Claim returns the objects of objs the owner controls after adopting and
// releasing; filter (may be nil) narrows what may be owned beyond the
// selector. Errors of single objects are joined; the objects claimed
// despite them are still returned.
func Claim[T metav1.Object](ctx context.Context, c *Claimer, objs []T, filter func(T) bool) ([]T, error) {
	var owned []T
	var errs []error
	for _, obj := range objs {
		match := c.Selector.Matches(labels.Set(obj.GetLabels())) && (filter == nil || filter(obj))
		ok, err := c.claim(ctx, obj, match)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			owned = append(owned, obj)
		}
	}
	return owned, errors.Join(errs...)
}

func (c *Claimer) claim(ctx context.Context, obj metav1.Object, match bool) (bool, error) {
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		switch {
		case ref.UID != c.Owner.GetUID():
			return false, nil
		case match:
			return true, nil
		case c.Owner.GetDeletionTimestamp() != nil:
			return false, nil
		}
		return false, c.patch(ctx, obj, "release", map[string]any{"$patch": "delete", "uid": c.Owner.GetUID()})
	}
	if !match || c.Owner.GetDeletionTimestamp() != nil || obj.GetDeletionTimestamp() != nil || obj.GetNamespace() != c.Owner.GetNamespace() {
		return false, nil
	}
	if !c.checked {
		c.rechecked, c.checked = c.Recheck(ctx), true
	}
	if c.rechecked != nil {
		return false, c.rechecked
	}
	if err := c.patch(ctx, obj, "adopt", metav1.NewControllerRef(c.Owner, c.Kind)); err != nil {
		return false, err
	}
	return true, nil
}

// patch adds (or with $patch delete, removes) one owner reference,
// conditional on the object's uid so a replaced object is left alone.
func (c *Claimer) patch(ctx context.Context, obj metav1.Object, what string, ref any) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []any{ref},
		"uid":             obj.GetUID(),
	}})
	if err != nil {
		return err
	}
	err = c.Patch(ctx, obj.GetNamespace(), obj.GetName(), body)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", what, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// RecheckOwner is a Claimer.Recheck that gets the owner through get and
// fails when its uid changed or it is being deleted.
func RecheckOwner(owner metav1.Object, get func(ctx context.Context) (metav1.Object, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		fresh, err := get(ctx)
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

// PatchType is what Claimer.Patch sends.
const PatchType = types.StrategicMergePatchType
