package job

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"bonsai.dev/bonsai/controllers/kit"
)

// maxUncounted bounds the pods one sync records in
// uncountedTerminatedPods and releases, as upstream does, so the status
// stays small and a huge Job does not starve the others.
const maxUncounted = 500

// trackAndUpdate counts finished pods and writes the status, in
// upstream's three steps so that no pod is counted twice or lost across a
// crash: (1) record the finished pods' UIDs in uncountedTerminatedPods
// (for an Indexed Job's successes, their index in completedIndexes),
// (2) remove their tracking finalizers, (3) move the recorded UIDs into
// succeeded and failed, and finish the Job when nothing is left.
func (c *Controller) trackAndUpdate(ctx context.Context, s *jobState, now time.Time) error {
	j := s.job // before the first write; s.job is the latest after it
	failing := s.finish != nil && s.finish.Type == batchv1.JobFailureTarget
	var release []*corev1.Pod
	for _, p := range s.pods {
		if len(release)+s.uncountedSucceeded.Len()+s.uncountedFailed.Len() >= maxUncounted {
			// Keep the status small and this sync short; the rest
			// comes next time.
			c.queue.Add(s.key)
			break
		}
		if !hasTrackingFinalizer(p) || c.expect.Pending(s.key, unfinalizedPod(p.UID)) {
			continue
		}
		failed := podFailed(p, j)
		if !canRelease(s, p, failed) {
			continue
		}
		release = append(release, p)
		uid := string(p.UID)
		switch {
		case p.Status.Phase == corev1.PodSucceeded && !s.uncountedFailed.Has(uid):
			if !isIndexed(j) {
				s.uncountedSucceeded.Insert(uid)
			}
		case failed || failing:
			ix := podIndex(p)
			validIndex := !isIndexed(j) || (ix != unknownIndex && ix < int(*j.Spec.Completions))
			if validIndex && judgeFailure(j, p).counts() {
				s.uncountedFailed.Insert(uid)
			}
		}
	}
	c.fillStatus(s)

	// Step 1: record, before any finalizer goes.
	if len(release) > 0 {
		if err := c.updateStatus(ctx, s); err != nil {
			return err
		}
	}
	// Step 2.
	if err := c.removeFinalizers(ctx, s.key, release); err != nil {
		return err
	}
	// Step 3: a recorded pod whose finalizer is gone is counted.
	released := sets.New[types.UID]()
	for _, p := range release {
		released.Insert(p.UID)
	}
	holding := sets.New[string]()
	for _, p := range s.pods {
		if hasTrackingFinalizer(p) && !released.Has(p.UID) {
			holding.Insert(string(p.UID))
		}
	}
	for _, uid := range sets.List(s.uncountedSucceeded.Difference(holding)) {
		s.uncountedSucceeded.Delete(uid)
		s.job.Status.Succeeded++
	}
	for _, uid := range sets.List(s.uncountedFailed.Difference(holding)) {
		s.uncountedFailed.Delete(uid)
		s.job.Status.Failed++
	}
	c.fillStatus(s)
	c.enactFinish(s, now)
	if err := c.updateStatus(ctx, s); err != nil {
		return err
	}
	c.setBackoff(s.key, s.backoff)
	return nil
}

// canRelease says a pod's finalizer may go: it succeeded, or it failed
// (and, under a pod failure policy, reached phase Failed so the policy
// can judge it), or the Job is finishing and every pod goes.
func canRelease(s *jobState, p *corev1.Pod, failed bool) bool {
	if s.finish != nil || p.Status.Phase == corev1.PodSucceeded {
		return true
	}
	if !failed {
		return false
	}
	return s.job.Spec.PodFailurePolicy == nil || p.Status.Phase == corev1.PodFailed
}

// fillStatus writes what the sync knows into the Job's status.
func (c *Controller) fillStatus(s *jobState) {
	st := &s.job.Status
	st.Active = int32(len(s.active))
	var ready int32
	for _, p := range s.active {
		if kit.IsPodReady(p) {
			ready++
		}
	}
	st.Ready = &ready
	terminating := s.terminating
	st.Terminating = &terminating
	st.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{
		Succeeded: uids(s.uncountedSucceeded),
		Failed:    uids(s.uncountedFailed),
	}
	if isIndexed(s.job) {
		st.CompletedIndexes = s.completed.String()
		st.Succeeded = int32(len(s.completed))
	}
	if s.failedIndexes != nil {
		st.FailedIndexes = s.failedIndexes.statusString()
	}
}

func uids(set sets.Set[string]) []types.UID {
	list := sets.List(set)
	out := make([]types.UID, len(list))
	for i, u := range list {
		out[i] = types.UID(u)
	}
	slices.Sort(out)
	return out
}

// enactFinish turns FailureTarget into Failed and SuccessCriteriaMet
// into Complete once every finished pod is counted and none is still
// terminating, as upstream does since 1.31.
func (c *Controller) enactFinish(s *jobState, now time.Time) {
	if s.finish == nil || s.uncountedSucceeded.Len()+s.uncountedFailed.Len() > 0 || s.terminating > 0 {
		return
	}
	j := s.job
	if s.finish.Type == batchv1.JobSuccessCriteriaMet {
		setCondition(j, batchv1.JobComplete, corev1.ConditionTrue, s.finish.Reason, s.finish.Message, now)
		j.Status.CompletionTime = &metav1.Time{Time: now}
		c.recorder.Event(j, corev1.EventTypeNormal, "Completed", "Job completed")
	} else {
		setCondition(j, batchv1.JobFailed, corev1.ConditionTrue, s.finish.Reason, s.finish.Message, now)
		c.recorder.Event(j, corev1.EventTypeWarning, s.finish.Reason, s.finish.Message)
	}
}

// updateStatus writes s.job's status when it changed; the write carries
// the resourceVersion read, so a sync on a stale Job fails and retries
// rather than counting twice.
func (c *Controller) updateStatus(ctx context.Context, s *jobState) error {
	if apiequality.Semantic.DeepEqual(s.written, s.job.Status) {
		return nil
	}
	updated, err := c.client.Batch.Jobs(s.job.Namespace).UpdateStatus(ctx, s.job, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update status of job %s: %w", s.key, err)
	}
	s.job = updated
	s.written = *updated.Status.DeepCopy()
	return nil
}
