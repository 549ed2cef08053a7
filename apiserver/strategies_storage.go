package apiserver

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// persistentVolumeStrategy and claimStrategy start volumes and claims in
// the Pending phase, as Kubernetes does, whatever status the client sent.
type persistentVolumeStrategy struct{ defaultStrategy }

func (persistentVolumeStrategy) prepareForCreate(w *writeCtx, obj runtime.Object) error {
	obj.(*corev1.PersistentVolume).Status = corev1.PersistentVolumeStatus{Phase: corev1.VolumePending}
	return nil
}

type claimStrategy struct{ defaultStrategy }

func (claimStrategy) prepareForCreate(w *writeCtx, obj runtime.Object) error {
	obj.(*corev1.PersistentVolumeClaim).Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
	return nil
}
