package kubelet

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The kubelet API learns from the agent's pods why a container waits.
func TestPodStatesWaiting(t *testing.T) {
	var states PodStates
	if r, ok := states.Waiting("default", "web", "app"); ok {
		t.Fatalf("before the agent runs: %q", r)
	}
	m := newPodManager(Config{})
	waiting := func(reason string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
	}
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"},
		Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "setup", State: waiting("ErrImagePull")}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", State: waiting("ImagePullBackOff")},
				{Name: "side", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			},
		}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "u2"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: waiting("CrashLoopBackOff")}}}}
	for _, p := range []*corev1.Pod{web, other} {
		m.workers[types.UID(p.UID)] = newPodWorker(m, p)
	}
	states.m.Store(m)
	for _, c := range []struct {
		ns, pod, container, want string
		ok                       bool
	}{
		{"default", "web", "app", "ImagePullBackOff", true},
		{"default", "web", "setup", "ErrImagePull", true},
		{"team", "web", "app", "CrashLoopBackOff", true},
		{"default", "web", "side", "", false},  // running
		{"default", "web", "nope", "", false},  // no such container
		{"default", "other", "app", "", false}, // no such pod
		{"elsewhere", "web", "app", "", false}, // another namespace
	} {
		if got, ok := states.Waiting(c.ns, c.pod, c.container); got != c.want || ok != c.ok {
			t.Errorf("%s/%s %s: %q %v, want %q %v", c.ns, c.pod, c.container, got, ok, c.want, c.ok)
		}
	}
}

// The kubelet's words for the waiting reasons a logs request is refused
// with.
func TestWaitingMessage(t *testing.T) {
	for reason, want := range map[string]string{
		"ImagePullBackOff":  "trying and failing to pull image",
		"ErrImagePull":      "image can't be pulled",
		"ContainerCreating": "ContainerCreating",
		"CrashLoopBackOff":  "CrashLoopBackOff",
	} {
		if got := waitingMessage(reason); got != want {
			t.Errorf("%s: %q, want %q", reason, got, want)
		}
	}
}
