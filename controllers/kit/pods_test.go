package kit

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodReadiness(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	pod := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: conds}}
	}
	ready := func(st corev1.ConditionStatus, ago time.Duration) corev1.PodCondition {
		c := corev1.PodCondition{Type: corev1.PodReady, Status: st}
		if ago >= 0 {
			c.LastTransitionTime = metav1.NewTime(now.Add(-ago))
		}
		return c
	}
	scheduled := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}
	for _, tc := range []struct {
		name            string
		pod             *corev1.Pod
		minReadySeconds int32
		wantReady       bool
		wantAvailable   bool
	}{
		{"no conditions", pod(), 0, false, false},
		{"no Ready condition", pod(scheduled), 0, false, false},
		{"not ready", pod(scheduled, ready(corev1.ConditionFalse, time.Hour)), 0, false, false},
		{"ready status unknown", pod(ready(corev1.ConditionUnknown, time.Hour)), 0, false, false},
		{"ready, no minReadySeconds", pod(scheduled, ready(corev1.ConditionTrue, 0)), 0, true, true},
		{"ready long enough", pod(ready(corev1.ConditionTrue, 11*time.Second)), 10, true, true},
		{"ready exactly minReadySeconds", pod(ready(corev1.ConditionTrue, 10*time.Second)), 10, true, false},
		{"ready too briefly", pod(ready(corev1.ConditionTrue, 5*time.Second)), 10, true, false},
		{"ready with no transition time", pod(ready(corev1.ConditionTrue, -1)), 10, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsPodReady(tc.pod); got != tc.wantReady {
				t.Errorf("IsPodReady = %v, want %v", got, tc.wantReady)
			}
			if got := IsPodAvailable(tc.pod, tc.minReadySeconds, now); got != tc.wantAvailable {
				t.Errorf("IsPodAvailable = %v, want %v", got, tc.wantAvailable)
			}
			if c := PodReadyCondition(tc.pod); c != nil && c.Type != corev1.PodReady {
				t.Errorf("PodReadyCondition = %v", c)
			}
		})
	}
}

func TestPodReadyCondition(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse},
	}}}
	if c := PodReadyCondition(p); c != &p.Status.Conditions[1] {
		t.Errorf("PodReadyCondition = %v, want the pod's own Ready condition", c)
	}
	if c := PodReadyCondition(&corev1.Pod{}); c != nil {
		t.Errorf("PodReadyCondition of a pod without conditions = %v, want nil", c)
	}
}
