package pvbinder

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

var everything = labels.Everything()

// Upstream's event reasons and messages.
const (
	reasonWaitForFirstConsumer = "WaitForFirstConsumer"
	reasonExternalProvisioning = "ExternalProvisioning"
	reasonFailedBinding        = "FailedBinding"
	reasonProvisioningFailed   = "ProvisioningFailed"
	reasonVolumeMismatch       = "VolumeMismatch"
	reasonClaimLost            = "ClaimLost"
	reasonClaimMisbound        = "ClaimMisbound"
)

func (c *Controller) syncClaim(ctx context.Context, k string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(k)
	pvc, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.HasAnnotation(pvc.ObjectMeta, volumehelpers.AnnBindCompleted) {
		return c.syncUnboundClaim(ctx, pvc)
	}
	return c.syncBoundClaim(ctx, pvc)
}

// syncUnboundClaim binds a claim that has never been bound: to the
// volume it names, or to the best fitting one, or asks for one.
func (c *Controller) syncUnboundClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.VolumeName == "" && !volumehelpers.PersistentVolumeClaimHasClass(pvc) {
		// Made before there was a default class: it gets the default
		// now, as upstream's retroactive assignment does.
		if name := c.defaultClass(); name != "" {
			upd := pvc.DeepCopy()
			upd.Spec.StorageClassName = &name
			_, err := c.cfg.Client.Core.PersistentVolumeClaims(pvc.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
			return err
		}
	}
	if pvc.Spec.VolumeName == "" {
		delay, err := c.delayBinding(pvc)
		if err != nil {
			return err
		}
		pv, err := c.findBestMatch(pvc, delay)
		if err != nil {
			return err
		}
		if pv != nil {
			return c.bind(ctx, pv, pvc)
		}
		switch class := volumehelpers.GetPersistentVolumeClaimClass(pvc); {
		case delay && !volumehelpers.IsDelayBindingProvisioning(pvc):
			c.recorder.Event(pvc, corev1.EventTypeNormal, reasonWaitForFirstConsumer, "waiting for first consumer to be created before binding")
		case class != "":
			if err := c.provisionClaim(ctx, pvc, class); err != nil {
				return err
			}
		default:
			c.recorder.Event(pvc, corev1.EventTypeNormal, reasonFailedBinding, "no persistent volumes available for this claim and no storage class is set")
		}
		return c.setClaimPending(ctx, pvc)
	}
	// The user asked for one volume.
	pv, err := c.volumes.Get(pvc.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return c.setClaimPending(ctx, pvc)
	}
	if err != nil {
		return err
	}
	switch {
	case pv.Spec.ClaimRef == nil:
		if msg := volumeMismatch(pv, pvc); msg != "" {
			c.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonVolumeMismatch, "Cannot bind to requested volume %q: %s", pv.Name, msg)
			return c.setClaimPending(ctx, pvc)
		}
		return c.bind(ctx, pv, pvc)
	case volumehelpers.IsVolumeBoundToClaim(pv, pvc):
		return c.bind(ctx, pv, pvc)
	case metav1.HasAnnotation(pvc.ObjectMeta, volumehelpers.AnnBoundByController):
		return fmt.Errorf("invalid binding of claim %q to volume %q: volume already claimed by %q", claimKey(pvc), pv.Name, refKey(pv.Spec.ClaimRef))
	default:
		c.recorder.Eventf(pvc, corev1.EventTypeNormal, reasonFailedBinding, "volume %q already bound to a different claim.", pv.Name)
		return c.setClaimPending(ctx, pvc)
	}
}

// syncBoundClaim keeps a bound claim bound, or marks it Lost when its
// volume is gone or belongs to another claim.
func (c *Controller) syncBoundClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.VolumeName == "" {
		return c.setClaimLost(ctx, pvc, reasonClaimLost, "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!")
	}
	pv, err := c.volumes.Get(pvc.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return c.setClaimLost(ctx, pvc, reasonClaimLost, "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
	}
	if err != nil {
		return err
	}
	if pv.Spec.ClaimRef == nil || volumehelpers.IsVolumeBoundToClaim(pv, pvc) {
		return c.bind(ctx, pv, pvc)
	}
	return c.setClaimLost(ctx, pvc, reasonClaimMisbound, "Two claims are bound to the same volume, this one is bound incorrectly")
}

