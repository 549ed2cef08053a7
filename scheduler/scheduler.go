// Package scheduler is bonsai's default scheduler, default-scheduler: it
// watches pods that name it (or no scheduler) and have no node, picks a
// node through filter and score plugins shaped like kube-scheduler's, and
// binds through pods/binding. A pod that fits nowhere gets PodScheduled=
// False (Unschedulable) and a FailedScheduling event, and waits for a
// cluster event that could make it fit.
//
// It owns the binding of pending pods and their PodScheduled condition;
// it never writes Nodes or bound pods. It talks to the API only through a
// plain REST client, never to the store; one instance per cluster.
package scheduler

import (
	"bonsai.dev/bonsai/client"

	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Config is what the scheduler needs.
type Config struct {
	// RESTConfig reaches the API server; only the core group is used.
	RESTConfig *rest.Config
	Options    Options
	// BindWorkers write bindings and status in parallel (default 32): the
	// scheduling loop never waits for the API.
	BindWorkers int
	Logger      *slog.Logger
	// Informers, when set, are the process' shared informers (those of
	// the controllers beside it): the scheduler then keeps no cache of
	// pods, nodes and volumes of its own. The caller starts them.
	Informers *client.Informers
}

// Scheduler is the default scheduler.
type Scheduler struct {
	cfg      Config
	core     rest.Interface
	evClient rest.Interface
	log      *slog.Logger
	cache    *schedCache
	queue    *schedulingQueue
	nodes    cache.SharedIndexInformer
	pods     cache.SharedIndexInformer
	// storage are the claim, volume and class informers VolumeBinding
	// reads.
	storage []cache.SharedIndexInformer
	// own are the informers the scheduler made and runs itself; synced
	// says when each event handler has seen its informer's whole cache.
	own     []cache.SharedIndexInformer
	synced  []cache.InformerSynced
	volumes volumeBindingPlugin
	// dra is DynamicResources; resourceClient writes claims' status.
	dra            dynamicResourcesPlugin
	resourceClient rest.Interface
	events         record.EventBroadcaster
	recorder       record.EventRecorder
	writes         chan func(context.Context)

	preFilters []PreFilterPlugin
	filters    []FilterPlugin
	scorers    []weightedScorer

	// Owned by the scheduling loop.
	nextStart int
	// cycleFilters are the filters the cycle's pod needs.
	cycleFilters []FilterPlugin
	feasible     []*NodeInfo
	// candidates are nodes a preemption might free.
	candidates []*NodeInfo
	scores     []int64
	totals     []int64
	rng        *rand.Rand
}

type weightedScorer struct {
	ScorePlugin
	weight int64
}

// New builds the scheduler; Run starts it.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BindWorkers <= 0 {
		cfg.BindWorkers = 32
	}
	if cfg.Options.ScoreWeights == nil {
		cfg.Options = DefaultOptions()
	}
	// Bindings at thousands a second: client-go's default 5 QPS would be
	// the scheduler's throughput.
	core, err := restClientFor(cfg.RESTConfig, -1, 0)
	if err != nil {
		return nil, err
	}
	// Events go through their own client held to kube-scheduler's default
	// 50 QPS (burst 100): in a burst of thousands of pods the Scheduled
	// events would otherwise take as much of the API as the bindings. As
	// in Kubernetes, the recorder drops what its queue cannot hold.
	evClient, err := restClientFor(cfg.RESTConfig, 50, 100)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg:      cfg,
		core:     core,
		evClient: evClient,
		log:      cfg.Logger.With("component", "scheduler"),
		cache:    newSchedCache(),
		queue:    newSchedulingQueue(cfg.Options.InitialBackoff, cfg.Options.MaxBackoff),
		writes:   make(chan func(context.Context), 4096),
		rng:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	if err := s.watchStorage(); err != nil {
		return nil, err
	}
	if err := s.watchResources(); err != nil {
		return nil, err
	}
	s.buildPlugins()
	s.nodes = s.informer(core, "nodes", &corev1.Node{})
	nodesReg, err := s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.onNodeAdd,
		UpdateFunc: s.onNodeUpdate,
		DeleteFunc: s.onNodeDelete,
	})
	if err != nil {
		return nil, err
	}
	s.pods = s.informer(core, "pods", &corev1.Pod{})
	podsReg, err := s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.onPodSet,
		UpdateFunc: func(old, obj any) { s.onPodUpdate(old.(*corev1.Pod), obj.(*corev1.Pod)) },
		DeleteFunc: s.onPodDelete,
	})
	if err != nil {
		return nil, err
	}
	// A handler added to a shared informer that already runs is told of
	// the objects in its cache in the background: the scheduler must not
	// place a pod before it has heard of every node and bound pod.
	s.synced = append(s.synced, nodesReg.HasSynced, podsReg.HasSynced)
	s.events = record.NewBroadcaster()
	s.recorder = s.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: DefaultSchedulerName})
	return s, nil
}

