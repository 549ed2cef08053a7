// Package garbagecollector deletes objects whose owners are gone, as
// kube-controller-manager's garbage collector does. It watches the
// metadata of every resource discovery lists as listable, watchable and
// deletable (re-read every 30 s so new resources are covered), and
// follows metadata.ownerReferences, matched by uid:
//
//   - background: a dependent whose every owner is absent is deleted; one
//     that keeps a live owner only loses its references to absent ones;
//   - foreground: an owner deleting with the foregroundDeletion finalizer
//     has its dependents deleted, and loses the finalizer once no
//     dependent with blockOwnerDeletion remains;
//   - orphan: an owner deleting with the orphan finalizer has its
//     references removed from its dependents, then loses the finalizer.
//
// A namespaced owner must be in its dependent's namespace; a reference
// to one elsewhere counts as absent and earns the dependent an
// OwnerRefInvalidNamespace warning event.
//
// It owns the deletion of dependents, the ownerReferences it removes and
// the two finalizers above; it must not touch anything else of an
// object. Its caches hold metadata only, and it is idle (apart from the
// discovery re-read) while nothing changes.
package garbagecollector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/lru"

	"bonsai.dev/bonsai/client"
)

// Defaults: kube-controller-manager's.
const (
	DefaultDiscoveryPeriod = 30 * time.Second
	DefaultWorkers         = 20 // --concurrent-gc-syncs
	componentName          = "garbage-collector-controller"
	absentOwnerCacheSize   = 500
)

// Config is what the collector needs; zero fields take the defaults.
type Config struct {
	// RESTConfig reaches the API server: discovery and the metadata client.
	RESTConfig *rest.Config
	// Client writes events.
	Client *client.Clientset
	// DiscoveryPeriod is how often the resources to watch are re-read.
	DiscoveryPeriod time.Duration
	// Workers process deletions and orphanings in parallel.
	Workers int
	// IgnoredResources are never watched (upstream: events, in both
	// groups, which nothing owns and of which there are many).
	IgnoredResources map[schema.GroupResource]bool
	Logger           *slog.Logger
}

func (c *Config) defaults() {
	if c.DiscoveryPeriod <= 0 {
		c.DiscoveryPeriod = DefaultDiscoveryPeriod
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.IgnoredResources == nil {
		c.IgnoredResources = map[schema.GroupResource]bool{
			{Group: "", Resource: "events"}:              true,
			{Group: "events.k8s.io", Resource: "events"}: true,
		}
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
}

// objectRef names one object the collector works on. The uid tells a
// re-created object of the same name from the one enqueued.
type objectRef struct {
	gvr       schema.GroupVersionResource
	kind      string
	namespace string
	name      string
	uid       types.UID
}

func (r objectRef) String() string {
	if r.namespace == "" {
		return fmt.Sprintf("%s %s (uid %s)", r.gvr.GroupResource(), r.name, r.uid)
	}
	return fmt.Sprintf("%s %s/%s (uid %s)", r.gvr.GroupResource(), r.namespace, r.name, r.uid)
}

// Controller is the garbage collector.
type Controller struct {
	cfg       Config
	log       *slog.Logger
	meta      metadata.Interface
	discovery discovery.ServerResourcesInterface
	recorder  record.EventRecorder

	// attemptToDelete holds objects that may be garbage (an owner went
	// or is waiting for them) and owners deleting in the foreground;
	// attemptToOrphan owners deleting with the orphan finalizer.
	attemptToDelete workqueue.TypedRateLimitingInterface[objectRef]
	attemptToOrphan workqueue.TypedRateLimitingInterface[objectRef]

	// absentOwners remembers owners verified gone, so the dependents of
	// one deleted owner do not each ask the API server again. Keys are
	// ownerKeys; uids are never reused, so an entry never goes stale.
	absentOwners *lru.Cache

	mu       sync.RWMutex
	monitors map[schema.GroupVersionResource]*monitor
	// kinds maps every kind discovery lists (any version, any verbs) to
	// its resource, to resolve ownerReferences.
	kinds map[schema.GroupKind]resourceInfo
	// runCtx is what monitors run under; set by Run.
	runCtx context.Context
}

// New builds the collector; Run starts it.
func New(cfg Config) (*Controller, error) {
	cfg.defaults()
	if cfg.RESTConfig == nil || cfg.Client == nil {
		return nil, errors.New("garbage collector: RESTConfig and Client are required")
	}
	meta, err := metadata.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("garbage collector: metadata client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("garbage collector: discovery client: %w", err)
	}
	return &Controller{
		cfg:       cfg,
		log:       cfg.Logger,
		meta:      meta,
		discovery: disc,
		attemptToDelete: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[objectRef](),
			workqueue.TypedRateLimitingQueueConfig[objectRef]{Name: "garbage_collector_attempt_to_delete"}),
		attemptToOrphan: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[objectRef](),
			workqueue.TypedRateLimitingQueueConfig[objectRef]{Name: "garbage_collector_attempt_to_orphan"}),
		absentOwners: lru.New(absentOwnerCacheSize),
		monitors:     map[schema.GroupVersionResource]*monitor{},
		kinds:        map[schema.GroupKind]resourceInfo{},
	}, nil
}

