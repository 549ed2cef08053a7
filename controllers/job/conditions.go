package job

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newCondition(t batchv1.JobConditionType, reason, message string, now time.Time) *batchv1.JobCondition {
	ts := metav1.NewTime(now)
	return &batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message, LastProbeTime: ts, LastTransitionTime: ts}
}

// conditionOf is the Job's condition of type t when it is True.
func conditionOf(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if c := &j.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func hasCondition(j *batchv1.Job, t batchv1.JobConditionType) bool { return conditionOf(j, t) != nil }

// finishedCondition is the Job's Complete or Failed condition, if True.
func finishedCondition(j *batchv1.Job) *batchv1.JobCondition {
	if c := conditionOf(j, batchv1.JobComplete); c != nil {
		return c
	}
	return conditionOf(j, batchv1.JobFailed)
}

// setCondition sets a condition's status, reason and message, keeping
// the transition time when the status stays; it reports a change.
func setCondition(j *batchv1.Job, t batchv1.JobConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) bool {
	ts := metav1.NewTime(now)
	for i := range j.Status.Conditions {
		c := &j.Status.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status == status && c.Reason == reason && c.Message == message {
			return false
		}
		if c.Status != status {
			c.LastTransitionTime = ts
		}
		c.Status, c.Reason, c.Message, c.LastProbeTime = status, reason, message, ts
		return true
	}
	if status != corev1.ConditionTrue {
		// A condition that never held is not written as False.
		return false
	}
	j.Status.Conditions = append(j.Status.Conditions, *newCondition(t, reason, message, now))
	return true
}

// setSuspendCondition reports suspension and resumption. As upstream,
// resuming restarts startTime, and with it the clock of
// activeDeadlineSeconds, which counts only continuously active time.
func (c *Controller) setSuspendCondition(s *jobState, now time.Time) {
	j := s.job
	if suspended(j) {
		if s.finish == nil && setCondition(j, batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended", now) {
			c.recorder.Event(j, corev1.EventTypeNormal, "Suspended", "Job suspended")
		}
		return
	}
	if setCondition(j, batchv1.JobSuspended, corev1.ConditionFalse, "JobResumed", "Job resumed", now) {
		c.recorder.Event(j, corev1.EventTypeNormal, "Resumed", "Job resumed")
		j.Status.StartTime = &metav1.Time{Time: now}
	}
}
