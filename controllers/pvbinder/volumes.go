package pvbinder

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

const (
	reasonVolumeFailedDelete  = "VolumeFailedDelete"
	reasonVolumeFailedRecycle = "VolumeFailedRecycle"
)

// syncVolume keeps a volume's phase in step with its claim and reclaims
// it when the claim is gone.
func (c *Controller) syncVolume(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		// Free, or pre-bound by the user to a claim not bound yet.
		_, err := c.setVolumePhase(ctx, pv, corev1.VolumeAvailable, "")
		return err
	}
	pvc, err := c.claimOf(ctx, ref)
	if err != nil {
		return err
	}
	switch {
	case pvc == nil:
		// The claim is gone: release the volume, then reclaim it.
		if pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed {
			if pv, err = c.setVolumePhase(ctx, pv, corev1.VolumeReleased, ""); err != nil {
				return err
			}
		}
		if pv.Status.Phase == corev1.VolumeReleased {
			return c.reclaim(ctx, pv)
		}
		return nil
	case pvc.Spec.VolumeName == "":
		// Half bound: the claim's sync finishes it.
		c.queue.Add(claimPrefix + claimKey(pvc))
		return nil
	case pvc.Spec.VolumeName == pv.Name:
		_, err := c.setVolumePhase(ctx, pv, corev1.VolumeBound, "")
		return err
	case metav1.HasAnnotation(pv.ObjectMeta, volumehelpers.AnnDynamicallyProvisioned) && pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete:
		// Provisioned for a claim that got another volume: not needed.
		if pv, err = c.setVolumePhase(ctx, pv, corev1.VolumeReleased, ""); err != nil {
			return err
		}
		return c.reclaim(ctx, pv)
	case metav1.HasAnnotation(pv.ObjectMeta, volumehelpers.AnnBoundByController):
		// This controller chose the volume for a claim that is bound
		// elsewhere: free it.
		return c.unbindVolume(ctx, pv)
	}
	// Pre-bound by the user to a claim bound elsewhere: wait for the
	// user to sort it out.
	return nil
}

// claimOf is the claim ref names, nil when it no longer exists. The cache
// may lag behind a claim just created, so a miss is checked with the API
// before the volume is released for good.
func (c *Controller) claimOf(ctx context.Context, ref *corev1.ObjectReference) (*corev1.PersistentVolumeClaim, error) {
	pvc, err := c.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
	if err == nil && pvc.UID == ref.UID {
		return pvc, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	pvc, err = c.cfg.Client.Core.PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if pvc.UID != ref.UID {
		return nil, nil
	}
	return pvc, nil
}

// reclaim applies a released volume's reclaim policy. Retain keeps it
// Released for the administrator. Delete is the provisioner's job for a
// volume it provisioned; bonsai has no in-tree volume plugin that could
// delete any other, so such a volume fails as upstream's does without a
// deletable plugin. Recycle has no recycler here either.
func (c *Controller) reclaim(ctx context.Context, pv *corev1.PersistentVolume) error {
	switch pv.Spec.PersistentVolumeReclaimPolicy {
	case corev1.PersistentVolumeReclaimDelete:
		if metav1.HasAnnotation(pv.ObjectMeta, volumehelpers.AnnDynamicallyProvisioned) {
			return nil
		}
		msg := "error getting deleter volume plugin for volume \"" + pv.Name + "\": no deletable volume plugin matched"
		if _, err := c.setVolumePhase(ctx, pv, corev1.VolumeFailed, msg); err != nil {
			return err
		}
		c.recorder.Event(pv, corev1.EventTypeWarning, reasonVolumeFailedDelete, msg)
	case corev1.PersistentVolumeReclaimRecycle:
		msg := "No recycler plugin found for the volume!"
		if _, err := c.setVolumePhase(ctx, pv, corev1.VolumeFailed, msg); err != nil {
			return err
		}
		c.recorder.Event(pv, corev1.EventTypeWarning, reasonVolumeFailedRecycle, msg)
	}
	return nil
}

// unbindVolume drops a binding this controller made.
func (c *Controller) unbindVolume(ctx context.Context, pv *corev1.PersistentVolume) error {
	upd := pv.DeepCopy()
	upd.Spec.ClaimRef = nil
	delete(upd.Annotations, volumehelpers.AnnBoundByController)
	out, err := c.cfg.Client.Core.PersistentVolumes().Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	_, err = c.setVolumePhase(ctx, out, corev1.VolumeAvailable, "")
	return err
}

// setVolumePhase writes the volume's phase (and message) if it changed,
// with the time of the transition.
func (c *Controller) setVolumePhase(ctx context.Context, pv *corev1.PersistentVolume, phase corev1.PersistentVolumePhase, msg string) (*corev1.PersistentVolume, error) {
	if pv.Status.Phase == phase && pv.Status.Message == msg {
		return pv, nil
	}
	upd := pv.DeepCopy()
	if upd.Status.Phase != phase {
		now := metav1.Now()
		upd.Status.LastPhaseTransitionTime = &now
	}
	upd.Status.Phase, upd.Status.Message = phase, msg
	return c.cfg.Client.Core.PersistentVolumes().UpdateStatus(ctx, upd, metav1.UpdateOptions{})
}
