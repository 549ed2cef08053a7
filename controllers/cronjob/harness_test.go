package cronjob

import (
	"fmt"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const waitFor = 30 * time.Second

// harness runs the API server and the CronJob controller on a fake
// clock. No Job controller runs: the test finishes Jobs itself.
type harness struct {
	*clustertest.Env
	t     *testing.T
	clock *clocktesting.FakeClock
	start time.Time
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{})
	// The CronJobs a test creates get real creation times, from which
	// their first runs count: keep the start and those creations in one
	// real minute, so that minute(1) is every CronJob's first run.
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 5*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
	start := time.Now()
	clk := clocktesting.NewFakeClock(start)
	inf := client.NewInformers(e.Config)
	c, err := New(Config{Client: e.Client, Informers: inf, Logger: e.Log, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go c.Run(e.Ctx)
	return &harness{Env: e, t: t, clock: clk, start: start}
}

// minute is the n-th whole minute after the harness started.
func (h *harness) minute(n int) time.Time {
	return h.start.Truncate(time.Minute).Add(time.Duration(n) * time.Minute)
}

func newCronJob(name string, mod func(*batchv1.CronJob)) *batchv1.CronJob {
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1.CronJobSpec{
			Schedule: "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"cron": name}, Annotations: map[string]string{"note": "from template"}},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
				}}},
			},
		},
	}
	if mod != nil {
		mod(cj)
	}
	return cj
}

func (h *harness) create(cj *batchv1.CronJob) *batchv1.CronJob {
	h.t.Helper()
	out, err := h.Client.Batch.CronJobs(cj.Namespace).Create(h.Ctx, cj, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create cronjob: %v", err)
	}
	// On a loaded machine the create may land in the minute after the
	// harness started: the CronJob's first run is then a minute later,
	// so count minutes from its creation.
	if created := out.CreationTimestamp.Time; created.Truncate(time.Minute).After(h.start.Truncate(time.Minute)) {
		h.start = created
	}
	return out
}

func (h *harness) cronJob(name string) *batchv1.CronJob {
	h.t.Helper()
	cj, err := h.Client.Batch.CronJobs("default").Get(h.Ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("get cronjob: %v", err)
	}
	return cj
}

// jobs are the names of the Jobs the CronJob owns, sorted.
func (h *harness) jobs(cj *batchv1.CronJob) []string {
	h.t.Helper()
	list, err := h.Client.Batch.Jobs("default").List(h.Ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatalf("list jobs: %v", err)
	}
	var names []string
	for _, j := range list.Items {
		if ref := metav1.GetControllerOf(&j); ref != nil && ref.UID == cj.UID {
			names = append(names, j.Name)
		}
	}
	slices.Sort(names)
	return names
}

// waitJobs waits until the CronJob owns exactly the Jobs of these
// scheduled times.
func (h *harness) waitJobs(cj *batchv1.CronJob, times ...time.Time) {
	h.t.Helper()
	var want []string
	for _, t := range times {
		want = append(want, jobName(cj, t))
	}
	slices.Sort(want)
	clustertest.Eventually(h.t, waitFor, func() error {
		if got := h.jobs(cj); !slices.Equal(got, want) {
			return fmt.Errorf("cronjob %s: jobs %v, want %v", cj.Name, got, want)
		}
		return nil
	})
}

// waitEvent waits for an event of the reason about the CronJob.
func (h *harness) waitEvent(cj *batchv1.CronJob, reason string) corev1.Event {
	h.t.Helper()
	var ev corev1.Event
	clustertest.Eventually(h.t, waitFor, func() error {
		list, err := h.Client.Core.Events("default").List(h.Ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.UID == cj.UID && e.Reason == reason {
				ev = e
				return nil
			}
		}
		return fmt.Errorf("no %s event for cronjob %s", reason, cj.Name)
	})
	return ev
}

// finishJob marks a Job finished as the Job controller would.
func (h *harness) finishJob(name string, cond batchv1.JobConditionType, started time.Time) {
	h.t.Helper()
	clustertest.Eventually(h.t, waitFor, func() error {
		j, err := h.Client.Batch.Jobs("default").Get(h.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewTime(h.clock.Now())
		st := metav1.NewTime(started)
		j.Status.StartTime = &st
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: cond, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now})
		if cond == batchv1.JobComplete {
			j.Status.CompletionTime = &now
		}
		_, err = h.Client.Batch.Jobs("default").UpdateStatus(h.Ctx, j, metav1.UpdateOptions{})
		return err
	})
}

// setTime moves the fake clock, waking the controller's timers.
func (h *harness) setTime(t time.Time) { h.clock.SetTime(t) }

func ptr[T any](v T) *T { return &v }
