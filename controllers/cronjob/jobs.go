package cronjob

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// jobName is upstream's: the CronJob's name and the scheduled time in
// minutes since the epoch, so each scheduled time makes one Job at most.
func jobName(cj *batchv1.CronJob, scheduled time.Time) string {
	return fmt.Sprintf("%s-%d", cj.Name, scheduled.Unix()/60)
}

// newJob is the Job of the CronJob's template for a scheduled time, owned
// by the CronJob and annotated with the time in the CronJob's zone.
func newJob(cj *batchv1.CronJob, name string, scheduled time.Time, loc *time.Location) *batchv1.Job {
	t := cj.Spec.JobTemplate
	annotations := maps.Clone(t.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	if cj.Spec.TimeZone == nil {
		// Upstream writes UTC when no zone is named.
		loc = time.UTC
	}
	annotations[batchv1.CronJobScheduledTimestampAnnotation] = scheduled.In(loc).Format(time.RFC3339)
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       cj.Namespace,
			Labels:          maps.Clone(t.Labels),
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))},
		},
	}
	t.Spec.DeepCopyInto(&j.Spec)
	return j
}

func jobRef(j *batchv1.Job) corev1.ObjectReference {
	return corev1.ObjectReference{
		Kind: "Job", APIVersion: batchv1.SchemeGroupVersion.String(),
		Namespace: j.Namespace, Name: j.Name, UID: j.UID, ResourceVersion: j.ResourceVersion,
	}
}

// cleanupHistory deletes the oldest finished Jobs beyond
// successfulJobsHistoryLimit and failedJobsHistoryLimit.
func (c *Controller) cleanupHistory(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) error {
	var succeeded, failed []*batchv1.Job
	for _, j := range jobs {
		switch finishedCondition(j) {
		case batchv1.JobComplete:
			succeeded = append(succeeded, j)
		case batchv1.JobFailed:
			failed = append(failed, j)
		}
	}
	for _, h := range []struct {
		jobs  []*batchv1.Job
		limit *int32
	}{{succeeded, cj.Spec.SuccessfulJobsHistoryLimit}, {failed, cj.Spec.FailedJobsHistoryLimit}} {
		if h.limit == nil || len(h.jobs) <= int(*h.limit) {
			continue
		}
		sortByStart(h.jobs)
		for _, j := range h.jobs[:len(h.jobs)-int(*h.limit)] {
			if j.DeletionTimestamp != nil {
				continue
			}
			if err := c.deleteJob(ctx, cj, j.Name, j.UID); err != nil {
				return err
			}
		}
	}
	return nil
}

// sortByStart orders Jobs oldest first by status.startTime, then by
// name; as upstream, Jobs that never started count as the newest.
func sortByStart(jobs []*batchv1.Job) {
	sort.Slice(jobs, func(a, b int) bool {
		sa, sb := jobs[a].Status.StartTime, jobs[b].Status.StartTime
		switch {
		case sa == nil && sb != nil:
			return false
		case sa != nil && sb == nil:
			return true
		case sa != nil && !sa.Equal(sb):
			return sa.Before(sb)
		}
		return jobs[a].Name < jobs[b].Name
	})
}
