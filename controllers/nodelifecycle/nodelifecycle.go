// Package nodelifecycle watches node heartbeats and acts on dead nodes, as
// kube-controller-manager's node lifecycle controller, taint manager and
// pod GC do: every NodeMonitorPeriod it checks each node's Lease and
// Ready heartbeat; a node silent for NodeMonitorGracePeriod gets its
// kubelet conditions set to Unknown, its pods marked not Ready, and the
// node.kubernetes.io/unreachable taints (not-ready when it reports
// Ready=False). NoExecute taints are added at a per-zone rate that drops
// when a zone is mostly down and stops when every zone is; pods that do
// not tolerate a NoExecute taint are deleted (after their
// tolerationSeconds when they tolerate it for a while). Pods of deleted
// nodes and terminated pods over a threshold are garbage-collected.
//
// It owns those conditions and taints of Nodes, pods' Ready condition on
// unreachable nodes, and the deletion of pods for those reasons. It must
// not touch anything a kubelet reports about a live node, nor taints it
// did not set (out-of-service is the user's). It talks to the API only
// through client-go; one instance per cluster.
package nodelifecycle

import (
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
	"cmp"
	"fmt"

	"context"
	"log/slog"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Defaults: kube-controller-manager's (the grace period as the seed
// documents it, 40 s; upstream moved it to 50 s in 1.32).
const (
	DefaultNodeMonitorPeriod         = 5 * time.Second
	DefaultNodeMonitorGracePeriod    = 40 * time.Second
	DefaultNodeEvictionRate          = 0.1
	DefaultSecondaryNodeEvictionRate = 0.01
	DefaultUnhealthyZoneThreshold    = 0.55
	DefaultLargeClusterSizeThreshold = 50
	DefaultTerminatedPodGCThreshold  = 12500
	defaultPodGCPeriod               = 20 * time.Second
	defaultTaintQueuePeriod          = 100 * time.Millisecond
	orphanQuarantine                 = 40 * time.Second
	reasonNodeStatusUnknown          = "NodeStatusUnknown"
	messageNodeStatusUnknown         = "Kubelet stopped posting node status."
	reasonNodeStatusNeverUpdated     = "NodeStatusNeverUpdated"
	messageNodeStatusNeverUpdated    = "Kubelet never posted node status."
	taintOutOfService                = "node.kubernetes.io/out-of-service"
	reasonTaintManagerEviction       = "TaintManagerEviction"
	reasonNodeNotReady               = "NodeNotReady"
	componentName                    = "node-controller"
	maxPodDeleteBackoff              = 30 * time.Second
	initialPodDeleteBackoff          = 100 * time.Millisecond
)

// kubeletConditions are the conditions a kubelet owns; when it stops
// posting, each becomes Unknown (upstream's list).
var kubeletConditions = []corev1.NodeConditionType{
	corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure,
}

// Config is what the controller needs; zero fields take the defaults.
type Config struct {
	RESTConfig *rest.Config
	// NodeMonitorPeriod is how often every node is checked (5 s);
	// NodeMonitorGracePeriod how long a node may be silent before it is
	// Unknown (40 s).
	NodeMonitorPeriod      time.Duration
	NodeMonitorGracePeriod time.Duration
	// NodeEvictionRate is NoExecute taints per second per zone (0.1);
	// SecondaryNodeEvictionRate the rate in a partially disrupted zone of
	// a cluster over LargeClusterSizeThreshold nodes (0.01; negative for
	// none). In a smaller cluster a partially disrupted zone evicts
	// nothing.
	NodeEvictionRate          float64
	SecondaryNodeEvictionRate float64
	// UnhealthyZoneThreshold is the fraction of not-ready nodes (with more
	// than 2 of them) that makes a zone partially disrupted (0.55).
	UnhealthyZoneThreshold    float64
	LargeClusterSizeThreshold int
	// TerminatedPodGCThreshold is how many terminated pods may exist
	// before the oldest are deleted (12500); 0 or less turns that off.
	TerminatedPodGCThreshold int
	// PodGCPeriod is how often pod GC runs (20 s).
	PodGCPeriod time.Duration
	// Workers delete and update pods in parallel (default 4).
	Workers int
	Clock   clock.WithTicker
	Logger  *slog.Logger
	// Informers, when set, are the process' shared informers: the
	// controller then keeps no cache of pods and nodes of its own. The
	// caller starts them.
	Informers *client.Informers
}

func (c *Config) defaults() {
	if c.NodeMonitorPeriod <= 0 {
		c.NodeMonitorPeriod = DefaultNodeMonitorPeriod
	}
	if c.NodeMonitorGracePeriod <= 0 {
		c.NodeMonitorGracePeriod = DefaultNodeMonitorGracePeriod
	}
	if c.NodeEvictionRate <= 0 {
		c.NodeEvictionRate = DefaultNodeEvictionRate
	}
	switch {
	case c.SecondaryNodeEvictionRate == 0:
		c.SecondaryNodeEvictionRate = DefaultSecondaryNodeEvictionRate
	case c.SecondaryNodeEvictionRate < 0:
		c.SecondaryNodeEvictionRate = 0
	}
	if c.UnhealthyZoneThreshold <= 0 {
		c.UnhealthyZoneThreshold = DefaultUnhealthyZoneThreshold
	}
	if c.LargeClusterSizeThreshold <= 0 {
		c.LargeClusterSizeThreshold = DefaultLargeClusterSizeThreshold
	}
	if c.PodGCPeriod <= 0 {
		c.PodGCPeriod = defaultPodGCPeriod
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	c.Clock = cmp.Or[clock.WithTicker](c.Clock, clock.RealClock{})
	c.Logger = cmp.Or(c.Logger, slog.Default())
}

// nodeHealth is what the controller has seen of a node's heartbeats.
// probe is the controller's own clock when a heartbeat last changed: a
// kubelet's clock may be off, so its timestamps are compared only with
// themselves.
type nodeHealth struct {
	probe     time.Time
	renew     time.Time // lease spec.renewTime last seen
	heartbeat time.Time // Ready lastHeartbeatTime last seen
}

// Controller is the node lifecycle controller.
type Controller struct {
	cfg    Config
	clock  clock.WithTicker
	core   rest.Interface
	nodes  cache.SharedIndexInformer
	leases cache.SharedIndexInformer
	pods   cache.SharedIndexInformer
	// own are the informers the controller made and runs itself.
	own      []cache.SharedIndexInformer
	podQueue workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	events   record.EventBroadcaster
	log      *slog.Logger

	// Monitor state, touched only by the monitor goroutine (and tests).
	health map[string]*nodeHealth
	zones  map[string]zoneState
	// allDisrupted: every zone fully disrupted; nothing is evicted.
	allDisrupted bool

	// Taint queue: nodes waiting for their NoExecute taint, per zone.
	mu       sync.Mutex
	limiters map[string]*evictionLimiter
	pending  map[string][]string // zone -> node names, first in first out
	queued   map[string]bool
	// tainted: nodes given a NoExecute taint, when, until the cache
	// shows it.
	tainted map[string]time.Time
	// orphans: pods whose node does not exist, since when (pod key).
	orphans map[string]time.Time
}

// New builds the controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	cfg.defaults()
	core, coord, err := client.CoreAndCoordination(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:   cfg,
		clock: cfg.Clock,
		core:  core,
		podQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](initialPodDeleteBackoff, maxPodDeleteBackoff),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodelifecycle-pods", Clock: cfg.Clock}),
		log:      cfg.Logger.With("controller", "node-lifecycle"),
		health:   map[string]*nodeHealth{},
		zones:    map[string]zoneState{},
		limiters: map[string]*evictionLimiter{},
		pending:  map[string][]string{},
		queued:   map[string]bool{},
		orphans:  map[string]time.Time{},
		tainted:  map[string]time.Time{},
	}
	c.leases = cache.NewSharedIndexInformer(cache.NewListWatchFromClient(coord, "leases", corev1.NamespaceNodeLease, fields.Everything()), &coordinationv1.Lease{}, 0, cache.Indexers{})
	c.own = []cache.SharedIndexInformer{c.leases}
	if cfg.Informers != nil {
		c.nodes = cfg.Informers.For(&corev1.Node{})
		c.pods = cfg.Informers.For(&corev1.Pod{})
		if err := client.IndexPodsByNode(c.pods); err != nil {
			return nil, fmt.Errorf("pods by node: %w", err)
		}
	} else {
		c.nodes = cache.NewSharedIndexInformer(cache.NewListWatchFromClient(core, "nodes", "", fields.Everything()), &corev1.Node{}, 0, cache.Indexers{})
		c.pods = cache.NewSharedIndexInformer(cache.NewListWatchFromClient(core, "pods", "", fields.Everything()), &corev1.Pod{}, 0, cache.Indexers{client.PodNodeIndex: client.PodNodeKeys})
		c.own = append(c.own, c.nodes, c.pods)
	}
	c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePod,
		UpdateFunc: func(_, obj any) { c.enqueuePod(obj) },
	})
	// A node's taints or readiness changing, or the node going, is
	// something every pod on it must look at.
	c.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueNodePods,
		UpdateFunc: func(old, obj any) {
			o, n := old.(*corev1.Node), obj.(*corev1.Node)
			if !sameTaints(o.Spec.Taints, n.Spec.Taints) || readyStatus(o) != readyStatus(n) {
				c.enqueueNodePods(obj)
			}
		},
		DeleteFunc: c.enqueueNodePods,
	})
	c.events = record.NewBroadcaster()
	c.recorder = c.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: componentName})
	return c, nil
}

