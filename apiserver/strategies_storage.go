package apiserver

import (
	"k8s.io/apimachinery/pkg/runtime"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/apiserver/admission"
	"bonsai.dev/bonsai/apiserver/registry"
)

// The storage admission plugins' names for what they set.
const (
	pvcProtectionFinalizer   = admission.PVCProtectionFinalizer
	pvProtectionFinalizer    = admission.PVProtectionFinalizer
	isDefaultClassAnnotation = admission.IsDefaultClassAnnotation
)

// persistentVolumeStrategy and claimStrategy start volumes and claims in
// the Pending phase, as Kubernetes does, whatever status the client sent.
// The protection finalizers and the default StorageClass are admission's
// (StorageObjectInUseProtection, DefaultStorageClass).
type persistentVolumeStrategy struct{ registry.DefaultStrategy }

func (persistentVolumeStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	pv := obj.(*corev1.PersistentVolume)
	pv.Status = corev1.PersistentVolumeStatus{Phase: corev1.VolumePending}
	return nil
}

type claimStrategy struct{ registry.DefaultStrategy }

func (claimStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
	return nil
}
