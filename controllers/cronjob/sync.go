package cronjob

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	shared, err := c.cronLister.CronJobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.stopTimer(key)
		return nil
	}
	if err != nil {
		return err
	}
	jobs, err := c.ownedJobs(shared)
	if err != nil {
		return err
	}
	cj := shared.DeepCopy()
	if cj, err = c.trackJobs(ctx, cj, jobs); err != nil {
		return err
	}
	wake, schedErr := c.runSchedule(ctx, key, cj, jobs)
	if !apiequality.Semantic.DeepEqual(cj.Status, shared.Status) {
		updated, err := c.client.Batch.CronJobs(ns).UpdateStatus(ctx, cj, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update status of cronjob %s: %w", key, err)
		}
		cj = updated
	}
	if schedErr != nil {
		return schedErr
	}
	if cj.DeletionTimestamp == nil {
		if err := c.cleanupHistory(ctx, cj, jobs); err != nil {
			return err
		}
	}
	if !wake.IsZero() {
		c.wakeAt(key, wake)
	} else {
		c.stopTimer(key)
	}
	return nil
}

// ownedJobs are the Jobs the CronJob controls.
func (c *Controller) ownedJobs(cj *batchv1.CronJob) ([]*batchv1.Job, error) {
	all, err := c.jobLister.Jobs(cj.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var own []*batchv1.Job
	for _, j := range all {
		if ref := metav1.GetControllerOf(j); ref != nil && ref.UID == cj.UID {
			own = append(own, j)
		}
	}
	return own, nil
}

// trackJobs brings status.active and lastSuccessfulTime in line with the
// Jobs: finished ones leave the active list, missing ones too.
func (c *Controller) trackJobs(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) (*batchv1.CronJob, error) {
	owned := map[types.UID]bool{}
	for _, j := range jobs {
		owned[j.UID] = true
		finished := finishedCondition(j)
		active := inActive(cj, j.UID)
		switch {
		case !active && finished == "":
			// Our status may be older than our Job: ask the API server
			// before calling the Job unexpected.
			fresh, err := c.client.Batch.CronJobs(cj.Namespace).Get(ctx, cj.Name, metav1.GetOptions{})
			if err != nil {
				return cj, fmt.Errorf("get cronjob %s/%s: %w", cj.Namespace, cj.Name, err)
			}
			if inActive(fresh, j.UID) {
				fresh.Status.DeepCopyInto(&cj.Status)
				cj.ResourceVersion = fresh.ResourceVersion
				continue
			}
			c.recorder.Eventf(cj, corev1.EventTypeWarning, "UnexpectedJob", "Saw a job that the controller did not create or forgot: %s", j.Name)
		case active && finished != "":
			removeActive(cj, j.UID)
			c.recorder.Eventf(cj, corev1.EventTypeNormal, "SawCompletedJob", "Saw completed job: %s, status: %v", j.Name, finished)
		}
		if finished == batchv1.JobComplete && j.Status.CompletionTime != nil &&
			(cj.Status.LastSuccessfulTime == nil || cj.Status.LastSuccessfulTime.Before(j.Status.CompletionTime)) {
			t := *j.Status.CompletionTime
			cj.Status.LastSuccessfulTime = &t
		}
	}
	for _, ref := range append([]corev1.ObjectReference(nil), cj.Status.Active...) {
		if owned[ref.UID] {
			continue
		}
		// Not in the cache: perhaps just created, perhaps gone.
		j, err := c.client.Batch.Jobs(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && j.UID != ref.UID):
			removeActive(cj, ref.UID)
			c.recorder.Eventf(cj, corev1.EventTypeNormal, "MissingJob", "Active job went missing: %v", ref.Name)
		case err != nil:
			return cj, fmt.Errorf("get job %s/%s: %w", ref.Namespace, ref.Name, err)
		}
	}
	return cj, nil
}

