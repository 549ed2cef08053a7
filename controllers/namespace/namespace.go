// Package namespace empties deleted namespaces, as kube-controller-
// manager's namespace controller does. When a namespace is deleted the
// API server marks it Terminating and keeps it for its "kubernetes"
// spec finalizer; this controller deletes every namespaced resource in it
// (deletecollection per resource discovery lists, list and delete where
// that is not served), reports progress in the namespace's deletion
// conditions, checks again with back-off while objects remain (objects
// with finalizers stay until those are removed), and when the namespace
// is empty removes the finalizer through namespaces/<name>/finalize, after
// which the API server removes the namespace.
//
// It owns the namespace's phase and deletion conditions and the
// "kubernetes" finalizer; it deletes objects only in namespaces being
// deleted and touches nothing else.
package namespace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

// Defaults.
const (
	// DefaultWorkers is kube-controller-manager's --concurrent-namespace-syncs.
	DefaultWorkers = 10
	// DefaultDeletionGracePeriod is how long after its deletion a namespace
	// is first emptied, so that a create admitted just before the deletion
	// lands first and is deleted too. Upstream waits 5 s for HA API
	// servers and etcd members to catch up; bonsai's one API server
	// refuses creates in a terminating namespace from the write on, so a
	// shorter wait covers the creates still in flight.
	DefaultDeletionGracePeriod = time.Second
	// DefaultParallelResources is how many resources are emptied at once.
	DefaultParallelResources = 8
	// finalizerEstimateSeconds is how long objects with finalizers are
	// given before the next check (upstream's value).
	finalizerEstimateSeconds = 15
)

// Config is what the controller needs; zero fields take the defaults.
type Config struct {
	RESTConfig *rest.Config
	Client     *client.Clientset
	Informers  *client.Informers
	Workers    int
	// DeletionGracePeriod: see DefaultDeletionGracePeriod.
	DeletionGracePeriod time.Duration
	ParallelResources   int
	Logger              *slog.Logger
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.DeletionGracePeriod <= 0 {
		c.DeletionGracePeriod = DefaultDeletionGracePeriod
	}
	if c.ParallelResources <= 0 {
		c.ParallelResources = DefaultParallelResources
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
}

// Controller is the namespace controller.
type Controller struct {
	cfg        Config
	log        *slog.Logger
	client     *client.Clientset
	meta       metadata.Interface
	discovery  discovery.DiscoveryInterface
	namespaces cache.SharedIndexInformer
	queue      workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	cfg.defaults()
	if cfg.RESTConfig == nil || cfg.Client == nil || cfg.Informers == nil {
		return nil, errors.New("namespace controller: RESTConfig, Client and Informers are required")
	}
	meta, err := metadata.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("namespace controller: metadata client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("namespace controller: discovery client: %w", err)
	}
	c := &Controller{
		cfg:       cfg,
		log:       cfg.Logger,
		client:    cfg.Client,
		meta:      meta,
		discovery: disc,
		// Upstream's limiter: per namespace exponential up to a minute, so a
		// stuck namespace is retried at least every minute; overall 10 qps.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 60*time.Second),
				&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "namespace"}),
		namespaces: cfg.Informers.For(&corev1.Namespace{}),
	}
	if _, err := c.namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("namespace controller: %w", err)
	}
	return c, nil
}

// enqueue queues a deleted namespace after the deletion grace period
// (a namespace already waiting keeps its earlier turn).
func (c *Controller) enqueue(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok || ns.DeletionTimestamp == nil {
		return
	}
	c.queue.AddAfter(ns.Name, c.cfg.DeletionGracePeriod)
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.namespaces.HasSynced) {
		return nil
	}
	c.log.Info("namespace controller started", "workers", c.cfg.Workers)
	worker.Run(ctx, c.queue, c.cfg.Workers, c.syncTimed, c.log, "namespace")
	return nil
}

// syncTimed syncs a namespace; content still going away (finalizers,
// graceful pods) brings it back in about half the time it was given.
func (c *Controller) syncTimed(ctx context.Context, name string) error {
	start := time.Now()
	defer func() { c.log.Debug("namespace controller: synced", "namespace", name, "took", time.Since(start)) }()
	err := c.sync(ctx, name)
	var remaining *resourcesRemainingError
	if errors.As(err, &remaining) {
		c.log.Debug("namespace controller: content remaining", "namespace", name, "estimateSeconds", remaining.estimate)
		return &worker.Requeue{After: time.Duration(remaining.estimate/2+1) * time.Second}
	}
	return err
}

// resourcesRemainingError: content is still going, with an estimate of
// how long it takes in seconds.
type resourcesRemainingError struct{ estimate int64 }

func (e *resourcesRemainingError) Error() string {
	return fmt.Sprintf("some content remains in the namespace, estimate %d seconds before it is removed", e.estimate)
}

// sync drives one deleted namespace toward removal.
func (c *Controller) sync(ctx context.Context, name string) error {
	nsClient := c.client.Core.Namespaces()
	ns, err := nsClient.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get namespace: %w", err)
	}
	if ns.DeletionTimestamp == nil {
		return nil
	}
	if ns.Status.Phase != corev1.NamespaceTerminating {
		if ns, err = c.updateNamespace(ctx, ns, func(ns *corev1.Namespace) bool {
			if ns.Status.Phase == corev1.NamespaceTerminating {
				return false
			}
			ns.Status.Phase = corev1.NamespaceTerminating
			return true
		}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("mark namespace Terminating: %w", err)
		}
	}
	if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
		return nil
	}
	estimate, err := c.deleteAllContent(ctx, ns)
	if err != nil {
		return err
	}
	if estimate > 0 {
		return &resourcesRemainingError{estimate: estimate}
	}
	return c.finalize(ctx, ns)
}

// updateNamespace applies change to ns's status and writes it, again
// on a conflict with the namespace read anew.
func (c *Controller) updateNamespace(ctx context.Context, ns *corev1.Namespace, change func(*corev1.Namespace) bool) (*corev1.Namespace, error) {
	nsClient := c.client.Core.Namespaces()
	cur := ns.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !change(cur) {
			return nil
		}
		out, err := nsClient.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			cur = out
			return nil
		}
		if apierrors.IsConflict(err) {
			if fresh, getErr := nsClient.Get(ctx, ns.Name, metav1.GetOptions{}); getErr == nil {
				cur = fresh
			}
		}
		return err
	})
	return cur, err
}

// finalize removes the "kubernetes" finalizer; with none left the API
// server removes the namespace.
func (c *Controller) finalize(ctx context.Context, ns *corev1.Namespace) error {
	nsClient := c.client.Core.Namespaces()
	cur := ns.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var fins []corev1.FinalizerName
		for _, f := range cur.Spec.Finalizers {
			if f != corev1.FinalizerKubernetes {
				fins = append(fins, f)
			}
		}
		cur.Spec.Finalizers = fins
		_, err := nsClient.Finalize(ctx, cur, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, getErr := nsClient.Get(ctx, ns.Name, metav1.GetOptions{}); getErr == nil {
				cur = fresh
			}
		}
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("finalize namespace: %w", err)
	}
	c.log.Info("namespace controller: namespace emptied and finalized", "namespace", ns.Name)
	return nil
}
