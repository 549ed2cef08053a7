// Package nodeipam gives every Node its pod CIDRs: it sets spec.podCIDRs,
// one from each cluster CIDR (one per IP family on a dual-stack cluster),
// and spec.podCIDR to the first, as kube-controller-manager's range
// allocator does. A node that already has a pod CIDR keeps it (after a
// restart too); a deleted node's CIDR goes back to the pool; when the pool
// is empty the node gets a CIDRNotAvailable event and waits.
//
// It owns those two fields of Nodes and nothing else. It talks to the API
// only through client-go (informer, workqueue, events), never to the store,
// and it is the only writer of pod CIDRs: one instance per cluster.
package nodeipam

import (
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
	"cmp"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// Config is what the controller needs.
type Config struct {
	// RESTConfig reaches the API server. Only the core group is used, over
	// a plain REST client: the typed clientset would link every group.
	RESTConfig *rest.Config
	// ClusterCIDRs are cut into node CIDRs of NodeMaskSizes[i] bits: one
	// per family, the primary first. A single-stack cluster may set
	// ClusterCIDR and NodeMaskSize instead.
	ClusterCIDRs  []netip.Prefix
	NodeMaskSizes []int
	ClusterCIDR   netip.Prefix
	NodeMaskSize  int
	// Workers sync nodes in parallel (default 8): allocation is serialised
	// in memory, the API writes are not.
	Workers int
	// RetryMax caps the back-off of a node waiting for a free CIDR
	// (default 30 s); a CIDR released by a deleted node is handed out at
	// once regardless.
	RetryMax time.Duration
	Logger   *slog.Logger
}

// Controller is the node IPAM controller.
type Controller struct {
	cfg      Config
	core     rest.Interface
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	events   record.EventBroadcaster
	log      *slog.Logger

	mu sync.Mutex
	// sets are the cluster CIDRs' node CIDRs, in ClusterCIDRs' order.
	sets []*cidrSet
	// held is each node's pod CIDRs as marked in sets: the ones it has,
	// or those reserved for it (one per set) while the write is under
	// way.
	held map[string][]netip.Prefix
	// waiting are nodes that found the pool empty; a release wakes them.
	waiting map[string]bool
}

// New builds the controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 30 * time.Second
	}
	if len(cfg.ClusterCIDRs) == 0 {
		cfg.ClusterCIDRs, cfg.NodeMaskSizes = []netip.Prefix{cfg.ClusterCIDR}, []int{cfg.NodeMaskSize}
	}
	if len(cfg.ClusterCIDRs) != len(cfg.NodeMaskSizes) || len(cfg.ClusterCIDRs) > 2 {
		return nil, fmt.Errorf("nodeipam: %d cluster CIDRs, %d node mask sizes", len(cfg.ClusterCIDRs), len(cfg.NodeMaskSizes))
	}
	if len(cfg.ClusterCIDRs) == 2 && cfg.ClusterCIDRs[0].Addr().Is4() == cfg.ClusterCIDRs[1].Addr().Is4() {
		return nil, fmt.Errorf("nodeipam: cluster CIDRs %v are not one per IP family", cfg.ClusterCIDRs)
	}
	var sets []*cidrSet
	for i, cc := range cfg.ClusterCIDRs {
		set, err := newCIDRSet(cc, cfg.NodeMaskSizes[i])
		if err != nil {
			return nil, err
		}
		sets = append(sets, set)
	}
	core, err := client.Core(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:  cfg,
		core: core,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, cfg.RetryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeipam"}),
		log:     cfg.Logger.With("controller", "node-ipam"),
		sets:    sets,
		held:    map[string][]netip.Prefix{},
		waiting: map[string]bool{},
	}
	c.informer = cache.NewSharedIndexInformer(
		cache.NewListWatchFromClient(core, "nodes", "", fields.Everything()),
		&corev1.Node{}, 0, cache.Indexers{})
	// Only names and pod CIDRs matter here: 10,000 nodes cost a few MB.
	c.informer.SetTransform(viewNode)
	c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	})
	c.events = record.NewBroadcaster()
	c.recorder = c.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "node-ipam-controller"})
	return c, nil
}

// nodeView is what the controller keeps of a Node: its name and pod
// CIDRs, a few hundred bytes where a decoded Node takes kilobytes.
type nodeView struct {
	metav1.ObjectMeta // name, UID and resourceVersion only
	podCIDRs          []string
}

func (v *nodeView) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject shares podCIDRs: a view is never modified.
func (v *nodeView) DeepCopyObject() runtime.Object {
	c := *v
	c.ObjectMeta = *v.ObjectMeta.DeepCopy()
	return &c
}

func viewNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a tombstone, or a view already
	}
	v := &nodeView{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}, podCIDRs: n.Spec.PodCIDRs}
	if len(v.podCIDRs) == 0 && n.Spec.PodCIDR != "" {
		v.podCIDRs = []string{n.Spec.PodCIDR}
	}
	return v, nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		c.queue.Add(key)
	}
}

// Run allocates until ctx ends. Before the first allocation it marks every
// pod CIDR the nodes already have, from a full list: after a restart no
// CIDR can be handed out twice.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	sink := c.events.StartRecordingToSink(&client.EventSink{Core: c.core, Ctx: ctx})
	defer func() { sink.Stop(); c.events.Shutdown() }()
	go c.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return ctx.Err()
	}
	c.mu.Lock()
	for _, obj := range c.informer.GetStore().List() {
		n := obj.(*nodeView)
		c.recordLocked(n.Name, nodeCIDRs(n, c.log))
	}
	for _, set := range c.sets {
		c.log.Info("node CIDRs in use", "count", set.inUse, "of", set.size, "clusterCIDR", set.cluster, "nodeMaskSize", set.maskBits)
	}
	c.mu.Unlock()

	worker.Run(ctx, c.queue, c.cfg.Workers, c.syncKey, c.log, "node")
	return nil
}