func (s *Scheduler) buildPlugins() {
	o := s.cfg.Options
	affinity := nodeAffinityPlugin{}
	fit := nodeResourcesFitPlugin{strategy: o.FitStrategy, resources: o.FitResources}
	taints := taintTolerationPlugin{}
	// Kubernetes' default order: cheap, node-only checks first.
	podAffinity := interPodAffinityPlugin{index: s.cache.affinity}
	spread := topologySpreadPlugin{}
	s.preFilters = []PreFilterPlugin{affinity, s.volumes, spread, podAffinity, s.dra}
	s.filters = []FilterPlugin{nodeUnschedulablePlugin{}, nodeNamePlugin{}, taints, affinity, nodePortsPlugin{}, fit, volumeLimitsPlugin{&s.volumes}, s.volumes, spread, podAffinity, s.dra}
	for _, sp := range []ScorePlugin{taints, affinity, fit, balancedAllocationPlugin{resources: o.BalancedResources}, imageLocalityPlugin{}, podAffinity, spread} {
		if w := o.ScoreWeights[sp.Name()]; w > 0 {
			s.scorers = append(s.scorers, weightedScorer{sp, w})
		}
	}
}

// restClientFor is a protobuf client of the core group; qps -1 is no
// client-side limit.
func restClientFor(cfg *rest.Config, qps float32, burst int) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = qps, burst
	return client.Core(c)
}

// informer is the shared informer of obj's kind (Config.Informers), or
// one of the scheduler's own, indexed by namespace like the shared ones
// and without the managedFields it never reads.
func (s *Scheduler) informer(rc rest.Interface, resource string, obj runtime.Object) cache.SharedIndexInformer {
	if s.cfg.Informers != nil {
		return s.cfg.Informers.For(obj)
	}
	inf := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(rc, resource, "", fields.Everything()),
		obj, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = inf.SetTransform(client.StripManagedFields) // fails only once started
	s.own = append(s.own, inf)
	return inf
}

// Run schedules until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	sink := s.events.StartRecordingToSink(&client.EventSink{Core: s.evClient, Ctx: ctx})
	defer func() { sink.Stop(); s.events.Shutdown() }()
	for _, inf := range s.own {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for i := 0; i < s.cfg.BindWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range s.writes {
				w(ctx)
			}
		}()
	}
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				s.queue.close()
				return
			case <-t.C:
				s.queue.flush()
			}
		}
	}()
	s.log.Info("scheduler started", "name", DefaultSchedulerName)
	for {
		qp := s.queue.pop()
		if qp == nil {
			break
		}
		s.scheduleOne(ctx, qp)
	}
	close(s.writes)
	wg.Wait()
	return nil
}

