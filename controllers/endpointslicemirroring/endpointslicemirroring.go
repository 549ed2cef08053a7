// Package endpointslicemirroring is the EndpointSlice mirroring
// controller, as kube-controller-manager's: Endpoints written by hand for
// a Service without a selector are mirrored into EndpointSlices, so that
// consumers of slices (the service proxy, DNS) see them. One slice per
// address type and set of ports, at most MaxEndpointsPerSubset (1,000)
// addresses of each subset.
//
// It owns the slices labelled endpointslice.kubernetes.io/managed-by:
// endpointslicemirroring-controller.k8s.io. It skips Endpoints labelled
// endpointslice.kubernetes.io/skip-mirror: "true", leader-election
// Endpoints, and Endpoints whose Service is missing or has a selector
// (the EndpointSlice controller serves those), and deletes what it
// mirrored of them. It talks to the API only through client-go.
package endpointslicemirroring

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/endpoints"
	"bonsai.dev/bonsai/controllers/endpointslice"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

const (
	// ControllerName is the managed-by label value of mirrored slices.
	ControllerName = "endpointslicemirroring-controller.k8s.io"
	// DefaultMaxEndpointsPerSubset is
	// --mirroring-max-endpoints-per-subset.
	DefaultMaxEndpointsPerSubset = 1000
	componentName                = "endpoint-slice-mirroring-controller"
	defaultWorkers               = 5
	minRetryDelay                = time.Second
	maxRetryDelay                = 1000 * time.Second
	// Event reasons, upstream's.
	reasonInvalidIPAddress         = "InvalidIPAddress"
	reasonTooManyAddressesToMirror = "TooManyAddressesToMirror"
)

// Config is what the controller needs; zero fields take the defaults.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	Clock     clock.WithTicker
	// MaxEndpointsPerSubset (1000, at most 1000: a slice's limit).
	MaxEndpointsPerSubset int
	// Workers (5, --mirroring-concurrent-service-endpoint-syncs).
	Workers int
}

// Controller mirrors Endpoints into EndpointSlices.
type Controller struct {
	cfg       Config
	log       *slog.Logger
	endpoints cache.SharedIndexInformer
	services  cache.SharedIndexInformer
	slices    cache.SharedIndexInformer

	endpointsLister corelisters.EndpointsLister
	serviceLister   corelisters.ServiceLister
	tracker         *endpointslice.Tracker
	recorder        record.EventRecorder
	queue           workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller and adds its handlers to the shared informers.
func New(cfg Config) (*Controller, error) {
	if cfg.MaxEndpointsPerSubset == 0 {
		cfg.MaxEndpointsPerSubset = DefaultMaxEndpointsPerSubset
	}
	if cfg.MaxEndpointsPerSubset < 1 || cfg.MaxEndpointsPerSubset > endpointslice.MaxMaxEndpointsPerSlice {
		return nil, fmt.Errorf("endpointslicemirroring: MaxEndpointsPerSubset %d: must be between 1 and %d", cfg.MaxEndpointsPerSubset, endpointslice.MaxMaxEndpointsPerSlice)
	}
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, errors.New("endpointslicemirroring: Client and Informers are required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = defaultWorkers
	}
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	c := &Controller{
		cfg:       cfg,
		log:       cfg.Logger,
		endpoints: cfg.Informers.For(&corev1.Endpoints{}),
		services:  cfg.Informers.For(&corev1.Service{}),
		slices:    cfg.Informers.For(&discoveryv1.EndpointSlice{}),
		tracker:   endpointslice.NewTracker(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](minRetryDelay, maxRetryDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpoint_slice_mirroring", Clock: cfg.Clock}),
	}
	c.endpointsLister = corelisters.NewEndpointsLister(c.endpoints.GetIndexer())
	c.serviceLister = corelisters.NewServiceLister(c.services.GetIndexer())
	// A Service's slices by index: a label selector over the namespace
	// reads every slice in it, for each Service synced.
	if err := client.IndexSlicesByService(c.slices); err != nil {
		return nil, fmt.Errorf("endpointslicemirroring: index EndpointSlices by Service: %w", err)
	}
	if _, err := c.endpoints.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(old, cur any) {
			if old.(*corev1.Endpoints).ResourceVersion != cur.(*corev1.Endpoints).ResourceVersion {
				c.enqueue(cur)
			}
		},
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, err
	}
	if _, err := c.services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		// Only a selector appearing or going changes whether to mirror.
		UpdateFunc: func(old, cur any) {
			if (old.(*corev1.Service).Spec.Selector == nil) != (cur.(*corev1.Service).Spec.Selector == nil) {
				c.enqueue(cur)
			}
		},
		DeleteFunc: c.enqueue,
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

// Run mirrors until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.cfg.Client.Core.RESTClient(), componentName)
	worker.Run(ctx, c.queue, c.cfg.Workers, c.sync, c.log, "endpoints", c.endpoints.HasSynced, c.services.HasSynced, c.slices.HasSynced)
	return nil
}

func (c *Controller) enqueue(obj any) {
	worker.Enqueue(c.queue, obj)
}

// mirroredKey is the Endpoints key of a slice this controller mirrored,
// or "".
func mirroredKey(obj any) (string, *discoveryv1.EndpointSlice) {
	s, ok := kit.Unwrap[*discoveryv1.EndpointSlice](obj)
	if !ok || s.Labels[discoveryv1.LabelManagedBy] != ControllerName || s.Labels[discoveryv1.LabelServiceName] == "" {
		return "", nil
	}
	return s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName], s
}

