package core

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podSpec(containers ...string) corev1.PodSpec {
	var s corev1.PodSpec
	for _, c := range containers {
		name, image, _ := strings.Cut(c, "=")
		s.Containers = append(s.Containers, corev1.Container{Name: name, Image: image})
	}
	return s
}

// TestPodStatusColumn covers the STATUS, READY and RESTARTS of pods in the
// states kubectl users meet.
func TestPodStatusColumn(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := func(r string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: r}}
	}
	terminated := func(code int32, r string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: r}}
	}
	always := corev1.ContainerRestartPolicyAlways
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want podSummary
	}{
		{"running", corev1.Pod{Spec: podSpec("a", "b"), Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", Ready: true, State: running}, {Name: "b", Ready: true, State: running}}}},
			podSummary{2, 2, "Running", "0"}},
		{"completed", corev1.Pod{Spec: podSpec("a"), Status: corev1.PodStatus{Phase: corev1.PodSucceeded,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", State: terminated(0, "Completed")}}}},
			podSummary{0, 1, "Completed", "0"}},
		{"error", corev1.Pod{Spec: podSpec("a"), Status: corev1.PodStatus{Phase: corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", State: terminated(1, "Error")}}}},
			podSummary{0, 1, "Error", "0"}},
		{"exit code", corev1.Pod{Spec: podSpec("a"), Status: corev1.PodStatus{Phase: corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", State: terminated(137, "")}}}},
			podSummary{0, 1, "ExitCode:137", "0"}},
		{"image pull", corev1.Pod{Spec: podSpec("a"), Status: corev1.PodStatus{Phase: corev1.PodPending,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", State: waiting("ImagePullBackOff")}}}},
			podSummary{0, 1, "ImagePullBackOff", "0"}},
		{"one container completed, one running and ready", corev1.Pod{Spec: podSpec("a", "b"), Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", Ready: true, State: running}, {Name: "b", State: terminated(0, "Completed")}}}},
			podSummary{1, 2, "Running", "0"}},
		{"one container completed, one running, pod not ready", corev1.Pod{Spec: podSpec("a", "b"), Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", Ready: true, State: running}, {Name: "b", State: terminated(0, "Completed")}}}},
			podSummary{1, 2, "NotReady", "0"}},
		{"init running", corev1.Pod{Spec: corev1.PodSpec{InitContainers: podSpec("i1", "i2").Containers, Containers: podSpec("a").Containers},
			Status: corev1.PodStatus{Phase: corev1.PodPending,
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "i1", State: terminated(0, "Completed")}, {Name: "i2", State: running}},
				ContainerStatuses:     []corev1.ContainerStatus{{Name: "a", State: waiting("PodInitializing")}}}},
			podSummary{0, 1, "Init:1/2", "0"}},
		{"init crash loop", corev1.Pod{Spec: corev1.PodSpec{InitContainers: podSpec("i1").Containers, Containers: podSpec("a").Containers},
			Status: corev1.PodStatus{Phase: corev1.PodPending,
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "i1", RestartCount: 4, State: waiting("CrashLoopBackOff")}},
				ContainerStatuses:     []corev1.ContainerStatus{{Name: "a", State: waiting("PodInitializing")}}}},
			podSummary{0, 1, "Init:CrashLoopBackOff", "4"}},
		{"init failed", corev1.Pod{Spec: corev1.PodSpec{InitContainers: podSpec("i1").Containers, Containers: podSpec("a").Containers},
			Status: corev1.PodStatus{Phase: corev1.PodFailed,
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "i1", State: terminated(2, "Error")}}}},
			podSummary{0, 1, "Init:Error", "0"}},
		{"sidecar started", corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "proxy", Image: "envoy", RestartPolicy: &always}}, Containers: podSpec("a").Containers},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions:            []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}},
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "proxy", Ready: true, Started: ptrTo(true), RestartCount: 1, State: running}},
				ContainerStatuses:     []corev1.ContainerStatus{{Name: "a", Ready: true, State: running}}}},
			podSummary{2, 2, "Running", "1"}},
		{"terminating", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Spec: podSpec("a"), Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", Ready: true, State: running}}}},
			podSummary{1, 1, "Terminating", "0"}},
		{"deleted after completion", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Spec: podSpec("a"), Status: corev1.PodStatus{Phase: corev1.PodSucceeded,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", State: terminated(0, "Completed")}}}},
			podSummary{0, 1, "Completed", "0"}},
		{"node lost", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Spec: podSpec("a"), Status: corev1.PodStatus{Phase: corev1.PodRunning, Reason: "NodeLost"}},
			podSummary{0, 1, "Unknown", "0"}},
		{"evicted", corev1.Pod{Spec: podSpec("a"), Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}},
			podSummary{0, 1, "Evicted", "0"}},
		{"scheduling gated", corev1.Pod{Spec: podSpec("a"), Status: corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}}},
			podSummary{0, 1, "SchedulingGated", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, summarizePod(&tc.pod), cmp.AllowUnexported(podSummary{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
