// Package cronjob creates Jobs on a schedule, as kube-controller-manager's
// CronJob controller (v2) does: at each time a CronJob's schedule (cron
// syntax, read by github.com/robfig/cron/v3, in spec.timeZone or the
// controller's local zone) names, it creates a Job
// `<cronjob>-<minutes since the epoch>` from the Job template, honours
// concurrencyPolicy, startingDeadlineSeconds and suspend, keeps
// status.active, lastScheduleTime and lastSuccessfulTime, and deletes
// finished Jobs beyond the history limits.
//
// It wakes up at each CronJob's next scheduled time on its clock (a fake
// one in tests) rather than polling. It owns CronJob status and the Jobs
// it creates; it must not touch Jobs another owner controls.
package cronjob

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

const componentName = "cronjob-controller"

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	// Clock decides when schedules are due and wakes the controller at
	// the next one (the real clock by default).
	Clock clock.WithDelayedExecution
	// Workers sync CronJobs in parallel (default 5, as upstream).
	Workers int
}

// Controller is the CronJob controller.
type Controller struct {
	cfg        Config
	client     *client.Clientset
	cronJobs   cache.SharedIndexInformer
	jobs       cache.SharedIndexInformer
	cronLister batchlisters.CronJobLister
	jobLister  batchlisters.JobLister
	// queue retries failures in real time; wake-ups at schedule times
	// go through the Config clock's timers instead.
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *slog.Logger
	clock    clock.WithDelayedExecution

	timersMu sync.Mutex
	timers   map[string]clock.Timer
}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, fmt.Errorf("cronjob controller: Client and Informers are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Clock = cmp.Or[clock.WithDelayedExecution](cfg.Clock, clock.RealClock{})
	if cfg.Workers <= 0 {
		cfg.Workers = 5
	}
	c := &Controller{
		cfg:      cfg,
		client:   cfg.Client,
		cronJobs: cfg.Informers.For(&batchv1.CronJob{}),
		jobs:     cfg.Informers.For(&batchv1.Job{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "cronjob"}),
		log:    cfg.Logger,
		clock:  cfg.Clock,
		timers: map[string]clock.Timer{},
	}
	c.cronLister = batchlisters.NewCronJobLister(c.cronJobs.GetIndexer())
	c.jobLister = batchlisters.NewJobLister(c.jobs.GetIndexer())
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := c.cronJobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.stopTimer(key)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("cronjob controller: %w", err)
	}
	if _, err := c.jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.jobChanged,
		UpdateFunc: func(_, obj any) { c.jobChanged(obj) },
		DeleteFunc: c.jobChanged,
	}); err != nil {
		return nil, fmt.Errorf("cronjob controller: %w", err)
	}
	return c, nil
}

// jobChanged queues the CronJob that controls the Job.
func (c *Controller) jobChanged(obj any) {
	j, ok := kit.Unwrap[*batchv1.Job](obj)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOf(j); ref != nil && ref.Kind == "CronJob" && ref.APIVersion == batchv1.SchemeGroupVersion.String() {
		c.queue.Add(j.Namespace + "/" + ref.Name)
	}
}

// wakeAt syncs key again at time at on the controller's clock; a later
// call replaces an earlier one. The wait is measured when the timer is
// set, not when the sync looked at the clock: a clock that moved on in
// between (the sync's API calls take time; a test's fake clock jumps)
// would otherwise wake it that much late, and a whole period late if it
// jumped past at.
func (c *Controller) wakeAt(key string, at time.Time) {
	c.timersMu.Lock()
	defer c.timersMu.Unlock()
	if t := c.timers[key]; t != nil {
		t.Stop()
	}
	c.timers[key] = c.clock.AfterFunc(at.Sub(c.clock.Now()), func() { c.queue.Add(key) })
	if !c.clock.Now().Before(at) {
		c.queue.Add(key)
	}
}

func (c *Controller) stopTimer(key string) {
	c.timersMu.Lock()
	defer c.timersMu.Unlock()
	if t := c.timers[key]; t != nil {
		t.Stop()
		delete(c.timers, key)
	}
}

// Run waits for the caches and syncs CronJobs until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.client.Core.RESTClient(), componentName)
	worker.Run(ctx, c.queue, c.cfg.Workers, c.sync, c.log, "cronjob", c.cronJobs.HasSynced, c.jobs.HasSynced)
	c.timersMu.Lock()
	for _, t := range c.timers {
		t.Stop()
	}
	c.timersMu.Unlock()
	return nil
}
