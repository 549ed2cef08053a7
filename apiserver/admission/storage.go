package admission

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The finalizers StorageObjectInUseProtection puts on every new claim and
// volume: the pvc-protection and pv-protection controllers remove them
// once nothing uses the object, so a claim a pod still mounts, or a volume
// still bound, is never deleted under it.
const (
	PVCProtectionFinalizer = "kubernetes.io/pvc-protection"
	PVProtectionFinalizer  = "kubernetes.io/pv-protection"
)

// The annotations that mark the StorageClass a claim without one gets;
// the beta spelling is still honoured.
const (
	IsDefaultClassAnnotation     = "storageclass.kubernetes.io/is-default-class"
	BetaIsDefaultClassAnnotation = "storageclass.beta.kubernetes.io/is-default-class"
)

var (
	claimsResource  = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	volumesResource = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
)

// StorageObjectInUseProtection is kube-apiserver's plugin of that name.
type StorageObjectInUseProtection struct{}

func (StorageObjectInUseProtection) Name() string              { return "StorageObjectInUseProtection" }
func (StorageObjectInUseProtection) Handles(op Operation) bool { return op == Create }

func (StorageObjectInUseProtection) Admit(_ context.Context, a Attributes) error {
	if a.GetSubresource() != "" {
		return nil
	}
	switch o := a.GetObject().(type) {
	case *corev1.PersistentVolumeClaim:
		if a.GetResource() == claimsResource {
			addFinalizer(&o.Finalizers, PVCProtectionFinalizer)
		}
	case *corev1.PersistentVolume:
		if a.GetResource() == volumesResource {
			addFinalizer(&o.Finalizers, PVProtectionFinalizer)
		}
	}
	return nil
}

func addFinalizer(fs *[]string, f string) {
	for _, have := range *fs {
		if have == f {
			return
		}
	}
	*fs = append(*fs, f)
}

// DefaultStorageClass is kube-apiserver's plugin of that name: a new
// claim that names no class (neither the field nor the beta annotation)
// gets the default one, the newest if several are marked. An empty class
// name is a deliberate choice of no class and stays.
type DefaultStorageClass struct {
	// StorageClasses lists the cluster's StorageClasses.
	StorageClasses func(ctx context.Context) ([]*storagev1.StorageClass, error)
}

func (DefaultStorageClass) Name() string              { return "DefaultStorageClass" }
func (DefaultStorageClass) Handles(op Operation) bool { return op == Create }

func (d DefaultStorageClass) Admit(ctx context.Context, a Attributes) error {
	pvc, ok := a.GetObject().(*corev1.PersistentVolumeClaim)
	if !ok || a.GetResource() != claimsResource || a.GetSubresource() != "" {
		return nil
	}
	if pvc.Spec.StorageClassName != nil {
		return nil
	}
	if _, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return nil
	}
	classes, err := d.StorageClasses(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if name, ok := newestDefault(classes, func(sc *storagev1.StorageClass) bool {
		return sc.Annotations[IsDefaultClassAnnotation] == "true" || sc.Annotations[BetaIsDefaultClassAnnotation] == "true"
	}); ok {
		pvc.Spec.StorageClassName = &name
	}
	return nil
}

// newestDefault is the name of the newest of the classes marked default
// (by name when two are as old), as kube-apiserver's default-class
// plugins choose among several; false when none is.
func newestDefault[T metav1.Object](classes []T, isDefault func(T) bool) (string, bool) {
	var newest T
	found := false
	for _, c := range classes {
		if !isDefault(c) {
			continue
		}
		if !found {
			newest, found = c, true
			continue
		}
		tc, tn := c.GetCreationTimestamp(), newest.GetCreationTimestamp()
		if tn.Before(&tc) || (tc.Equal(&tn) && c.GetName() < newest.GetName()) {
			newest = c
		}
	}
	if !found {
		return "", false
	}
	return newest.GetName(), true
}
