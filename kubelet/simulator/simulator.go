// Package simulator runs simulated nodes: every Node annotated
// bonsai.dev/simulated=true gets what a kubelet would give it (a Lease
// renewed every 10 s, Ready status with capacity, and its pods Running and
// Ready with fake IPs from the node's pod CIDR), without containers, as
// kwok does. One simulator in the server runs all such nodes; 10,000 of them
// cost a few KB each.
//
// It owns the Lease and status of simulated nodes and the status of their
// pods, and it finishes the deletion of those pods. It must not touch nodes
// without the annotation (a real kubelet runs them), and like every
// component it talks to the API only through client-go, never to the store.
package simulator

import (
	apiclient "bonsai.dev/bonsai/client"
	"fmt"

	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Annotations that drive the simulator.
const (
	// AnnotationSimulated "true" on a Node hands it to the simulator.
	AnnotationSimulated = "bonsai.dev/simulated"
	// AnnotationHeartbeat "false" on a simulated Node stops its Lease
	// renewals and status posts, and its pods freeze as they are: the
	// node looks dead, to exercise node failure.
	AnnotationHeartbeat = "bonsai.dev/simulated-heartbeat"
	// AnnotationStartDelay on a Pod (a Go duration, "2s") keeps its
	// containers in ContainerCreating that long after the pod is seen.
	AnnotationStartDelay = "bonsai.dev/simulated-start-delay"
	// AnnotationReadyDelay on a Pod keeps it Running but not Ready that
	// long after its containers start.
	AnnotationReadyDelay = "bonsai.dev/simulated-ready-delay"
)

// Timing defaults: the kubelet's.
const (
	defaultLeaseInterval  = 10 * time.Second
	defaultLeaseDuration  = 40 * time.Second
	defaultStatusInterval = 5 * time.Minute
)

// Config is what the simulator needs.
type Config struct {
	// RESTConfig reaches the API server; the simulator acts for every
	// simulated node, so its identity must be allowed to.
	RESTConfig *rest.Config
	// Version is reported as nodeInfo.containerRuntimeVersion
	// "simulated://<Version>"; KubeletVersion as the kubelet's.
	Version        string
	KubeletVersion string
	// LeaseInterval (10 s), LeaseDuration (40 s) and StatusInterval
	// (5 min, how often status is posted when nothing changed) are the
	// kubelet's defaults; tests shorten them.
	LeaseInterval  time.Duration
	LeaseDuration  time.Duration
	StatusInterval time.Duration
	// Workers of the node status queue (default 8); four times as many
	// renew leases, the steady load (10,000 nodes renew 1,000 times a
	// second), and start pods, the bursts (a Deployment of 1,000
	// replicas). API calls wait for the store's fsync: many in flight
	// share one.
	Workers int
	// Informers, when set, are the server's shared informers: the
	// simulator reads pods from theirs. Without, it watches on its own.
	Informers *apiclient.Informers
	Clock     clock.WithTicker
	Logger    *slog.Logger
}

// Simulator runs every simulated node.
type Simulator struct {
	cfg   Config
	api   *client
	clock clock.WithTicker
	log   *slog.Logger
	nodes cache.SharedIndexInformer
	pods  cache.SharedIndexInformer
	// ownInformers are the informers the simulator runs itself, when
	// Config.Informers was nil.
	ownInformers *apiclient.Informers
	nodeQ        workqueue.TypedRateLimitingInterface[string]
	leaseQ       workqueue.TypedRateLimitingInterface[string]
	podQ         workqueue.TypedRateLimitingInterface[string]
	events       record.EventBroadcaster
	recorder     record.EventRecorder

	leases leaseStore
	ips    *podIPs
	// ownWrites are the pods whose status the simulator is writing, by
	// key, with the resourceVersion each write replaces (see ownEcho).
	ownWrites sync.Map

	// simSeen is closed when the first simulated node is seen: Run
	// starts the pod informer and the workers then.
	simSeen     chan struct{}
	simSeenOnce sync.Once

	badMu sync.Mutex
	// bad remembers which invalid annotation values were reported, so an
	// object gets one event per mistake rather than one per sync.
	bad map[objectName]map[string]string
}

// New builds the simulator; Run starts it.
func New(cfg Config) (*Simulator, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LeaseInterval <= 0 {
		cfg.LeaseInterval = defaultLeaseInterval
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = defaultLeaseDuration
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = defaultStatusInterval
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	api, err := newClient(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	s := &Simulator{
		cfg:   cfg,
		api:   api,
		clock: cfg.Clock,
		log:   cfg.Logger.With("component", "simulator"),
		ips:   newPodIPs(),
		bad:   map[objectName]map[string]string{},
	}
	s.leases.m = map[string]leaseState{}
	s.simSeen = make(chan struct{})
	queue := func(name string, first, max time.Duration) workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](first, max),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name, Clock: cfg.Clock})
	}
	s.nodeQ = queue("simulator-nodes", 200*time.Millisecond, 10*time.Second)
	// The kubelet's lease back-off: 200 ms doubling to 7 s.
	s.leaseQ = queue("simulator-leases", 200*time.Millisecond, 7*time.Second)
	s.podQ = queue("simulator-pods", 200*time.Millisecond, 10*time.Second)

	s.nodes = cache.NewSharedIndexInformer(
		cache.NewListWatchFromClient(api.core, "nodes", "", fields.Everything()),
		&corev1.Node{}, 0, cache.Indexers{})
	// The cache holds a view of each node, not the node (see nodeView).
	s.nodes.SetTransform(s.viewNode)
	s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.nodeChanged(nil, obj.(*nodeView)) },
		UpdateFunc: func(old, obj any) { s.nodeChanged(old.(*nodeView), obj.(*nodeView)) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				s.nodeQ.Add(key)
				s.leaseQ.Add(key)
			}
		},
	})

	// Every pod, from the informer the server's controllers and
	// scheduler share: which pods run on simulated nodes changes as nodes
	// are annotated, and a second watch of its own would decode every
	// pod write once more and keep a second copy of every pod.
	inf := cfg.Informers
	if inf == nil {
		inf = apiclient.NewInformers(cfg.RESTConfig)
		s.ownInformers = inf
	}
	s.pods = inf.For(&corev1.Pod{})
	if err := apiclient.IndexPodsByNode(s.pods); err != nil {
		return nil, fmt.Errorf("pods by node: %w", err)
	}

	s.events = record.NewBroadcaster()
	s.recorder = s.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "bonsai-simulator"})
	return s, nil
}

