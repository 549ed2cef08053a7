package core

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// A pod's dynamic resource claims, as kube-apiserver validates them: each
// pod claim named once and naming exactly one claim or template, each
// container claim naming a pod claim (and a request of it at most once),
// and the claims the controller records in the status matching the spec.

func validatePodResourceClaims(s *corev1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, c := range s.ResourceClaims {
		p := path.Child("resourceClaims").Index(i)
		switch {
		case c.Name == "":
			errs = append(errs, field.Required(p.Child("name"), ""))
		case names[c.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		default:
			for _, msg := range validation.IsDNS1123Label(c.Name) {
				errs = append(errs, field.Invalid(p.Child("name"), c.Name, msg))
			}
			names[c.Name] = true
		}
		if c.ResourceClaimName != nil && c.ResourceClaimTemplateName != nil {
			errs = append(errs, field.Invalid(p, c, "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified"))
		}
		if c.ResourceClaimName == nil && c.ResourceClaimTemplateName == nil {
			errs = append(errs, field.Invalid(p, c, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"))
		}
		for child, v := range map[string]*string{"resourceClaimName": c.ResourceClaimName, "resourceClaimTemplateName": c.ResourceClaimTemplateName} {
			if v == nil {
				continue
			}
			for _, msg := range apivalidation.NameIsDNSSubdomain(*v, false) {
				errs = append(errs, field.Invalid(p.Child(child), *v, msg))
			}
		}
	}
	for _, cs := range []struct {
		name string
		list []corev1.Container
	}{{"initContainers", s.InitContainers}, {"containers", s.Containers}} {
		for i, c := range cs.list {
			errs = append(errs, validateContainerClaims(c.Resources.Claims, names, path.Child(cs.name).Index(i).Child("resources", "claims"))...)
		}
	}
	if s.Resources != nil {
		errs = append(errs, validateContainerClaims(s.Resources.Claims, names, path.Child("resources", "claims"))...)
	}
	return errs
}

// validateContainerClaims: each entry names a pod claim, and no claim
// (or request of it) twice.
func validateContainerClaims(claims []corev1.ResourceClaim, podClaims map[string]bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, c := range claims {
		p := path.Index(i)
		if c.Name == "" {
			errs = append(errs, field.Required(p, ""))
			continue
		}
		if seen[c.Name] {
			errs = append(errs, field.Duplicate(p, c.Name))
		} else {
			key := c.Name
			if c.Request != "" {
				for _, msg := range validation.IsDNS1123Label(c.Request) {
					errs = append(errs, field.Invalid(p.Child("request"), c.Request, msg))
				}
				key += "/" + c.Request
			}
			if seen[key] {
				errs = append(errs, field.Duplicate(p, key))
			} else if c.Request == "" {
				for k := range seen {
					if i := strings.Index(k, "/"); i >= 0 && k[:i] == c.Name {
						errs = append(errs, field.Duplicate(p, c.Name))
					}
				}
			}
			seen[key] = true
		}
		if !podClaims[c.Name] {
			e := field.NotFound(p, c.Name)
			e.Detail = "must be one of the names in pod.spec.resourceClaims"
			if len(podClaims) == 0 {
				e.Detail += " which is empty"
			} else {
				names := make([]string, 0, len(podClaims))
				for n := range podClaims {
					names = append(names, n)
				}
				sort.Strings(names)
				e.Detail += ": " + strings.Join(names, ", ")
			}
			errs = append(errs, e)
		}
	}
	return errs
}

// ValidateStatusUpdate checks what a pod status write may say of the
// pod's resource claims.
func (podStrategy) ValidateStatusUpdate(_ *registry.WriteCtx, obj, _ runtime.Object) field.ErrorList {
	pod := obj.(*corev1.Pod)
	p := field.NewPath("status", "resourceClaimStatuses")
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, st := range pod.Status.ResourceClaimStatuses {
		ip := p.Index(i)
		found := false
		for _, c := range pod.Spec.ResourceClaims {
			found = found || c.Name == st.Name
		}
		if !found {
			errs = append(errs, field.Invalid(ip.Child("name"), st.Name, "must match the name of an entry in `spec.resourceClaims`"))
		}
		if seen[st.Name] {
			errs = append(errs, field.Duplicate(ip.Child("name"), st.Name))
		}
		seen[st.Name] = true
		if st.ResourceClaimName != nil {
			for _, msg := range apivalidation.NameIsDNSSubdomain(*st.ResourceClaimName, false) {
				errs = append(errs, field.Invalid(ip.Child("resourceClaimName"), st.ResourceClaimName, msg))
			}
		}
	}
	return errs
}