func (c *Controller) onSlice(obj any) {
	if key, s := mirroredKey(obj); s != nil && c.tracker.ShouldSync(key, s) {
		c.queue.Add(key)
	}
}

func (c *Controller) onSliceUpdate(old, cur any) {
	if oldKey, o := mirroredKey(old); o != nil {
		if newKey, n := mirroredKey(cur); n == nil || newKey != oldKey {
			c.queue.Add(oldKey)
		}
	}
	c.onSlice(cur)
}

func (c *Controller) onSliceDelete(obj any) {
	if key, s := mirroredKey(obj); s != nil && !c.tracker.HandleDeletion(key, s.Name) {
		c.queue.Add(key)
	}
}

// shouldMirror: not Endpoints labelled skip-mirror, nor those old leader
// elections use as a lock.
func shouldMirror(ep *corev1.Endpoints) bool {
	if ep.Labels[discoveryv1.LabelSkipMirror] == "true" {
		return false
	}
	_, leader := ep.Annotations[endpoints.LeaderAnnotation]
	return !leader
}

// sync mirrors one Endpoints, or deletes what was mirrored of it when it
// should not be.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	ep, err := c.endpointsLister.Endpoints(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return c.deleteMirrored(ctx, key, ns, name)
	}
	if err != nil {
		return err
	}
	if !shouldMirror(ep) {
		return c.deleteMirrored(ctx, key, ns, name)
	}
	svc, err := c.serviceLister.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return c.deleteMirrored(ctx, key, ns, name)
	}
	if err != nil {
		return err
	}
	if svc.Spec.Selector != nil {
		return c.deleteMirrored(ctx, key, ns, name) // the EndpointSlice controller's
	}
	existing, err := c.mirrored(ns, name)
	if err != nil {
		return err
	}
	if c.tracker.Stale(key, existing) {
		return errors.New("EndpointSlice informer cache is out of date")
	}
	p := reconcile(ep, existing, c.cfg.MaxEndpointsPerSubset)
	if p.invalid > 0 {
		c.recorder.Eventf(ep, corev1.EventTypeWarning, reasonInvalidIPAddress,
			"Skipped %d invalid IP addresses when mirroring to EndpointSlices", p.invalid)
	}
	if p.skipped > p.invalid {
		c.recorder.Eventf(ep, corev1.EventTypeWarning, reasonTooManyAddressesToMirror,
			"A max of %d addresses can be mirrored to EndpointSlices per Endpoints subset. %d addresses were skipped", c.cfg.MaxEndpointsPerSubset, p.skipped-p.invalid)
	}
	return c.apply(ctx, ep, key, p)
}

// mirrored is the slices this controller made for the Service ns/name.
func (c *Controller) mirrored(ns, name string) ([]*discoveryv1.EndpointSlice, error) {
	objs, err := c.slices.GetIndexer().ByIndex(client.SliceServiceIndex, ns+"/"+name)
	if err != nil {
		return nil, err
	}
	var out []*discoveryv1.EndpointSlice
	for _, o := range objs {
		if s := o.(*discoveryv1.EndpointSlice); s.Labels[discoveryv1.LabelManagedBy] == ControllerName {
			out = append(out, s)
		}
	}
	return out, nil
}

func (c *Controller) deleteMirrored(ctx context.Context, key, ns, name string) error {
	ss, err := c.mirrored(ns, name)
	if err != nil {
		return err
	}
	for _, s := range ss {
		if err := c.cfg.Client.Discovery.EndpointSlices(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete mirrored EndpointSlice %s/%s: %w", ns, s.Name, err)
		}
		c.tracker.Deleted(key, s.Name)
	}
	return nil
}

// apply writes a plan; no creates for Endpoints being deleted.
func (c *Controller) apply(ctx context.Context, ep *corev1.Endpoints, key string, p plan) error {
	api := c.cfg.Client.Discovery.EndpointSlices(ep.Namespace)
	if ep.DeletionTimestamp == nil {
		for _, s := range p.create {
			out, err := api.Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
					return nil
				}
				return fmt.Errorf("create EndpointSlice mirroring %s: %w", key, err)
			}
			c.tracker.Wrote(key, out)
		}
	}
	for _, s := range p.update {
		out, err := api.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update EndpointSlice %s mirroring %s: %w", s.Name, key, err)
		}
		c.tracker.Wrote(key, out)
	}
	for _, s := range p.delete {
		if err := api.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete EndpointSlice %s mirroring %s: %w", s.Name, key, err)
		}
		c.tracker.Deleted(key, s.Name)
	}
	return nil
}