func (c *Controller) enqueuePod(obj any) {
	worker.Enqueue(c.podQueue, obj)
}

func (c *Controller) enqueueNodePods(obj any) {
	name := ""
	switch n := obj.(type) {
	case *corev1.Node:
		name = n.Name
	case cache.DeletedFinalStateUnknown:
		name = n.Key
	}
	if name == "" {
		return
	}
	pods, _ := c.pods.GetIndexer().ByIndex(client.PodNodeIndex, name)
	for _, p := range pods {
		c.enqueuePod(p)
	}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	stop, err := c.start(ctx)
	if err != nil {
		return err
	}
	defer stop()
	monitor := c.clock.NewTicker(c.cfg.NodeMonitorPeriod)
	taints := c.clock.NewTicker(defaultTaintQueuePeriod)
	gc := c.clock.NewTicker(c.cfg.PodGCPeriod)
	defer monitor.Stop()
	defer taints.Stop()
	defer gc.Stop()
	c.monitor(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-monitor.C():
			c.monitor(ctx)
		case <-taints.C():
			c.processTaintQueues(ctx)
		case <-gc.C():
			c.gcPods(ctx)
		}
	}
}

// start runs the informers, the event sink and the pod workers; stop
// ends them once ctx is done. The periodic passes are Run's (tests call
// them one by one).
func (c *Controller) start(ctx context.Context) (stop func(), err error) {
	sink := c.events.StartRecordingToSink(&client.EventSink{Core: c.core, Ctx: ctx})
	for _, inf := range c.own {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.nodes.HasSynced, c.leases.HasSynced, c.pods.HasSynced) {
		c.podQueue.ShutDown()
		sink.Stop()
		c.events.Shutdown()
		return nil, ctx.Err()
	}
	c.log.Info("node lifecycle controller started", "monitorPeriod", c.cfg.NodeMonitorPeriod,
		"gracePeriod", c.cfg.NodeMonitorGracePeriod, "evictionRate", c.cfg.NodeEvictionRate,
		"secondaryEvictionRate", c.cfg.SecondaryNodeEvictionRate, "unhealthyZoneThreshold", c.cfg.UnhealthyZoneThreshold,
		"largeClusterSizeThreshold", c.cfg.LargeClusterSizeThreshold, "terminatedPodGCThreshold", c.cfg.TerminatedPodGCThreshold)

	var wg sync.WaitGroup
	for i := 0; i < c.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNextPod(ctx) {
			}
		}()
	}
	return func() {
		c.podQueue.ShutDown()
		wg.Wait()
		sink.Stop()
		c.events.Shutdown()
	}, nil
}

