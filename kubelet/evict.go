package kubelet

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/kubelet/eviction"
)

// Node-pressure eviction as the kubelet's eviction manager runs it: the
// node's figures are looked at every housekeeping interval (the stats
// sampler's), and memory every second in between, standing in for the
// kubelet's memcg threshold notifications, so a pod that grows its memory
// past the threshold is gone within a second or two rather than at the
// next housekeeping. When a threshold is met (a soft one for its grace
// period), the node reports the pressure condition; for disk, dead
// containers and unused images go first; then one pod at a time is
// evicted: stopped (at once for a hard threshold) and left Failed with
// reason Evicted.

// evictionFastCheck is how often memory is read between samples.
const evictionFastCheck = time.Second

// evictionCleanupTimeout is how long an eviction waits for the pod to
// stop before the next round, as the kubelet's podCleanupTimeout.
const evictionCleanupTimeout = 30 * time.Second

// evictOrder is node-pressure eviction's order to a pod worker.
type evictOrder struct {
	grace time.Duration
	msg   string
	// disruption: the pod gets the DisruptionTarget condition (node
	// pressure), which a pod over its own storage limits does not.
	disruption bool
	done       chan struct{}
	closed     bool
}

// evict orders the pod stopped within grace and failed with msg; the
// channel closes once it has stopped.
func (w *podWorker) evict(grace time.Duration, msg string, disruption bool) <-chan struct{} {
	w.mu.Lock()
	if w.evictOrder == nil {
		w.evictOrder = &evictOrder{grace: grace, msg: msg, disruption: disruption, done: make(chan struct{})}
	}
	done := w.evictOrder.done
	w.mu.Unlock()
	w.wake()
	return done
}

func (w *podWorker) evictMessage() (msg string, disruption bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.evictOrder == nil {
		return "", false
	}
	return w.evictOrder.msg, w.evictOrder.disruption
}

func (w *podWorker) evictFinished() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if o := w.evictOrder; o != nil && !o.closed {
		close(o.done)
		o.closed = true
	}
}

// syncEviction stops an evicted pod and posts it Failed with reason
// Evicted and a DisruptionTarget condition. handled means the sync ends
// here.
func (w *podWorker) syncEviction(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus) (time.Duration, bool) {
	w.mu.Lock()
	o := w.evictOrder
	w.mu.Unlock()
	if o == nil {
		return 0, false
	}
	if !w.evicted {
		w.stopAll(ctx, pod, inst, o.grace)
		w.evicted = true
		inst, _ = w.instances(ctx)
	}
	w.postStatus(ctx, pod, w.status(pod, inst))
	w.evictFinished()
	w.releaseNetwork(ctx)
	w.releaseDevices()
	w.unprepareClaims(ctx) // a failure is retried by housekeeping
	return time.Minute, true
}

// evictablePods are the pods the node runs that can still be evicted, with
// their workers.
func (m *podManager) evictablePods() ([]*corev1.Pod, map[*corev1.Pod]*podWorker) {
	byPod := map[*corev1.Pod]*podWorker{}
	var out []*corev1.Pod
	for _, w := range m.liveWorkers() {
		pod, deleted := w.snapshot()
		if pod == nil || deleted || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		w.mu.Lock()
		ordered := w.evictOrder != nil
		w.mu.Unlock()
		if ordered {
			continue
		}
		out = append(out, pod)
		byPod[pod] = w
	}
	return out, byPod
}

// evictionLoop is the kubelet's eviction manager.
type evictionLoop struct {
	a     *Agent
	m     *podManager
	mgr   *eviction.Manager
	stats *StatsSampler
	// gc removes unused images under disk pressure; nil: none.
	gc       *imageGC
	interval time.Duration
	// dedicatedImageFs: images and writable layers are on another file
	// system than the kubelet's root, so a container's ephemeral storage
	// limit counts its logs only.
	dedicatedImageFs bool
	metrics          *evictionMetrics
}

