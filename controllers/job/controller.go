// Package job runs Jobs to completion, as kube-controller-manager's Job
// controller does: it creates pods from a Job's template (labelled,
// owned, and held by the batch.kubernetes.io/job-tracking finalizer until
// each finished pod is counted through status.uncountedTerminatedPods),
// keeps parallelism of them active, backs off exponentially after
// failures, applies backoffLimit, backoffLimitPerIndex, maxFailedIndexes,
// activeDeadlineSeconds, podFailurePolicy and successPolicy, honours
// suspend and podReplacementPolicy, and reports it all in the Job's
// status and conditions.
//
// It owns the status of Jobs and the pods they own. It must not touch
// pods that another controller owns, nor delete finished Jobs (the TTL
// controller does). It talks to the API only through client-go.
package job

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

// Upstream's pod failure back-off: 10 s doubling per failure after the
// last success, at most 6 minutes.
const (
	DefaultBackoff    = 10 * time.Second
	DefaultMaxBackoff = 6 * time.Minute
	componentName     = "job-controller"
	// maxPodChangesPerSync bounds the creations and deletions of one
	// sync, as upstream does, so one huge Job cannot starve the others.
	maxPodChangesPerSync = 500
)

// Config is what the controller needs; zero fields take the defaults.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	Clock     clock.WithTicker
	// Backoff is the delay after a Job's first pod failure (10 s), doubled
	// for each further failure up to MaxBackoff (6 min). Tests shorten it.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Workers sync Jobs in parallel (default 5, as upstream).
	Workers int
}

// Controller is the Job controller.
type Controller struct {
	cfg       Config
	client    *client.Clientset
	jobs      cache.SharedIndexInformer
	pods      cache.SharedIndexInformer
	jobLister batchlisters.JobLister
	podLister corelisters.PodLister
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder
	log       *slog.Logger
	clock     clock.WithTicker

	// expect holds what this controller asked of pods and has not yet
	// seen in the informer, so a sync on a stale cache does not create or
	// count twice.
	expect *kit.Expectations
	// backoff remembers, per Job key, the failures since its last
	// success; like upstream it lives in memory only.
	backoffMu sync.Mutex
	backoff   map[string]backoffRecord
}

// New builds the controller and registers its informer handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, fmt.Errorf("job controller: Client and Informers are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 5
	}
	c := &Controller{
		cfg:    cfg,
		client: cfg.Client,
		jobs:   cfg.Informers.For(&batchv1.Job{}),
		pods:   cfg.Informers.For(&corev1.Pod{}),
		log:    cfg.Logger,
		clock:  cfg.Clock,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "job", Clock: cfg.Clock}),
		expect:  kit.NewExpectations(cfg.Clock),
		backoff: map[string]backoffRecord{},
	}
	c.jobLister = batchlisters.NewJobLister(c.jobs.GetIndexer())
	c.podLister = corelisters.NewPodLister(c.pods.GetIndexer())
	if _, err := c.jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, fmt.Errorf("job controller: %w", err)
	}
	if _, err := c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if key := c.podChanged(obj); key != "" {
				c.expect.Observed(key, createdPod(obj.(*corev1.Pod).Name))
			}
		},
		UpdateFunc: func(_, obj any) { c.podChanged(obj) },
		DeleteFunc: func(obj any) { c.podChanged(obj) },
	}); err != nil {
		return nil, fmt.Errorf("job controller: %w", err)
	}
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.queue.Add(key)
}

// podChanged queues the Job that controls the pod and returns its key.
func (c *Controller) podChanged(obj any) string {
	pod, ok := kit.Unwrap[*corev1.Pod](obj)
	if !ok {
		return ""
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return ""
	}
	key := pod.Namespace + "/" + ref.Name
	c.queue.Add(key)
	return key
}

// Run waits for the caches and syncs Jobs until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.client.Core.RESTClient(), componentName)
	worker.Run(ctx, c.queue, c.cfg.Workers, c.sync, c.log, "job", c.jobs.HasSynced, c.pods.HasSynced)
	return nil
}