// monitor is one pass over every node: heartbeats, conditions, taints,
// zone states.
func (c *Controller) monitor(ctx context.Context) {
	now := c.clock.Now()
	type count struct{ ready, notReady int }
	counts := map[string]*count{}
	seen := map[string]bool{}
	readiness := map[string]corev1.ConditionStatus{}
	nodes := c.nodes.GetStore().List()
	for _, obj := range nodes {
		node := obj.(*corev1.Node)
		seen[node.Name] = true
		ready, err := c.checkNode(ctx, node, now)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("node health check failed; next pass retries", "node", node.Name, "err", err)
		}
		readiness[node.Name] = ready
		z := zoneOf(node)
		if counts[z] == nil {
			counts[z] = &count{}
		}
		if ready == corev1.ConditionTrue {
			counts[z].ready++
		} else {
			counts[z].notReady++
		}
	}
	for name := range c.health {
		if !seen[name] {
			delete(c.health, name)
		}
	}

	// Zone states, and whether every zone is down at once: then the
	// control plane is more likely cut off than every node dead.
	allFull := len(counts) > 0
	states := map[string]zoneState{}
	for z, n := range counts {
		states[z] = computeZoneState(n.ready, n.notReady, c.cfg.UnhealthyZoneThreshold)
		allFull = allFull && states[z] == stateFullDisruption
	}
	for z, s := range states {
		if old := c.zones[z]; old != s {
			c.log.Info("zone state changed", "zone", zoneName(z), "from", orInitial(old), "to", s)
		}
	}
	c.zones = states
	if allFull != c.allDisrupted {
		if allFull {
			c.log.Warn("every zone is fully disrupted: no evictions, NoExecute taints taken off, until a node is Ready again")
		} else {
			c.log.Info("a zone has a Ready node again: evictions resume")
			// Nodes get a fresh grace period, as upstream gives them: the
			// silence may have been the control plane's.
			for _, h := range c.health {
				h.probe = now
			}
		}
		c.allDisrupted = allFull
	}

	c.mu.Lock()
	for z := range c.limiters {
		if _, ok := states[z]; !ok {
			c.limiters[z].limiter.Stop()
			delete(c.limiters, z)
			for _, n := range c.pending[z] {
				delete(c.queued, n)
			}
			delete(c.pending, z)
		}
	}
	for z, s := range states {
		rate := c.cfg.zoneRate(s, len(nodes))
		if allFull {
			rate = 0
		}
		if l := c.limiters[z]; l == nil {
			c.limiters[z] = newEvictionLimiter(rate, c.clock)
		} else {
			l.setRate(rate, c.clock)
		}
	}
	if allFull {
		for z, names := range c.pending {
			for _, n := range names {
				delete(c.queued, n)
			}
			delete(c.pending, z)
		}
	}
	c.mu.Unlock()

	// NoExecute taints once the zones are known: they depend on them.
	for _, obj := range nodes {
		node := obj.(*corev1.Node)
		var err error
		if allFull {
			if hasTaint(node, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) || hasTaint(node, corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute) {
				err = c.updateTaints(ctx, node.Name, func(n *corev1.Node) []corev1.Taint { return withoutNoExecute(n.Spec.Taints) })
			}
		} else {
			err = c.ensureNoExecuteTaint(ctx, node, readiness[node.Name])
		}
		if err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
			c.log.Warn("NoExecute taint update failed; next pass retries", "node", node.Name, "err", err)
		}
	}
	c.processTaintQueues(ctx)
}

