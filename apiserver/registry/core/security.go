package core

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateSecurityProfiles checks the seccomp and AppArmor profiles of a
// pod and its containers as kube-apiserver does: a known type, and a
// Localhost profile that names a relative path under the node's profile
// dir (never "..", never absolute) and only for that type.
func ValidateSecurityProfiles(s *corev1.PodSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sc := s.SecurityContext; sc != nil {
		sp := p.Child("securityContext")
		errs = append(errs, validateSeccompProfile(sc.SeccompProfile, sp.Child("seccompProfile"))...)
		errs = append(errs, validateAppArmorProfile(sc.AppArmorProfile, sp.Child("appArmorProfile"))...)
	}
	for _, group := range []struct {
		name string
		cs   []corev1.Container
	}{{"initContainers", s.InitContainers}, {"containers", s.Containers}} {
		for i, c := range group.cs {
			if c.SecurityContext == nil {
				continue
			}
			sp := p.Child(group.name).Index(i).Child("securityContext")
			errs = append(errs, validateSeccompProfile(c.SecurityContext.SeccompProfile, sp.Child("seccompProfile"))...)
			errs = append(errs, validateAppArmorProfile(c.SecurityContext.AppArmorProfile, sp.Child("appArmorProfile"))...)
		}
	}
	return errs
}

func validateSeccompProfile(sp *corev1.SeccompProfile, p *field.Path) field.ErrorList {
	if sp == nil {
		return nil
	}
	var errs field.ErrorList
	switch sp.Type {
	case corev1.SeccompProfileTypeLocalhost, corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined:
	case "":
		errs = append(errs, field.Required(p.Child("type"), "type is required when seccompProfile is set"))
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), sp.Type, []string{string(corev1.SeccompProfileTypeLocalhost), string(corev1.SeccompProfileTypeRuntimeDefault), string(corev1.SeccompProfileTypeUnconfined)}))
	}
	return append(errs, validateLocalhostProfile(sp.Type == corev1.SeccompProfileTypeLocalhost, sp.LocalhostProfile, sp, p)...)
}

func validateAppArmorProfile(ap *corev1.AppArmorProfile, p *field.Path) field.ErrorList {
	if ap == nil {
		return nil
	}
	var errs field.ErrorList
	switch ap.Type {
	case corev1.AppArmorProfileTypeLocalhost, corev1.AppArmorProfileTypeRuntimeDefault, corev1.AppArmorProfileTypeUnconfined:
	case "":
		errs = append(errs, field.Required(p.Child("type"), "type is required when appArmorProfile is set"))
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), ap.Type, []string{string(corev1.AppArmorProfileTypeLocalhost), string(corev1.AppArmorProfileTypeRuntimeDefault), string(corev1.AppArmorProfileTypeUnconfined)}))
	}
	lp := p.Child("localhostProfile")
	switch {
	case ap.Type != corev1.AppArmorProfileTypeLocalhost && ap.LocalhostProfile != nil:
		errs = append(errs, field.Invalid(lp, ap, "can only be set when AppArmor type is Localhost"))
	case ap.Type != corev1.AppArmorProfileTypeLocalhost:
	case ap.LocalhostProfile == nil:
		errs = append(errs, field.Required(lp, "must be set when AppArmor type is Localhost"))
	case strings.TrimSpace(*ap.LocalhostProfile) != *ap.LocalhostProfile:
		// An AppArmor profile is a name loaded in the kernel, not a path.
		errs = append(errs, field.Invalid(lp, *ap.LocalhostProfile, "must not be padded with whitespace"))
	case *ap.LocalhostProfile == "":
		errs = append(errs, field.Required(lp, "must be set when AppArmor type is Localhost"))
	case len(*ap.LocalhostProfile) > 4095:
		errs = append(errs, field.TooLong(lp, "", 4095))
	}
	return errs
}

// validateLocalhostProfile: set exactly when the type is Localhost, and
// then a descending relative path.
func validateLocalhostProfile(localhost bool, profile *string, whole any, p *field.Path) field.ErrorList {
	lp := p.Child("localhostProfile")
	switch {
	case localhost && profile == nil:
		return field.ErrorList{field.Required(lp, "must be set when seccomp type is Localhost")}
	case localhost:
		return validateLocalDescendingPath(*profile, lp)
	case profile != nil:
		return field.ErrorList{field.Invalid(lp, whole, "can only be set when seccomp type is Localhost")}
	}
	return nil
}

// sysctlName is kube-apiserver's rule for a sysctl's name: dot- or
// slash-separated segments of lower-case letters, digits, '-' and '_'
// that start and end with a letter or digit, 253 characters at most.
const sysctlNameFmt = "([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?"

var sysctlNameRE = regexp.MustCompile("^" + sysctlNameFmt + "$")

const maxSysctlName = 253

// ValidateSysctls checks the names of a pod's sysctls, as kube-apiserver
// does: named, well-formed, each once, and no network sysctl for a pod on
// the host's network nor an IPC one for a pod in the host's IPC namespace.
// Whether a sysctl is allowed at all is the kubelet's to say.
func ValidateSysctls(s *corev1.PodSpec, p *field.Path) field.ErrorList {
	if s.SecurityContext == nil {
		return nil
	}
	var errs field.ErrorList
	names := map[string]bool{}
	for i, sc := range s.SecurityContext.Sysctls {
		np := p.Index(i).Child("name")
		switch {
		case sc.Name == "":
			errs = append(errs, field.Required(np, ""))
		case len(sc.Name) > maxSysctlName || !sysctlNameRE.MatchString(sc.Name):
			errs = append(errs, field.Invalid(np, sc.Name, fmt.Sprintf("must have at most %d characters and match regex %s", maxSysctlName, sysctlNameRE)))
		case names[sc.Name]:
			errs = append(errs, field.Duplicate(np, sc.Name))
		}
		names[sc.Name] = true
		// Network sysctls live under net., IPC ones are kernel.shm*,
		// kernel.msg*, kernel.sem and fs.mqueue.* (the kubelet's
		// namespaced sysctls); '/' separates them as well as '.'.
		n := strings.ReplaceAll(sc.Name, "/", ".")
		switch {
		case s.HostNetwork && strings.HasPrefix(n, "net."):
			errs = append(errs, field.Invalid(np, sc.Name, "may not be specified when 'hostNetwork' is true"))
		case s.HostIPC && (strings.HasPrefix(n, "kernel.shm") || strings.HasPrefix(n, "kernel.msg") || n == "kernel.sem" || strings.HasPrefix(n, "fs.mqueue.")):
			errs = append(errs, field.Invalid(np, sc.Name, "may not be specified when 'hostIPC' is true"))
		}
	}
	return errs
}
