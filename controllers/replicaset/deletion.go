package replicaset

import (
	"math"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/controllers/kit"
)

// podDeletionCostAnnotation ranks pods for scale-down: lower cost goes
// first.
const podDeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

// podsToDelete picks n of pods to delete on scale-down, in upstream's
// order of preference. related are the pods of the ReplicaSet's sibling
// ReplicaSets (same controller): a pod on a node crowded with them goes
// before one that is not, so that scale-down spreads the workload.
func podsToDelete(pods, related []*corev1.Pod, n int, now time.Time) []*corev1.Pod {
	if n >= len(pods) {
		return pods
	}
	onNode := map[string]int{}
	for _, p := range related {
		if p.Spec.NodeName != "" && isPodActive(p) {
			onNode[p.Spec.NodeName]++
		}
	}
	r := rankedPods{pods: append([]*corev1.Pod(nil), pods...), rank: make([]int, len(pods)), now: now}
	for i, p := range r.pods {
		r.rank[i] = onNode[p.Spec.NodeName]
	}
	sort.Sort(r)
	return r.pods[:n]
}

var phaseOrder = map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}

// rankedPods sorts pods so that the ones to delete first come first:
//  1. unscheduled before scheduled;
//  2. Pending before Unknown before Running;
//  3. not Ready before Ready;
//  4. lower pod-deletion-cost first;
//  5. on a node with more related pods first;
//  6. Ready for less time first (on a logarithmic scale, ties broken by
//     UID, so that pods of about the same age go at random);
//  7. more container restarts first;
//  8. newer first (on the same logarithmic scale).
type rankedPods struct {
	pods []*corev1.Pod
	rank []int
	now  time.Time
}

func (r rankedPods) Len() int { return len(r.pods) }
func (r rankedPods) Swap(i, j int) {
	r.pods[i], r.pods[j] = r.pods[j], r.pods[i]
	r.rank[i], r.rank[j] = r.rank[j], r.rank[i]
}

func (r rankedPods) Less(i, j int) bool {
	a, b := r.pods[i], r.pods[j]
	if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
		return a.Spec.NodeName == ""
	}
	if pa, pb := phaseOrder[a.Status.Phase], phaseOrder[b.Status.Phase]; pa != pb {
		return pa < pb
	}
	if ra, rb := kit.IsPodReady(a), kit.IsPodReady(b); ra != rb {
		return !ra
	}
	if ca, cb := deletionCost(a), deletionCost(b); ca != cb {
		return ca < cb
	}
	if r.rank[i] != r.rank[j] {
		return r.rank[i] > r.rank[j]
	}
	if kit.IsPodReady(a) && kit.IsPodReady(b) {
		ta, tb := readySince(a), readySince(b)
		if !ta.Equal(tb) {
			return r.newerFirst(a, b, ta, tb)
		}
	}
	if ca, cb := maxRestarts(a), maxRestarts(b); ca != cb {
		return ca > cb
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return r.newerFirst(a, b, a.CreationTimestamp.Time, b.CreationTimestamp.Time)
	}
	return false
}

// newerFirst orders by time, newer (or unknown) first. Times are compared
// in powers of two of their age, as upstream's LogarithmicScaleDown does.
func (r rankedPods) newerFirst(a, b *corev1.Pod, ta, tb time.Time) bool {
	if ta.IsZero() || tb.IsZero() {
		return ta.IsZero()
	}
	if d := logAge(ta, r.now) - logAge(tb, r.now); d != 0 {
		return d < 0
	}
	return a.UID < b.UID
}

func logAge(t, now time.Time) int64 {
	if d := now.Sub(t); d > 0 {
		return int64(math.Log2(float64(d)))
	}
	return -1
}

func readySince(p *corev1.Pod) time.Time {
	if c := kit.PodReadyCondition(p); c != nil {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

func deletionCost(p *corev1.Pod) int32 {
	v, ok := p.Annotations[podDeletionCostAnnotation]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

func maxRestarts(p *corev1.Pod) int32 {
	var m int32
	for _, s := range p.Status.ContainerStatuses {
		m = max(m, s.RestartCount)
	}
	return m
}