func zoneName(z string) string {
	if z == "" {
		return "(none)"
	}
	return z
}

func orInitial(s zoneState) zoneState {
	if s == "" {
		return stateInitial
	}
	return s
}

// checkNode brings one node's conditions and NoSchedule taints in line
// with its heartbeats and returns its Ready status as it now stands (""
// without a Ready condition).
func (c *Controller) checkNode(ctx context.Context, node *corev1.Node, now time.Time) (corev1.ConditionStatus, error) {
	h := c.health[node.Name]
	if h == nil {
		// First sight (or a restart of this controller): the node has a
		// whole grace period from now.
		h = &nodeHealth{probe: now}
		c.health[node.Name] = h
	}
	if l, ok, _ := c.leases.GetStore().GetByKey(corev1.NamespaceNodeLease + "/" + node.Name); ok {
		if rt := l.(*coordinationv1.Lease).Spec.RenewTime; rt != nil && !rt.Time.Equal(h.renew) {
			h.renew, h.probe = rt.Time, now
		}
	}
	if rc := readyCondition(node); rc != nil && !rc.LastHeartbeatTime.Time.Equal(h.heartbeat) {
		h.heartbeat, h.probe = rc.LastHeartbeatTime.Time, now
	}

	// No Ready condition yet (a node still registering) means no taints
	// until the grace period makes it Unknown.
	var ready corev1.ConditionStatus
	if rc := readyCondition(node); rc != nil {
		ready = rc.Status
	}
	var err error
	if now.Sub(h.probe) > c.cfg.NodeMonitorGracePeriod && needsUnknown(node) {
		if err = c.markUnknown(ctx, node.Name, now); err == nil {
			ready = corev1.ConditionUnknown
			c.log.Info("node stopped posting status: conditions Unknown", "node", node.Name, "silentFor", now.Sub(h.probe).Round(time.Millisecond))
			c.recorder.Eventf(nodeRef(node), corev1.EventTypeNormal, reasonNodeNotReady, "Node %s status is now: NodeNotReady", node.Name)
		}
	}

	// NoSchedule taints follow the condition at once (the scheduler must
	// stop placing pods there). NoExecute ones are monitor's, after the
	// zone states.
	wantNoSchedule := noScheduleTaintKeys(node, ready)
	if terr := c.ensureNoScheduleTaint(ctx, node, wantNoSchedule); terr != nil && err == nil {
		err = terr
	}
	return ready, err
}

