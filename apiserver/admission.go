package apiserver

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"bonsai.dev/bonsai/apiserver/admission"
	"bonsai.dev/bonsai/apiserver/registry/networking"
)

// deleteForbidden refuses the deletions the server itself refuses (its
// admission's are NamespaceLifecycle's): the range of --service-cidr
// stays while the server uses it.
func deleteForbidden(res *resource, name string) error {
	if res.gvr == gvr("networking.k8s.io", "v1", "servicecidrs") && name == networking.DefaultServiceCIDRName {
		return apierrors.NewForbidden(qualified(res), name, fmt.Errorf("the ServiceCIDR of --service-cidr may not be deleted"))
	}
	return nil
}

// The storage admission plugins' names for what they set.
const (
	pvcProtectionFinalizer   = admission.PVCProtectionFinalizer
	pvProtectionFinalizer    = admission.PVProtectionFinalizer
	isDefaultClassAnnotation = admission.IsDefaultClassAnnotation
)
