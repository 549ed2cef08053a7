package apiserver

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testJob(name string, mod func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}},
	}
	if mod != nil {
		mod(j)
	}
	return j
}

// A Job gets upstream's defaults and generated selector: template labels
// for controller-uid and job-name (new and legacy keys), a selector on
// controller-uid, the template's labels as its own, and pod failure
// policy condition patterns defaulting to True.
func TestJobDefaults(t *testing.T) {
	e := newTestEnv(t)
	j, err := e.cs.BatchV1().Jobs("default").Create(e.ctx, testJob("pi", func(j *batchv1.Job) {
		j.Spec.Template.Labels["job-name"] = "mine" // kept, as upstream
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}},
		}}}
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(j.UID)
	wantTemplate := map[string]string{"app": "pi", "job-name": "mine", batchv1.JobNameLabel: "pi", "controller-uid": uid, batchv1.ControllerUidLabel: uid}
	if diff := cmp.Diff(wantTemplate, j.Spec.Template.Labels); diff != "" {
		t.Errorf("template labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: uid}}, j.Spec.Selector); diff != "" {
		t.Errorf("selector (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"app": "pi", "job-name": "mine"}, j.Labels); diff != "" {
		t.Errorf("job labels (-want +got):\n%s", diff)
	}
	if got := j.Spec.PodFailurePolicy.Rules[0].OnPodConditions[0].Status; got != corev1.ConditionTrue {
		t.Errorf("onPodConditions status %q, want True", got)
	}
	if *j.Spec.Completions != 1 || *j.Spec.Parallelism != 1 || *j.Spec.BackoffLimit != 6 || *j.Spec.CompletionMode != batchv1.NonIndexedCompletion ||
		*j.Spec.Suspend || *j.Spec.PodReplacementPolicy != batchv1.Failed || j.Spec.ManualSelector == nil || *j.Spec.ManualSelector {
		t.Errorf("spec defaults %+v", j.Spec)
	}
}

// A CronJob's job template gets only the nested defaults (pod spec, pod
// failure policy patterns), not a Job's: as upstream, the Job it creates
// is defaulted on its own create.
func TestCronJobTemplateDefaults(t *testing.T) {
	e := newTestEnv(t)
	tmpl := testJob("t", func(j *batchv1.Job) {
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}},
		}}}
	})
	cj, err := e.cs.BatchV1().CronJobs("default").Create(e.ctx, &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly"},
		Spec:       batchv1.CronJobSpec{Schedule: "@daily", JobTemplate: batchv1.JobTemplateSpec{Spec: tmpl.Spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := cj.Spec.JobTemplate.Spec
	if s.Completions != nil || s.Parallelism != nil || s.BackoffLimit != nil || s.CompletionMode != nil || s.ManualSelector != nil {
		t.Errorf("job template got a Job's defaults: %+v", s)
	}
	if s.Template.Spec.TerminationGracePeriodSeconds == nil || s.PodFailurePolicy.Rules[0].OnPodConditions[0].Status != corev1.ConditionTrue {
		t.Errorf("job template lacks the nested defaults: %+v", s)
	}
	if *cj.Spec.SuccessfulJobsHistoryLimit != 3 || *cj.Spec.FailedJobsHistoryLimit != 1 || cj.Spec.ConcurrencyPolicy != batchv1.AllowConcurrent || *cj.Spec.Suspend {
		t.Errorf("cronjob defaults %+v", cj.Spec)
	}
}

func TestJobValidation(t *testing.T) {
	e := newTestEnv(t)
	jobs := e.cs.BatchV1().Jobs("default")
	indexed := batchv1.IndexedCompletion
	for _, tc := range []struct {
		name string
		mod  func(*batchv1.Job)
		want []string
	}{
		{"negative counts", func(j *batchv1.Job) {
			j.Spec.Parallelism, j.Spec.Completions, j.Spec.BackoffLimit = ptrTo[int32](-1), ptrTo[int32](-1), ptrTo[int32](-1)
			j.Spec.ActiveDeadlineSeconds = ptrTo[int64](0)
		}, []string{"spec.activeDeadlineSeconds", "spec.backoffLimit", "spec.completions", "spec.parallelism"}},
		{"indexed without completions", func(j *batchv1.Job) {
			j.Spec.CompletionMode = &indexed
			j.Spec.Parallelism = ptrTo[int32](2)
		}, []string{"spec.completions"}},
		{"per-index limits need indexed", func(j *batchv1.Job) {
			j.Spec.BackoffLimitPerIndex = ptrTo[int32](1)
			j.Spec.MaxFailedIndexes = ptrTo[int32](5)
			j.Spec.Completions = ptrTo[int32](2)
		}, []string{"spec.backoffLimitPerIndex", "spec.maxFailedIndexes"}},
		{"pod failure policy", func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			j.Spec.PodReplacementPolicy = ptrTo(batchv1.TerminatingOrFailed)
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{0, 3, 2}}},
				{Action: "Explode"},
			}}
		}, []string{"spec.podFailurePolicy.rules[0].action", "spec.podFailurePolicy.rules[0].onExitCodes.values[0]", "spec.podFailurePolicy.rules[0].onExitCodes.values[2]",
			"spec.podFailurePolicy.rules[1]", "spec.podFailurePolicy.rules[1].action", "spec.podReplacementPolicy", "spec.template.spec.restartPolicy"}},
		{"success policy needs indexed", func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{}}}
		}, []string{"spec.completionMode", "spec.successPolicy.rules[0]"}},
		{"selector not matching", func(j *batchv1.Job) {
			j.Spec.Template.Labels[batchv1.ControllerUidLabel] = "someone-else"
		}, []string{"spec.template.metadata.labels", "spec.template.metadata.labels[batch.kubernetes.io/controller-uid]"}},
	} {
		_, err := jobs.Create(e.ctx, testJob("bad", tc.mod), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: want 422 Invalid, got %v", tc.name, err)
			continue
		}
		var got []string
		for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
			got = append(got, c.Field)
		}
		sort.Strings(got)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: causes (-want +got):\n%s", tc.name, diff)
		}
	}
}