// conditionTaintKey is the taint key for a Ready status ("" for Ready).
func conditionTaintKey(ready corev1.ConditionStatus) string {
	switch ready {
	case corev1.ConditionFalse:
		return corev1.TaintNodeNotReady
	case corev1.ConditionUnknown:
		return corev1.TaintNodeUnreachable
	}
	return ""
}

// conditionTaints are the NoSchedule taints of the conditions other than
// Ready that TaintNodesByCondition maps (upstream's table): a node under
// pressure takes no new pods that do not tolerate it.
var conditionTaints = []struct {
	cond corev1.NodeConditionType
	key  string
}{
	{corev1.NodeMemoryPressure, corev1.TaintNodeMemoryPressure},
	{corev1.NodeDiskPressure, corev1.TaintNodeDiskPressure},
	{corev1.NodePIDPressure, corev1.TaintNodePIDPressure},
	{corev1.NodeNetworkUnavailable, corev1.TaintNodeNetworkUnavailable},
}

// noScheduleKeys are every NoSchedule taint the controller owns.
var noScheduleKeys = []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable,
	corev1.TaintNodeMemoryPressure, corev1.TaintNodeDiskPressure, corev1.TaintNodePIDPressure, corev1.TaintNodeNetworkUnavailable}

// noScheduleTaintKeys are the NoSchedule taints the node's conditions
// call for: Ready's, and one per True pressure condition.
func noScheduleTaintKeys(node *corev1.Node, ready corev1.ConditionStatus) map[string]bool {
	want := map[string]bool{}
	if k := conditionTaintKey(ready); k != "" {
		want[k] = true
	}
	for _, ct := range conditionTaints {
		for _, c := range node.Status.Conditions {
			if c.Type == ct.cond && c.Status == corev1.ConditionTrue {
				want[ct.key] = true
			}
		}
	}
	return want
}

