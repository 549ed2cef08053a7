package apiserver

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// The finalizers kube-apiserver's StorageObjectInUseProtection admission
// puts on every new claim and volume: the pvc-protection and
// pv-protection controllers remove them once nothing uses the object, so
// a claim a pod still mounts, or a volume still bound, is never deleted
// under it.
const (
	pvcProtectionFinalizer = "kubernetes.io/pvc-protection"
	pvProtectionFinalizer  = "kubernetes.io/pv-protection"
	// isDefaultClassAnnotation marks the StorageClass a claim without
	// one gets.
	isDefaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"
)

// persistentVolumeStrategy and claimStrategy start volumes and claims in
// the Pending phase, as Kubernetes does, whatever status the client sent,
// and apply the storage admission plugins that act on create.
type persistentVolumeStrategy struct{ defaultStrategy }

func (persistentVolumeStrategy) prepareForCreate(w *writeCtx, obj runtime.Object) error {
	pv := obj.(*corev1.PersistentVolume)
	pv.Status = corev1.PersistentVolumeStatus{Phase: corev1.VolumePending}
	addFinalizer(&pv.Finalizers, pvProtectionFinalizer)
	return nil
}

type claimStrategy struct{ defaultStrategy }

func (claimStrategy) prepareForCreate(w *writeCtx, obj runtime.Object) error {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
	addFinalizer(&pvc.Finalizers, pvcProtectionFinalizer)
	return w.s.defaultStorageClass(context.Background(), pvc)
}

func addFinalizer(fs *[]string, f string) {
	for _, have := range *fs {
		if have == f {
			return
		}
	}
	*fs = append(*fs, f)
}

// defaultStorageClass is the DefaultStorageClass admission: a claim that
// names no class (neither the field nor the beta annotation) gets the
// default one, the newest if several are marked. An empty class name is
// a deliberate choice of no class and stays.
func (s *Server) defaultStorageClass(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.StorageClassName != nil {
		return nil
	}
	if _, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return nil
	}
	res := s.reg.byGVR[gvr("storage.k8s.io", "v1", "storageclasses")]
	items, _, err := s.listObjects(ctx, res, "", listOptions{labels: labels.Everything(), fields: fields.Everything()})
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	var defaults []*storagev1.StorageClass
	for _, o := range items {
		sc := o.(*storagev1.StorageClass)
		if v := sc.Annotations[isDefaultClassAnnotation]; v == "true" || sc.Annotations[betaIsDefaultClassAnnotation] == "true" {
			defaults = append(defaults, sc)
		}
	}
	if len(defaults) == 0 {
		return nil
	}
	sort.Slice(defaults, func(i, j int) bool {
		ti, tj := defaults[i].CreationTimestamp, defaults[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return defaults[i].Name < defaults[j].Name
	})
	name := defaults[0].Name
	pvc.Spec.StorageClassName = &name
	return nil
}

// betaIsDefaultClassAnnotation is the old spelling, still honoured.
const betaIsDefaultClassAnnotation = "storageclass.beta.kubernetes.io/is-default-class"
