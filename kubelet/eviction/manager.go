package eviction

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// What evictions write, in the kubelet's words.
const (
	// Reason is the evicted pod's status reason and its event's.
	Reason = "Evicted"
	// ThresholdMetReason is the node's event when it starts reclaiming.
	ThresholdMetReason = "EvictionThresholdMet"
	// DefaultPressureTransitionPeriod is how long a pressure condition
	// stays True after its threshold was last met.
	DefaultPressureTransitionPeriod = 5 * time.Minute
	// Event annotations naming what used the starved resource.
	OffendingContainersKey      = "offending_containers"
	OffendingContainersUsageKey = "offending_containers_usage"
	StarvedResourceKey          = "starved_resource"
)

// systemCriticalPriority is the lowest priority of a critical pod.
const systemCriticalPriority = int32(2000000000)

// Observation is one signal's reading: what is available out of what
// capacity, sampled at Time.
type Observation struct {
	Available, Capacity *resource.Quantity
	Time                time.Time
}

// Observations are the readings by signal.
type Observations map[Signal]Observation

// Observe reads the signals from a stats summary, as the kubelet does:
// memory from the node's available bytes and working set, the file systems
// from the node's and the runtime's image fs, pids from the node's rlimit.
func Observe(s *statsapi.Summary) Observations {
	out := Observations{}
	if s == nil {
		return out
	}
	n := s.Node
	if m := n.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
		out[SignalMemoryAvailable] = Observation{
			Available: resource.NewQuantity(int64(*m.AvailableBytes), resource.BinarySI),
			Capacity:  resource.NewQuantity(int64(*m.AvailableBytes+*m.WorkingSetBytes), resource.BinarySI),
			Time:      m.Time.Time,
		}
	}
	fs := func(f *statsapi.FsStats, bytes, inodes Signal) {
		if f == nil {
			return
		}
		if f.AvailableBytes != nil && f.CapacityBytes != nil {
			out[bytes] = Observation{resource.NewQuantity(int64(*f.AvailableBytes), resource.BinarySI), resource.NewQuantity(int64(*f.CapacityBytes), resource.BinarySI), f.Time.Time}
		}
		if f.InodesFree != nil && f.Inodes != nil {
			out[inodes] = Observation{resource.NewQuantity(int64(*f.InodesFree), resource.DecimalSI), resource.NewQuantity(int64(*f.Inodes), resource.DecimalSI), f.Time.Time}
		}
	}
	fs(n.Fs, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	if n.Runtime != nil {
		fs(n.Runtime.ImageFs, SignalImageFsAvailable, SignalImageFsInodesFree)
	}
	if r := n.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		out[SignalPIDAvailable] = Observation{
			Available: resource.NewQuantity(*r.MaxPID-*r.NumOfRunningProcesses, resource.DecimalSI),
			Capacity:  resource.NewQuantity(*r.MaxPID, resource.DecimalSI),
			Time:      r.Time.Time,
		}
	}
	return out
}

