package ttlafterfinished

import (
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/garbagecollector"
	"bonsai.dev/bonsai/controllers/job"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// Finished Jobs are deleted once their TTL after the finish has passed,
// by the controller's clock; Jobs without a TTL, or not finished, stay.
func TestDeletesExpiredJobs(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{})
	start := time.Now().Truncate(time.Second)
	clk := clocktesting.NewFakeClock(start)
	inf := client.NewInformers(e.Config)
	c, err := New(Config{Client: e.Client, Informers: inf, Logger: e.Log, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go c.Run(e.Ctx)

	jobs := e.Client.Batch.Jobs("default")
	create := func(name string, ttl *int32, finished batchv1.JobConditionType) {
		t.Helper()
		j, err := jobs.Create(e.Ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: batchv1.JobSpec{TTLSecondsAfterFinished: ttl, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if finished == "" {
			return
		}
		at := metav1.NewTime(start)
		j.Status.StartTime = &at
		j.Status.Conditions = []batchv1.JobCondition{{Type: finished, Status: corev1.ConditionTrue, LastTransitionTime: at, LastProbeTime: at}}
		if finished == batchv1.JobComplete {
			j.Status.CompletionTime = &at
		}
		if _, err := jobs.UpdateStatus(e.Ctx, j, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ttl := func(s int32) *int32 { return &s }
	create("short", ttl(10), batchv1.JobComplete)
	create("long", ttl(100), batchv1.JobFailed)
	create("forever", nil, batchv1.JobComplete)
	create("running", ttl(0), "")

	gone := func(name string) func() error {
		return func() error {
			_, err := jobs.Get(e.Ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("job %s still there (err %v)", name, err)
		}
	}
	exists := func(names ...string) {
		t.Helper()
		for _, n := range names {
			if _, err := jobs.Get(e.Ctx, n, metav1.GetOptions{}); err != nil {
				t.Errorf("job %s: %v, want it kept", n, err)
			}
		}
	}
	// Step the clock until the controller has queued the short TTL.
	clustertest.Eventually(t, 30*time.Second, func() error {
		if clk.Since(start) < 10*time.Second {
			clk.Step(time.Second)
		}
		return gone("short")()
	})
	if clk.Since(start) < 10*time.Second {
		t.Errorf("short deleted at +%s, before its 10 s TTL", clk.Since(start))
	}
	exists("long", "forever", "running")
	clustertest.Eventually(t, 30*time.Second, func() error {
		if clk.Since(start) < 100*time.Second {
			clk.Step(10 * time.Second)
		}
		return gone("long")()
	})
	if clk.Since(start) < 100*time.Second {
		t.Errorf("long deleted at +%s, before its 100 s TTL", clk.Since(start))
	}
	exists("forever", "running")
}

// With the Job controller and the garbage collector: a Job that
// completes is deleted once its TTL (here 1 s, on the real clock) has
// passed, and its pods after it (background propagation).
func TestDeletesCompletedJobWithJobController(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	gc, err := garbagecollector.New(garbagecollector.Config{RESTConfig: e.Config, Client: e.Client, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	go gc.Run(e.Ctx)
	inf := client.NewInformers(e.Config)
	jc, err := job.New(job.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := New(Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go jc.Run(e.Ctx)
	go tc.Run(e.Ctx)
	ttl := int32(1)
	j, err := e.Client.Batch.Jobs("default").Create(e.Ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "default"},
		Spec: batchv1.JobSpec{TTLSecondsAfterFinished: &ttl, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Play the kubelet: the pod succeeds once it runs.
	clustertest.Eventually(t, 60*time.Second, func() error {
		pods, err := e.Client.Core.Pods("default").List(e.Ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(j.UID)})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return fmt.Errorf("want one running pod, have %d", len(pods.Items))
		}
		p := pods.Items[0]
		p.Status.Phase = corev1.PodSucceeded
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: metav1.Now()}}
		_, err = e.Client.Core.Pods("default").UpdateStatus(e.Ctx, &p, metav1.UpdateOptions{})
		return err
	})
	clustertest.Eventually(t, 60*time.Second, func() error {
		j, err := e.Client.Batch.Jobs("default").Get(e.Ctx, "once", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("job still there, conditions %+v", j.Status.Conditions)
	})
	clustertest.Eventually(t, 60*time.Second, func() error {
		pods, err := e.Client.Core.Pods("default").List(e.Ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(j.UID)})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods of the deleted job left", len(pods.Items))
		}
		return nil
	})
}