func (e *evictionLoop) run(ctx context.Context) {
	var lastFull time.Time
	again := false
	for ctx.Err() == nil {
		periodic := time.Since(lastFull) >= e.interval
		if again || periodic || e.memoryMet() {
			lastFull = time.Now()
			// As the kubelet: after an eviction, look again at once, on
			// fresh figures.
			if again = e.synchronize(ctx, again || !periodic); again {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(evictionFastCheck):
		}
	}
}

// memoryMet is the cheap check between samples: is a memory threshold
// met now?
func (e *evictionLoop) memoryMet() bool {
	mem := e.stats.nodeMemory(nowMeta())
	if mem == nil {
		return false
	}
	obs := eviction.Observe(&statsapi.Summary{Node: statsapi.NodeStats{Memory: mem}})
	return len(eviction.Met(e.mgr.Config().Thresholds, obs, false)) > 0
}

// synchronize updates the pressure conditions and evicts at most one
// pod; true when it evicted one. It takes a fresh sample when asked (a
// memory threshold met between samples) or when the sampler's last one
// is older than the housekeeping interval; otherwise the sampler's own,
// so an idle node is not sampled twice as often.
func (e *evictionLoop) synchronize(ctx context.Context, fresh bool) bool {
	sum := e.stats.Summary()
	if fresh || sum == nil || sum.Node.Memory == nil || time.Since(sum.Node.Memory.Time.Time) >= e.interval {
		e.stats.Sample(ctx)
		sum = e.stats.Summary()
	}
	obs := eviction.Observe(sum)
	d := e.mgr.Synchronize(time.Now(), obs)
	if e.a.setPressure(d.Conditions) {
		if err := e.a.postStatus(ctx, false); err != nil {
			e.a.cfg.Logger.Warn("posting node status failed", "node", e.a.cfg.NodeName, "err", err)
		}
	}
	if e.localStorage(ctx, sum) {
		return true
	}
	if d.Reclaim == nil {
		return false
	}
	t := *d.Reclaim
	res := t.Signal.Resource()
	log := e.a.cfg.Logger
	log.Info("eviction manager: attempting to reclaim", "resourceName", res, "signal", t.Signal, "threshold", t.Value.String())
	e.a.nodeEvent(ctx, corev1.EventTypeWarning, eviction.ThresholdMetReason, fmt.Sprintf("Attempting to reclaim %s", res))
	if res == corev1.ResourceEphemeralStorage || res == eviction.ResourceInodes {
		if e.reclaimNodeLevel(ctx) {
			log.Info("eviction manager: able to reduce resource pressure without evicting pods", "resourceName", res)
			return false
		}
	}
	pods, workers := e.m.evictablePods()
	if len(pods) == 0 {
		log.Warn("eviction manager: eviction thresholds have been met, but no pods are active to evict", "resourceName", res)
		return false
	}
	stats := eviction.PodStats(sum)
	eviction.Rank(t.Signal, pods, stats)
	for _, pod := range pods {
		if eviction.Critical(pod) {
			log.Warn("eviction manager: cannot evict a critical pod", "pod", podKey(pod))
			continue
		}
		msg, ann := eviction.Message(t, obs, pod, stats)
		grace := e.mgr.PodGracePeriod(t, pod)
		for _, met := range d.Met {
			if o, ok := obs[met.Signal]; ok && !o.Time.IsZero() {
				e.metrics.statsAge(string(met.Signal), time.Since(o.Time))
			}
		}
		e.evictPod(ctx, workers[pod], pod, string(t.Signal), grace, msg, ann, true)
		return true
	}
	log.Warn("eviction manager: unable to evict any pods from the node", "resourceName", res)
	return false
}

// evictPod records the event and the metric, orders the pod stopped and
// failed, and waits until it has stopped.
func (e *evictionLoop) evictPod(ctx context.Context, w *podWorker, pod *corev1.Pod, signal string, grace time.Duration, msg string, ann map[string]string, disruption bool) {
	log := e.a.cfg.Logger
	e.podEvent(ctx, w, pod, msg, ann)
	log.Info("eviction manager: evicting pod", "pod", podKey(pod), "signal", signal, "grace", grace, "message", msg)
	e.metrics.evicted(signal)
	select {
	case <-w.evict(grace, msg, disruption):
	case <-time.After(grace + evictionCleanupTimeout):
		log.Warn("eviction manager: timed out waiting for the pod to stop", "pod", podKey(pod))
	case <-ctx.Done():
	}
}

// localStorage evicts, at once, every pod past its own local storage
// limits (an emptyDir's sizeLimit, its containers' ephemeral-storage
// limits), as the kubelet's local storage isolation does before looking
// at the node's thresholds; true when it evicted one.
func (e *evictionLoop) localStorage(ctx context.Context, sum *statsapi.Summary) bool {
	pods, workers := e.m.evictablePods()
	stats := eviction.PodStats(sum)
	evicted := false
	for _, pod := range pods {
		st, ok := stats(pod)
		if !ok {
			continue
		}
		signal, msg, bad := eviction.LocalStorageViolation(pod, st, e.dedicatedImageFs)
		if !bad {
			continue
		}
		if eviction.Critical(pod) {
			e.a.cfg.Logger.Warn("eviction manager: cannot evict a critical pod", "pod", podKey(pod), "message", msg)
			continue
		}
		e.evictPod(ctx, workers[pod], pod, signal, 0, msg, nil, false)
		evicted = true
	}
	return evicted
}

// podEvent records the Evicted event, annotated with what used the
// starved resource, as the kubelet does.
func (e *evictionLoop) podEvent(ctx context.Context, w *podWorker, pod *corev1.Pod, msg string, ann map[string]string) {
	ref := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: w.apiObject(pod).UID, ResourceVersion: pod.ResourceVersion}
	ev := kubeletEvent(e.a.cfg.NodeName, pod.Namespace, ref, corev1.EventTypeWarning, eviction.Reason, msg)
	ev.Annotations = ann
	if err := e.a.cfg.Client.createEvent(ctx, ev); err != nil && !apierrors.IsNotFound(err) {
		e.a.cfg.Logger.Debug("recording event", "pod", podKey(pod), "reason", eviction.Reason, "err", err)
	}
}

