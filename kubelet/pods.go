package kubelet

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/netplugin"
)

// Container restart back-off, as the kubelet's: 10 s doubling to 5 min.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 5 * time.Minute
)

// Back-off between attempts to create a pod's sandbox: 2 s doubling to
// 1 min, so that a network plugin that fails is not hammered, and a fixed
// one is used soon.
const (
	sandboxBackoffInitial = 2 * time.Second
	sandboxBackoffMax     = time.Minute
)

// podManager runs one worker per pod bound to this node. Workers are
// level-triggered: each sync reads the pod and the runtime and moves the
// runtime one step toward the spec, so a restart of bonsai, a lost event
// or a crash in between is just another state to converge from.
type podManager struct {
	cfg    Config
	rt     cri.Runtime
	net    netplugin.PodNetwork
	client *Client
	log    *slog.Logger
	ctx    context.Context
	// nodeUID owns mirror pods.
	nodeUID types.UID

	backoff *flowcontrol.Backoff
	// sandboxBackoff spaces out retries of a pod whose sandbox (its
	// network, mostly) could not be made.
	sandboxBackoff *flowcontrol.Backoff
	// tokens are the service-account tokens of projected volumes.
	tokens *tokenManager
	// shutdown is graceful node shutdown (nil when off): while the node
	// shuts down, new pods are refused.
	shutdown *shutdownManager
	// events records the pods' Events through client-go's correlator, as
	// the kubelet does: a repeat of the same event (a pull back-off
	// every retry) raises the count of one Event, and a pod's burst of
	// more than 25 is then let through once in 5 minutes, so a pod that
	// keeps failing cannot fill the store with Events.
	events   record.EventBroadcaster
	recorder record.EventRecorder
	// pressure are the eviction manager's node conditions (nil: none),
	// which refuse new pods as the kubelet's eviction admission does.
	pressure func() map[corev1.NodeConditionType]bool

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	synced  bool
	store   cache.Store
}

func newPodManager(cfg Config) *podManager {
	m := &podManager{
		cfg: cfg, rt: cfg.Runtime, client: cfg.Client, log: cfg.Logger,
		backoff:        flowcontrol.NewBackOff(backoffInitial, backoffMax),
		sandboxBackoff: flowcontrol.NewBackOff(sandboxBackoffInitial, sandboxBackoffMax),
		tokens:         newTokenManager(cfg.Client),
		workers:        map[types.UID]*podWorker{},
		events:         record.NewBroadcaster(),
	}
	m.recorder = m.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: cfg.NodeName})
	return m
}

// run watches this node's pods until ctx ends. Workers outlive neither.
func (m *podManager) run(ctx context.Context) {
	sink := m.events.StartRecordingToSink(&client.EventSink{Core: m.client.core, Ctx: ctx})
	defer func() { sink.Stop(); m.events.Shutdown() }()
	store, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: m.client.podListWatch(m.cfg.NodeName),
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { m.observe(obj.(*corev1.Pod), false) },
			UpdateFunc: func(_, obj any) { m.observe(obj.(*corev1.Pod), false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if p, ok := obj.(*corev1.Pod); ok {
					m.observe(p, true)
				}
			},
		},
	})
	m.store = store
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return
	}
	m.mu.Lock()
	m.synced = true
	m.mu.Unlock()
	// With every pod of the node known, what the runtime holds for no
	// known pod is an orphan from before a restart.
	m.housekeeping(ctx)
	m.retainDevices()
	m.retainClaims(ctx)
	go m.runtimeEvents(ctx)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.housekeeping(ctx)
			m.retainDevices()
			m.retainClaims(ctx)
			m.backoff.GC()
			m.sandboxBackoff.GC()
		}
	}
}

// observe hands the newest pod to its worker, starting one if needed.
// Mirror pods are the static pods' shadows: their workers are fed from
// the manifests.
func (m *podManager) observe(pod *corev1.Pod, deleted bool) {
	if isMirror(pod) {
		return
	}
	m.mu.Lock()
	w, ok := m.workers[pod.UID]
	if !ok {
		// A pod deleted before a worker saw it still gets one: it runs
		// once to clean up whatever the runtime may hold for it.
		w = newPodWorker(m, pod)
		m.workers[pod.UID] = w
		go w.run()
	}
	m.mu.Unlock()
	w.update(pod, deleted)
}

// observeStatic feeds a static pod's worker; its status goes to the
// mirror pod, whose API UID is mirrorUID.
func (m *podManager) observeStatic(pod *corev1.Pod, mirrorUID types.UID) {
	m.mu.Lock()
	w, ok := m.workers[pod.UID]
	if !ok {
		w = newPodWorker(m, pod)
		m.workers[pod.UID] = w
		go w.run()
	}
	m.mu.Unlock()
	w.mu.Lock()
	w.apiUID = mirrorUID
	changed := w.pod == nil || w.pod.ResourceVersion != pod.ResourceVersion
	w.pod = pod
	w.mu.Unlock()
	if changed {
		w.wake()
	}
}

// runtimeEvents wakes the worker of a pod whose container exited.
func (m *podManager) runtimeEvents(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-m.rt.Events():
			st, err := m.rt.ContainerStatus(ctx, id)
			if err != nil {
				continue
			}
			m.mu.Lock()
			w := m.workers[types.UID(st.Labels[cri.LabelPodUID])]
			m.mu.Unlock()
			if w != nil {
				w.wake()
			}
		}
	}
}

