// Package endpointslice is the EndpointSlice controller, as
// kube-controller-manager's: for every Service with a selector it keeps
// EndpointSlices (discovery.k8s.io/v1) of the pods the selector picks,
// with at most MaxEndpointsPerSlice endpoints each, one address type per
// slice and one set of resolved ports per slice, packed with upstream's
// algorithm that prefers few writes to tight packing.
//
// It owns the slices labelled endpointslice.kubernetes.io/managed-by:
// endpointslice-controller.k8s.io. It must not touch other slices (the
// mirroring controller's, users'), nor the slices of Services without a
// selector. It talks to the API only through client-go.
package endpointslice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/servicepods"
	"bonsai.dev/bonsai/controllers/worker"
)

const (
	// ControllerName is the managed-by label value of the slices this
	// controller owns.
	ControllerName = "endpointslice-controller.k8s.io"
	// DefaultMaxEndpointsPerSlice and MaxMaxEndpointsPerSlice bound
	// --max-endpoints-per-slice; the second is the API's limit.
	DefaultMaxEndpointsPerSlice = 100
	MaxMaxEndpointsPerSlice     = 1000
	componentName               = "endpoint-slice-controller"
	defaultWorkers              = 5
	// Retries of a failing Service back off from 1 s to 1000 s, as
	// upstream's queue does.
	minRetryDelay = time.Second
	maxRetryDelay = 1000 * time.Second
	// sliceChangeMinSyncDelay is upstream's least delay of a sync
	// triggered by a slice event.
	sliceChangeMinSyncDelay = time.Second
)

// Config is what the controller needs; zero fields take the defaults.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	Clock     clock.WithTicker
	// MaxEndpointsPerSlice (100, at most 1000) is
	// --max-endpoints-per-slice.
	MaxEndpointsPerSlice int
	// EndpointUpdatesBatchPeriod delays the sync of a Service after a pod
	// change, so that changes of several pods share one write
	// (--endpoint-updates-batch-period, 0 by default).
	EndpointUpdatesBatchPeriod time.Duration
	// Workers syncing Services concurrently (5, --concurrent-service-endpoint-syncs).
	Workers int
}

// Controller keeps the EndpointSlices of Services with a selector.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	pods     cache.SharedIndexInformer
	services cache.SharedIndexInformer
	nodes    cache.SharedIndexInformer
	slices   cache.SharedIndexInformer

	serviceLister corelisters.ServiceLister
	sliceLister   discoverylisters.EndpointSliceLister
	reconciler    reconciler
	tracker       *Tracker
	triggers      *servicepods.TriggerTimes
	recorder      record.EventRecorder
	queue         workqueue.TypedRateLimitingInterface[string]
	// nodesChanged is set while a resync of the hinted Services after
	// node changes waits (see onNodeChange).
	nodesChanged atomic.Bool
}

// New builds the controller and adds its handlers to the shared informers.
func New(cfg Config) (*Controller, error) {
	if cfg.MaxEndpointsPerSlice == 0 {
		cfg.MaxEndpointsPerSlice = DefaultMaxEndpointsPerSlice
	}
	if cfg.MaxEndpointsPerSlice < 1 || cfg.MaxEndpointsPerSlice > MaxMaxEndpointsPerSlice {
		return nil, fmt.Errorf("endpointslice: MaxEndpointsPerSlice %d: must be between 1 and %d", cfg.MaxEndpointsPerSlice, MaxMaxEndpointsPerSlice)
	}
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, errors.New("endpointslice: Client and Informers are required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = defaultWorkers
	}
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	c := &Controller{
		cfg:      cfg,
		log:      cfg.Logger,
		pods:     cfg.Informers.For(&corev1.Pod{}),
		services: cfg.Informers.For(&corev1.Service{}),
		nodes:    cfg.Informers.For(&corev1.Node{}),
		slices:   cfg.Informers.For(&discoveryv1.EndpointSlice{}),
		tracker:  NewTracker(),
		triggers: servicepods.NewTriggerTimes(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](minRetryDelay, maxRetryDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpoint_slice", Clock: cfg.Clock}),
	}
	if err := servicepods.AddIndexes(c.pods, c.services); err != nil {
		return nil, fmt.Errorf("endpointslice: %w", err)
	}
	c.serviceLister = corelisters.NewServiceLister(c.services.GetIndexer())
	c.sliceLister = discoverylisters.NewEndpointSliceLister(c.slices.GetIndexer())
	nodeLister := corelisters.NewNodeLister(c.nodes.GetIndexer())
	c.reconciler = reconciler{maxPerSlice: cfg.MaxEndpointsPerSlice, node: nodeLister.Get,
		nodes: func() ([]*corev1.Node, error) { return nodeLister.List(labels.Everything()) }}

	if _, err := c.services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueService,
		UpdateFunc: func(_, cur any) { c.enqueueService(cur) },
		DeleteFunc: c.enqueueService,
	}); err != nil {
		return nil, err
	}
	if _, err := c.pods.AddEventHandler(servicepods.PodHandler(c.services.GetIndexer(), c.log, c.enqueueBatched)); err != nil {
		return nil, err
	}
	if _, err := c.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNodeChange(nil, obj) },
		UpdateFunc: c.onNodeChange,
		DeleteFunc: func(obj any) { c.onNodeChange(nil, obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := c.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onSlice,
		UpdateFunc: c.onSliceUpdate,
		DeleteFunc: c.onSliceDelete,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run syncs Services until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.cfg.Client.Core.RESTClient(), componentName)
	worker.Run(ctx, c.queue, c.cfg.Workers, c.syncKey, c.log, "service", c.pods.HasSynced, c.services.HasSynced, c.nodes.HasSynced, c.slices.HasSynced)
	return nil
}