// reclaimNodeLevel removes dead containers and unused images, then says
// whether every threshold is clear (with its minimum reclaim) without
// evicting a pod.
func (e *evictionLoop) reclaimNodeLevel(ctx context.Context) bool {
	e.removeDeadContainers(ctx)
	if e.gc != nil {
		if _, err := e.gc.deleteUnused(ctx); err != nil {
			e.a.cfg.Logger.Warn("eviction manager: removing unused images", "err", err)
		}
	}
	e.stats.Sample(ctx)
	return len(eviction.Met(e.mgr.Config().Thresholds, eviction.Observe(e.stats.Summary()), true)) == 0
}

// removeDeadContainers removes every exited container but the newest of
// each pod's container (its status and logs), as the kubelet's container
// GC does under disk pressure.
func (e *evictionLoop) removeDeadContainers(ctx context.Context) {
	cs, err := e.m.rt.ListContainers(ctx)
	if err != nil {
		return
	}
	newest := map[string]cri.ContainerStatus{}
	for _, c := range cs {
		k := c.Labels[cri.LabelPodUID] + "/" + c.Labels[cri.LabelContainerName]
		if n, ok := newest[k]; !ok || c.CreatedAt.After(n.CreatedAt) {
			newest[k] = c
		}
	}
	for _, c := range cs {
		k := c.Labels[cri.LabelPodUID] + "/" + c.Labels[cri.LabelContainerName]
		if c.State != cri.ContainerExited || newest[k].ID == c.ID {
			continue
		}
		if err := e.m.rt.RemoveContainer(ctx, c.ID); err == nil {
			e.a.cfg.Logger.Info("eviction manager: removed dead container", "id", c.ID, "pod", c.Labels[cri.LabelPodNamespace]+"/"+c.Labels[cri.LabelPodName])
		}
	}
}

// setPressure records the pressure conditions; true when they changed.
func (a *Agent) setPressure(c map[corev1.NodeConditionType]bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := a.pressure == nil
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if a.pressure[t] != c[t] {
			changed = true
		}
	}
	a.pressure = c
	return changed
}

// pressureOf is the condition the eviction manager last reported; ok is
// false before its first round.
func (a *Agent) pressureOf(t corev1.NodeConditionType) (pressure, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pressure == nil {
		return false, false
	}
	return a.pressure[t], true
}

// pressureConditions are the pressure conditions now True.
func (a *Agent) pressureConditions() map[corev1.NodeConditionType]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[corev1.NodeConditionType]bool{}
	for t, on := range a.pressure {
		if on {
			out[t] = true
		}
	}
	return out
}

// rejectForPressure fails a pod that arrives while the node is under
// pressure, before anything of it runs, as the kubelet's eviction
// admission does: under memory pressure alone only BestEffort pods that
// do not tolerate the memory-pressure taint; under disk or PID pressure
// every pod. Critical pods are always admitted.
func (w *podWorker) rejectForPressure(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus) bool {
	if w.m.pressure == nil || len(inst) > 0 || w.sandbox != nil || eviction.Critical(pod) {
		return false
	}
	conds := w.m.pressure()
	msg, reject := eviction.AdmitMessage(pod, conds)
	if !reject {
		return false
	}
	w.event(ctx, pod, "", corev1.EventTypeWarning, eviction.Reason, msg)
	st := pod.Status.DeepCopy()
	st.Phase, st.Reason, st.Message = corev1.PodFailed, eviction.Reason, "Pod was rejected: "+msg
	w.postStatus(ctx, pod, *st)
	return true
}

// evictionMetrics are the kubelet's eviction metrics under its names:
// evictions by signal, and how old the figures were that an eviction for
// a node threshold acted on.
type evictionMetrics struct {
	evictions *prometheus.CounterVec
	age       *prometheus.HistogramVec
}

// newEvictionMetrics registers the metrics with r; nil r: none kept.
func newEvictionMetrics(r prometheus.Registerer) (*evictionMetrics, error) {
	if r == nil {
		return nil, nil
	}
	m := &evictionMetrics{
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_evictions", Help: "Cumulative number of pod evictions by eviction signal",
		}, []string{"eviction_signal"}),
		age: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kubelet_eviction_stats_age_seconds", Buckets: prometheus.DefBuckets,
			Help: "Time between when stats are collected, and when pod is evicted based on those stats by eviction signal",
		}, []string{"eviction_signal"}),
	}
	for _, c := range []prometheus.Collector{m.evictions, m.age} {
		if err := r.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *evictionMetrics) evicted(signal string) {
	if m != nil {
		m.evictions.WithLabelValues(signal).Inc()
	}
}

func (m *evictionMetrics) statsAge(signal string, age time.Duration) {
	if m != nil {
		m.age.WithLabelValues(signal).Observe(age.Seconds())
	}
}

// sameFileSystem says whether two paths are on one file system (true
// when either cannot be read).
func sameFileSystem(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return true
	}
	return sa.Dev == sb.Dev
}