// Run discovers the resources, waits for their caches, and works until
// ctx ends.
func (gc *Controller) Run(ctx context.Context) error {
	defer gc.attemptToDelete.ShutDown()
	defer gc.attemptToOrphan.ShutDown()
	gc.recorder = client.NewRecorder(ctx, gc.cfg.Client.Core.RESTClient(), componentName)
	gc.mu.Lock()
	gc.runCtx = ctx
	gc.mu.Unlock()

	// The first discovery must succeed, or nothing is known; keep trying.
	for {
		err := gc.resync(ctx)
		if err == nil {
			break
		}
		gc.log.Error("garbage collector: discovery failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	if !gc.waitForSync(ctx) {
		return nil
	}
	gc.log.Info("garbage collector started", "resources", gc.monitorCount(), "workers", gc.cfg.Workers)

	var wg sync.WaitGroup
	for i := 0; i < gc.cfg.Workers; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for gc.processNext(ctx, gc.attemptToDelete, gc.attemptToDeleteItem) {
			}
		}()
		go func() {
			defer wg.Done()
			for gc.processNext(ctx, gc.attemptToOrphan, gc.orphanDependents) {
			}
		}()
	}
	ticker := time.NewTicker(gc.cfg.DiscoveryPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			gc.attemptToDelete.ShutDown()
			gc.attemptToOrphan.ShutDown()
			wg.Wait()
			return nil
		case <-ticker.C:
			if err := gc.resync(ctx); err != nil {
				gc.log.Warn("garbage collector: rediscovery failed; keeping the resources known", "err", err)
			}
		}
	}
}

// processNext handles one item of q with sync; false once q shuts down.
func (gc *Controller) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[objectRef], sync func(context.Context, objectRef) error) bool {
	ref, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(ref)
	err := sync(ctx, ref)
	switch {
	case err == nil:
		q.Forget(ref)
	case errors.Is(err, errNamespacedOwnerOfClusterScoped):
		// A cluster-scoped object naming a namespaced owner stays as it
		// is: no retry can resolve the reference.
		gc.log.Debug("garbage collector: cluster-scoped object refers to a namespaced owner; leaving it", "item", ref)
		q.Forget(ref)
	case errors.Is(err, errUnknownKind):
		// A kind discovery does not list (yet): a new resource shows up at
		// the next rediscovery, so retry with back-off, quietly.
		gc.log.Debug("garbage collector: owner of unknown kind", "item", ref, "err", err)
		q.AddRateLimited(ref)
	default:
		if ctx.Err() == nil {
			gc.log.Warn("garbage collector: sync failed", "item", ref, "err", err)
		}
		q.AddRateLimited(ref)
	}
	return true
}

// get reads the live metadata of ref.
func (gc *Controller) get(ctx context.Context, ref objectRef) (*metav1.PartialObjectMetadata, error) {
	return gc.meta.Resource(ref.gvr).Namespace(ref.namespace).Get(ctx, ref.name, metav1.GetOptions{})
}

// reportInvalidNamespace records the warning upstream gives a dependent
// whose ownerReference names a namespaced owner outside its namespace.
func (gc *Controller) reportInvalidNamespace(dep objectRef, owner metav1.OwnerReference) {
	ref := &corev1.ObjectReference{Kind: dep.kind, APIVersion: dep.gvr.GroupVersion().String(), Namespace: dep.namespace, Name: dep.name, UID: dep.uid}
	gc.recorder.Eventf(ref, corev1.EventTypeWarning, "OwnerRefInvalidNamespace", "ownerRef [%s/%s, namespace: %s, name: %s, uid: %s] does not exist in namespace %q",
		owner.APIVersion, owner.Kind, dep.namespace, owner.Name, owner.UID, dep.namespace)
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