// responsible is true for a pod this scheduler should place.
func responsible(p *corev1.Pod) bool {
	return p.Spec.NodeName == "" && (p.Spec.SchedulerName == "" || p.Spec.SchedulerName == DefaultSchedulerName) &&
		p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func (s *Scheduler) onPodSet(obj any) {
	p := obj.(*corev1.Pod)
	switch {
	case p.Spec.NodeName != "" && !terminal(p):
		s.cache.setPod(p)
	case responsible(p):
		s.queue.add(p)
	}
}

func (s *Scheduler) onPodUpdate(old, p *corev1.Pod) {
	switch {
	case p.Spec.NodeName != "":
		s.queue.delete(p)
		if terminal(p) {
			s.cache.removePod(p.UID)
			if !terminal(old) {
				s.queue.moveAll()
			}
			return
		}
		s.cache.setPod(p)
	case responsible(p):
		if old.ResourceVersion != p.ResourceVersion {
			s.queue.update(p, !equality.Semantic.DeepEqual(old.Spec, p.Spec) ||
				!equality.Semantic.DeepEqual(old.Labels, p.Labels) || !equality.Semantic.DeepEqual(old.Annotations, p.Annotations))
		}
	default:
		s.queue.delete(p)
	}
}

func (s *Scheduler) onPodDelete(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		t, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if p, ok = t.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	s.queue.delete(p)
	if p.Spec.NodeName != "" {
		s.cache.removePod(p.UID)
		s.queue.moveAll()
	}
}

func (s *Scheduler) onNodeAdd(obj any) {
	s.cache.setNode(obj.(*corev1.Node))
	s.queue.moveAll()
}

func (s *Scheduler) onNodeUpdate(oldObj, obj any) {
	old, n := oldObj.(*corev1.Node), obj.(*corev1.Node)
	s.cache.setNode(n)
	// A heartbeat changes nothing a filter reads; waking every
	// unschedulable pod for it would spin.
	if !equality.Semantic.DeepEqual(old.Status.Allocatable, n.Status.Allocatable) ||
		!equality.Semantic.DeepEqual(old.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(old.Spec.Taints, n.Spec.Taints) ||
		old.Spec.Unschedulable != n.Spec.Unschedulable {
		s.queue.moveAll()
	}
}

func (s *Scheduler) onNodeDelete(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		t, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if n, ok = t.Obj.(*corev1.Node); !ok {
			return
		}
	}
	s.cache.removeNode(n.Name)
}

// Kubernetes' bounds on how many feasible nodes a cycle looks for.
const (
	minFeasibleNodesToFind           = 100
	minFeasibleNodesPercentageToFind = 5
)

func (s *Scheduler) numFeasibleNodesToFind(all int) int {
	if all < minFeasibleNodesToFind {
		return all
	}
	pct := int(s.cfg.Options.PercentageOfNodesToScore)
	if pct == 0 {
		pct = 50 - all/125
		if pct < minFeasibleNodesPercentageToFind {
			pct = minFeasibleNodesPercentageToFind
		}
	}
	n := all * pct / 100
	if n < minFeasibleNodesToFind {
		return minFeasibleNodesToFind
	}
	return n
}

// scheduleOne runs one cycle: filter, score, assume, and hand the binding
// to a writer.
func (s *Scheduler) scheduleOne(ctx context.Context, qp *queuedPod) {
	pod := qp.pod
	if s.cache.known(pod.UID) {
		s.queue.done(qp) // bound or assumed already; the queue had a stale copy
		return
	}
	state := newCycleState()
	state.podReq = computePodResources(pod)
	node, fitErr, victims := s.place(state, pod)
	if fitErr != nil {
		s.queue.requeue(qp, true)
		s.reportUnschedulable(pod, fitErr.Error())
		if victims != nil {
			s.preempt(pod, victims)
		}
		return
	}
	vb := s.volumes.bindingsFor(state, node)
	db := s.dra.bindingsFor(state, pod, node)
	s.writes <- func(ctx context.Context) { s.bind(ctx, qp, node, vb, db) }
}

// place filters and scores under the cache lock and assumes the pod on
// the chosen node before letting go of it. A pod that fits nowhere may
// get a preemption instead.
func (s *Scheduler) place(state *CycleState, pod *corev1.Pod) (string, *fitError, *preemption) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	nodes := s.cache.list
	all := len(nodes)
	if all == 0 {
		return "", &fitError{}, nil
	}
	for _, p := range s.preFilters {
		if st := p.PreFilter(state, pod, nodes); st != nil {
			return "", &fitError{numNodes: all, prefilter: st.reasons[0]}, nil
		}
	}
	filters := s.cycleFilters[:0]
	for _, f := range s.filters {
		if sk, ok := f.(FilterSkipper); !ok || !sk.SkipFilter(state, pod) {
			filters = append(filters, f)
		}
	}
	s.cycleFilters = filters
	want := s.numFeasibleNodesToFind(all)
	feasible := s.feasible[:0]
	var reasons map[string]int
	candidates := s.candidates[:0]
	start, i := s.nextStart%all, 0
	for ; i < all && len(feasible) < want; i++ {
		ni := nodes[(start+i)%all]
		st := runFilters(filters, state, pod, ni)
		if st == nil {
			feasible = append(feasible, ni)
			continue
		}
		if !st.unresolvable {
			candidates = append(candidates, ni)
		}
		if reasons == nil {
			reasons = map[string]int{}
		}
		for _, r := range st.reasons {
			reasons[r]++
		}
	}
	s.nextStart = (start + i) % all
	s.feasible = feasible
	if len(feasible) == 0 {
		p := s.findPreemptionLocked(state, pod, candidates)
		clear(candidates)
		s.candidates = candidates[:0]
		return "", &fitError{numNodes: all, reasons: reasons}, p
	}
	best := feasible[0]
	if len(feasible) > 1 && len(s.scorers) > 0 {
		best = s.pickBest(state, pod, feasible)
	}
	s.cache.assumeLocked(pod, best.Node.Name, state.podReq)
	return best.Node.Name, nil, nil
}

