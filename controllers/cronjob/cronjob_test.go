package cronjob

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

// With concurrencyPolicy Allow every scheduled minute starts a Job
// named <cronjob>-<minutes since epoch>, from the template, owned by
// the CronJob and annotated with its scheduled time; both are active.
func TestAllowConcurrent(t *testing.T) {
	h := newHarness(t)
	cj := h.create(newCronJob("allow", nil))
	m1, m2 := h.minute(1), h.minute(2)
	h.setTime(m1.Add(time.Second))
	h.waitJobs(cj, m1)
	j, err := h.Client.Batch.Jobs("default").Get(h.Ctx, jobName(cj, m1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("allow-%d", m1.Unix()/60); j.Name != want {
		t.Errorf("job name %q, want %q", j.Name, want)
	}
	wantAnn := map[string]string{"note": "from template", batchv1.CronJobScheduledTimestampAnnotation: m1.UTC().Format(time.RFC3339)}
	if diff := cmp.Diff(wantAnn, j.Annotations); diff != "" {
		t.Errorf("job annotations (-want +got):\n%s", diff)
	}
	if j.Labels["cron"] != "allow" {
		t.Errorf("job labels %v, want the template's", j.Labels)
	}
	if ref := metav1.GetControllerOf(j); ref == nil || ref.UID != cj.UID || ref.Kind != "CronJob" {
		t.Errorf("job owner %+v, want the CronJob", ref)
	}
	h.setTime(m2.Add(time.Second))
	h.waitJobs(cj, m1, m2)
	clustertest.Eventually(t, waitFor, func() error {
		cj := h.cronJob("allow")
		if len(cj.Status.Active) != 2 || cj.Status.LastScheduleTime == nil || !cj.Status.LastScheduleTime.Time.Equal(m2) {
			return fmt.Errorf("active %v lastScheduleTime %v, want 2 jobs and %s", cj.Status.Active, cj.Status.LastScheduleTime, m2)
		}
		return nil
	})
}

// With Forbid a run waits while the last one is active, and starts when
// that one finishes; lastSuccessfulTime records the finish.
func TestForbidConcurrent(t *testing.T) {
	h := newHarness(t)
	cj := h.create(newCronJob("forbid", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = batchv1.ForbidConcurrent }))
	m1, m2 := h.minute(1), h.minute(2)
	h.setTime(m1.Add(time.Second))
	h.waitJobs(cj, m1)
	h.setTime(m2.Add(time.Second))
	h.waitEvent(cj, "JobAlreadyActive")
	if got := h.jobs(cj); len(got) != 1 {
		t.Fatalf("jobs %v while the first is active, want only it", got)
	}
	h.finishJob(jobName(cj, m1), batchv1.JobComplete, m1)
	h.waitJobs(cj, m1, m2)
	h.waitEvent(cj, "SawCompletedJob")
	clustertest.Eventually(t, waitFor, func() error {
		cj := h.cronJob("forbid")
		if len(cj.Status.Active) != 1 || cj.Status.Active[0].Name != jobName(cj, m2) || cj.Status.LastSuccessfulTime == nil {
			return fmt.Errorf("active %v lastSuccessfulTime %v, want the second job and a time", cj.Status.Active, cj.Status.LastSuccessfulTime)
		}
		return nil
	})
}

// With Replace a new run deletes the active one.
func TestReplaceConcurrent(t *testing.T) {
	h := newHarness(t)
	cj := h.create(newCronJob("replace", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = batchv1.ReplaceConcurrent }))
	m1, m2 := h.minute(1), h.minute(2)
	h.setTime(m1.Add(time.Second))
	h.waitJobs(cj, m1)
	h.setTime(m2.Add(time.Second))
	h.waitJobs(cj, m2)
	clustertest.Eventually(t, waitFor, func() error {
		cj := h.cronJob("replace")
		if len(cj.Status.Active) != 1 || cj.Status.Active[0].Name != jobName(cj, m2) {
			return fmt.Errorf("active %v, want only the second job", cj.Status.Active)
		}
		return nil
	})
}

// A run that could not start within startingDeadlineSeconds is skipped
// (a CronJob without a deadline still starts it late), and the next one
// starts on time.
func TestStartingDeadline(t *testing.T) {
	h := newHarness(t)
	cj := h.create(newCronJob("deadline", func(cj *batchv1.CronJob) { cj.Spec.StartingDeadlineSeconds = ptr[int64](30) }))
	late := h.create(newCronJob("late", nil))
	m1, m2 := h.minute(1), h.minute(2)
	h.setTime(m1.Add(45 * time.Second))
	h.waitJobs(late, m1)
	if got := h.jobs(cj); len(got) != 0 {
		t.Fatalf("jobs %v for a run past its deadline", got)
	}
	h.setTime(m2.Add(10 * time.Second))
	h.waitJobs(cj, m2)
}

// More than 100 missed runs are reported (TooManyMissedTimes) and only
// the most recent starts.
func TestTooManyMissed(t *testing.T) {
	h := newHarness(t)
	cj := h.create(newCronJob("missed", nil))
	now := h.minute(200).Add(30 * time.Second)
	h.setTime(now)
	h.waitEvent(cj, "TooManyMissedTimes")
	h.waitJobs(cj, h.minute(200))
}