// syncKey syncs a node's CIDRs; a full range (until a node goes) and a
// write conflict are retried quietly.
func (c *Controller) syncKey(ctx context.Context, key string) error {
	err := c.sync(ctx, key)
	if errors.Is(err, errFull) || apierrors.IsConflict(err) {
		return worker.Quiet(err)
	}
	return err
}

// sync makes one node's pod CIDR true: record the one it has, or give it
// one; a node that is gone gives its CIDR back.
func (c *Controller) sync(ctx context.Context, name string) error {
	obj, exists, err := c.informer.GetIndexer().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		c.mu.Lock()
		c.releaseLocked(name)
		c.mu.Unlock()
		return nil
	}
	node := obj.(*nodeView)
	if have := nodeCIDRs(node, c.log); len(have) > 0 || len(node.podCIDRs) > 0 {
		c.mu.Lock()
		c.recordLocked(name, have)
		c.mu.Unlock()
		return nil
	}

	c.mu.Lock()
	cidrs, full, err := c.reserveLocked(name)
	var inUse, size int
	if full != nil {
		inUse, size = full.inUse, full.size
	}
	c.mu.Unlock()
	if err != nil {
		ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
		c.recorder.Eventf(ref, corev1.EventTypeWarning, "CIDRNotAvailable",
			"Node %s has no pod CIDR: all %d /%d ranges of the cluster CIDR %s are in use; it gets one when a node is deleted",
			name, size, full.maskBits, full.cluster)
		c.log.Warn("no free node CIDR", "node", name, "inUse", inUse, "clusterCIDR", full.cluster)
		return err
	}
	strs := make([]string, len(cidrs))
	for i, p := range cidrs {
		strs[i] = p.String()
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"podCIDR": strs[0], "podCIDRs": strs}})
	err = c.core.Patch(types.StrategicMergePatchType).Resource("nodes").Name(name).Body(patch).Do(ctx).Error()
	if apierrors.IsNotFound(err) {
		return nil // the delete event releases the reservation
	}
	if err != nil {
		// The reservation stays: the retry writes the same CIDR, unless
		// the node got one from elsewhere meanwhile (then that one is
		// recorded and this one released).
		return fmt.Errorf("set pod CIDRs %v: %w", strs, err)
	}
	c.log.Debug("node CIDRs allocated", "node", name, "podCIDRs", strs)
	return nil
}

// reserveLocked returns the CIDRs held for name, or takes a free one of
// each cluster CIDR: all or none, as upstream's range allocator. On
// failure it returns the set that is full.
func (c *Controller) reserveLocked(name string) ([]netip.Prefix, *cidrSet, error) {
	if h := c.held[name]; len(h) == len(c.sets) {
		return h, nil, nil
	}
	c.releaseLocked(name)
	var got []netip.Prefix
	for _, set := range c.sets {
		p, err := set.allocateNext()
		if err != nil {
			for i, q := range got {
				c.sets[i].release(q)
			}
			c.waiting[name] = true
			return nil, set, err
		}
		got = append(got, p)
	}
	delete(c.waiting, name)
	c.held[name] = got
	return got, nil, nil
}

// setOf is the cluster CIDR set of p's family, nil if none.
func (c *Controller) setOf(p netip.Prefix) *cidrSet {
	for _, set := range c.sets {
		if set.cluster.Addr().Is4() == p.Addr().Is4() {
			return set
		}
	}
	return nil
}

// recordLocked marks what a node has as its own, giving back whatever was
// held for it before.
func (c *Controller) recordLocked(name string, have []netip.Prefix) {
	delete(c.waiting, name)
	if same(c.held[name], have) {
		return
	}
	c.releaseLocked(name)
	var kept []netip.Prefix
	for _, p := range have {
		set := c.setOf(p)
		if set == nil {
			continue // a family the cluster has no CIDR of
		}
		if set.taken(p) {
			// Set by hand, or by another allocator: two nodes share it.
			// Nothing here can fix that; say so.
			c.log.Warn("pod CIDR of a node overlaps one already in use", "node", name, "podCIDR", p)
		}
		if set.occupy(p) {
			kept = append(kept, p)
		}
	}
	if len(kept) > 0 {
		c.held[name] = kept
	}
}

func (c *Controller) releaseLocked(name string) {
	h, ok := c.held[name]
	delete(c.waiting, name)
	if !ok {
		return
	}
	delete(c.held, name)
	for _, p := range h {
		if set := c.setOf(p); set != nil {
			set.release(p)
		}
	}
	// Nodes waiting for a CIDR try again now rather than after back-off.
	for n := range c.waiting {
		c.queue.Add(n)
	}
}

func same(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// nodeCIDRs parses what a node has; unparsable entries are logged and left
// out (the API validates them, so this is belt and braces).
func nodeCIDRs(n *nodeView, log *slog.Logger) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range n.podCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			log.Warn("node has an unparsable pod CIDR", "node", n.Name, "podCIDR", s)
			continue
		}
		out = append(out, p.Masked())
	}
	return out
}
