package job

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

func indexed(completions, parallelism int32) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Spec.CompletionMode = ptr(batchv1.IndexedCompletion)
		j.Spec.Completions, j.Spec.Parallelism = ptr(completions), ptr(parallelism)
	}
}

// byIndex maps the Job's running pods by completion index.
func (h *harness) byIndex(j *batchv1.Job) map[int]corev1.Pod {
	out := map[int]corev1.Pod{}
	for _, p := range h.running(j) {
		out[podIndex(&p)] = p
	}
	return out
}

// waitIndexes waits for running pods of exactly these indexes.
func (h *harness) waitIndexes(j *batchv1.Job, want ...int) map[int]corev1.Pod {
	h.t.Helper()
	var pods map[int]corev1.Pod
	clustertest.Eventually(h.t, waitFor, func() error {
		pods = h.byIndex(j)
		got := []int{}
		for ix := range pods {
			got = append(got, ix)
		}
		if len(got) != len(want) {
			return fmt.Errorf("running indexes %v, want %v", got, want)
		}
		for _, ix := range want {
			if _, ok := pods[ix]; !ok {
				return fmt.Errorf("running indexes %v, want %v", got, want)
			}
		}
		return nil
	})
	return pods
}

// Each pod of an Indexed Job carries its index (annotation, label,
// hostname, JOB_COMPLETION_INDEX from the annotation); a failed index is
// re-run, and completedIndexes records the successes until all are done.
func TestIndexed(t *testing.T) {
	h := newHarness(t, 500*time.Millisecond)
	j := h.create(newJob("idx", indexed(3, 3)))
	pods := h.waitIndexes(j, 0, 1, 2)
	for ix, p := range pods {
		s := strconv.Itoa(ix)
		if p.Annotations[batchv1.JobCompletionIndexAnnotation] != s || p.Labels[batchv1.JobCompletionIndexAnnotation] != s {
			t.Errorf("pod %s: index annotation %q label %q, want %s", p.Name, p.Annotations[batchv1.JobCompletionIndexAnnotation], p.Labels[batchv1.JobCompletionIndexAnnotation], s)
		}
		if want := "idx-" + s; p.Spec.Hostname != want {
			t.Errorf("pod %s: hostname %q, want %q", p.Name, p.Spec.Hostname, want)
		}
		want := []corev1.EnvVar{{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			APIVersion: "v1", FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}}
		if diff := cmp.Diff(want, p.Spec.Containers[0].Env); diff != "" {
			t.Errorf("pod %s env (-want +got):\n%s", p.Name, diff)
		}
	}
	h.finish(pods[1], 0)
	h.waitStatus("idx", func(j *batchv1.Job) error {
		if j.Status.CompletedIndexes != "1" || j.Status.Succeeded != 1 {
			return fmt.Errorf("completedIndexes %q succeeded %d, want \"1\", 1", j.Status.CompletedIndexes, j.Status.Succeeded)
		}
		return nil
	})
	h.finish(pods[0], 3)
	pods = h.waitIndexes(j, 0, 2) // index 0 again, after its failure
	h.finish(pods[0], 0)
	h.finish(pods[2], 0)
	j = h.waitCondition("idx", batchv1.JobComplete)
	if j.Status.CompletedIndexes != "0-2" || j.Status.Succeeded != 3 || j.Status.Failed != 1 {
		t.Errorf("completedIndexes %q succeeded %d failed %d, want 0-2, 3, 1", j.Status.CompletedIndexes, j.Status.Succeeded, j.Status.Failed)
	}
}

// With backoffLimitPerIndex an index is retried with its failure count
// on the pod, after its own back-off, until it fails past the limit; it
// is then in failedIndexes and not run again, and the Job fails with
// FailedIndexes once every other index is done.
func TestBackoffLimitPerIndex(t *testing.T) {
	backoff := time.Second
	h := newHarness(t, backoff)
	j := h.create(newJob("perindex", func(j *batchv1.Job) {
		indexed(2, 2)(j)
		j.Spec.BackoffLimitPerIndex = ptr[int32](1)
	}))
	if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 2147483647 {
		t.Errorf("backoffLimit defaulted to %v, want MaxInt32 with backoffLimitPerIndex", j.Spec.BackoffLimit)
	}
	pods := h.waitIndexes(j, 0, 1)
	if got := pods[0].Annotations[batchv1.JobIndexFailureCountAnnotation]; got != "0" {
		t.Errorf("first pod of index 0: failure count %q, want 0", got)
	}
	failedAt := time.Now()
	h.finish(pods[0], 1)
	pods = h.waitIndexes(j, 0, 1)
	if got := pods[0].Annotations[batchv1.JobIndexFailureCountAnnotation]; got != "1" {
		t.Errorf("second pod of index 0: failure count %q, want 1", got)
	}
	if gap := pods[0].CreationTimestamp.Sub(failedAt.Truncate(time.Second)); gap < backoff-time.Second/2 {
		t.Errorf("index 0 re-run %s after its failure, want its back-off of %s", gap, backoff)
	}
	h.finish(pods[0], 1)
	h.waitStatus("perindex", func(j *batchv1.Job) error {
		if j.Status.FailedIndexes == nil || *j.Status.FailedIndexes != "0" || j.Status.Failed != 2 {
			return fmt.Errorf("failedIndexes %v failed %d, want \"0\", 2", j.Status.FailedIndexes, j.Status.Failed)
		}
		return nil
	})
	h.waitIndexes(j, 1) // index 0 is not run again
	h.finish(pods[1], 0)
	j = h.waitCondition("perindex", batchv1.JobFailed)
	if c := conditionOf(j, batchv1.JobFailed); c.Reason != batchv1.JobReasonFailedIndexes {
		t.Errorf("Failed reason %q, want FailedIndexes", c.Reason)
	}
	if j.Status.CompletedIndexes != "1" {
		t.Errorf("completedIndexes %q, want 1", j.Status.CompletedIndexes)
	}
}