func (m *podManager) workerDone(uid types.UID) {
	m.mu.Lock()
	delete(m.workers, uid)
	m.mu.Unlock()
	m.tokens.forgetPod(uid)
}

// liveWorkers are the workers of the pods the node runs now.
func (m *podManager) liveWorkers() []*podWorker {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*podWorker, 0, len(m.workers))
	for _, w := range m.workers {
		out = append(out, w)
	}
	return out
}

func (m *podManager) known(uid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.workers[types.UID(uid)]
	return ok
}

// housekeeping removes containers, sandboxes, networks and pod dirs that
// belong to no pod this node runs: pods deleted while bonsai was down, or
// leftovers of a crash mid-teardown.
func (m *podManager) housekeeping(ctx context.Context) {
	cs, err := m.rt.ListContainers(ctx)
	if err != nil {
		m.log.Warn("housekeeping: list containers", "err", err)
		return
	}
	for _, c := range cs {
		uid := c.Labels[cri.LabelPodUID]
		if m.known(uid) {
			continue
		}
		m.log.Info("removing orphaned container", "id", c.ID, "pod", c.Labels[cri.LabelPodNamespace]+"/"+c.Labels[cri.LabelPodName])
		m.rt.StopContainer(ctx, c.ID, 0)
		if err := m.rt.RemoveContainer(ctx, c.ID); err != nil {
			m.log.Warn("removing orphaned container", "id", c.ID, "err", err)
		}
	}
	sbs, err := m.rt.ListPodSandboxes(ctx)
	if err == nil {
		for _, sb := range sbs {
			if m.known(sb.Config.PodUID) {
				continue
			}
			if m.net != nil {
				m.net.Teardown(ctx, sb.Config.PodUID)
			}
			m.rt.RemovePodSandbox(ctx, sb.ID)
		}
	}
	if m.net != nil {
		if err := m.net.GC(ctx, m.known); err != nil {
			m.log.Warn("housekeeping: pod network", "err", err)
		}
	}
	dirs, _ := os.ReadDir(m.podsDir())
	for _, d := range dirs {
		if !m.known(d.Name()) {
			if err := m.teardownCSI(ctx, filepath.Join(m.podsDir(), d.Name())); err != nil {
				m.log.Warn("housekeeping: CSI volumes of a gone pod", "pod", d.Name(), "err", err)
				continue
			}
			if err := removePodDir(filepath.Join(m.podsDir(), d.Name())); err != nil {
				m.log.Warn("housekeeping: pod dir", "err", err)
			}
		}
	}
	if m.cfg.CSI != nil {
		if err := m.cfg.CSI.UnstageUnused(ctx); err != nil {
			m.log.Warn("housekeeping: unstaging CSI volumes", "err", err)
		}
	}
}

func (m *podManager) podsDir() string { return filepath.Join(m.cfg.RootDir, "pods") }

func (m *podManager) seccompDir() string {
	if m.cfg.SeccompDir != "" {
		return m.cfg.SeccompDir
	}
	return filepath.Join(m.cfg.RootDir, "seccomp")
}
func (m *podManager) logsDir() string { return filepath.Join(m.cfg.RootDir, "logs") }

// PodStates lets the kubelet API ask what the agent knows of the pods it
// runs; the agent fills it in when it starts, and until then it knows
// nothing.
type PodStates struct {
	m atomic.Pointer[podManager]
}

// Waiting is the reason container of the pod waits, as the agent last
// reported it in the pod's status: false when the agent does not run the
// pod, or the container does not wait.
func (p *PodStates) Waiting(namespace, pod, container string) (string, bool) {
	m := p.m.Load()
	if m == nil {
		return "", false
	}
	m.mu.Lock()
	workers := make([]*podWorker, 0, len(m.workers))
	for _, w := range m.workers {
		workers = append(workers, w)
	}
	m.mu.Unlock()
	for _, w := range workers {
		if reason, ok := w.containerWaiting(namespace, pod, container); ok {
			return reason, true
		}
	}
	return "", false
}

// Pods are the pods the agent runs, as it last saw them (their
// status as the API server has it): the kubelet API's /pods.
func (p *PodStates) Pods() []corev1.Pod {
	m := p.m.Load()
	if m == nil {
		return nil
	}
	m.mu.Lock()
	workers := make([]*podWorker, 0, len(m.workers))
	for _, w := range m.workers {
		workers = append(workers, w)
	}
	m.mu.Unlock()
	out := make([]corev1.Pod, 0, len(workers))
	for _, w := range workers {
		if pod, deleted := w.snapshot(); pod != nil && !deleted {
			out = append(out, *pod.DeepCopy())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}

// StatsPods are the pods the agent runs with a sandbox, for the stats
// sampler (StatsConfig.Pods); false until the agent starts.
func (p *PodStates) StatsPods() ([]StatsPod, bool) {
	m := p.m.Load()
	if m == nil {
		return nil, false
	}
	workers := m.liveWorkers()
	out := make([]StatsPod, 0, len(workers))
	for _, w := range workers {
		w.mu.Lock()
		if w.measured != nil {
			out = append(out, *w.measured)
		}
		w.mu.Unlock()
	}
	return out, true
}

// containerWaiting is the waiting reason of container in the worker's
// newest pod status, if it is that pod's.
func (w *podWorker) containerWaiting(namespace, pod, container string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pod
	if p == nil || p.Namespace != namespace || p.Name != pod {
		return "", false
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, cs := range list {
			if cs.Name == container && cs.State.Waiting != nil {
				return cs.State.Waiting.Reason, true
			}
		}
	}
	return "", false
}