// Met is the thresholds whose signal is below their value now; with
// minReclaim, below their value plus their minimum reclaim (what a met
// threshold must free before it is let go).
func Met(thresholds []Threshold, obs Observations, minReclaim bool) []Threshold {
	var out []Threshold
	for _, t := range thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		q := t.Value.Of(o.Capacity)
		if minReclaim && t.MinReclaim != nil {
			q.Add(*t.MinReclaim.Of(o.Capacity))
		}
		if q.Cmp(*o.Available) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// Config is the eviction policy.
type Config struct {
	Thresholds []Threshold
	// PressureTransitionPeriod is how long a condition stays True after
	// its threshold was last met (--eviction-pressure-transition-period).
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriod caps a pod's grace when a soft threshold evicts it
	// (--eviction-max-pod-grace-period, 0 by default as the kubelet's);
	// negative: the pod's own.
	MaxPodGracePeriod time.Duration
}

// Manager keeps the eviction state between synchronizations: when each
// threshold was first met, when each condition was last observed, and
// the thresholds met last time (held until their minimum reclaim).
type Manager struct {
	cfg           Config
	firstObserved map[string]time.Time
	condObserved  map[corev1.NodeConditionType]time.Time
	met           []Threshold
}

// NewManager starts with nothing met.
func NewManager(cfg Config) *Manager {
	if cfg.PressureTransitionPeriod == 0 {
		cfg.PressureTransitionPeriod = DefaultPressureTransitionPeriod
	}
	return &Manager{cfg: cfg, firstObserved: map[string]time.Time{}, condObserved: map[corev1.NodeConditionType]time.Time{}}
}

// Config is the manager's policy.
func (m *Manager) Config() Config { return m.cfg }

// Decision is one synchronization's outcome.
type Decision struct {
	// Conditions are the pressure conditions the node reports True.
	Conditions map[corev1.NodeConditionType]bool
	// Reclaim is the threshold to act on now (grace period over), memory
	// first; nil when none.
	Reclaim *Threshold
	// Met are the thresholds whose grace periods are over.
	Met []Threshold
}

// Synchronize folds the observations into the state at now.
func (m *Manager) Synchronize(now time.Time, obs Observations) Decision {
	met := Met(m.cfg.Thresholds, obs, false)
	// A threshold met before stays met until its minimum reclaim is freed.
	for _, t := range Met(m.met, obs, true) {
		if !hasThreshold(met, t) {
			met = append(met, t)
		}
	}
	first := map[string]time.Time{}
	for _, t := range met {
		at, ok := m.firstObserved[t.key()]
		if !ok {
			at = now
		}
		first[t.key()] = at
	}
	m.firstObserved = first
	for _, t := range met {
		m.condObserved[t.Signal.Condition()] = now
	}
	d := Decision{Conditions: map[corev1.NodeConditionType]bool{}}
	for c, at := range m.condObserved {
		if now.Sub(at) < m.cfg.PressureTransitionPeriod {
			d.Conditions[c] = true
		} else {
			delete(m.condObserved, c)
		}
	}
	for _, t := range met {
		if now.Sub(first[t.key()]) >= t.GracePeriod {
			d.Met = append(d.Met, t)
		}
	}
	m.met = d.Met
	// Memory first, as the kubelet ranks starved resources.
	sort.SliceStable(d.Met, func(i, j int) bool {
		return d.Met[i].Signal == SignalMemoryAvailable && d.Met[j].Signal != SignalMemoryAvailable
	})
	if len(d.Met) > 0 {
		t := d.Met[0]
		d.Reclaim = &t
	}
	return d
}

func hasThreshold(ts []Threshold, t Threshold) bool {
	for _, o := range ts {
		if o.key() == t.key() {
			return true
		}
	}
	return false
}

// PodGracePeriod is how long the evicted pod gets: nothing for a hard
// threshold, else its own grace capped at the max pod grace period.
func (m *Manager) PodGracePeriod(t Threshold, pod *corev1.Pod) time.Duration {
	if t.Hard() {
		return 0
	}
	own := 30 * time.Second
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		own = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	if max := m.cfg.MaxPodGracePeriod; max >= 0 && max < own {
		return max
	}
	return max(own, 0)
}

// Critical says whether the kubelet never evicts the pod: static and
// mirror pods, and pods of system-critical priority.
func Critical(pod *corev1.Pod) bool {
	if src, ok := pod.Annotations["kubernetes.io/config.source"]; ok && src != "api" {
		return true
	}
	if _, ok := pod.Annotations["kubernetes.io/config.mirror"]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}

// StatsFunc finds a pod's stats.
type StatsFunc func(*corev1.Pod) (statsapi.PodStats, bool)

// PodStats indexes a summary's pods by UID.
func PodStats(s *statsapi.Summary) StatsFunc {
	byUID := map[string]statsapi.PodStats{}
	if s != nil {
		for _, p := range s.Pods {
			byUID[p.PodRef.UID] = p
		}
	}
	return func(p *corev1.Pod) (statsapi.PodStats, bool) {
		st, ok := byUID[string(p.UID)]
		return st, ok
	}
}

// Rank orders pods for eviction under the signal's pressure, the first to
// go first: memory by usage above requests, then priority, then usage
// less requests; disk the same with ephemeral storage; pids by priority
// then processes. A pod without stats goes first.
func Rank(sig Signal, pods []*corev1.Pod, stats StatsFunc) {
	var by []cmpFunc
	switch sig.Resource() {
	case corev1.ResourceMemory:
		by = []cmpFunc{exceeds(stats, memoryUsage, corev1.ResourceMemory), priority, aboveRequest(stats, memoryUsage, corev1.ResourceMemory)}
	case corev1.ResourceEphemeralStorage:
		by = []cmpFunc{exceeds(stats, diskUsage, corev1.ResourceEphemeralStorage), priority, aboveRequest(stats, diskUsage, corev1.ResourceEphemeralStorage)}
	case ResourceInodes:
		by = []cmpFunc{priority, aboveRequest(stats, inodeUsage, ResourceInodes)}
	case ResourcePids:
		by = []cmpFunc{priority, aboveRequest(stats, processUsage, ResourcePids)}
	default:
		by = []cmpFunc{priority}
	}
	sort.SliceStable(pods, func(i, j int) bool {
		for _, c := range by {
			if r := c(pods[i], pods[j]); r != 0 {
				return r < 0
			}
		}
		return false
	})
}

// cmpFunc is negative when p1 goes before p2.
type cmpFunc func(p1, p2 *corev1.Pod) int

func priority(p1, p2 *corev1.Pod) int {
	a, b := podPriority(p1), podPriority(p2)
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

type usageFunc func(statsapi.PodStats) int64

func memoryUsage(s statsapi.PodStats) int64 {
	if s.Memory == nil || s.Memory.WorkingSetBytes == nil {
		return 0
	}
	return int64(*s.Memory.WorkingSetBytes)
}

func diskUsage(s statsapi.PodStats) int64 {
	if s.EphemeralStorage == nil || s.EphemeralStorage.UsedBytes == nil {
		return 0
	}
	return int64(*s.EphemeralStorage.UsedBytes)
}

func inodeUsage(s statsapi.PodStats) int64 {
	if s.EphemeralStorage == nil || s.EphemeralStorage.InodesUsed == nil {
		return 0
	}
	return int64(*s.EphemeralStorage.InodesUsed)
}

func processUsage(s statsapi.PodStats) int64 {
	if s.ProcessStats == nil || s.ProcessStats.ProcessCount == nil {
		return 0
	}
	return int64(*s.ProcessStats.ProcessCount)
}

func request(p *corev1.Pod, name corev1.ResourceName) int64 {
	if name != corev1.ResourceMemory && name != corev1.ResourceEphemeralStorage {
		return 0
	}
	req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	q := req[name]
	return q.Value()
}

func exceeds(stats StatsFunc, use usageFunc, name corev1.ResourceName) cmpFunc {
	return func(p1, p2 *corev1.Pod) int {
		s1, ok1 := stats(p1)
		s2, ok2 := stats(p2)
		if !ok1 || !ok2 {
			return cmpBool(!ok1, !ok2)
		}
		return cmpBool(use(s1) > request(p1, name), use(s2) > request(p2, name))
	}
}

func aboveRequest(stats StatsFunc, use usageFunc, name corev1.ResourceName) cmpFunc {
	return func(p1, p2 *corev1.Pod) int {
		s1, ok1 := stats(p1)
		s2, ok2 := stats(p2)
		if !ok1 || !ok2 {
			return cmpBool(!ok1, !ok2)
		}
		a, b := use(s1)-request(p1, name), use(s2)-request(p2, name)
		switch {
		case a > b:
			return -1
		case a < b:
			return 1
		}
		return 0
	}
}

// Message words the eviction of pod for the starved resource as the
// kubelet does, and the event annotations naming the containers that
// used more than they requested.
func Message(t Threshold, obs Observations, pod *corev1.Pod, stats StatsFunc) (string, map[string]string) {
	res := t.Signal.Resource()
	msg := fmt.Sprintf("The node was low on resource: %v. ", res)
	if o, ok := obs[t.Signal]; ok {
		msg += fmt.Sprintf("Threshold quantity: %v, available: %v. ", t.Value.Of(o.Capacity), o.Available)
	}
	ann := map[string]string{}
	ps, ok := stats(pod)
	if !ok {
		return msg, ann
	}
	var names, usages []string
	containers := append(append([]corev1.Container(nil), pod.Spec.Containers...), pod.Spec.InitContainers...)
	for _, cs := range ps.Containers {
		for _, c := range containers {
			if c.Name != cs.Name {
				continue
			}
			req := c.Resources.Requests[res]
			var usage *resource.Quantity
			switch res {
			case corev1.ResourceMemory:
				if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
					usage = resource.NewQuantity(int64(*cs.Memory.WorkingSetBytes), resource.BinarySI)
				}
			case corev1.ResourceEphemeralStorage:
				if cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil && cs.Logs != nil && cs.Logs.UsedBytes != nil {
					usage = resource.NewQuantity(int64(*cs.Rootfs.UsedBytes+*cs.Logs.UsedBytes), resource.BinarySI)
				}
			}
			if usage != nil && usage.Cmp(req) > 0 {
				msg += fmt.Sprintf("Container %s was using %s, request is %s, has larger consumption of %v. ", c.Name, usage.String(), req.String(), res)
				names, usages = append(names, c.Name), append(usages, usage.String())
			}
			break
		}
	}
	ann[OffendingContainersKey] = strings.Join(names, ",")
	ann[OffendingContainersUsageKey] = strings.Join(usages, ",")
	ann[StarvedResourceKey] = string(res)
	return msg, ann
}

// AdmitMessage says whether a new pod is refused under these pressure
// conditions, and why, as the kubelet's eviction admission words it:
// under memory pressure alone only a BestEffort pod that does not
// tolerate the memory-pressure taint; under any other pressure every pod.
// The caller admits critical pods first.
func AdmitMessage(pod *corev1.Pod, conds map[corev1.NodeConditionType]bool) (string, bool) {
	var on []string
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if conds[t] {
			on = append(on, string(t))
		}
	}
	if len(on) == 0 {
		return "", false
	}
	if len(on) == 1 && on[0] == string(corev1.NodeMemoryPressure) {
		if !bestEffort(pod) {
			return "", false
		}
		for _, t := range pod.Spec.Tolerations {
			if tolerates(t, corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule) {
				return "", false
			}
		}
	}
	return fmt.Sprintf("The node had condition: %v. ", on), true
}

// tolerates matches a toleration against a taint with no value.
func tolerates(t corev1.Toleration, key string, effect corev1.TaintEffect) bool {
	if t.Effect != "" && t.Effect != effect {
		return false
	}
	if t.Key != "" && t.Key != key {
		return false
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return t.Key != "" && t.Value == ""
	}
	return false
}

// bestEffort: no CPU or memory requested or limited by any container.
func bestEffort(pod *corev1.Pod) bool {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass == corev1.PodQOSBestEffort
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				if _, ok := rl[corev1.ResourceCPU]; ok {
					return false
				}
				if _, ok := rl[corev1.ResourceMemory]; ok {
					return false
				}
			}
		}
	}
	return true
}