// More failed indexes than maxFailedIndexes fail the Job at once.
func TestMaxFailedIndexes(t *testing.T) {
	h := newHarness(t, 200*time.Millisecond)
	j := h.create(newJob("maxfailed", func(j *batchv1.Job) {
		indexed(3, 3)(j)
		j.Spec.BackoffLimitPerIndex = ptr[int32](0)
		j.Spec.MaxFailedIndexes = ptr[int32](0)
	}))
	pods := h.waitIndexes(j, 0, 1, 2)
	h.finish(pods[2], 1)
	j = h.waitCondition("maxfailed", batchv1.JobFailed)
	if c := conditionOf(j, batchv1.JobFailed); c.Reason != batchv1.JobReasonMaxFailedIndexesExceeded {
		t.Errorf("Failed reason %q, want MaxFailedIndexesExceeded", c.Reason)
	}
	if j.Status.FailedIndexes == nil || *j.Status.FailedIndexes != "2" {
		t.Errorf("failedIndexes %v, want 2", j.Status.FailedIndexes)
	}
	clustertest.Eventually(t, waitFor, func() error {
		if n := len(h.running(j)); n != 0 {
			return fmt.Errorf("%d pods still running", n)
		}
		return nil
	})
}

// A success policy met by index 0 makes the Job SuccessCriteriaMet and
// then Complete with reason SuccessPolicy, its other pods deleted.
func TestSuccessPolicy(t *testing.T) {
	h := newHarness(t, time.Second)
	j := h.create(newJob("sp", func(j *batchv1.Job) {
		indexed(3, 3)(j)
		j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr("0")}}}
	}))
	pods := h.waitIndexes(j, 0, 1, 2)
	h.finish(pods[0], 0)
	j = h.waitCondition("sp", batchv1.JobComplete)
	for _, ct := range []batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete} {
		c := conditionOf(j, ct)
		if c == nil || c.Reason != batchv1.JobReasonSuccessPolicy || c.Message != "Matched rules at index 0" {
			t.Errorf("%s condition %+v, want reason SuccessPolicy, message %q", ct, c, "Matched rules at index 0")
		}
	}
	if j.Status.CompletedIndexes != "0" || j.Status.Succeeded != 1 || j.Status.Active != 0 {
		t.Errorf("completedIndexes %q succeeded %d active %d, want 0, 1, 0", j.Status.CompletedIndexes, j.Status.Succeeded, j.Status.Active)
	}
	clustertest.Eventually(t, waitFor, func() error {
		if n := len(h.running(j)); n != 0 {
			return fmt.Errorf("%d pods still running", n)
		}
		return nil
	})
}

// succeededCount alone is met by that many completed indexes.
func TestSuccessRuleMet(t *testing.T) {
	j := newJob("x", indexed(5, 5))
	for _, tc := range []struct {
		rule batchv1.SuccessPolicyRule
		done []int
		want bool
	}{
		{batchv1.SuccessPolicyRule{SucceededCount: ptr[int32](2)}, []int{3}, false},
		{batchv1.SuccessPolicyRule{SucceededCount: ptr[int32](2)}, []int{3, 4}, true},
		{batchv1.SuccessPolicyRule{SucceededIndexes: ptr("0-2")}, []int{0, 1, 3}, false},
		{batchv1.SuccessPolicyRule{SucceededIndexes: ptr("0-2")}, []int{0, 1, 2}, true},
		{batchv1.SuccessPolicyRule{SucceededIndexes: ptr("0-2,4"), SucceededCount: ptr[int32](2)}, []int{4, 3, 1}, true},
		{batchv1.SuccessPolicyRule{SucceededIndexes: ptr("0-2,4"), SucceededCount: ptr[int32](2)}, []int{4, 3}, false},
	} {
		j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{tc.rule}}
		done := indexSet{}
		for _, ix := range tc.done {
			done[ix] = true
		}
		if got := successRuleMet(j, done) == 0; got != tc.want {
			t.Errorf("rule %+v with %v done: met %v, want %v", tc.rule, tc.done, got, tc.want)
		}
	}
}

func TestIndexSet(t *testing.T) {
	for in, want := range map[string]string{"": "", "1": "1", "0,1,2,5,7-8": "0-2,5,7-8", "3-4,1,9": "1,3-4", "x,2": "2"} {
		if got := parseIndexes(in, 9).String(); got != want {
			t.Errorf("parseIndexes(%q) = %q, want %q", in, got, want)
		}
	}
}