func (c *Controller) ensureNoScheduleTaint(ctx context.Context, node *corev1.Node, want map[string]bool) error {
	ok := true
	for _, k := range noScheduleKeys {
		ok = ok && hasTaint(node, k, corev1.TaintEffectNoSchedule) == want[k]
	}
	if ok {
		return nil
	}
	return c.updateTaints(ctx, node.Name, func(n *corev1.Node) []corev1.Taint {
		out := withoutTaint(n.Spec.Taints, corev1.TaintEffectNoSchedule, noScheduleKeys...)
		for _, k := range noScheduleKeys {
			if want[k] {
				out = append(out, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
			}
		}
		return out
	})
}

func (c *Controller) ensureNoExecuteTaint(ctx context.Context, node *corev1.Node, ready corev1.ConditionStatus) error {
	key := conditionTaintKey(ready)
	other := corev1.TaintNodeUnreachable
	if key == corev1.TaintNodeUnreachable {
		other = corev1.TaintNodeNotReady
	}
	switch {
	case key == "":
		c.dequeue(node.Name)
		c.mu.Lock()
		delete(c.tainted, node.Name)
		c.mu.Unlock()
		if !hasTaint(node, corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute) && !hasTaint(node, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
			return nil
		}
		c.log.Info("node is Ready again: NoExecute taints off", "node", node.Name)
		return c.updateTaints(ctx, node.Name, func(n *corev1.Node) []corev1.Taint { return withoutNoExecute(n.Spec.Taints) })
	case hasTaint(node, key, corev1.TaintEffectNoExecute):
		c.dequeue(node.Name)
		c.mu.Lock()
		delete(c.tainted, node.Name)
		c.mu.Unlock()
		return nil
	case hasTaint(node, other, corev1.TaintEffectNoExecute):
		c.dequeue(node.Name)
		now := metav1.NewTime(c.clock.Now())
		return c.updateTaints(ctx, node.Name, func(n *corev1.Node) []corev1.Taint {
			return append(withoutNoExecute(n.Spec.Taints), corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
		})
	default:
		c.enqueueTaint(zoneOf(node), node.Name)
		return nil
	}
}

func (c *Controller) enqueueTaint(zone, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Tainted a moment ago, and the cache does not show it yet: queueing
	// it again would spend the zone's next token on nothing.
	if at, ok := c.tainted[name]; ok && c.clock.Since(at) < c.cfg.NodeMonitorGracePeriod {
		return
	}
	delete(c.tainted, name)
	if c.queued[name] {
		return
	}
	c.queued[name] = true
	c.pending[zone] = append(c.pending[zone], name)
}

func (c *Controller) dequeue(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.queued[name] {
		return
	}
	delete(c.queued, name)
	for z, names := range c.pending {
		for i, n := range names {
			if n == name {
				c.pending[z] = append(names[:i:i], names[i+1:]...)
				return
			}
		}
	}
}

// processTaintQueues taints the nodes waiting in each zone as far as the
// zone's limiter lets it.
func (c *Controller) processTaintQueues(ctx context.Context) {
	type job struct{ zone, node string }
	var jobs []job
	c.mu.Lock()
	for z, names := range c.pending {
		l := c.limiters[z]
		for len(names) > 0 {
			name := names[0]
			// Whether it recovered is for monitor to say (it dequeues
			// such nodes): the cache may not have its own writes yet.
			if _, ok, _ := c.nodes.GetStore().GetByKey(name); !ok {
				names = names[1:]
				delete(c.queued, name)
				continue
			}
			if l == nil || !l.limiter.TryAccept() {
				break
			}
			names = names[1:]
			delete(c.queued, name)
			jobs = append(jobs, job{z, name})
		}
		c.pending[z] = names
	}
	c.mu.Unlock()
	for _, j := range jobs {
		now := metav1.NewTime(c.clock.Now())
		var key string
		err := c.updateTaints(ctx, j.node, func(n *corev1.Node) []corev1.Taint {
			if rc := readyCondition(n); rc != nil {
				key = conditionTaintKey(rc.Status)
			}
			if key == "" || hasTaint(n, key, corev1.TaintEffectNoExecute) {
				return n.Spec.Taints
			}
			return append(withoutNoExecute(n.Spec.Taints), corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
		})
		if err != nil {
			if ctx.Err() == nil && !apierrors.IsNotFound(err) {
				c.log.Warn("NoExecute taint failed; next pass retries", "node", j.node, "err", err)
			}
			continue
		}
		if key != "" {
			c.mu.Lock()
			c.tainted[j.node] = now.Time
			c.mu.Unlock()
			c.log.Info("node tainted NoExecute", "node", j.node, "taint", key, "zone", zoneName(j.zone))
		}
	}
}

// needsUnknown: some kubelet condition is not Unknown yet (or missing).
func needsUnknown(node *corev1.Node) bool {
	for _, t := range kubeletConditions {
		cond := condition(node, t)
		if cond == nil || cond.Status != corev1.ConditionUnknown {
			return true
		}
	}
	return false
}

// markUnknown sets every kubelet condition to Unknown, keeping each one's
// last heartbeat: that is when the kubelet was last heard from.
func (c *Controller) markUnknown(ctx context.Context, name string, now time.Time) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(node); err != nil {
			return err
		}
		t := metav1.NewTime(now)
		changed := false
		for _, ct := range kubeletConditions {
			cond := condition(node, ct)
			if cond == nil {
				node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
					Type: ct, Status: corev1.ConditionUnknown, Reason: reasonNodeStatusNeverUpdated,
					Message: messageNodeStatusNeverUpdated, LastHeartbeatTime: t, LastTransitionTime: t,
				})
				changed = true
				continue
			}
			if cond.Status == corev1.ConditionUnknown {
				continue
			}
			cond.Status, cond.Reason, cond.Message, cond.LastTransitionTime = corev1.ConditionUnknown, reasonNodeStatusUnknown, messageNodeStatusUnknown, t
			changed = true
		}
		if !changed {
			return nil
		}
		return c.core.Put().Resource("nodes").Name(name).SubResource("status").Body(node).Do(ctx).Error()
	})
}

