package scheduler

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The framework is kube-scheduler's, cut to what bonsai runs: plugins
// behind PreFilter/Filter/Score interfaces, a CycleState that carries what
// one plugin computed for a pod through the cycle, and NodeInfos the cache
// keeps current.

// Plugin is one scheduling rule; its name is Kubernetes' plugin name, the
// one a scheduler config file refers to.
type Plugin interface {
	Name() string
}

// PreFilterPlugin computes per-pod state once per cycle, before the nodes
// are walked; it may read every node (under the cache lock). A non-nil
// status fails the pod on every node.
type PreFilterPlugin interface {
	Plugin
	PreFilter(state *CycleState, pod *corev1.Pod, nodes []*NodeInfo) *Status
}

// FilterPlugin says whether the pod fits one node; nil means it does.
type FilterPlugin interface {
	Plugin
	Filter(state *CycleState, pod *corev1.Pod, node *NodeInfo) *Status
}

// ScorePlugin ranks a feasible node; Normalize (optional) maps the raw
// scores of all feasible nodes onto 0..MaxNodeScore.
type ScorePlugin interface {
	Plugin
	Score(state *CycleState, pod *corev1.Pod, node *NodeInfo) int64
}

// FilterSkipper is a FilterPlugin that can tell, once PreFilter ran, that
// its Filter passes every node for the pod (kube-scheduler's PreFilter
// Skip): the cycle leaves it out of the walk over the nodes.
type FilterSkipper interface {
	SkipFilter(state *CycleState, pod *corev1.Pod) bool
}

// ScoreSkipper is a ScorePlugin that can tell, once PreFilter ran, that
// it scores every node alike for the pod (kube-scheduler's PreScore
// Skip): the ranking is the same without it.
type ScoreSkipper interface {
	SkipScore(state *CycleState, pod *corev1.Pod) bool
}

// ScoreNormalizer is a ScorePlugin whose raw scores need rescaling.
type ScoreNormalizer interface {
	NormalizeScore(state *CycleState, pod *corev1.Pod, scores []int64)
}

// MaxNodeScore is the top score a plugin gives a node, as in Kubernetes.
const MaxNodeScore int64 = 100

// Status is why a pod does not fit: the reasons are Kubernetes' own
// strings, counted per node in the FailedScheduling message.
type Status struct {
	reasons []string
	// unresolvable means preempting pods on the node cannot help (a
	// selector or a taint, not a resource).
	unresolvable bool
}

func unschedulable(reasons ...string) *Status { return &Status{reasons: reasons} }
func unresolvable(reasons ...string) *Status {
	return &Status{reasons: reasons, unresolvable: true}
}

// Reasons are the status' reasons.
func (s *Status) Reasons() []string { return s.reasons }

// CycleState is one scheduling cycle's scratch space: what the PreFilter
// plugins precomputed for the pod, one field each. (A map keyed by plugin
// name, read by every filter for every node, was a twentieth of a cycle.)
type CycleState struct {
	// podReq is the pod's requests, computed once for every plugin that
	// needs them.
	podReq           *podResources
	nodeAffinity     *nodeAffinityState
	interPodAffinity *interPodAffinityState
	topologySpread   *topologySpreadState
	volumes          *volumeState
	dra              *draState
}

func newCycleState() *CycleState { return &CycleState{} }

// fitError is a pod that fits no node: its message is Kubernetes' shape,
// "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) were unschedulable."
type fitError struct {
	numNodes int
	// prefilter is set when a PreFilter plugin failed the pod outright.
	prefilter string
	reasons   map[string]int
}

func (e *fitError) Error() string {
	if e.numNodes == 0 && e.prefilter == "" {
		return "no nodes available to schedule pods"
	}
	msg := fmt.Sprintf("0/%d nodes are available:", e.numNodes)
	if e.prefilter != "" {
		return msg + " " + e.prefilter + "."
	}
	hist := make([]string, 0, len(e.reasons))
	for r, n := range e.reasons {
		hist = append(hist, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(hist)
	if len(hist) == 0 {
		return msg[:len(msg)-1] + "."
	}
	return msg + " " + strings.Join(hist, ", ") + "."
}
