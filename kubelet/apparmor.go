package kubelet

import (
	"context"
	"os"
	"os/exec"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/kubelet/cri"
)

// appArmorAnnotationPrefix is the per-container AppArmor annotation that
// came before the securityContext field; the kubelet still honours it.
const appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"

// appArmorProfile is the container's AppArmor profile for the runtime:
// the container's field over the pod's over the annotation, as the
// kubelet reads them; "" is unconfined. Unset is the runtime's default
// where the host has AppArmor, as containerd's CRI plugin applies it.
func appArmorProfile(pod *corev1.Pod, c *corev1.Container) string {
	var p *corev1.AppArmorProfile
	if pod.Spec.SecurityContext != nil {
		p = pod.Spec.SecurityContext.AppArmorProfile
	}
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		p = c.SecurityContext.AppArmorProfile
	}
	if p == nil {
		switch a := pod.Annotations[appArmorAnnotationPrefix+c.Name]; {
		case a == "":
		case a == "unconfined":
			p = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(a, "localhost/"):
			name := strings.TrimPrefix(a, "localhost/")
			p = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		default:
			p = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
		}
	}
	if p == nil {
		// The default needs apparmor_parser to load it; without it, as
		// without AppArmor, unset is unconfined.
		if !appArmorEnabled() || !hasAppArmorParser() {
			return ""
		}
		return cri.AppArmorRuntimeDefault
	}
	switch p.Type {
	case corev1.AppArmorProfileTypeRuntimeDefault:
		return cri.AppArmorRuntimeDefault
	case corev1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile != nil {
			return *p.LocalhostProfile
		}
	}
	return ""
}

// asksAppArmor reports whether any container of the pod asks for an
// AppArmor profile other than unconfined.
func asksAppArmor(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].SecurityContext != nil && cs[i].SecurityContext.Privileged != nil && *cs[i].SecurityContext.Privileged {
				continue
			}
			if appArmorProfile(pod, &cs[i]) != "" {
				return true
			}
		}
	}
	return false
}

// appArmorEnabled reports whether the host's kernel enforces AppArmor.
var appArmorEnabled = func() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.HasPrefix(string(b), "Y")
}

func hasAppArmorParser() bool {
	_, err := exec.LookPath("apparmor_parser")
	return err == nil
}

// appArmorRejectReason and its message are the kubelet's for a pod that
// asks for AppArmor on a host without it.
const (
	appArmorRejectReason  = "AppArmor"
	appArmorRejectMessage = "Cannot enforce AppArmor: AppArmor is not enabled on the host"
)

// rejectAppArmor fails a pod, before anything of it runs, that asks for an
// AppArmor profile on a host without AppArmor: running it unconfined would
// silently drop the confinement it asked for.
func (w *podWorker) rejectAppArmor(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus) bool {
	if len(inst) > 0 || w.sandbox != nil || appArmorEnabled() || !asksAppArmor(pod) {
		return false
	}
	w.event(ctx, pod, "", corev1.EventTypeWarning, appArmorRejectReason, appArmorRejectMessage)
	st := pod.Status.DeepCopy()
	st.Phase, st.Reason, st.Message = corev1.PodFailed, appArmorRejectReason, appArmorRejectMessage
	w.postStatus(ctx, pod, *st)
	return true
}
