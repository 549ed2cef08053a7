package job

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

var disruption = corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"}

// withPolicy sets a pod failure policy of one rule.
func withPolicy(rule batchv1.PodFailurePolicyRule) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{rule}}
	}
}

func onExitCodes(action batchv1.PodFailurePolicyAction, op batchv1.PodFailurePolicyOnExitCodesOperator, codes ...int32) batchv1.PodFailurePolicyRule {
	return batchv1.PodFailurePolicyRule{Action: action, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: op, Values: codes}}
}

// FailJob fails the Job at the first matching failure, whatever the
// backoff limit, with reason PodFailurePolicy and a message naming the
// container and rule.
func TestPodFailurePolicyFailJob(t *testing.T) {
	h := newHarness(t, time.Second)
	j := h.create(newJob("failjob", withPolicy(onExitCodes(batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyOnExitCodesOpIn, 42))))
	if j.Spec.PodReplacementPolicy == nil || *j.Spec.PodReplacementPolicy != batchv1.Failed {
		t.Errorf("podReplacementPolicy defaulted to %v, want Failed with a pod failure policy", j.Spec.PodReplacementPolicy)
	}
	p := h.waitRunning(j, 1)[0]
	h.finish(p, 42)
	j = h.waitCondition("failjob", batchv1.JobFailed)
	c := conditionOf(j, batchv1.JobFailed)
	wantMsg := fmt.Sprintf("Container main for pod default/%s failed with exit code 42 matching FailJob rule at index 0", p.Name)
	if c.Reason != batchv1.JobReasonPodFailurePolicy || c.Message != wantMsg {
		t.Errorf("Failed condition reason %q message %q, want PodFailurePolicy, %q", c.Reason, c.Message, wantMsg)
	}
	if ft := conditionOf(j, batchv1.JobFailureTarget); ft == nil || ft.Reason != batchv1.JobReasonPodFailurePolicy {
		t.Errorf("FailureTarget %+v, want reason PodFailurePolicy", ft)
	}
	if j.Status.Failed != 1 {
		t.Errorf("failed %d, want 1", j.Status.Failed)
	}
}

// Ignore (here on a DisruptionTarget condition) does not count the
// failure: the pod is replaced and backoffLimit 0 is not exceeded.
// Count on an exit code not in the list counts as usual.
func TestPodFailurePolicyIgnoreAndCount(t *testing.T) {
	h := newHarness(t, 200*time.Millisecond)
	j := h.create(newJob("ignore", func(j *batchv1.Job) {
		j.Spec.BackoffLimit = ptr[int32](0)
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}},
			onExitCodes(batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyOnExitCodesOpNotIn, 1, 2),
		}}
	}))
	first := h.waitRunning(j, 1)[0]
	h.finish(first, 137, disruption)
	var second corev1.Pod
	clustertest.Eventually(t, waitFor, func() error {
		pods := h.running(j)
		if len(pods) != 1 || pods[0].Name == first.Name {
			return fmt.Errorf("no replacement for the ignored failure yet")
		}
		second = pods[0]
		return nil
	})
	j = h.job("ignore")
	if j.Status.Failed != 0 || hasCondition(j, batchv1.JobFailureTarget) {
		t.Errorf("after an ignored failure: failed %d, conditions %+v; want 0 and no failure", j.Status.Failed, j.Status.Conditions)
	}
	h.finish(second, 3) // NotIn [1 2]: Count
	j = h.waitCondition("ignore", batchv1.JobFailed)
	if c := conditionOf(j, batchv1.JobFailed); c.Reason != batchv1.JobReasonBackoffLimitExceeded || j.Status.Failed != 1 {
		t.Errorf("Failed reason %q failed %d, want BackoffLimitExceeded, 1", c.Reason, j.Status.Failed)
	}
}

// FailIndex fails the pod's index at once, without its retries.
func TestPodFailurePolicyFailIndex(t *testing.T) {
	h := newHarness(t, 200*time.Millisecond)
	j := h.create(newJob("failindex", func(j *batchv1.Job) {
		indexed(2, 2)(j)
		j.Spec.BackoffLimitPerIndex = ptr[int32](3)
		withPolicy(onExitCodes(batchv1.PodFailurePolicyActionFailIndex, batchv1.PodFailurePolicyOnExitCodesOpIn, 7))(j)
	}))
	pods := h.waitIndexes(j, 0, 1)
	h.finish(pods[0], 7)
	h.waitStatus("failindex", func(j *batchv1.Job) error {
		if j.Status.FailedIndexes == nil || *j.Status.FailedIndexes != "0" {
			return fmt.Errorf("failedIndexes %v, want 0", j.Status.FailedIndexes)
		}
		return nil
	})
	h.waitIndexes(j, 1)
	h.finish(pods[1], 0)
	j = h.waitCondition("failindex", batchv1.JobFailed)
	if c := conditionOf(j, batchv1.JobFailed); c.Reason != batchv1.JobReasonFailedIndexes {
		t.Errorf("Failed reason %q, want FailedIndexes", c.Reason)
	}
	if n := len(h.pods(j)); n != 2 {
		t.Errorf("%d pods, want 2: a failed index is not retried", n)
	}
}

func TestJudgeFailure(t *testing.T) {
	pod := func(exit int32, conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Status: corev1.PodStatus{
			Phase:                 corev1.PodFailed,
			Conditions:            conds,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit}}}},
		}}
	}
	other := "sidecar"
	for _, tc := range []struct {
		name   string
		rule   batchv1.PodFailurePolicyRule
		pod    *corev1.Pod
		action string // "" when no rule matches
	}{
		{"In matches", onExitCodes(batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyOnExitCodesOpIn, 3, 4), pod(4), "FailJob"},
		{"In misses", onExitCodes(batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyOnExitCodesOpIn, 3), pod(4), ""},
		{"NotIn matches", onExitCodes(batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyOnExitCodesOpNotIn, 3), pod(4), "Count"},
		{"NotIn never matches exit 0", onExitCodes(batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyOnExitCodesOpNotIn, 3), pod(0), ""},
		{"other container", batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: &other, Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{4}}}, pod(4), ""},
		{"condition", batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}, pod(1, disruption), "Ignore"},
		{"condition False", batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}, pod(1, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse}), ""},
	} {
		j := newJob("j", withPolicy(tc.rule))
		v := judgeFailure(j, tc.pod)
		got := ""
		if v.action != nil {
			got = string(*v.action)
		}
		if got != tc.action {
			t.Errorf("%s: action %q, want %q", tc.name, got, tc.action)
		}
		if got == "FailJob" && !strings.Contains(v.message, "matching FailJob rule at index 0") {
			t.Errorf("%s: message %q", tc.name, v.message)
		}
	}
}