// Run simulates until ctx ends.
func (s *Simulator) Run(ctx context.Context) error {
	sink := s.events.StartRecordingToSink(&apiclient.EventSink{Core: s.api.core, Ctx: ctx})
	defer func() { sink.Stop(); s.events.Shutdown() }()
	go s.nodes.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), s.nodes.HasSynced) {
		s.shutDownQueues()
		return ctx.Err()
	}
	// Most servers never have a simulated node: until one appears the
	// simulator handles no pod events and runs no workers (and, on its
	// own informers, keeps no copy of the pods), only its watch on nodes.
	select {
	case <-s.simSeen:
	case <-ctx.Done():
		s.shutDownQueues()
		return nil
	}
	podsReg, err := s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: s.podChanged,
		UpdateFunc: func(old, obj any) {
			if !s.ownEcho(old.(*corev1.Pod), obj.(*corev1.Pod)) {
				s.podChanged(obj)
			}
		},
		DeleteFunc: s.podDeleted,
	})
	if err != nil {
		s.shutDownQueues()
		return err
	}
	defer func() { _ = s.pods.RemoveEventHandler(podsReg) }()
	if s.ownInformers != nil {
		s.ownInformers.Start(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), podsReg.HasSynced) {
		s.shutDownQueues()
		return ctx.Err()
	}
	s.adoptPodIPs()
	s.adoptLeases(ctx)

	var wg sync.WaitGroup
	for _, w := range []struct {
		q       workqueue.TypedRateLimitingInterface[string]
		sync    func(context.Context, string) error
		what    string
		workers int
	}{
		{s.leaseQ, s.syncLease, "lease", 4 * s.cfg.Workers},
		{s.nodeQ, s.syncNode, "node status", s.cfg.Workers},
		{s.podQ, s.syncPod, "pod", 4 * s.cfg.Workers},
	} {
		for i := 0; i < w.workers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for s.processNext(ctx, w.q, w.sync, w.what) {
				}
			}()
		}
	}
	<-ctx.Done()
	s.shutDownQueues()
	wg.Wait()
	return nil
}

func (s *Simulator) shutDownQueues() {
	s.nodeQ.ShutDown()
	s.leaseQ.ShutDown()
	s.podQ.ShutDown()
}