// runSchedule starts the Job due now, if any, and says when to look
// again: the next run's time (zero: never, as for a suspended CronJob or
// a bad schedule).
func (c *Controller) runSchedule(ctx context.Context, key string, cj *batchv1.CronJob, jobs []*batchv1.Job) (time.Time, error) {
	if cj.DeletionTimestamp != nil {
		return time.Time{}, nil
	}
	sched, err := parseSchedule(cj)
	if err != nil {
		// Nothing runs until the user fixes the CronJob, whose update
		// brings it back here.
		var tzErr *timeZoneError
		if errors.As(err, &tzErr) {
			c.recorder.Eventf(cj, corev1.EventTypeWarning, "UnknownTimeZone", "%v", tzErr)
		} else {
			c.recorder.Eventf(cj, corev1.EventTypeWarning, "UnparseableSchedule", "unparseable schedule: %q : %s", cj.Spec.Schedule, err)
		}
		return time.Time{}, nil
	}
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		return time.Time{}, nil
	}
	now := c.clock.Now()
	untilNext := func() time.Time {
		n := sched.next(now)
		if n.IsZero() {
			return n
		}
		return n.Add(nextDelta)
	}
	earliest := cj.CreationTimestamp.Time
	if cj.Status.LastScheduleTime != nil {
		earliest = cj.Status.LastScheduleTime.Time
	}
	if d := cj.Spec.StartingDeadlineSeconds; d != nil {
		// Nothing older than the deadline can start any more: such runs
		// are skipped, as upstream does.
		if limit := now.Add(-time.Duration(*d) * time.Second); limit.After(earliest) {
			earliest = limit
		}
	}
	scheduled, tooMany := sched.mostRecent(earliest, now)
	if tooMany {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "TooManyMissedTimes", "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew")
	}
	if scheduled.IsZero() {
		return untilNext(), nil
	}
	name := jobName(cj, scheduled)
	if inActiveByName(cj, name) {
		return untilNext(), nil
	}
	if cj.Spec.ConcurrencyPolicy == batchv1.ForbidConcurrent && len(cj.Status.Active) > 0 {
		// The run waits; when the active Job finishes, its update brings
		// the CronJob back here while the time is still due.
		c.recorder.Eventf(cj, corev1.EventTypeNormal, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid")
		return untilNext(), nil
	}
	if cj.Spec.ConcurrencyPolicy == batchv1.ReplaceConcurrent {
		for _, ref := range append([]corev1.ObjectReference(nil), cj.Status.Active...) {
			if err := c.deleteJob(ctx, cj, ref.Name, ref.UID); err != nil {
				return time.Time{}, err
			}
			removeActive(cj, ref.UID)
		}
	}
	created, err := c.client.Batch.Jobs(cj.Namespace).Create(ctx, newJob(cj, name, scheduled, sched.loc), metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		// Created before, by us or someone else: no second run.
		existing, getErr := c.client.Batch.Jobs(cj.Namespace).Get(ctx, name, metav1.GetOptions{})
		if getErr != nil {
			return time.Time{}, fmt.Errorf("get job %s/%s: %w", cj.Namespace, name, getErr)
		}
		if ref := metav1.GetControllerOf(existing); ref == nil || ref.UID != cj.UID || finishedCondition(existing) != "" {
			return untilNext(), nil
		}
		created = existing
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return time.Time{}, nil // the namespace goes away with the CronJob
	case err != nil:
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "FailedCreate", "Error creating job: %v", err)
		return time.Time{}, fmt.Errorf("create job %s/%s: %w", cj.Namespace, name, err)
	default:
		c.recorder.Eventf(cj, corev1.EventTypeNormal, "SuccessfulCreate", "Created job %v", created.Name)
	}
	cj.Status.Active = append(cj.Status.Active, jobRef(created))
	cj.Status.LastScheduleTime = &metav1.Time{Time: scheduled}
	return untilNext(), nil
}

// deleteJob deletes a Job of the CronJob, its pods in the background.
func (c *Controller) deleteJob(ctx context.Context, cj *batchv1.CronJob, name string, uid types.UID) error {
	policy := metav1.DeletePropagationBackground
	err := c.client.Batch.Jobs(cj.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "FailedDelete", "Error deleting job: %v", err)
		return fmt.Errorf("delete job %s/%s: %w", cj.Namespace, name, err)
	}
	c.recorder.Eventf(cj, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted job %v", name)
	return nil
}

func inActive(cj *batchv1.CronJob, uid types.UID) bool {
	for _, ref := range cj.Status.Active {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

func inActiveByName(cj *batchv1.CronJob, name string) bool {
	for _, ref := range cj.Status.Active {
		if ref.Name == name {
			return true
		}
	}
	return false
}

func removeActive(cj *batchv1.CronJob, uid types.UID) {
	var keep []corev1.ObjectReference
	for _, ref := range cj.Status.Active {
		if ref.UID != uid {
			keep = append(keep, ref)
		}
	}
	cj.Status.Active = keep
}

// finishedCondition is Complete or Failed when the Job has that
// condition True, else "".
func finishedCondition(j *batchv1.Job) batchv1.JobConditionType {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}
	return ""
}
