package kubelet

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/kubelet/cri"
)

// Sidecars are init containers with restartPolicy Always (KEP-753, GA in
// Kubernetes 1.33): started in their turn among the init containers, the
// next one starts once the sidecar has started (running, past its
// postStart hook and its startup probe), and they keep running, restarted
// whatever the pod's restart policy, beside the main containers. Their
// probes run as the main containers' do, and their readiness counts in
// the pod's.

// isSidecar reports whether c is a restartable init container.
func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// sidecarStarted reports whether the sidecar c, whose instances are cs
// (newest first), runs and has passed its startup probe.
func (w *podWorker) sidecarStarted(c *corev1.Container, cs []cri.ContainerStatus) bool {
	if len(cs) == 0 || cs[0].State != cri.ContainerRunning {
		return false
	}
	if c.StartupProbe == nil {
		return true
	}
	ps := w.probes[c.Name]
	return ps != nil && ps.id == cs[0].ID && ps.started
}

// syncSidecar keeps the sidecar c running; done when it has started, or
// when the main containers already ran (a sidecar restarting later holds
// nothing back).
func (w *podWorker) syncSidecar(ctx context.Context, pod *corev1.Pod, c *corev1.Container, inst map[string][]cri.ContainerStatus) (time.Duration, bool) {
	cs := inst[c.Name]
	d := w.syncContainer(ctx, pod, c, cs, false)
	if w.sidecarStarted(c, cs) || initDoneBefore(pod, inst) {
		return d, true
	}
	// Starting, or waiting for its startup probe: look again soon.
	return min(d, time.Second), false
}

// probedContainers are the containers whose probes run: the sidecars and
// the main containers.
func probedContainers(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			out = append(out, &pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// initStatusDone reports whether an init container's status lets the pod
// be initialized: a sidecar that started (or whose pod's main containers
// already ran), any other init container that exited 0.
func initStatusDone(c *corev1.Container, s corev1.ContainerStatus, mainRan bool) bool {
	if isSidecar(c) {
		return mainRan || (s.Started != nil && *s.Started)
	}
	t := s.State.Terminated
	return t != nil && t.ExitCode == 0
}

// initSpec is the pod's i-th init container (an empty one past the end,
// for a status without its spec).
func initSpec(pod *corev1.Pod, i int) *corev1.Container {
	if i < len(pod.Spec.InitContainers) {
		return &pod.Spec.InitContainers[i]
	}
	return &corev1.Container{}
}

// mainContainersRan reports whether any main container has run.
func mainContainersRan(statuses []corev1.ContainerStatus) bool {
	for _, s := range statuses {
		if s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}
