package job

import (
	"fmt"
	"sort"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const waitFor = 60 * time.Second

// harness is a running API server with simulated nodes and the Job
// controller, on a short back-off.
type harness struct {
	*clustertest.Env
	t *testing.T
}

func newHarness(t *testing.T, backoff time.Duration) *harness {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	inf := client.NewInformers(e.Config)
	c, err := New(Config{Client: e.Client, Informers: inf, Logger: e.Log, Backoff: backoff, MaxBackoff: 8 * backoff})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go c.Run(e.Ctx)
	return &harness{Env: e, t: t}
}

// newJob is a Job of one container that pods of run forever until the
// test finishes them.
func newJob(name string, mod func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
				},
			},
		},
	}
	if mod != nil {
		mod(j)
	}
	return j
}

func (h *harness) create(j *batchv1.Job) *batchv1.Job {
	h.t.Helper()
	out, err := h.Client.Batch.Jobs(j.Namespace).Create(h.Ctx, j, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create job: %v", err)
	}
	return out
}

func (h *harness) job(name string) *batchv1.Job {
	h.t.Helper()
	j, err := h.Client.Batch.Jobs("default").Get(h.Ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("get job: %v", err)
	}
	return j
}

// pods are the Job's pods, oldest first.
func (h *harness) pods(j *batchv1.Job) []corev1.Pod {
	h.t.Helper()
	list, err := h.Client.Core.Pods(j.Namespace).List(h.Ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(j.UID)})
	if err != nil {
		h.t.Fatalf("list pods: %v", err)
	}
	sort.Slice(list.Items, func(a, b int) bool {
		return list.Items[a].CreationTimestamp.Before(&list.Items[b].CreationTimestamp) ||
			list.Items[a].CreationTimestamp.Equal(&list.Items[b].CreationTimestamp) && list.Items[a].Name < list.Items[b].Name
	})
	return list.Items
}

// running are the Job's pods that are Running and not being deleted.
func (h *harness) running(j *batchv1.Job) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range h.pods(j) {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// waitRunning waits for exactly n Running pods of the Job and returns them.
func (h *harness) waitRunning(j *batchv1.Job, n int) []corev1.Pod {
	h.t.Helper()
	var pods []corev1.Pod
	clustertest.Eventually(h.t, waitFor, func() error {
		pods = h.running(j)
		if len(pods) != n {
			return fmt.Errorf("job %s: %d running pods, want %d", j.Name, len(pods), n)
		}
		return nil
	})
	return pods
}

// finish ends a pod as a kubelet would: phase Succeeded (exit code 0)
// or Failed with the exit code, plus any pod conditions given.
func (h *harness) finish(p corev1.Pod, exitCode int32, conds ...corev1.PodCondition) {
	h.t.Helper()
	clustertest.Eventually(h.t, waitFor, func() error {
		cur, err := h.Client.Core.Pods(p.Namespace).Get(h.Ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status.Phase = corev1.PodSucceeded
		reason := "Completed"
		if exitCode != 0 {
			cur.Status.Phase = corev1.PodFailed
			reason = "Error"
		}
		for i := range cur.Status.ContainerStatuses {
			cs := &cur.Status.ContainerStatuses[i]
			cs.Ready = false
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, Reason: reason, FinishedAt: now}}
		}
		for i := range cur.Status.Conditions {
			if cur.Status.Conditions[i].Type == corev1.PodReady || cur.Status.Conditions[i].Type == corev1.ContainersReady {
				cur.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		for _, c := range conds {
			c.LastTransitionTime = now
			cur.Status.Conditions = append(cur.Status.Conditions, c)
		}
		_, err = h.Client.Core.Pods(p.Namespace).UpdateStatus(h.Ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// waitCondition waits for the Job's condition of type t to be True and
// returns the Job.
func (h *harness) waitCondition(name string, t batchv1.JobConditionType) *batchv1.Job {
	h.t.Helper()
	var j *batchv1.Job
	clustertest.Eventually(h.t, waitFor, func() error {
		j = h.job(name)
		if c := conditionOf(j, t); c != nil {
			return nil
		}
		return fmt.Errorf("job %s: no %s condition; status %+v", name, t, j.Status)
	})
	return j
}

// waitStatus waits until check passes on the Job.
func (h *harness) waitStatus(name string, check func(*batchv1.Job) error) *batchv1.Job {
	h.t.Helper()
	var j *batchv1.Job
	clustertest.Eventually(h.t, waitFor, func() error {
		j = h.job(name)
		if err := check(j); err != nil {
			return fmt.Errorf("%w; status %+v", err, j.Status)
		}
		return nil
	})
	return j
}

func ptr[T any](v T) *T { return &v }
