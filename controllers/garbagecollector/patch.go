package garbagecollector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// metaPatch is a JSON merge patch of metadata. It carries the uid and
// resourceVersion read, so it applies only to that object as it was
// read: a merge patch replaces whole lists, and must not undo a
// concurrent change to them. It works the same for every resource,
// custom ones included (which take no strategic merge patch).
type metaPatch struct {
	Metadata patchedMeta `json:"metadata"`
}

type patchedMeta struct {
	UID             types.UID                `json:"uid"`
	ResourceVersion string                   `json:"resourceVersion"`
	OwnerReferences *[]metav1.OwnerReference `json:"ownerReferences,omitempty"`
	Finalizers      *[]string                `json:"finalizers,omitempty"`
}

// patchMeta reads ref, lets change fill the patch from the live object
// (false: nothing to do) and applies it, again on a conflict. A missing
// object is nothing to do.
func (gc *Controller) patchMeta(ctx context.Context, ref objectRef, change func(live *metav1.PartialObjectMetadata, p *patchedMeta) bool) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		live, err := gc.get(ctx, ref)
		if err != nil {
			return err
		}
		if live.UID != ref.uid {
			return nil
		}
		p := metaPatch{Metadata: patchedMeta{UID: live.UID, ResourceVersion: live.ResourceVersion}}
		if !change(live, &p.Metadata) {
			return nil
		}
		data, err := json.Marshal(p)
		if err != nil {
			return err
		}
		_, err = gc.meta.Resource(ref.gvr).Namespace(ref.namespace).Patch(ctx, ref.name, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch %s: %w", ref, err)
	}
	return nil
}

// patchOwnerReferences rewrites ref's ownerReferences: keep returns each
// reference as it should be, or false to drop it.
func (gc *Controller) patchOwnerReferences(ctx context.Context, ref objectRef, keep func(metav1.OwnerReference) (metav1.OwnerReference, bool)) error {
	return gc.patchMeta(ctx, ref, func(live *metav1.PartialObjectMetadata, p *patchedMeta) bool {
		refs := []metav1.OwnerReference{}
		for _, r := range live.OwnerReferences {
			if nr, ok := keep(*r.DeepCopy()); ok {
				refs = append(refs, nr)
			}
		}
		if slices.EqualFunc(refs, live.OwnerReferences, func(a, b metav1.OwnerReference) bool { return a.UID == b.UID && blocks(a) == blocks(b) }) {
			return false
		}
		p.OwnerReferences = &refs
		return true
	})
}

// removeFinalizer takes finalizer off ref.
func (gc *Controller) removeFinalizer(ctx context.Context, ref objectRef, finalizer string) error {
	return gc.patchMeta(ctx, ref, func(live *metav1.PartialObjectMetadata, p *patchedMeta) bool {
		if !slices.Contains(live.Finalizers, finalizer) {
			return false
		}
		fins := []string{}
		for _, f := range live.Finalizers {
			if f != finalizer {
				fins = append(fins, f)
			}
		}
		p.Finalizers = &fins
		return true
	})
}

// orphanDependents removes the owner's references from every dependent,
// then the orphan finalizer from the owner.
func (gc *Controller) orphanDependents(ctx context.Context, owner objectRef) error {
	for _, dep := range gc.dependents(owner.uid) {
		err := gc.patchOwnerReferences(ctx, dep.ref, func(r metav1.OwnerReference) (metav1.OwnerReference, bool) {
			return r, r.UID != owner.uid
		})
		if err != nil {
			return fmt.Errorf("orphan the dependents of %s: %w", owner, err)
		}
	}
	return gc.removeFinalizer(ctx, owner, metav1.FinalizerOrphanDependents)
}
