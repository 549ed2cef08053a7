package job

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/controllers/kit"
)

// jobState is what one sync learns of a Job and its pods.
type jobState struct {
	key string
	job *batchv1.Job // a copy whose status the sync edits
	// written is the status as the API server last had it.
	written batchv1.JobStatus
	pods    []*corev1.Pod
	// active are running or pending pods not being deleted; terminating
	// pods are being deleted and not yet terminal.
	active      []*corev1.Pod
	terminating int32
	// uncounted are the UIDs of finished pods recorded but not yet in
	// the succeeded and failed counts.
	uncountedSucceeded, uncountedFailed sets.Set[string]
	// newSucceeded and newFailed are finished pods still holding the
	// tracking finalizer and not yet recorded.
	newSucceeded, newFailed []*corev1.Pod
	// succeeded and failed count every finished pod, recorded or not
	// (for an Indexed Job succeeded is the number of completed indexes).
	succeeded, failed int32
	completed         indexSet // Indexed only
	failedIndexes     indexSet // with backoffLimitPerIndex only
	// finish is the condition the Job is heading to: FailureTarget or
	// SuccessCriteriaMet, set once and then made Failed or Complete when
	// its pods are gone.
	finish  *batchv1.JobCondition
	backoff backoffRecord
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	shared, err := c.jobLister.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expect.Forget(key)
		c.setBackoff(key, backoffRecord{})
		return c.releaseOrphans(ctx, key, ns, name)
	}
	if err != nil {
		return err
	}
	if m := shared.Spec.ManagedBy; m != nil && *m != batchv1.JobControllerName {
		return nil // another controller runs this Job, as upstream's managedBy says
	}
	pods, err := c.jobPods(ctx, shared)
	if err != nil {
		return err
	}
	if finishedCondition(shared) != nil || shared.DeletionTimestamp != nil {
		// Nothing more to count: let every pod go. A Job being deleted
		// releases nothing (upstream's claiming rule), so the pods it
		// controls but no longer selects are let go here too.
		c.setBackoff(key, backoffRecord{})
		if shared.DeletionTimestamp != nil {
			if pods, err = c.controlledPods(shared); err != nil {
				return err
			}
		}
		return c.removeFinalizers(ctx, key, withFinalizer(pods))
	}
	now := c.clock.Now()
	s := c.observe(key, shared.DeepCopy(), pods, now)
	if s.job.Status.StartTime == nil && !suspended(s.job) {
		s.job.Status.StartTime = &metav1.Time{Time: now}
	}
	c.decideFinish(s, now)

	satisfied := c.expectationsSatisfied(key, pods)
	var manageErr error
	switch {
	case s.finish != nil:
		// Heading to Complete or Failed: record that first, so that a
		// later sync does not take the pods stopped now for failures of
		// their own, then stop every pod still running. Their finalizers
		// stay, so a failing Job counts them.
		if !hasCondition(s.job, s.finish.Type) {
			s.job.Status.Conditions = append(s.job.Status.Conditions, *s.finish)
			if err := c.updateStatus(ctx, s); err != nil {
				return err
			}
		}
		if len(s.active) > 0 {
			manageErr = c.deletePods(ctx, s.job, key, s.active, false)
			s.terminating += int32(len(s.active))
			s.active = nil
		}
	case satisfied:
		manageErr = c.manage(ctx, s, now)
	}
	c.setSuspendCondition(s, now)

	if err := c.trackAndUpdate(ctx, s, now); err != nil {
		return err
	}
	return manageErr
}

// jobPods are the pods the Job controls, after claiming them as
// upstream's controller-ref manager does: a pod without a controller
// that matches the selector is adopted (owner reference and tracking
// finalizer added), and an owned pod that no longer matches is released.
// Pods another controller owns are never touched.
func (c *Controller) jobPods(ctx context.Context, j *batchv1.Job) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(j.Spec.Selector)
	if err != nil || j.Spec.Selector == nil {
		return nil, fmt.Errorf("job %s/%s: bad selector: %v", j.Namespace, j.Name, err)
	}
	all, err := c.podLister.Pods(j.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := &kit.RefManager[*corev1.Pod]{
		Owner: j, Kind: controllerKind, Selector: sel,
		Finalizers: []string{trackingFinalizer},
		Patch:      kit.PatchWith(c.client.Core.Pods),
		CanAdopt:   kit.RecheckOwner(j, c.client.Batch.Jobs(j.Namespace).Get),
	}
	// A finished Job adopts nothing more; what it owns it keeps.
	finished := finishedCondition(j) != nil
	return m.Claim(ctx, all, func(p *corev1.Pod) bool { return !finished || metav1.IsControlledBy(p, j) })
}