// syncKey syncs a Service's slices; a cache that has not yet seen the
// controller's own last writes is waited out quietly.
func (c *Controller) syncKey(ctx context.Context, key string) error {
	err := c.syncService(ctx, key)
	if errors.Is(err, errStaleCache) {
		return worker.Quiet(err)
	}
	return err
}

var errStaleCache = errors.New("EndpointSlice informer cache is out of date")

// syncService brings the slices of one Service to its pods.
func (c *Controller) syncService(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // never a key of ours
	}
	svc, err := c.serviceLister.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.triggers.Forget(key)
		return c.deleteSlicesOfGoneService(ctx, ns, name, key)
	}
	if err != nil {
		return err
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.Selector == nil {
		// Such Services get no slices from this controller: users (or the
		// mirroring controller) write them.
		return nil
	}
	pods, err := servicepods.PodsForService(c.pods.GetIndexer(), svc)
	if err != nil {
		return err
	}
	existing, err := c.managedSlices(ns, name)
	if err != nil {
		return err
	}
	if c.tracker.Stale(key, existing) {
		return errStaleCache
	}
	trigger := c.triggers.Compute(key, svc, pods)
	p, planErr := c.reconciler.reconcile(svc, pods, existing)
	if err := c.apply(ctx, svc, key, p, trigger); err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpointSlices",
				"Error updating Endpoint Slices for Service %s/%s: %v", ns, name, err)
		}
		return err
	}
	// Hint Events only with a write: a Service whose hints stay unsafe
	// is not told so at every sync.
	if p.writes() {
		for _, ev := range p.events {
			typ := corev1.EventTypeNormal
			if ev.warning {
				typ = corev1.EventTypeWarning
			}
			c.recorder.Event(svc, typ, ev.reason, ev.message)
		}
	}
	return planErr
}

// managedSlices are the Service's slices this controller manages, less
// those being deleted (they are gone already as far as consumers care).
func (c *Controller) managedSlices(ns, name string) ([]*discoveryv1.EndpointSlice, error) {
	all, err := c.sliceLister.EndpointSlices(ns).List(labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: ControllerName,
	}))
	if err != nil {
		return nil, err
	}
	out := all[:0:0]
	for _, s := range all {
		if s.DeletionTimestamp == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// deleteSlicesOfGoneService deletes the slices of a deleted Service. The
// garbage collector would, through their owner reference; doing it here
// too keeps consumers from routing to a gone Service when the collector
// is slow or off.
func (c *Controller) deleteSlicesOfGoneService(ctx context.Context, ns, name, key string) error {
	stale, err := c.managedSlices(ns, name)
	if err != nil {
		return err
	}
	for _, s := range stale {
		err := c.cfg.Client.Discovery.EndpointSlices(ns).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete EndpointSlice %s/%s of deleted Service: %w", ns, s.Name, err)
		}
		c.tracker.Deleted(key, s.Name)
	}
	return nil
}

// apply writes a plan: creates (unless the Service is being deleted, so
// as not to race the garbage collector), updates, then deletes.
func (c *Controller) apply(ctx context.Context, svc *corev1.Service, key string, p plan, trigger time.Time) error {
	api := c.cfg.Client.Discovery.EndpointSlices(svc.Namespace)
	if svc.DeletionTimestamp == nil {
		for _, s := range p.create {
			setTriggerTime(s, trigger)
			created, err := api.Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
					return nil // creates will keep failing; the namespace is going
				}
				return fmt.Errorf("create EndpointSlice for Service %s: %w", key, err)
			}
			c.tracker.Wrote(key, created)
		}
	}
	for _, s := range p.update {
		setTriggerTime(s, trigger)
		updated, err := api.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update EndpointSlice %s of Service %s: %w", s.Name, key, err)
		}
		c.tracker.Wrote(key, updated)
	}
	for _, s := range p.delete {
		err := api.Delete(ctx, s.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete EndpointSlice %s of Service %s: %w", s.Name, key, err)
		}
		c.tracker.Deleted(key, s.Name)
	}
	return nil
}

// setTriggerTime sets (or clears, when no change is pending) the
// endpoints.kubernetes.io/last-change-trigger-time annotation.
func setTriggerTime(s *discoveryv1.EndpointSlice, t time.Time) {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	if t.IsZero() {
		delete(s.Annotations, corev1.EndpointsLastChangeTriggerTime)
	} else {
		s.Annotations[corev1.EndpointsLastChangeTriggerTime] = t.UTC().Format(time.RFC3339Nano)
	}
}