func (s *Simulator) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error, what string) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if err := sync(ctx, key); err != nil {
		switch {
		case ctx.Err() != nil:
		case apierrors.IsConflict(err):
			// Someone else wrote the object since the cache saw it: the
			// retry reads the newer one. Routine, not worth a warning.
			s.log.Debug("simulated "+what+" sync conflicted; retrying", "key", key)
		default:
			s.log.Warn("simulated "+what+" sync failed; retrying", "key", key, "err", err)
		}
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

// nodeChanged queues what a node event may have changed. Lease renewals
// are queued only when heartbeats (re)start: each renewal schedules the
// next, and an extra one on every status write would double the rate.
func (s *Simulator) nodeChanged(old, n *nodeView) {
	sim, beat := s.simulated(n), s.heartbeat(n)
	if sim {
		s.simSeenOnce.Do(func() { close(s.simSeen) })
	}
	if !sim {
		if old != nil && s.simulated(old) {
			s.nodeQ.Add(n.Name) // forget it
			s.enqueuePods(n.Name)
		}
		return
	}
	s.nodeQ.Add(n.Name)
	wasBeating := old != nil && s.simulated(old) && s.heartbeat(old)
	if beat && !wasBeating {
		s.leaseQ.Add(n.Name)
	}
	if old == nil || !s.simulated(old) || s.heartbeat(old) != beat ||
		old.podCIDR != n.podCIDR || old.internalIP != n.internalIP {
		s.enqueuePods(n.Name)
	}
}

func (s *Simulator) enqueuePods(node string) {
	pods, _ := s.pods.GetIndexer().ByIndex(apiclient.PodNodeIndex, node)
	for _, obj := range pods {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			s.podQ.Add(key)
		}
	}
}

func (s *Simulator) podChanged(obj any) {
	p := obj.(*corev1.Pod)
	if n, ok := s.simulatedNode(p.Spec.NodeName); ok && n != nil {
		if key, err := cache.MetaNamespaceKeyFunc(p); err == nil {
			s.podQ.Add(key)
		}
	}
}

// podDeleted queues a bound pod that is gone: it gives its IP back,
// whatever its node. A pod never bound never had one.
func (s *Simulator) podDeleted(obj any) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName == "" {
		return
	}
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		s.podQ.Add(key)
	}
}

// simulatedNode returns the named node (nil if there is none) and whether
// the simulator runs it.
func (s *Simulator) simulatedNode(name string) (*nodeView, bool) {
	obj, exists, err := s.nodes.GetIndexer().GetByKey(name)
	if err != nil || !exists {
		return nil, false
	}
	n := obj.(*nodeView)
	return n, s.simulated(n)
}

// simulated reads a node's bonsai.dev/simulated annotation; a value that
// is not a boolean leaves the node alone, with an event saying why.
func (s *Simulator) simulated(n *nodeView) bool {
	if !n.simulated.set {
		return false
	}
	b, err := strconv.ParseBool(n.simulated.value)
	if err != nil {
		s.reportBad(n.ref(), "", n.Name, AnnotationSimulated, n.simulated.value, `want "true" or "false"; the node is not simulated`)
		return false
	}
	return b
}

// heartbeat reads bonsai.dev/simulated-heartbeat: on unless "false".
func (s *Simulator) heartbeat(n *nodeView) bool {
	if !n.heartbeat.set {
		return true
	}
	b, err := strconv.ParseBool(n.heartbeat.value)
	if err != nil {
		s.reportBad(n.ref(), "", n.Name, AnnotationHeartbeat, n.heartbeat.value, `want "true" or "false"; heartbeats go on`)
		return true
	}
	return b
}

// delay reads a pod's delay annotation: a non-negative Go duration, else
// an event and no delay.
func (s *Simulator) delay(p *corev1.Pod, annotation string) time.Duration {
	v, ok := p.Annotations[annotation]
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		s.reportBad(p, p.Namespace, p.Name, annotation, v, `want a duration such as "2s" or "500ms"; using no delay`)
		return 0
	}
	return d
}

type objectName struct{ namespace, name string }

// reportBad sends one Warning event per object and invalid value.
func (s *Simulator) reportBad(obj runtime.Object, namespace, name, annotation, value, what string) {
	key := objectName{namespace, name}
	s.badMu.Lock()
	if s.bad[key] == nil {
		s.bad[key] = map[string]string{}
	}
	old, seen := s.bad[key][annotation]
	s.bad[key][annotation] = value
	s.badMu.Unlock()
	if seen && old == value {
		return
	}
	s.recorder.Eventf(obj, corev1.EventTypeWarning, "InvalidAnnotation", "annotation %s: invalid value %q: %s", annotation, value, what)
	s.log.Warn("invalid simulator annotation", "namespace", namespace, "name", name, "annotation", annotation, "value", value)
}

// forgetBad drops what reportBad remembers of an object that is gone.
func (s *Simulator) forgetBad(namespace, name string) {
	s.badMu.Lock()
	delete(s.bad, objectName{namespace, name})
	s.badMu.Unlock()
}