// On update the pod template, completion mode and policies are
// immutable, except that a suspended Job that never started may move its
// pods (mutable scheduling directives) and an Indexed Job may scale
// completions with parallelism.
func TestJobUpdateValidation(t *testing.T) {
	e := newTestEnv(t)
	jobs := e.cs.BatchV1().Jobs("default")
	j, err := jobs.Create(e.ctx, testJob("run", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j.Spec.Template.Spec.Containers[0].Image = "other"
	j.Spec.Completions = ptrTo[int32](3)
	if _, err := jobs.Update(e.ctx, j, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("changing a running Job's template and completions: %v, want Invalid", err)
	}

	s, err := jobs.Create(e.ctx, testJob("susp", func(j *batchv1.Job) { j.Spec.Suspend = ptrTo(true) }), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "a"}
	if s, err = jobs.Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("moving a suspended, unstarted Job's pods: %v", err)
	}
	s.Spec.Template.Spec.Containers[0].Image = "other"
	if _, err := jobs.Update(e.ctx, s, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("changing a suspended Job's image: %v, want Invalid", err)
	}

	ix, err := jobs.Create(e.ctx, testJob("elastic", func(j *batchv1.Job) {
		j.Spec.CompletionMode = ptrTo(batchv1.IndexedCompletion)
		j.Spec.Completions, j.Spec.Parallelism = ptrTo[int32](2), ptrTo[int32](2)
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ix.Spec.Completions, ix.Spec.Parallelism = ptrTo[int32](4), ptrTo[int32](4)
	if _, err := jobs.Update(e.ctx, ix, metav1.UpdateOptions{}); err != nil {
		t.Errorf("scaling an elastic Indexed Job: %v", err)
	}
}

// A CronJob's job template is validated as a Job's spec, at its own path.
func TestCronJobTemplateValidation(t *testing.T) {
	e := newTestEnv(t)
	tmpl := testJob("t", func(j *batchv1.Job) {
		j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		j.Spec.BackoffLimitPerIndex = ptrTo[int32](1)
	})
	_, err := e.cs.BatchV1().CronJobs("default").Create(e.ctx, &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec:       batchv1.CronJobSpec{Schedule: "@daily", JobTemplate: batchv1.JobTemplateSpec{Spec: tmpl.Spec}},
	}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want 422 Invalid, got %v", err)
	}
	var got []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		got = append(got, c.Field)
	}
	sort.Strings(got)
	want := []string{"spec.jobTemplate.spec.backoffLimitPerIndex", "spec.jobTemplate.spec.backoffLimitPerIndex", "spec.jobTemplate.spec.template.spec.restartPolicy"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("causes (-want +got):\n%s", diff)
	}
}
