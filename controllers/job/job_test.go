package job

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

// A Job with completions 4 and parallelism 2 keeps two pods running,
// labelled, owned and held by the tracking finalizer, replaces each
// success until four succeeded, then is Complete with every finalizer
// gone.
func TestCompletionsWithParallelism(t *testing.T) {
	h := newHarness(t, time.Second)
	j := h.create(newJob("work", func(j *batchv1.Job) {
		j.Spec.Completions, j.Spec.Parallelism = ptr[int32](4), ptr[int32](2)
	}))
	pods := h.waitRunning(j, 2)
	p := pods[0]
	wantLabels := map[string]string{"app": "work", batchv1.ControllerUidLabel: string(j.UID), batchv1.JobNameLabel: "work", "controller-uid": string(j.UID), "job-name": "work"}
	if diff := cmp.Diff(wantLabels, p.Labels); diff != "" {
		t.Errorf("pod labels (-want +got):\n%s", diff)
	}
	ref := metav1.GetControllerOf(&p)
	if ref == nil || ref.UID != j.UID || ref.Kind != "Job" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("pod owner reference %+v, want controller Job %s with blockOwnerDeletion", ref, j.UID)
	}
	if !hasTrackingFinalizer(&p) {
		t.Errorf("pod finalizers %v, want %s", p.Finalizers, trackingFinalizer)
	}
	h.waitStatus("work", func(j *batchv1.Job) error {
		if j.Status.Active != 2 || j.Status.Ready == nil || *j.Status.Ready != 2 || j.Status.StartTime == nil {
			return fmt.Errorf("active %d ready %v startTime %v, want 2, 2, set", j.Status.Active, j.Status.Ready, j.Status.StartTime)
		}
		return nil
	})

	done := map[string]bool{}
	for len(done) < 4 {
		for _, p := range h.running(j) {
			if !done[p.Name] && len(done) < 4 {
				done[p.Name] = true
				h.finish(p, 0)
			}
		}
		n := len(done)
		h.waitStatus("work", func(j *batchv1.Job) error {
			if int(j.Status.Succeeded) < n {
				return fmt.Errorf("succeeded %d, want %d", j.Status.Succeeded, n)
			}
			return nil
		})
	}
	j = h.waitCondition("work", batchv1.JobComplete)
	if c := conditionOf(j, batchv1.JobComplete); c.Reason != batchv1.JobReasonCompletionsReached {
		t.Errorf("Complete reason %q, want %q", c.Reason, batchv1.JobReasonCompletionsReached)
	}
	if !hasCondition(j, batchv1.JobSuccessCriteriaMet) {
		t.Errorf("no SuccessCriteriaMet condition before Complete: %+v", j.Status.Conditions)
	}
	if j.Status.Succeeded != 4 || j.Status.Failed != 0 || j.Status.Active != 0 || j.Status.CompletionTime == nil {
		t.Errorf("status %+v, want 4 succeeded, none active or failed, a completion time", j.Status)
	}
	pods = h.pods(j)
	if len(pods) != 4 {
		t.Errorf("%d pods, want 4 (no more created than completions)", len(pods))
	}
	clustertest.Eventually(t, waitFor, func() error {
		for _, p := range h.pods(j) {
			if hasTrackingFinalizer(&p) {
				return fmt.Errorf("pod %s still has the tracking finalizer", p.Name)
			}
		}
		return nil
	})
}

// A failed pod is replaced after the back-off; failures beyond
// backoffLimit fail the Job (FailureTarget, then Failed) with reason
// BackoffLimitExceeded and its running pods deleted.
func TestBackoffLimitExceeded(t *testing.T) {
	backoff := 2 * time.Second
	h := newHarness(t, backoff)
	j := h.create(newJob("flaky", func(j *batchv1.Job) {
		j.Spec.BackoffLimit = ptr[int32](1)
		j.Spec.Parallelism, j.Spec.Completions = ptr[int32](2), ptr[int32](3)
	}))
	pods := h.waitRunning(j, 2)
	failedAt := time.Now()
	h.finish(pods[0], 1)
	h.waitStatus("flaky", func(j *batchv1.Job) error {
		if j.Status.Failed != 1 {
			return fmt.Errorf("failed %d, want 1", j.Status.Failed)
		}
		return nil
	})
	// The replacement waits out the back-off.
	replacement := h.waitRunning(j, 2)
	var newPod corev1.Pod
	for _, p := range replacement {
		if p.Name != pods[1].Name {
			newPod = p
		}
	}
	if gap := newPod.CreationTimestamp.Sub(failedAt.Truncate(time.Second)); gap < backoff-time.Second {
		t.Errorf("replacement created %s after the failure, want the %s back-off", gap, backoff)
	}
	h.finish(newPod, 2)
	j = h.waitCondition("flaky", batchv1.JobFailed)
	c := conditionOf(j, batchv1.JobFailed)
	if c.Reason != batchv1.JobReasonBackoffLimitExceeded || c.Message != "Job has reached the specified backoff limit" {
		t.Errorf("Failed condition %+v, want reason BackoffLimitExceeded", c)
	}
	if ft := conditionOf(j, batchv1.JobFailureTarget); ft == nil || ft.Reason != batchv1.JobReasonBackoffLimitExceeded {
		t.Errorf("FailureTarget condition %+v, want reason BackoffLimitExceeded", ft)
	}
	// The pod still running when the Job failed was deleted and counted.
	if j.Status.Failed != 3 || j.Status.Active != 0 || j.Status.CompletionTime != nil {
		t.Errorf("status failed %d active %d completionTime %v, want 3, 0, none", j.Status.Failed, j.Status.Active, j.Status.CompletionTime)
	}
	clustertest.Eventually(t, waitFor, func() error {
		if n := len(h.running(j)); n != 0 {
			return fmt.Errorf("%d pods still running", n)
		}
		return nil
	})
}

// The back-off doubles with each failure after the last success.
func TestBackoffDelay(t *testing.T) {
	base, limit := 10*time.Second, 6*time.Minute
	for failures, want := range map[int]time.Duration{0: 0, 1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 6: 320 * time.Second, 7: 6 * time.Minute, 30: 6 * time.Minute} {
		if got := delay(failures, base, limit); got != want {
			t.Errorf("delay(%d) = %s, want %s", failures, got, want)
		}
	}
}
