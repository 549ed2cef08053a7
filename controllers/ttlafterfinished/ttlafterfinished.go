// Package ttlafterfinished deletes finished Jobs once their
// spec.ttlSecondsAfterFinished has passed, as kube-controller-manager's
// TTL-after-finished controller does, with background propagation so
// the garbage collector removes their pods.
//
// It only deletes Jobs that are Complete or Failed and ask for it; it
// re-reads a Job from the API before deleting, and deletes it only if
// that very object (UID and resourceVersion) is still expired.
package ttlafterfinished

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	Clock     clock.WithTicker
	// Workers delete Jobs in parallel (default 5, as upstream).
	Workers int
}

// Controller is the TTL-after-finished controller.
type Controller struct {
	cfg    Config
	jobs   cache.SharedIndexInformer
	lister batchlisters.JobLister
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, fmt.Errorf("ttl-after-finished controller: Client and Informers are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	if cfg.Workers <= 0 {
		cfg.Workers = 5
	}
	c := &Controller{
		cfg:  cfg,
		jobs: cfg.Informers.For(&batchv1.Job{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ttl_jobs_to_delete", Clock: cfg.Clock}),
	}
	c.lister = batchlisters.NewJobLister(c.jobs.GetIndexer())
	enqueue := func(obj any) {
		j, ok := obj.(*batchv1.Job)
		if !ok || !needsCleanup(j) {
			return
		}
		if key, err := cache.MetaNamespaceKeyFunc(j); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := c.jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("ttl-after-finished controller: %w", err)
	}
	return c, nil
}

// Run waits for the cache and works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	worker.Run(ctx, c.queue, c.cfg.Workers, c.sync, c.cfg.Logger, "job", c.jobs.HasSynced)
	return nil
}

// sync deletes the Job if its TTL ran out, else comes back when it will.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	j, err := c.lister.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if expired, err := c.expired(key, j); !expired || err != nil {
		return err
	}
	// The cache may be old: the TTL may have been changed or the Job
	// re-created. Check the object as the API server has it now.
	fresh, err := c.cfg.Client.Batch.Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get job %s: %w", key, err)
	}
	if expired, err := c.expired(key, fresh); !expired || err != nil {
		return err
	}
	policy := metav1.DeletePropagationBackground
	err = c.cfg.Client.Batch.Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{
		PropagationPolicy: &policy,
		Preconditions:     &metav1.Preconditions{UID: &fresh.UID, ResourceVersion: &fresh.ResourceVersion},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete expired job %s: %w", key, err)
	}
	c.cfg.Logger.Debug("deleted finished job after its TTL", "job", key)
	return nil
}

// expired says the Job's TTL ran out; when it has yet to, the Job comes
// back to the queue at that time.
func (c *Controller) expired(key string, j *batchv1.Job) (bool, error) {
	if !needsCleanup(j) {
		return false, nil
	}
	finished, err := finishTime(j)
	if err != nil {
		return false, err
	}
	left := finished.Add(time.Duration(*j.Spec.TTLSecondsAfterFinished) * time.Second).Sub(c.cfg.Clock.Now())
	if left > 0 {
		c.queue.AddAfter(key, left)
		return false, nil
	}
	return true, nil
}

// needsCleanup: finished, with a TTL, not already being deleted.
func needsCleanup(j *batchv1.Job) bool {
	return j.Spec.TTLSecondsAfterFinished != nil && j.DeletionTimestamp == nil && finishedCondition(j) != nil
}

func finishedCondition(j *batchv1.Job) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		c := &j.Status.Conditions[i]
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// finishTime is when the Job finished: its Complete or Failed
// condition's transition time, as upstream reads it.
func finishTime(j *batchv1.Job) (time.Time, error) {
	c := finishedCondition(j)
	if c.LastTransitionTime.IsZero() {
		return time.Time{}, fmt.Errorf("job %s/%s: finished condition %s has no transition time", j.Namespace, j.Name, c.Type)
	}
	return c.LastTransitionTime.Time, nil
}