// delayBinding: the claim's class binds WaitForFirstConsumer.
func (c *Controller) delayBinding(pvc *corev1.PersistentVolumeClaim) (bool, error) {
	name := volumehelpers.GetPersistentVolumeClaimClass(pvc)
	if name == "" {
		return false, nil
	}
	class, err := c.classes.Get(name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer, nil
}

// findBestMatch picks a volume as upstream's volume index does: among
// the volumes whose access modes cover the claim's, those with the
// fewest modes first, and within them the smallest that fits (or the
// one pre-bound to the claim).
func (c *Controller) findBestMatch(pvc *corev1.PersistentVolumeClaim, delay bool) (*corev1.PersistentVolume, error) {
	all, err := c.volumes.List(everything)
	if err != nil {
		return nil, err
	}
	byModes := map[string][]*corev1.PersistentVolume{}
	for _, pv := range all {
		if volumehelpers.CheckAccessModes(pvc, pv) {
			k := modesKey(pv.Spec.AccessModes)
			byModes[k] = append(byModes[k], pv)
		}
	}
	keys := make([]string, 0, len(byModes))
	for k := range byModes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		ni, nj := strings.Count(keys[i], ",")+1, strings.Count(keys[j], ",")+1
		if ni != nj {
			return ni < nj
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		pv, err := volumehelpers.FindMatchingVolume(pvc, byModes[k], nil, nil, delay, true)
		if err != nil || pv != nil {
			return pv, err
		}
	}
	return nil, nil
}

func modesKey(modes []corev1.PersistentVolumeAccessMode) string {
	s := make([]string, len(modes))
	for i, m := range modes {
		s[i] = string(m)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// volumeMismatch is why a volume the claim names cannot serve it, as
// upstream's checkVolumeSatisfyClaim says; "" when it can.
func volumeMismatch(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) string {
	want := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pv.Spec.Capacity[corev1.ResourceStorage]
	switch {
	case have.Cmp(want) < 0:
		return "requested PV is too small"
	case volumehelpers.GetPersistentVolumeClass(pv) != volumehelpers.GetPersistentVolumeClaimClass(pvc):
		return "storageClassName does not match"
	case volumehelpers.CheckVolumeModeMismatches(&pvc.Spec, &pv.Spec):
		return "incompatible volumeMode"
	case !volumehelpers.CheckAccessModes(pvc, pv):
		return "incompatible accessMode"
	}
	return ""
}

// provisionClaim asks the class's provisioner for a volume by naming it
// in the claim's annotations; provisioners watch for claims naming them.
func (c *Controller) provisionClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, className string) error {
	class, err := c.classes.Get(className)
	if apierrors.IsNotFound(err) {
		c.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonProvisioningFailed, "storageclass.storage.k8s.io %q not found", className)
		return nil
	}
	if err != nil {
		return err
	}
	if pvc.Annotations[volumehelpers.AnnStorageProvisioner] != class.Provisioner || pvc.Annotations[volumehelpers.AnnBetaStorageProvisioner] != class.Provisioner {
		upd := pvc.DeepCopy()
		metav1.SetMetaDataAnnotation(&upd.ObjectMeta, volumehelpers.AnnStorageProvisioner, class.Provisioner)
		metav1.SetMetaDataAnnotation(&upd.ObjectMeta, volumehelpers.AnnBetaStorageProvisioner, class.Provisioner)
		if _, err := c.cfg.Client.Core.PersistentVolumeClaims(pvc.Namespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	c.recorder.Eventf(pvc, corev1.EventTypeNormal, reasonExternalProvisioning,
		"Waiting for a volume to be created either by the external provisioner '%s' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.", class.Provisioner)
	return nil
}

// bind completes the binding of pv and pvc in upstream's order: the
// volume's claimRef, its phase, the claim's volumeName and annotations,
// its status. Each write is conditional on the cached resourceVersion,
// so a volume two claims want goes to one of them.
func (c *Controller) bind(ctx context.Context, pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) error {
	bound, dirty, err := volumehelpers.GetBindVolumeToClaim(pv, pvc)
	if err != nil {
		return err
	}
	if dirty {
		if bound, err = c.cfg.Client.Core.PersistentVolumes().Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if _, err := c.setVolumePhase(ctx, bound, corev1.VolumeBound, ""); err != nil {
		return err
	}
	claim := pvc.DeepCopy()
	changed := false
	if claim.Spec.VolumeName != pv.Name {
		claim.Spec.VolumeName = pv.Name
		metav1.SetMetaDataAnnotation(&claim.ObjectMeta, volumehelpers.AnnBoundByController, "yes")
		changed = true
	}
	if !metav1.HasAnnotation(claim.ObjectMeta, volumehelpers.AnnBindCompleted) {
		metav1.SetMetaDataAnnotation(&claim.ObjectMeta, volumehelpers.AnnBindCompleted, "yes")
		changed = true
	}
	if changed {
		if claim, err = c.cfg.Client.Core.PersistentVolumeClaims(pvc.Namespace).Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	st := claim.Status.DeepCopy()
	st.Phase = corev1.ClaimBound
	st.AccessModes = pv.Spec.AccessModes
	// The capacity is set when the claim becomes Bound, not after, as
	// kube-controller-manager does: an expansion grows the volume first
	// and the claim's capacity only once the node has grown the file
	// system (the kubelet writes it then).
	if claim.Status.Phase != corev1.ClaimBound || claim.Status.Capacity == nil {
		st.Capacity = pv.Spec.Capacity
	}
	if apiequality.Semantic.DeepEqual(*st, claim.Status) {
		return nil
	}
	if claim.Status.Phase != corev1.ClaimBound {
		c.log.Info("claim bound", "claim", claimKey(pvc), "volume", pv.Name)
	}
	claim.Status = *st
	_, err = c.cfg.Client.Core.PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	return err
}

func (c *Controller) setClaimPending(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Status.Phase == corev1.ClaimPending {
		return nil
	}
	claim := pvc.DeepCopy()
	claim.Status.Phase = corev1.ClaimPending
	_, err := c.cfg.Client.Core.PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	return err
}

// setClaimLost marks a bound claim whose volume is gone or taken: its
// data are no longer reachable through it.
func (c *Controller) setClaimLost(ctx context.Context, pvc *corev1.PersistentVolumeClaim, reason, msg string) error {
	if pvc.Status.Phase == corev1.ClaimLost {
		return nil
	}
	claim := pvc.DeepCopy()
	claim.Status.Phase = corev1.ClaimLost
	if _, err := c.cfg.Client.Core.PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		return err
	}
	c.recorder.Event(pvc, corev1.EventTypeWarning, reason, msg)
	return nil
}

// defaultClass is the default StorageClass (the newest of several), ""
// when there is none.
func (c *Controller) defaultClass() string {
	classes, err := c.classes.List(everything)
	if err != nil {
		return ""
	}
	var best *storagev1.StorageClass
	for _, sc := range classes {
		if sc.Annotations[isDefaultClassAnnotation] != "true" && sc.Annotations[betaIsDefaultClassAnnotation] != "true" {
			continue
		}
		if best == nil || best.CreationTimestamp.Before(&sc.CreationTimestamp) ||
			(best.CreationTimestamp.Equal(&sc.CreationTimestamp) && sc.Name < best.Name) {
			best = sc
		}
	}
	if best == nil {
		return ""
	}
	return best.Name
}

const (
	isDefaultClassAnnotation     = "storageclass.kubernetes.io/is-default-class"
	betaIsDefaultClassAnnotation = "storageclass.beta.kubernetes.io/is-default-class"
)