func runFilters(filters []FilterPlugin, state *CycleState, pod *corev1.Pod, ni *NodeInfo) *Status {
	for _, f := range filters {
		if st := f.Filter(state, pod, ni); st != nil {
			return st
		}
	}
	return nil
}

// pickBest sums the weighted, normalised scores and picks the highest,
// a tie broken at random so equal nodes share the load.
func (s *Scheduler) pickBest(state *CycleState, pod *corev1.Pod, feasible []*NodeInfo) *NodeInfo {
	n := len(feasible)
	if cap(s.totals) < n {
		s.totals, s.scores = make([]int64, n), make([]int64, n)
	}
	totals, scores := s.totals[:n], s.scores[:n]
	clear(totals)
	for _, sp := range s.scorers {
		if sk, ok := sp.ScorePlugin.(ScoreSkipper); ok && sk.SkipScore(state, pod) {
			continue
		}
		for i, ni := range feasible {
			scores[i] = sp.Score(state, pod, ni)
		}
		if norm, ok := sp.ScorePlugin.(ScoreNormalizer); ok {
			norm.NormalizeScore(state, pod, scores)
		}
		for i := range scores {
			totals[i] += scores[i] * sp.weight
		}
	}
	best, ties := 0, 1
	for i := 1; i < n; i++ {
		switch {
		case totals[i] > totals[best]:
			best, ties = i, 1
		case totals[i] == totals[best]:
			ties++
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return feasible[best]
}

// bind writes the decision; a failure undoes the assume and retries after
// back-off, unless the pod is gone or bound already.
func (s *Scheduler) bind(ctx context.Context, qp *queuedPod, node string, vb *volumeBindings, db *draBindings) {
	pod := qp.pod
	if db != nil {
		// The allocation stays in flight until the claim informer shows
		// it, or the bind fails.
		defer func() {
			if !s.cache.known(pod.UID) {
				db.release()
			}
		}()
	}
	if vb != nil {
		err := vb.prebind(ctx, s.core)
		if err == nil {
			err = vb.waitBound(ctx)
		}
		if err != nil {
			s.cache.forget(pod)
			if ctx.Err() != nil {
				s.queue.done(qp)
				return
			}
			s.log.Warn("volume binding failed; retrying after back-off", "pod", qp.key, "node", node, "err", err)
			s.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedScheduling", "running PreBind plugin %q: %v", VolumeBindingName, err)
			s.queue.requeue(qp, false)
			return
		}
	}
	if db != nil {
		if err := db.prebind(ctx, s.resourceClient); err != nil {
			s.cache.forget(pod)
			if ctx.Err() != nil {
				s.queue.done(qp)
				return
			}
			s.log.Warn("claim allocation failed; retrying after back-off", "pod", qp.key, "node", node, "err", err)
			s.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedScheduling", "running PreBind plugin %q: %v", DynamicResourcesName, err)
			s.queue.requeue(qp, false)
			return
		}
	}
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	err := s.core.Post().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("binding").Body(b).Do(ctx).Error()
	if err == nil {
		s.queue.done(qp)
		s.recorder.Eventf(pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, node)
		return
	}
	s.cache.forget(pod)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || ctx.Err() != nil {
		s.queue.done(qp)
		return
	}
	s.log.Warn("binding failed; retrying after back-off", "pod", qp.key, "node", node, "err", err)
	s.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedScheduling", "Binding rejected: %v", err)
	s.queue.requeue(qp, false)
}

// reportUnschedulable sets PodScheduled=False and records the
// FailedScheduling event, off the scheduling loop.
func (s *Scheduler) reportUnschedulable(pod *corev1.Pod, msg string) {
	s.recorder.Event(pod, corev1.EventTypeWarning, "FailedScheduling", msg)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && c.Message == msg {
			return
		}
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": corev1.PodScheduled, "status": corev1.ConditionFalse, "reason": corev1.PodReasonUnschedulable,
		"message": msg, "lastProbeTime": nil, "lastTransitionTime": metav1.Now(),
	}}}})
	ns, name := pod.Namespace, pod.Name
	s.writes <- func(ctx context.Context) {
		err := s.core.Patch(types.StrategicMergePatchType).Namespace(ns).Resource("pods").Name(name).SubResource("status").Body(patch).Do(ctx).Error()
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			s.log.Warn("could not set PodScheduled=False", "pod", ns+"/"+name, "err", err)
		}
	}
}
