package job

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// failureVerdict is what the pod failure policy makes of a failed pod.
type failureVerdict struct {
	// action of the first matching rule; nil when none matched (the
	// failure then counts toward backoffLimit as usual).
	action *batchv1.PodFailurePolicyAction
	// message says why the Job fails, for a FailJob rule.
	message string
}

// counts says whether the failure counts toward backoffLimit and
// status.failed: every action but Ignore.
func (v failureVerdict) counts() bool {
	return !v.is(batchv1.PodFailurePolicyActionIgnore)
}

func (v failureVerdict) is(a batchv1.PodFailurePolicyAction) bool {
	return v.action != nil && *v.action == a
}

// judgeFailure applies the Job's pod failure policy to a failed pod:
// the rules in order, the first whose exit codes or pod conditions match
// decides. Without a policy every failure counts.
func judgeFailure(j *batchv1.Job, p *corev1.Pod) failureVerdict {
	policy := j.Spec.PodFailurePolicy
	if policy == nil {
		return failureVerdict{}
	}
	for i, rule := range policy.Rules {
		action := rule.Action
		if r := rule.OnExitCodes; r != nil {
			if cs := matchingContainer(p, r); cs != nil {
				return failureVerdict{action: &action, message: fmt.Sprintf("Container %s for pod %s/%s failed with exit code %d matching %s rule at index %d",
					cs.Name, p.Namespace, p.Name, cs.State.Terminated.ExitCode, action, i)}
			}
			continue
		}
		for _, pattern := range rule.OnPodConditions {
			if hasPodCondition(p, pattern) {
				return failureVerdict{action: &action, message: fmt.Sprintf("Pod %s/%s has condition %s matching %s rule at index %d",
					p.Namespace, p.Name, pattern.Type, action, i)}
			}
		}
	}
	return failureVerdict{}
}

// matchingContainer is the first terminated container (init containers
// included) whose non-zero exit code the requirement matches. Exit code 0
// never matches: a container that succeeded did not fail the pod.
func matchingContainer(p *corev1.Pod, r *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			cs := &list[i]
			t := cs.State.Terminated
			if t == nil || t.ExitCode == 0 || (r.ContainerName != nil && *r.ContainerName != cs.Name) {
				continue
			}
			in := slices.Contains(r.Values, t.ExitCode)
			if (r.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) == in {
				return cs
			}
		}
	}
	return nil
}

func hasPodCondition(p *corev1.Pod, pattern batchv1.PodFailurePolicyOnPodConditionsPattern) bool {
	status := pattern.Status
	if status == "" {
		status = corev1.ConditionTrue
	}
	for _, c := range p.Status.Conditions {
		if c.Type == pattern.Type && c.Status == status {
			return true
		}
	}
	return false
}

// successRuleMet is the index of the first success policy rule the
// succeeded indexes satisfy, or -1.
func successRuleMet(j *batchv1.Job, succeeded indexSet) int {
	if j.Spec.SuccessPolicy == nil || !isIndexed(j) {
		return -1
	}
	completions := int(*j.Spec.Completions)
	for i, rule := range j.Spec.SuccessPolicy.Rules {
		var want, have int
		if rule.SucceededIndexes != nil {
			set := parseIndexes(*rule.SucceededIndexes, completions)
			want = len(set)
			for ix := range set {
				if succeeded[ix] {
					have++
				}
			}
		} else {
			have = len(succeeded)
		}
		if rule.SucceededCount != nil {
			want = int(*rule.SucceededCount)
		}
		if want > 0 && have >= want {
			return i
		}
	}
	return -1
}
