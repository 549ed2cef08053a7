// Package endpoints is the legacy Endpoints controller, as
// kube-controller-manager's: for every Service with a selector it keeps
// an Endpoints object of the same name listing the selected pods'
// addresses (ready and not ready) per set of resolved ports, at most
// 1,000 addresses (the rest cut, with the
// endpoints.kubernetes.io/over-capacity: truncated annotation), and
// deletes it when the Service goes.
//
// It owns the Endpoints of Services with a selector. It must not touch
// the Endpoints of Services without one (users write those; the
// mirroring controller reads them), nor leader-election Endpoints. It
// talks to the API only through client-go.
package endpoints

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/servicepods"
	"bonsai.dev/bonsai/controllers/worker"
)

const (
	// LabelManagedBy and ControllerName mark the Endpoints this
	// controller writes.
	LabelManagedBy = "endpoints.kubernetes.io/managed-by"
	ControllerName = "endpoint-controller"
	componentName  = ControllerName
	defaultWorkers = 5
	minRetryDelay  = time.Second
	maxRetryDelay  = 1000 * time.Second
	// overCapacity is the annotation value of truncated Endpoints.
	overCapacity = "truncated"
	// LeaderAnnotation marks the Endpoints old leader elections used as
	// their lock; no controller touches those.
	LeaderAnnotation = "control-plane.alpha.kubernetes.io/leader"
)

// Config is what the controller needs; zero fields take the defaults.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	Clock     clock.WithTicker
	// EndpointUpdatesBatchPeriod delays the sync of a Service after a pod
	// change (--endpoint-updates-batch-period, 0).
	EndpointUpdatesBatchPeriod time.Duration
	// Workers (5, --concurrent-endpoint-syncs).
	Workers int
}

// Controller keeps the Endpoints of Services with a selector.
type Controller struct {
	cfg       Config
	log       *slog.Logger
	pods      cache.SharedIndexInformer
	services  cache.SharedIndexInformer
	endpoints cache.SharedIndexInformer

	serviceLister   corelisters.ServiceLister
	endpointsLister corelisters.EndpointsLister
	triggers        *servicepods.TriggerTimes
	recorder        record.EventRecorder
	queue           workqueue.TypedRateLimitingInterface[string]

	// written is the resourceVersion of each Endpoints this controller
	// last wrote: a cache older than that must not be acted on.
	mu      sync.Mutex
	written map[string]uint64
}

// New builds the controller and adds its handlers to the shared informers.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, errors.New("endpoints: Client and Informers are required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = defaultWorkers
	}
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	c := &Controller{
		cfg:       cfg,
		log:       cfg.Logger,
		pods:      cfg.Informers.For(&corev1.Pod{}),
		services:  cfg.Informers.For(&corev1.Service{}),
		endpoints: cfg.Informers.For(&corev1.Endpoints{}),
		triggers:  servicepods.NewTriggerTimes(),
		written:   map[string]uint64{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](minRetryDelay, maxRetryDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpoint", Clock: cfg.Clock}),
	}
	if err := servicepods.AddIndexes(c.pods, c.services); err != nil {
		return nil, fmt.Errorf("endpoints: %w", err)
	}
	c.serviceLister = corelisters.NewServiceLister(c.services.GetIndexer())
	c.endpointsLister = corelisters.NewEndpointsLister(c.endpoints.GetIndexer())
	if _, err := c.services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, err
	}
	if _, err := c.pods.AddEventHandler(servicepods.PodHandler(c.services.GetIndexer(), c.log, c.enqueueBatched)); err != nil {
		return nil, err
	}
	// An Endpoints deleted by someone else comes back if its Service
	// still selects pods.
	if _, err := c.endpoints.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: c.enqueue}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run syncs Services until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	c.recorder = client.NewRecorder(ctx, c.cfg.Client.Core.RESTClient(), componentName)
	if !cache.WaitForCacheSync(ctx.Done(), c.pods.HasSynced, c.services.HasSynced, c.endpoints.HasSynced) {
		return nil
	}
	c.queueLeftovers()
	worker.Run(ctx, c.queue, c.cfg.Workers, c.syncService, c.log, "service")
	return nil
}

// queueLeftovers queues every Endpoints at start, so that those of
// Services deleted while the controller was not running are deleted.
func (c *Controller) queueLeftovers() {
	all, err := c.endpointsLister.List(labels.Everything())
	if err != nil {
		c.log.Error("listing Endpoints", "err", err)
		return
	}
	for _, ep := range all {
		if _, ok := ep.Annotations[LeaderAnnotation]; !ok {
			c.queue.Add(ep.Namespace + "/" + ep.Name)
		}
	}
}