// updateTaints sets a node's taints to what change returns from the
// node as it is now, retrying on conflicts; no write when they are the
// same.
func (c *Controller) updateTaints(ctx context.Context, name string, change func(*corev1.Node) []corev1.Taint) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(node); err != nil {
			return err
		}
		taints := change(node.DeepCopy())
		if sameTaints(taints, node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = taints
		return c.core.Put().Resource("nodes").Name(name).Body(node).Do(ctx).Error()
	})
}

func condition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	return condition(node, corev1.NodeReady)
}

// readyStatus is the node's Ready status; no condition counts as Unknown.
func readyStatus(node *corev1.Node) corev1.ConditionStatus {
	if rc := readyCondition(node); rc != nil {
		return rc.Status
	}
	return corev1.ConditionUnknown
}

func hasTaint(node *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

func withoutTaint(taints []corev1.Taint, effect corev1.TaintEffect, keys ...string) []corev1.Taint {
	out := make([]corev1.Taint, 0, len(taints))
next:
	for _, t := range taints {
		if t.Effect == effect {
			for _, k := range keys {
				if t.Key == k {
					continue next
				}
			}
		}
		out = append(out, t)
	}
	return out
}

func withoutNoExecute(taints []corev1.Taint) []corev1.Taint {
	return withoutTaint(taints, corev1.TaintEffectNoExecute, corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable)
}

func sameTaints(a, b []corev1.Taint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].MatchTaint(&b[i]) || a[i].Value != b[i].Value {
			return false
		}
	}
	return true
}

func nodeRef(n *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}
}
