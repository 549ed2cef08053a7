package statefulset

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// PVC retention (persistentVolumeClaimRetentionPolicy) is done upstream's
// way: the controller only sets ownerReferences on the claims and the
// garbage collector deletes them with their owner. whenDeleted=Delete
// makes the set a claim's controller; whenScaled=Delete makes the pod its
// controller once the pod is condemned by a scale down.

var podKind = corev1.SchemeGroupVersion.WithKind("Pod")

const (
	retain = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	del    = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
)

func retentionPolicy(set *appsv1.StatefulSet) appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy {
	p := appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: retain, WhenScaled: retain}
	if set.Spec.PersistentVolumeClaimRetentionPolicy != nil {
		if v := set.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted; v != "" {
			p.WhenDeleted = v
		}
		if v := set.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled; v != "" {
			p.WhenScaled = v
		}
	}
	return p
}

// getClaim reads a claim from the cache.
func (c *Controller) getClaim(ns, name string) (*corev1.PersistentVolumeClaim, error) {
	return c.pvcLister.PersistentVolumeClaims(ns).Get(name)
}

// createClaims creates the pod's missing claims. A claim being deleted
// blocks the pod: it would lose its data under it.
func (c *Controller) createClaims(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	var errs []error
	for _, claim := range claimsFor(set, ordinalOf(pod)) {
		pvc, err := c.getClaim(claim.Namespace, claim.Name)
		switch {
		case apierrors.IsNotFound(err):
			_, err := c.client.Core.PersistentVolumeClaims(claim.Namespace).Create(ctx, &claim, metav1.CreateOptions{})
			switch {
			case err == nil:
				c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulCreate", "create Claim %s Pod %s in StatefulSet %s success", claim.Name, pod.Name, set.Name)
			case !apierrors.IsAlreadyExists(err):
				c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "create Claim %s for Pod %s in StatefulSet %s failed error: %s", claim.Name, pod.Name, set.Name, err)
				errs = append(errs, fmt.Errorf("failed to create PVC %s: %w", claim.Name, err))
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("failed to retrieve PVC %s: %w", claim.Name, err))
		case pvc.DeletionTimestamp != nil:
			errs = append(errs, fmt.Errorf("pvc %s is being deleted", claim.Name))
		}
	}
	return errors.Join(errs...)
}

// claimsMatchPolicy says whether the pod's existing claims carry the
// ownerReferences set's policy asks for.
func (c *Controller) claimsMatchPolicy(set *appsv1.StatefulSet, pod *corev1.Pod) (bool, error) {
	for _, claim := range claimsFor(set, ordinalOf(pod)) {
		pvc, err := c.getClaim(set.Namespace, claim.Name)
		switch {
		case apierrors.IsNotFound(err):
			// Created later; checked then.
		case err != nil:
			return false, fmt.Errorf("get claim %s for %s: %w", claim.Name, pod.Name, err)
		case !claimOwnerUpToDate(pvc, set, pod):
			return false, nil
		}
	}
	return true, nil
}

// updateClaimsForPolicy rewrites the ownerReferences of the pod's claims
// to match set's policy.
func (c *Controller) updateClaimsForPolicy(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	for _, claim := range claimsFor(set, ordinalOf(pod)) {
		pvc, err := c.getClaim(set.Namespace, claim.Name)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("get claim %s for %s: %w", claim.Name, pod.Name, err)
		}
		if unexpectedController(pvc, set, pod) {
			c.recorder.Eventf(set, corev1.EventTypeWarning, "ConflictingController", "PersistentVolumeClaim %s has a conflicting OwnerReference that acts as a manging controller, the retention policy is ignored for this claim", claim.Name)
		}
		if claimOwnerUpToDate(pvc, set, pod) {
			continue
		}
		pvc = pvc.DeepCopy()
		setClaimOwners(pvc, set, pod)
		if _, err := c.client.Core.PersistentVolumeClaims(set.Namespace).Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("could not update claim %s for delete policy ownerRefs: %w", claim.Name, err)
		}
	}
	return nil
}