// controlledPods are the cached pods j controls, whether its selector
// picks them or not.
func (c *Controller) controlledPods(j *batchv1.Job) ([]*corev1.Pod, error) {
	all, err := c.podLister.Pods(j.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, p := range all {
		if metav1.IsControlledBy(p, j) {
			out = append(out, p)
		}
	}
	return out, nil
}

// releaseOrphans removes the tracking finalizer from pods whose Job is
// gone, so they can be deleted.
func (c *Controller) releaseOrphans(ctx context.Context, key, ns, name string) error {
	all, err := c.podLister.Pods(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	var orphans []*corev1.Pod
	for _, p := range all {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "Job" && ref.Name == name && hasTrackingFinalizer(p) {
			orphans = append(orphans, p)
		}
	}
	return c.removeFinalizers(ctx, key, orphans)
}

func withFinalizer(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if hasTrackingFinalizer(p) {
			out = append(out, p)
		}
	}
	return out
}

func suspended(j *batchv1.Job) bool { return j.Spec.Suspend != nil && *j.Spec.Suspend }

// onlyReplaceFailed says a pod is replaced only once it is Failed, not
// while it terminates: podReplacementPolicy Failed, which a pod failure
// policy implies.
func onlyReplaceFailed(j *batchv1.Job) bool {
	return j.Spec.PodFailurePolicy != nil || (j.Spec.PodReplacementPolicy != nil && *j.Spec.PodReplacementPolicy == batchv1.Failed)
}

// podFailed says a pod counts as failed: phase Failed or, unless only
// failed pods are replaced, deleted before it succeeded (an orphan that
// never reaches Failed).
func podFailed(p *corev1.Pod, j *batchv1.Job) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if onlyReplaceFailed(j) {
		return false
	}
	return p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// observe sorts the pods and counts what finished.
func (c *Controller) observe(key string, j *batchv1.Job, pods []*corev1.Pod, now time.Time) *jobState {
	s := &jobState{key: key, job: j, pods: pods, written: *j.Status.DeepCopy()}
	if u := j.Status.UncountedTerminatedPods; u != nil {
		s.uncountedSucceeded = sets.New(toStrings(u.Succeeded)...)
		s.uncountedFailed = sets.New(toStrings(u.Failed)...)
	} else {
		s.uncountedSucceeded, s.uncountedFailed = sets.New[string](), sets.New[string]()
	}
	completions := 0
	if j.Spec.Completions != nil {
		completions = int(*j.Spec.Completions)
	}
	if isIndexed(j) {
		s.completed = parseIndexes(j.Status.CompletedIndexes, completions)
	}
	if j.Spec.BackoffLimitPerIndex != nil {
		failed := ""
		if j.Status.FailedIndexes != nil {
			failed = *j.Status.FailedIndexes
		}
		s.failedIndexes = parseIndexes(failed, completions)
	}
	var countedFailures []*corev1.Pod
	// Pods a finishing Job stopped did not fail their index.
	finishing := hasCondition(j, batchv1.JobFailureTarget) || hasCondition(j, batchv1.JobSuccessCriteriaMet)
	for _, p := range pods {
		switch {
		case p.DeletionTimestamp != nil && !terminal(p):
			s.terminating++
		case !terminal(p):
			s.active = append(s.active, p)
		}
		if !hasTrackingFinalizer(p) || c.expect.Pending(key, unfinalizedPod(p.UID)) {
			continue
		}
		uid := string(p.UID)
		switch {
		case p.Status.Phase == corev1.PodSucceeded && !s.uncountedFailed.Has(uid):
			if isIndexed(j) {
				if ix := podIndex(p); ix != unknownIndex && ix < completions && !s.completed[ix] {
					s.completed[ix] = true
					s.newSucceeded = append(s.newSucceeded, p)
				}
			} else if !s.uncountedSucceeded.Has(uid) {
				s.newSucceeded = append(s.newSucceeded, p)
			}
		case podFailed(p, j) && !s.uncountedFailed.Has(uid):
			verdict := judgeFailure(j, p)
			s.newFailed = append(s.newFailed, p)
			if verdict.counts() {
				countedFailures = append(countedFailures, p)
			}
			if s.failedIndexes != nil && verdict.counts() && !finishing {
				ix := podIndex(p)
				if ix != unknownIndex && ix < completions && !s.completed[ix] &&
					(verdict.is(batchv1.PodFailurePolicyActionFailIndex) || int32(annotationInt(p, indexFailureCountKey)+1) > *j.Spec.BackoffLimitPerIndex) {
					s.failedIndexes[ix] = true
				}
			}
		}
	}
	if isIndexed(j) {
		s.succeeded = int32(len(s.completed))
	} else {
		s.succeeded = j.Status.Succeeded + int32(s.uncountedSucceeded.Len()+len(s.newSucceeded))
	}
	s.failed = j.Status.Failed + int32(s.uncountedFailed.Len()+len(countedFailures))
	s.backoff = c.backoffOf(key).next(s.newSucceeded, countedFailures, now)
	return s
}

func toStrings[T ~string](in []T) []string {
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = string(v)
	}
	return out
}

