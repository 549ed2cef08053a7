package kubelet

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"$(A)", "1"},
		{"x-$(A)-$(B)-y", "x-1-two-y"},
		{"$(MISSING)", "$(MISSING)"},
		{"$$(A)", "$(A)"},
		{"$A", "$A"},
		{"$(A", "$(A"},
		{"cost: 5$", "cost: 5$"},
	} {
		if got := expand(tc.in, vars); got != tc.want {
			t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPodPhase(t *testing.T) {
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	ok := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}
	failed := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}
	waiting := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	backoff := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}
	pod := func(p corev1.RestartPolicy) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: p}} }
	for _, tc := range []struct {
		name   string
		policy corev1.RestartPolicy
		init   []corev1.ContainerStatus
		cs     []corev1.ContainerStatus
		want   corev1.PodPhase
	}{
		{"creating", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{waiting}, corev1.PodPending},
		{"running", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{running, ok}, corev1.PodRunning},
		{"all done", corev1.RestartPolicyNever, nil, []corev1.ContainerStatus{ok, ok}, corev1.PodSucceeded},
		{"one failed, never", corev1.RestartPolicyNever, nil, []corev1.ContainerStatus{ok, failed}, corev1.PodFailed},
		{"one failed, on failure", corev1.RestartPolicyOnFailure, nil, []corev1.ContainerStatus{ok, failed}, corev1.PodRunning},
		{"all exited, always", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{ok}, corev1.PodRunning},
		{"crash loop", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{backoff}, corev1.PodRunning},
		{"init running", corev1.RestartPolicyAlways, []corev1.ContainerStatus{running}, []corev1.ContainerStatus{waiting}, corev1.PodPending},
		{"init failed, never", corev1.RestartPolicyNever, []corev1.ContainerStatus{failed}, []corev1.ContainerStatus{waiting}, corev1.PodFailed},
	} {
		if got := podPhase(pod(tc.policy), tc.init, tc.cs); got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A sidecar (an init container with restartPolicy Always) holds the pod
// Pending until it has started, then the main containers decide; it
// never fails the pod by exiting, and a pod of finished main containers
// is done whatever its sidecar does.
func TestPodPhaseWithSidecar(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	yes, no := true, false
	pod := func(p corev1.RestartPolicy) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: p,
			InitContainers: []corev1.Container{{Name: "proxy", RestartPolicy: &always}},
			Containers:     []corev1.Container{{Name: "main"}}}}
	}
	sidecar := func(started bool) corev1.ContainerStatus {
		return corev1.ContainerStatus{Started: &started, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	}
	exited := corev1.ContainerStatus{Started: &no, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}
	waiting := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
	running := corev1.ContainerStatus{Started: &yes, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	ok := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}
	for _, tc := range []struct {
		name   string
		policy corev1.RestartPolicy
		init   corev1.ContainerStatus
		main   corev1.ContainerStatus
		want   corev1.PodPhase
	}{
		{"sidecar not started yet", corev1.RestartPolicyAlways, sidecar(false), waiting, corev1.PodPending},
		{"sidecar started, main running", corev1.RestartPolicyAlways, sidecar(true), running, corev1.PodRunning},
		{"sidecar exited before start, never", corev1.RestartPolicyNever, exited, waiting, corev1.PodPending},
		{"sidecar restarting after main ran", corev1.RestartPolicyAlways, exited, running, corev1.PodRunning},
		{"main done, sidecar running, never", corev1.RestartPolicyNever, sidecar(true), ok, corev1.PodSucceeded},
	} {
		if got := podPhase(pod(tc.policy), []corev1.ContainerStatus{tc.init}, []corev1.ContainerStatus{tc.main}); got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}
}