// claimIsStale: under whenScaled=Delete, a claim still owned by an
// earlier pod of the same name is on its way to the garbage collector;
// a new pod must wait rather than mount it.
func (c *Controller) claimIsStale(set *appsv1.StatefulSet, pod *corev1.Pod) (bool, error) {
	if retentionPolicy(set).WhenScaled == retain {
		return false, nil
	}
	for _, claim := range claimsFor(set, ordinalOf(pod)) {
		pvc, err := c.getClaim(claim.Namespace, claim.Name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, err
		case hasStaleOwnerRef(pvc, pod, podKind):
			return true, nil
		}
	}
	return false, nil
}

// claimOwnerUpToDate says whether the claim's references to set and pod
// are as the policy wants:
//
//	Retain/Retain: neither; whenDeleted=Delete: the set;
//	whenScaled=Delete: the pod once it is scaled away, else the set if
//	whenDeleted=Delete.
//
// Claims with stale references (an earlier set or pod of the same name)
// or another controller are left as they are.
func claimOwnerUpToDate(claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	if hasStaleOwnerRef(claim, set, controllerKind) || hasStaleOwnerRef(claim, pod, podKind) {
		return true
	}
	if unexpectedController(claim, set, pod) {
		return !hasOwnerRef(claim, set) && !hasOwnerRef(claim, pod)
	}
	if hasNonControllerOwner(claim, set, pod) {
		return false
	}
	wantSet, wantPod := wantedOwners(set, pod)
	return hasOwnerRef(claim, set) == wantSet && hasOwnerRef(claim, pod) == wantPod
}

// wantedOwners is which of set and pod the policy makes a claim's owner.
func wantedOwners(set *appsv1.StatefulSet, pod *corev1.Pod) (wantSet, wantPod bool) {
	p := retentionPolicy(set)
	scaledDown := !inOrdinalRange(set, pod)
	switch {
	case p.WhenScaled == del && p.WhenDeleted == del:
		return !scaledDown, scaledDown
	case p.WhenScaled == del:
		return false, scaledDown
	case p.WhenDeleted == del:
		return true, false
	}
	return false, false
}

// setClaimOwners replaces the claim's references to set and pod with the
// ones the policy wants (none if another controller has the claim).
func setClaimOwners(claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod) {
	unexpected := unexpectedController(claim, set, pod)
	var refs []metav1.OwnerReference
	for _, r := range claim.OwnerReferences {
		if !matchesRef(&r, set, controllerKind) && !matchesRef(&r, pod, podKind) {
			refs = append(refs, r)
		}
	}
	if !unexpected {
		wantSet, wantPod := wantedOwners(set, pod)
		if wantSet {
			refs = append(refs, *metav1.NewControllerRef(set, controllerKind))
		}
		if wantPod {
			refs = append(refs, *metav1.NewControllerRef(pod, podKind))
		}
	}
	claim.OwnerReferences = refs
}

func hasOwnerRef(target, owner metav1.Object) bool {
	for _, r := range target.GetOwnerReferences() {
		if r.UID == owner.GetUID() {
			return true
		}
	}
	return false
}

// unexpectedController: under a Delete policy, a controller of the claim
// other than this set and this pod (including earlier ones of the same
// names).
func unexpectedController(claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	if p := retentionPolicy(set); p.WhenScaled == retain && p.WhenDeleted == retain {
		return false
	}
	for _, r := range claim.OwnerReferences {
		switch {
		case matchesRef(&r, set, controllerKind):
			if r.UID != set.UID {
				return true
			}
		case matchesRef(&r, pod, podKind):
			if r.UID != pod.UID {
				return true
			}
		case r.Controller != nil && *r.Controller:
			return true
		}
	}
	return false
}

func hasNonControllerOwner(claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	for _, r := range claim.OwnerReferences {
		if (r.UID == set.UID || r.UID == pod.UID) && (r.Controller == nil || !*r.Controller) {
			return true
		}
	}
	return false
}

// hasStaleOwnerRef: target refers to an object of owner's kind and name
// with another uid (one that was deleted and replaced).
func hasStaleOwnerRef(target, owner metav1.Object, kind schema.GroupVersionKind) bool {
	for _, r := range target.GetOwnerReferences() {
		if matchesRef(&r, owner, kind) {
			return r.UID != owner.GetUID()
		}
	}
	return false
}

func matchesRef(r *metav1.OwnerReference, owner metav1.Object, kind schema.GroupVersionKind) bool {
	return r.APIVersion == kind.GroupVersion().String() && r.Kind == kind.Kind && r.Name == owner.GetName()
}
