// Package storage holds the kinds of storage.k8s.io: their defaults and
// table columns.
package storage

import (
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("storage.k8s.io", "v1", "storageclasses"), Kind: "StorageClass", ShortNames: []string{"sc"},
			Defaulter: defaultStorageClass, Printer: &storageClassPrinter},
	}
}

func defaultStorageClass(obj runtime.Object) {
	o := obj.(*storagev1.StorageClass)
	if o.ReclaimPolicy == nil {
		o.ReclaimPolicy = ptrTo(corev1.PersistentVolumeReclaimDelete)
	}
	if o.VolumeBindingMode == nil {
		o.VolumeBindingMode = ptrTo(storagev1.VolumeBindingImmediate)
	}
}

var storageClassPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Provisioner", registry.TString, storagev1.StorageClass{}.SwaggerDoc()["provisioner"]),
		registry.Col("ReclaimPolicy", registry.TString, storagev1.StorageClass{}.SwaggerDoc()["reclaimPolicy"]),
		registry.Col("VolumeBindingMode", registry.TString, storagev1.StorageClass{}.SwaggerDoc()["volumeBindingMode"]),
		registry.Col("AllowVolumeExpansion", registry.TBoolean, storagev1.StorageClass{}.SwaggerDoc()["allowVolumeExpansion"]),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		c := o.(*storagev1.StorageClass)
		name := c.Name
		if c.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" || c.Annotations["storageclass.beta.kubernetes.io/is-default-class"] == "true" {
			name += " (default)"
		}
		reclaim := string(corev1.PersistentVolumeReclaimDelete)
		if c.ReclaimPolicy != nil {
			reclaim = string(*c.ReclaimPolicy)
		}
		binding := string(storagev1.VolumeBindingImmediate)
		if c.VolumeBindingMode != nil {
			binding = string(*c.VolumeBindingMode)
		}
		expand := c.AllowVolumeExpansion != nil && *c.AllowVolumeExpansion
		return []any{name, c.Provisioner, reclaim, binding, expand, registry.Age(c)}
	},
}

func ptrTo[T any](v T) *T { return &v }
