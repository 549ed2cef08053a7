package job

import (
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

// A Job active longer than activeDeadlineSeconds fails with reason
// DeadlineExceeded and its running pods are deleted.
func TestActiveDeadline(t *testing.T) {
	h := newHarness(t, time.Second)
	j := h.create(newJob("deadline", func(j *batchv1.Job) {
		j.Spec.ActiveDeadlineSeconds = ptr[int64](2)
		j.Spec.Parallelism, j.Spec.Completions = ptr[int32](2), ptr[int32](2)
	}))
	h.waitRunning(j, 2)
	j = h.waitCondition("deadline", batchv1.JobFailed)
	c := conditionOf(j, batchv1.JobFailed)
	if c.Reason != batchv1.JobReasonDeadlineExceeded || c.Message != "Job was active longer than specified deadline" {
		t.Errorf("Failed condition %+v, want DeadlineExceeded", c)
	}
	if took := c.LastTransitionTime.Sub(j.Status.StartTime.Time); took < 2*time.Second {
		t.Errorf("failed %s after start, before the 2 s deadline", took)
	}
	clustertest.Eventually(t, waitFor, func() error {
		if n := len(h.pods(j)); n != 0 {
			return fmt.Errorf("%d pods left", n)
		}
		return nil
	})
}

// A Job created suspended starts no pod and says Suspended; resuming
// starts its pods and its clock; suspending again deletes the running
// pods without counting them as failed.
func TestSuspendResume(t *testing.T) {
	h := newHarness(t, time.Second)
	j := h.create(newJob("susp", func(j *batchv1.Job) {
		j.Spec.Suspend = ptr(true)
		j.Spec.Parallelism, j.Spec.Completions = ptr[int32](2), ptr[int32](4)
	}))
	j = h.waitCondition("susp", batchv1.JobSuspended)
	if c := conditionOf(j, batchv1.JobSuspended); c.Reason != "JobSuspended" || j.Status.StartTime != nil {
		t.Errorf("Suspended condition %+v startTime %v, want reason JobSuspended and no start time", c, j.Status.StartTime)
	}
	if n := len(h.pods(j)); n != 0 {
		t.Errorf("suspended Job has %d pods", n)
	}
	h.setSuspend("susp", false)
	h.waitRunning(j, 2)
	j = h.waitStatus("susp", func(j *batchv1.Job) error {
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobSuspended && c.Status == corev1.ConditionFalse && c.Reason == "JobResumed" && j.Status.StartTime != nil {
				return nil
			}
		}
		return fmt.Errorf("not resumed")
	})
	h.setSuspend("susp", true)
	clustertest.Eventually(t, waitFor, func() error {
		if n := len(h.pods(j)); n != 0 {
			return fmt.Errorf("%d pods left after suspension", n)
		}
		return nil
	})
	// The Suspended condition may be written while the deleted pods still
	// count as active; the count follows once they are gone.
	j = h.waitStatus("susp", func(j *batchv1.Job) error {
		if c := conditionOf(j, batchv1.JobSuspended); c == nil || c.Status != corev1.ConditionTrue || j.Status.Active != 0 {
			return fmt.Errorf("Suspended condition %+v, active %d", c, j.Status.Active)
		}
		return nil
	})
	if j.Status.Failed != 0 {
		t.Errorf("after suspension failed %d, want 0: suspension deletes pods without counting them as failed", j.Status.Failed)
	}
	// Resuming again restarts startTime (kept to the second by the API).
	started := j.Status.StartTime.Time
	time.Sleep(time.Until(started.Add(1100 * time.Millisecond)))
	h.setSuspend("susp", false)
	h.waitStatus("susp", func(j *batchv1.Job) error {
		if j.Status.StartTime == nil || !j.Status.StartTime.After(started) {
			return fmt.Errorf("startTime %v, want after %s", j.Status.StartTime, started)
		}
		return nil
	})
}