func (c *Controller) enqueue(obj any) {
	worker.Enqueue(c.queue, obj)
}

// enqueueBatched queues Services after a pod change, after the batch
// period so that the changes of several pods share one write.
func (c *Controller) enqueueBatched(keys sets.Set[string]) {
	for key := range keys {
		c.queue.AddAfter(key, c.cfg.EndpointUpdatesBatchPeriod)
	}
}

func rvOf(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// syncService brings the Endpoints of one Service to its pods.
func (c *Controller) syncService(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.serviceLister.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		// The Service is gone: so are its Endpoints (they have no owner
		// reference for the garbage collector to follow).
		c.triggers.Forget(key)
		c.mu.Lock()
		delete(c.written, key)
		c.mu.Unlock()
		err := c.cfg.Client.Core.Endpoints(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Endpoints %s of deleted Service: %w", key, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.Selector == nil {
		return nil // their Endpoints, if any, are the user's
	}
	pods, err := servicepods.PodsForService(c.pods.GetIndexer(), svc)
	if err != nil {
		return err
	}
	subsets := desiredSubsets(svc, pods)
	trigger := c.triggers.Compute(key, svc, pods)

	cur, err := c.endpointsLister.Endpoints(ns).Get(name)
	create := apierrors.IsNotFound(err)
	switch {
	case create:
		cur = &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	case err != nil:
		return err
	default:
		c.mu.Lock()
		stale := rvOf(cur.ResourceVersion) < c.written[key]
		c.mu.Unlock()
		if stale {
			return fmt.Errorf("endpoints informer cache is out of date for %s", key)
		}
	}
	truncated := truncate(subsets)
	wantLabels := endpointsLabels(svc)
	if !create && apiequality.Semantic.DeepEqual(cur.Subsets, subsets) && labels.Equals(cur.Labels, wantLabels) &&
		(cur.Annotations[corev1.EndpointsOverCapacity] == overCapacity) == truncated {
		return nil
	}
	next := cur.DeepCopy()
	next.Subsets, next.Labels = subsets, wantLabels
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	if trigger.IsZero() {
		delete(next.Annotations, corev1.EndpointsLastChangeTriggerTime)
	} else {
		next.Annotations[corev1.EndpointsLastChangeTriggerTime] = trigger.UTC().Format(time.RFC3339Nano)
	}
	if truncated {
		next.Annotations[corev1.EndpointsOverCapacity] = overCapacity
	} else {
		delete(next.Annotations, corev1.EndpointsOverCapacity)
	}
	return c.write(ctx, key, next, create)
}

func (c *Controller) write(ctx context.Context, key string, ep *corev1.Endpoints, create bool) error {
	api := c.cfg.Client.Core.Endpoints(ep.Namespace)
	var out *corev1.Endpoints
	var err error
	if create {
		out, err = api.Create(ctx, ep, metav1.CreateOptions{})
	} else {
		out, err = api.Update(ctx, ep, metav1.UpdateOptions{})
	}
	if err != nil {
		if create && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil // creates will keep failing; the namespace is going
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			if create {
				c.recorder.Eventf(ep, corev1.EventTypeWarning, "FailedToCreateEndpoint", "Failed to create endpoint for service %s: %v", key, err)
			} else {
				c.recorder.Eventf(ep, corev1.EventTypeWarning, "FailedToUpdateEndpoint", "Failed to update endpoint %s: %v", key, err)
			}
		}
		return fmt.Errorf("write Endpoints %s: %w", key, err)
	}
	c.mu.Lock()
	c.written[key] = rvOf(out.ResourceVersion)
	c.mu.Unlock()
	return nil
}

// endpointsLabels are the Service's labels, plus
// service.kubernetes.io/headless for a headless Service and the label
// that tells the Endpoints this controller writes from users' (since
// 1.33).
func endpointsLabels(svc *corev1.Service) map[string]string {
	out := make(map[string]string, len(svc.Labels)+2)
	for k, v := range svc.Labels {
		out[k] = v
	}
	if servicepods.IsServiceIPSet(svc) {
		delete(out, corev1.IsHeadlessService)
	} else {
		out[corev1.IsHeadlessService] = ""
	}
	out[LabelManagedBy] = ControllerName
	return out
}
