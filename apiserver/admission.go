package apiserver

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
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

// configMapStrategy validates ConfigMap keys and size as Kubernetes does.
type configMapStrategy struct{ registry.DefaultStrategy }

func (configMapStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	c := obj.(*corev1.ConfigMap)
	errs, total := validateDataKeys(c.Data, field.NewPath("data"))
	binErrs, binTotal := validateDataKeys(c.BinaryData, field.NewPath("binaryData"))
	errs, total = append(errs, binErrs...), total+binTotal
	for k := range c.Data {
		if _, dup := c.BinaryData[k]; dup {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, "duplicate of key present in binaryData"))
		}
	}
	if total > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath(""), "", corev1.MaxSecretSize))
	}
	return errs
}

func (st configMapStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	c, o := obj.(*corev1.ConfigMap), old.(*corev1.ConfigMap)
	if o.Immutable != nil && *o.Immutable {
		if c.Immutable == nil || !*c.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !equalStringMaps(c.Data, o.Data) || len(c.BinaryData) != len(o.BinaryData) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
	}
	return errs
}

func equalStringMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