// A suspended CronJob starts nothing; resumed, it starts the run it
// missed.
func TestSuspend(t *testing.T) {
	h := newHarness(t)
	on := h.create(newCronJob("on", nil))
	off := h.create(newCronJob("off", func(cj *batchv1.CronJob) { cj.Spec.Suspend = ptr(true) }))
	m1 := h.minute(1)
	h.setTime(m1.Add(time.Second))
	h.waitJobs(on, m1)
	if got := h.jobs(off); len(got) != 0 {
		t.Fatalf("suspended cronjob started %v", got)
	}
	clustertest.Eventually(t, waitFor, func() error {
		cj := h.cronJob("off")
		cj.Spec.Suspend = ptr(false)
		_, err := h.Client.Batch.CronJobs("default").Update(h.Ctx, cj, metav1.UpdateOptions{})
		return err
	})
	h.waitJobs(off, m1)
}

// Finished Jobs beyond successfulJobsHistoryLimit and
// failedJobsHistoryLimit are deleted, oldest first.
func TestHistoryLimits(t *testing.T) {
	h := newHarness(t)
	cj := h.create(newCronJob("history", func(cj *batchv1.CronJob) {
		cj.Spec.SuccessfulJobsHistoryLimit = ptr[int32](1)
		cj.Spec.FailedJobsHistoryLimit = ptr[int32](1)
	}))
	if d := h.cronJob("history"); *d.Spec.SuccessfulJobsHistoryLimit != 1 {
		t.Fatalf("limit %d", *d.Spec.SuccessfulJobsHistoryLimit)
	}
	var times []time.Time
	for i := 1; i <= 4; i++ {
		m := h.minute(i)
		times = append(times, m)
		h.setTime(m.Add(time.Second))
		h.waitJobs(cj, times...)
	}
	h.finishJob(jobName(cj, times[0]), batchv1.JobComplete, times[0])
	h.finishJob(jobName(cj, times[1]), batchv1.JobComplete, times[1])
	h.finishJob(jobName(cj, times[2]), batchv1.JobFailed, times[2])
	h.finishJob(jobName(cj, times[3]), batchv1.JobFailed, times[3])
	h.waitJobs(cj, times[1], times[3])
}

// The defaults keep 3 successful and 1 failed Job.
func TestHistoryLimitDefaults(t *testing.T) {
	h := newHarness(t)
	cj := h.create(newCronJob("defaults", nil))
	if *cj.Spec.SuccessfulJobsHistoryLimit != 3 || *cj.Spec.FailedJobsHistoryLimit != 1 || cj.Spec.ConcurrencyPolicy != batchv1.AllowConcurrent {
		t.Errorf("defaults %d/%d/%s, want 3/1/Allow", *cj.Spec.SuccessfulJobsHistoryLimit, *cj.Spec.FailedJobsHistoryLimit, cj.Spec.ConcurrencyPolicy)
	}
}

// timeZone decides when the schedule runs and how the scheduled time is
// written; an unknown zone is reported and runs nothing. Descriptors
// such as @hourly work.
func TestTimeZones(t *testing.T) {
	h := newHarness(t)
	tokyo := h.create(newCronJob("tokyo", func(cj *batchv1.CronJob) {
		cj.Spec.Schedule = "0 9 * * *"
		cj.Spec.TimeZone = ptr("Asia/Tokyo")
	}))
	hourly := h.create(newCronJob("hourly", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "@hourly" }))
	bad := h.create(newCronJob("bad", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = ptr("Mars/Olympus_Mons") }))
	unparseable := h.create(newCronJob("unparseable", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "61 * * * *" }))
	h.waitEvent(bad, "UnknownTimeZone")
	h.waitEvent(unparseable, "UnparseableSchedule")

	// 09:00 in Tokyo is 00:00 UTC.
	midnight := h.start.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	h.setTime(midnight.Add(time.Second))
	h.waitJobs(tokyo, midnight)
	h.waitJobs(hourly, midnight)
	j, err := h.Client.Batch.Jobs("default").Get(h.Ctx, jobName(tokyo, midnight), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := j.Annotations[batchv1.CronJobScheduledTimestampAnnotation], midnight.Format("2006-01-02")+"T09:00:00+09:00"; got != want {
		t.Errorf("scheduled timestamp %q, want %q", got, want)
	}
	for _, cj := range []*batchv1.CronJob{bad, unparseable} {
		if got := h.jobs(cj); len(got) != 0 {
			t.Errorf("cronjob %s started %v", cj.Name, got)
		}
	}
}

// An active Job deleted by someone else leaves status.active (MissingJob).
func TestMissingJob(t *testing.T) {
	h := newHarness(t)
	cj := h.create(newCronJob("missing", nil))
	m1 := h.minute(1)
	h.setTime(m1.Add(time.Second))
	h.waitJobs(cj, m1)
	clustertest.Eventually(t, waitFor, func() error {
		if n := len(h.cronJob("missing").Status.Active); n != 1 {
			return fmt.Errorf("%d active, want 1", n)
		}
		return nil
	})
	if err := h.Client.Batch.Jobs("default").Delete(h.Ctx, jobName(cj, m1), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(cj, "MissingJob")
	clustertest.Eventually(t, waitFor, func() error {
		if active := h.cronJob("missing").Status.Active; len(active) != 0 {
			return fmt.Errorf("active %v after its job was deleted", active)
		}
		return nil
	})
}