// decideFinish sets s.finish when the Job has failed or succeeded, in
// upstream's order: a condition already set, a FailJob rule, the backoff
// limit, the deadline, failed indexes, then success.
func (c *Controller) decideFinish(s *jobState, now time.Time) {
	j := s.job
	if cond := conditionOf(j, batchv1.JobFailureTarget); cond != nil {
		s.finish = cond
		return
	}
	if cond := conditionOf(j, batchv1.JobSuccessCriteriaMet); cond != nil {
		s.finish = cond
		return
	}
	for _, p := range s.newFailed {
		if p.Status.Phase != corev1.PodFailed {
			continue
		}
		if v := judgeFailure(j, p); v.is(batchv1.PodFailurePolicyActionFailJob) {
			s.finish = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonPodFailurePolicy, v.message, now)
			return
		}
	}
	if s.failed > *j.Spec.BackoffLimit || pastBackoffLimitOnFailure(j, s.active) {
		s.finish = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit", now)
		return
	}
	if ads := j.Spec.ActiveDeadlineSeconds; ads != nil && j.Status.StartTime != nil && !suspended(j) {
		left := time.Duration(*ads)*time.Second - now.Sub(j.Status.StartTime.Time)
		if left <= 0 {
			s.finish = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline", now)
			return
		}
		c.queue.AddAfter(s.key, left)
	}
	if s.failedIndexes != nil && j.Spec.MaxFailedIndexes != nil && int32(len(s.failedIndexes)) > *j.Spec.MaxFailedIndexes {
		s.finish = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes", now)
		return
	}
	if len(s.failedIndexes) > 0 && c.allDone(s) {
		s.finish = newCondition(batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes, "Job has failed indexes", now)
		return
	}
	if rule := successRuleMet(j, s.completed); rule >= 0 {
		s.finish = newCondition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonSuccessPolicy, fmt.Sprintf("Matched rules at index %d", rule), now)
		return
	}
	if !c.allDone(s) {
		return
	}
	s.finish = newCondition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, "Reached expected number of succeeded pods", now)
}

// allDone says the Job's work is over: every completion reached (failed
// indexes included), or, for a work queue without completions, a pod
// succeeded and none is left running.
func (c *Controller) allDone(s *jobState) bool {
	j := s.job
	if j.Spec.Completions == nil {
		return s.succeeded > 0 && len(s.active) == 0
	}
	if isIndexed(j) {
		return len(s.completed)+len(s.failedIndexes) >= int(*j.Spec.Completions)
	}
	return s.succeeded >= *j.Spec.Completions
}

// pastBackoffLimitOnFailure counts container restarts against the limit
// when pods restart in place (restartPolicy OnFailure), as upstream does.
func pastBackoffLimitOnFailure(j *batchv1.Job, active []*corev1.Pod) bool {
	if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	var restarts int32
	for _, p := range active {
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			restarts += cs.RestartCount
		}
	}
	if *j.Spec.BackoffLimit == 0 {
		return restarts > 0
	}
	return restarts >= *j.Spec.BackoffLimit
}