// With restartPolicy OnFailure containers restart in place, and their
// restarts count against backoffLimit.
func TestBackoffLimitOnFailure(t *testing.T) {
	h := newHarness(t, time.Second)
	j := h.create(newJob("onfailure", func(j *batchv1.Job) {
		j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		j.Spec.BackoffLimit = ptr[int32](2)
	}))
	p := h.waitRunning(j, 1)[0]
	restart := func(n int32) {
		clustertest.Eventually(t, waitFor, func() error {
			cur, err := h.Client.Core.Pods("default").Get(h.Ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.ContainerStatuses[0].RestartCount = n
			_, err = h.Client.Core.Pods("default").UpdateStatus(h.Ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	restart(1)
	h.waitStatus("onfailure", func(j *batchv1.Job) error {
		if j.Status.Active != 1 {
			return fmt.Errorf("active %d", j.Status.Active)
		}
		return nil
	})
	if hasCondition(h.job("onfailure"), batchv1.JobFailureTarget) {
		t.Fatalf("failed after one restart with backoffLimit 2")
	}
	restart(2)
	j = h.waitCondition("onfailure", batchv1.JobFailed)
	if c := conditionOf(j, batchv1.JobFailed); c.Reason != batchv1.JobReasonBackoffLimitExceeded {
		t.Errorf("Failed reason %q, want BackoffLimitExceeded", c.Reason)
	}
}

// A Job another controller manages (spec.managedBy) is left alone.
func TestManagedByOther(t *testing.T) {
	h := newHarness(t, time.Second)
	other := h.create(newJob("other", func(j *batchv1.Job) { j.Spec.ManagedBy = ptr("example.com/queue") }))
	ours := h.create(newJob("ours", nil))
	h.waitRunning(ours, 1)
	if n := len(h.pods(other)); n != 0 {
		t.Errorf("job managed by another controller got %d pods", n)
	}
}

func (h *harness) setSuspend(name string, v bool) {
	h.t.Helper()
	clustertest.Eventually(h.t, waitFor, func() error {
		j := h.job(name)
		j.Spec.Suspend = ptr(v)
		_, err := h.Client.Batch.Jobs("default").Update(h.Ctx, j, metav1.UpdateOptions{})
		return err
	})
}

// With podReplacementPolicy Failed a deleted pod is replaced only once it
// is Failed, and it is terminating meanwhile; with TerminatingOrFailed
// (the default) at once, the deleted pod counted as failed.
func TestPodReplacementPolicy(t *testing.T) {
	h := newHarness(t, 100*time.Millisecond)
	for _, policy := range []batchv1.PodReplacementPolicy{batchv1.Failed, batchv1.TerminatingOrFailed} {
		name := "repl-" + map[batchv1.PodReplacementPolicy]string{batchv1.Failed: "failed", batchv1.TerminatingOrFailed: "terminating"}[policy]
		j := h.create(newJob(name, func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = ptr(policy) }))
		first := h.waitRunning(j, 1)[0]
		if err := h.Client.Core.Pods("default").Delete(h.Ctx, first.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if policy == batchv1.TerminatingOrFailed {
			h.waitRunning(j, 1)
			h.waitStatus(name, func(j *batchv1.Job) error {
				if j.Status.Failed != 1 {
					return fmt.Errorf("failed %d, want 1", j.Status.Failed)
				}
				return nil
			})
			continue
		}
		h.waitStatus(name, func(j *batchv1.Job) error {
			if j.Status.Terminating == nil || *j.Status.Terminating != 1 || j.Status.Active != 0 {
				return fmt.Errorf("terminating %v active %d, want 1, 0", j.Status.Terminating, j.Status.Active)
			}
			return nil
		})
		if n := len(h.pods(j)); n != 1 {
			t.Errorf("%s: %d pods while the first terminates, want 1", policy, n)
		}
		h.finish(first, 137) // the kubelet reports it Failed
		h.waitRunning(j, 1)
		h.waitStatus(name, func(j *batchv1.Job) error {
			if j.Status.Failed != 1 || *j.Status.Terminating != 0 {
				return fmt.Errorf("failed %d terminating %d, want 1, 0", j.Status.Failed, *j.Status.Terminating)
			}
			return nil
		})
	}
}

// A work-queue Job (no completions) is Complete once a pod succeeded and
// the others finished.
func TestWorkQueue(t *testing.T) {
	h := newHarness(t, time.Second)
	j := h.create(newJob("queue", func(j *batchv1.Job) { j.Spec.Parallelism = ptr[int32](2) }))
	pods := h.waitRunning(j, 2)
	h.finish(pods[0], 0)
	h.waitStatus("queue", func(j *batchv1.Job) error {
		if j.Status.Succeeded != 1 {
			return fmt.Errorf("succeeded %d", j.Status.Succeeded)
		}
		return nil
	})
	if n := len(h.pods(j)); n != 2 {
		t.Errorf("%d pods after the first success, want 2: no new pod starts", n)
	}
	if hasCondition(h.job("queue"), batchv1.JobComplete) {
		t.Errorf("Complete while a pod still runs")
	}
	h.finish(pods[1], 0)
	j = h.waitCondition("queue", batchv1.JobComplete)
	if j.Status.Succeeded != 2 {
		t.Errorf("succeeded %d, want 2", j.Status.Succeeded)
	}
}

// Deleting a Job lets its pods go: the tracking finalizers are removed
// so that the garbage collector (or anyone) can delete them.
func TestDeletedJobReleasesPods(t *testing.T) {
	h := newHarness(t, time.Second)
	j := h.create(newJob("gone", func(j *batchv1.Job) { j.Spec.Parallelism = ptr[int32](2) }))
	h.waitRunning(j, 2)
	background := metav1.DeletePropagationBackground // no garbage collector runs here: the pods stay
	// The API server may answer a delete racing a status write with 409.
	clustertest.Eventually(t, waitFor, func() error {
		return h.Client.Batch.Jobs("default").Delete(h.Ctx, "gone", metav1.DeleteOptions{PropagationPolicy: &background})
	})
	clustertest.Eventually(t, waitFor, func() error {
		list, err := h.Client.Core.Pods("default").List(h.Ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(j.UID)})
		if err != nil {
			return err
		}
		if len(list.Items) != 2 {
			return fmt.Errorf("%d pods, want the 2 orphans", len(list.Items))
		}
		for _, p := range list.Items {
			if hasTrackingFinalizer(&p) {
				return fmt.Errorf("pod %s keeps the tracking finalizer", p.Name)
			}
		}
		return nil
	})
}

// A pod without a controller that matches a Job's selector is adopted
// (owner reference and tracking finalizer) and counts as the Job's; an
// owned pod relabelled out of the selector is released and replaced.
func TestAdoptAndRelease(t *testing.T) {
	h := newHarness(t, time.Second)
	stray, err := h.Client.Core.Pods("default").Create(h.Ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: "default", Labels: map[string]string{"app": "adopt"}},
		Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j := h.create(newJob("adopt", func(j *batchv1.Job) {
		j.Spec.ManualSelector = ptr(true)
		j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "adopt"}}
	}))
	clustertest.Eventually(t, waitFor, func() error {
		p, err := h.Client.Core.Pods("default").Get(h.Ctx, "stray", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != j.UID || !hasTrackingFinalizer(p) {
			return fmt.Errorf("stray pod owner %+v finalizers %v, want the Job and the tracking finalizer", ref, p.Finalizers)
		}
		return nil
	})
	h.waitStatus("adopt", func(j *batchv1.Job) error {
		if j.Status.Active != 1 {
			return fmt.Errorf("active %d, want the adopted pod", j.Status.Active)
		}
		return nil
	})
	// Relabelled out of the selector, it is released and replaced.
	clustertest.Eventually(t, waitFor, func() error {
		p, err := h.Client.Core.Pods("default").Get(h.Ctx, "stray", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Labels["app"] = "elsewhere"
		_, err = h.Client.Core.Pods("default").Update(h.Ctx, p, metav1.UpdateOptions{})
		return err
	})
	clustertest.Eventually(t, waitFor, func() error {
		p, err := h.Client.Core.Pods("default").Get(h.Ctx, "stray", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if metav1.GetControllerOf(p) != nil || hasTrackingFinalizer(p) {
			return fmt.Errorf("released pod keeps owner %v finalizers %v", p.OwnerReferences, p.Finalizers)
		}
		return nil
	})
	var replacement corev1.Pod
	clustertest.Eventually(t, waitFor, func() error {
		list, err := h.Client.Core.Pods("default").List(h.Ctx, metav1.ListOptions{LabelSelector: "app=adopt"})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.UID != stray.UID {
				replacement = p
				return nil
			}
		}
		return fmt.Errorf("no replacement pod running")
	})
	h.finish(replacement, 0)
	h.waitCondition("adopt", batchv1.JobComplete)
}
