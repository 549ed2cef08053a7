package kit

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PodReadyCondition is pod's Ready condition, nil when it has none.
func PodReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// IsPodReady says whether pod's Ready condition is True.
func IsPodReady(pod *corev1.Pod) bool {
	c := PodReadyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// IsPodAvailable says whether pod has been Ready for more than
// minReadySeconds at now (at once when minReadySeconds is 0), as
// upstream's podutil.IsPodAvailable.
func IsPodAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	c := PodReadyCondition(pod)
	if c == nil || c.Status != corev1.ConditionTrue {
		return false
	}
	return minReadySeconds == 0 || (!c.LastTransitionTime.IsZero() && c.LastTransitionTime.Add(time.Duration(minReadySeconds)*time.Second).Before(now))
}
