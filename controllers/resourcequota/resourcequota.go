// Package resourcequota is kube-controller-manager's resourcequota
// controller: it recounts each ResourceQuota's status.used from the
// objects of its namespace (object counts, count/<resource>.<group>,
// compute requests and limits of pods, storage of claims, within the
// quota's scopes) and copies spec.hard to status.hard. The API server's
// quota admission charges new objects as they are created; this
// controller gives back what deleted or finished objects held, and
// corrects any drift, at once on deletions and every SyncPeriod.
//
// It owns ResourceQuota status and nothing else. The usage rules are
// apiserver/quota's, shared with the admission.
package resourcequota

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

// DefaultSyncPeriod is kube-controller-manager's
// --resource-quota-sync-period.
const DefaultSyncPeriod = 5 * time.Minute

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	// RESTConfig reaches kinds without a shared informer, which
	// count/<resource>.<group> quotas count through metadata lists.
	RESTConfig *rest.Config
	Logger     *slog.Logger
	// SyncPeriod is DefaultSyncPeriod when zero.
	SyncPeriod time.Duration
	// Clock judges pods' deletion grace; the real clock when nil.
	Clock clock.PassiveClock
}

// Controller recounts quota usage.
type Controller struct {
	cfg    Config
	log    *slog.Logger
	meta   metadata.Interface
	quotas corelisters.ResourceQuotaLister
	// indexer holds the kinds counted from the shared informers' caches.
	indexer map[schema.GroupResource]cache.Indexer
	synced  []cache.InformerSynced
	// metaInformers are the countedByMetadata kinds' informers, which
	// Run runs (they are the controller's own).
	metaInformers []cache.SharedIndexInformer
	queue         workqueue.TypedRateLimitingInterface[string]
}

// informed are the kinds counted from caches of whole objects, whose
// usage depends on their spec; the others are listed.
var informed = map[schema.GroupResource]runtime.Object{
	{Resource: "pods"}:                   &corev1.Pod{},
	{Resource: "services"}:               &corev1.Service{},
	{Resource: "persistentvolumeclaims"}: &corev1.PersistentVolumeClaim{},
	{Resource: "resourcequotas"}:         &corev1.ResourceQuota{},
}

// countedByMetadata are numerous kinds that only count: cached as
// metadata, so their data (1 MB each at most) is neither kept nor decoded
// here.
var countedByMetadata = []schema.GroupResource{{Resource: "configmaps"}, {Resource: "secrets"}}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = DefaultSyncPeriod
	}
	cfg.Clock = cmp.Or[clock.PassiveClock](cfg.Clock, clock.RealClock{})
	meta, err := metadata.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	quotaInf := cfg.Informers.For(&corev1.ResourceQuota{})
	c := &Controller{
		cfg:     cfg,
		log:     cfg.Logger,
		meta:    meta,
		quotas:  corelisters.NewResourceQuotaLister(quotaInf.GetIndexer()),
		indexer: map[schema.GroupResource]cache.Indexer{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "resourcequota"}),
	}
	if _, err := quotaInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueQuota,
		UpdateFunc: func(old, obj any) {
			// Its own status writes need no recount; a new spec does.
			o, n := old.(*corev1.ResourceQuota), obj.(*corev1.ResourceQuota)
			if o.Generation != n.Generation || !sameLists(n.Spec.Hard, n.Status.Hard) {
				c.enqueueQuota(obj)
			}
		},
	}); err != nil {
		return nil, err
	}
	infs := map[schema.GroupResource]cache.SharedIndexInformer{}
	for gr, obj := range informed {
		infs[gr] = cfg.Informers.For(obj)
	}
	for _, gr := range countedByMetadata {
		inf := metadataInformer(cfg.RESTConfig, meta, gr.WithVersion("v1"))
		c.metaInformers = append(c.metaInformers, inf)
		infs[gr] = inf
	}
	for gr, inf := range infs {
		c.indexer[gr] = inf.GetIndexer()
		c.synced = append(c.synced, inf.HasSynced)
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, obj any) {
				if mayFree(old, obj) {
					c.enqueueNamespaceOf(obj)
				}
			},
			DeleteFunc: c.enqueueNamespaceOf,
		}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// mayFree: an update after which the object may use less (the
// admission charged the increase already): a pod that finished or is
// being deleted, a claim or service whose spec changed. As upstream's
// replenishment, only those: a recount reads caches that may not have
// the objects admitted a moment ago, so one run for a pod going Pending
// to Running could write a usage below what admission had charged, and
// let the next create past the quota.
func mayFree(old, obj any) bool {
	switch n := obj.(type) {
	case *corev1.Pod:
		o := old.(*corev1.Pod)
		return podTerminal(n) != podTerminal(o) || (n.DeletionTimestamp != nil) != (o.DeletionTimestamp != nil)
	case *corev1.PersistentVolumeClaim:
		return n.Generation != old.(*corev1.PersistentVolumeClaim).Generation ||
			!sameLists(n.Spec.Resources.Requests, old.(*corev1.PersistentVolumeClaim).Spec.Resources.Requests)
	case *corev1.Service:
		o := old.(*corev1.Service)
		return n.Spec.Type != o.Spec.Type || len(n.Spec.Ports) != len(o.Spec.Ports)
	}
	return false
}

func podTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func (c *Controller) enqueueQuota(obj any) {
	if k, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(k)
	}
}

func (c *Controller) enqueueNamespaceOf(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	ns, _, err := cache.SplitMetaNamespaceKey(keyOf(obj))
	if err != nil || ns == "" {
		return
	}
	qs, _ := c.quotas.ResourceQuotas(ns).List(labels.Everything())
	for _, q := range qs {
		c.queue.Add(q.Namespace + "/" + q.Name)
	}
}

func keyOf(obj any) string {
	k, _ := cache.MetaNamespaceKeyFunc(obj)
	return k
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	for _, inf := range c.metaInformers {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return nil
	}
	go c.resync(ctx)
	worker.Run(ctx, c.queue, 1, c.sync, c.log, "quota")
	return nil
}

// resync recounts every quota every SyncPeriod, catching what no event
// announced (an admission charge for an object that was then not
// stored).
func (c *Controller) resync(ctx context.Context) {
	t := time.NewTicker(c.cfg.SyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			qs, _ := c.quotas.List(labels.Everything())
			for _, q := range qs {
				c.queue.Add(q.Namespace + "/" + q.Name)
			}
		}
	}
}

// metadataInformer caches the metadata of every object of gvr, indexed
// by namespace, keeping only what counting needs.
func metadataInformer(cfg *rest.Config, meta metadata.Interface, gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(client.MetadataListWatch(cfg, meta, gvr), &metav1.PartialObjectMetadata{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	// Before Run, so it cannot fail.
	_ = inf.SetTransform(func(obj any) (any, error) {
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return obj, nil
		}
		return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
			Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		}}, nil
	})
	return inf
}
