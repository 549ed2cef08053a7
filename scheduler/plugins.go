package scheduler

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Plugin names are Kubernetes' own, so a scheduler config file written
// for kube-scheduler names the same things.
const (
	NodeNameName           = "NodeName"
	NodeUnschedulableName  = "NodeUnschedulable"
	NodeAffinityName       = "NodeAffinity"
	TaintTolerationName    = "TaintToleration"
	NodeResourcesFitName   = "NodeResourcesFit"
	BalancedAllocationName = "NodeResourcesBalancedAllocation"
	NodePortsName          = "NodePorts"
	ImageLocalityName      = "ImageLocality"
)

// Kubernetes' reasons, word for word: users grep events for them.
const (
	errNodeName          = "node(s) didn't match the requested node name"
	errNodeUnschedulable = "node(s) were unschedulable"
	errNodeAffinity      = "node(s) didn't match Pod's node affinity/selector"
	errNodePorts         = "node(s) didn't have free ports for the requested pod ports"
	errTooManyPods       = "Too many pods"
)

var nologger = klog.Background()

// nodeNamePlugin: a pod naming a node (spec.nodeName is not set, but an
// affinity on metadata.name is the usual way) fits only there. bonsai
// pods reach the scheduler without nodeName, so this guards the rare pod
// whose nodeName was set while it sat in the queue.
type nodeNamePlugin struct{}

func (nodeNamePlugin) Name() string { return NodeNameName }

// SkipFilter: a pod without nodeName fits every node's name.
func (nodeNamePlugin) SkipFilter(_ *CycleState, pod *corev1.Pod) bool { return pod.Spec.NodeName == "" }
func (nodeNamePlugin) Filter(_ *CycleState, pod *corev1.Pod, ni *NodeInfo) *Status {
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != ni.Node.Name {
		return unresolvable(errNodeName)
	}
	return nil
}

type nodeUnschedulablePlugin struct{}

var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

func (nodeUnschedulablePlugin) Name() string { return NodeUnschedulableName }
func (nodeUnschedulablePlugin) Filter(_ *CycleState, pod *corev1.Pod, ni *NodeInfo) *Status {
	if !ni.unschedulable {
		return nil
	}
	if corev1helpers.TolerationsTolerateTaint(nologger, pod.Spec.Tolerations, &unschedulableTaint, false) {
		return nil
	}
	return unresolvable(errNodeUnschedulable)
}

// nodeAffinityPlugin filters on nodeSelector and required node affinity
// (every operator, matchFields too, through component-helpers) and scores
// preferred terms by the weights of those that match.
type nodeAffinityPlugin struct{}

type nodeAffinityState struct {
	required  nodeaffinity.RequiredNodeAffinity
	preferred *nodeaffinity.PreferredSchedulingTerms
}

func (nodeAffinityPlugin) Name() string { return NodeAffinityName }

func (nodeAffinityPlugin) PreFilter(state *CycleState, pod *corev1.Pod, _ []*NodeInfo) *Status {
	s := &nodeAffinityState{required: nodeaffinity.GetRequiredNodeAffinity(pod)}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
		// Invalid terms were refused by the API's validation; an error
		// here scores no node higher, as Kubernetes does.
		s.preferred, _ = nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	state.nodeAffinity = s
	return nil
}

// SkipFilter: a pod without nodeSelector or required node affinity
// fits every node.
func (nodeAffinityPlugin) SkipFilter(_ *CycleState, pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	return len(pod.Spec.NodeSelector) == 0 &&
		(a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil)
}

// SkipScore: without preferred terms every node scores 0.
func (nodeAffinityPlugin) SkipScore(state *CycleState, _ *corev1.Pod) bool {
	return state.nodeAffinity.preferred == nil
}

func (nodeAffinityPlugin) Filter(state *CycleState, pod *corev1.Pod, ni *NodeInfo) *Status {
	s := state.nodeAffinity
	if ok, _ := s.required.Match(ni.Node); !ok {
		return unresolvable(errNodeAffinity)
	}
	return nil
}

func (nodeAffinityPlugin) Score(state *CycleState, pod *corev1.Pod, ni *NodeInfo) int64 {
	s := state.nodeAffinity
	if s.preferred == nil {
		return 0
	}
	return s.preferred.Score(ni.Node)
}

func (nodeAffinityPlugin) NormalizeScore(_ *CycleState, _ *corev1.Pod, scores []int64) {
	normalize(scores, false)
}

// taintTolerationPlugin keeps pods off nodes with NoSchedule or NoExecute
// taints they do not tolerate, and prefers nodes with fewer untolerated
// PreferNoSchedule taints.
type taintTolerationPlugin struct{}

func (taintTolerationPlugin) Name() string { return TaintTolerationName }

func hardTaint(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

func (taintTolerationPlugin) Filter(_ *CycleState, pod *corev1.Pod, ni *NodeInfo) *Status {
	t, bad := corev1helpers.FindMatchingUntoleratedTaint(nologger, ni.taints, pod.Spec.Tolerations, hardTaint, false)
	if !bad {
		return nil
	}
	return unresolvable(fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value))
}

func (taintTolerationPlugin) Score(_ *CycleState, pod *corev1.Pod, ni *NodeInfo) int64 {
	var n int64
	for i := range ni.taints {
		t := &ni.taints[i]
		if t.Effect != corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for j := range pod.Spec.Tolerations {
			tol := &pod.Spec.Tolerations[j]
			if (tol.Effect == "" || tol.Effect == corev1.TaintEffectPreferNoSchedule) && tol.ToleratesTaint(nologger, t, false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			n++
		}
	}
	return n
}

// NormalizeScore makes fewer untolerated taints the better score.
func (taintTolerationPlugin) NormalizeScore(_ *CycleState, _ *corev1.Pod, scores []int64) {
	normalize(scores, true)
}

// normalize maps scores onto 0..MaxNodeScore by the largest; reverse makes
// the smallest raw score the best.
func normalize(scores []int64, reverse bool) {
	var max int64
	for _, s := range scores {
		max = maxInt(max, s)
	}
	for i, s := range scores {
		switch {
		case max == 0 && reverse:
			scores[i] = MaxNodeScore
		case max == 0:
			scores[i] = 0
		case reverse:
			scores[i] = MaxNodeScore - MaxNodeScore*s/max
		default:
			scores[i] = MaxNodeScore * s / max
		}
	}
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// nodePortsPlugin: two pods cannot take the same host port and protocol
// on overlapping addresses.
type nodePortsPlugin struct{}

func (nodePortsPlugin) Name() string { return NodePortsName }

// SkipFilter: a pod taking no host port conflicts with none.
func (nodePortsPlugin) SkipFilter(state *CycleState, _ *corev1.Pod) bool {
	return len(state.podReq.hostPorts) == 0
}

func (nodePortsPlugin) Filter(state *CycleState, _ *corev1.Pod, ni *NodeInfo) *Status {
	for _, hp := range state.podReq.hostPorts {
		if ni.portConflict(hp) {
			return unschedulable(errNodePorts)
		}
	}
	return nil
}

// ResourceSpec is a resource and its weight in a scoring strategy.
type ResourceSpec struct {
	Name   corev1.ResourceName `json:"name"`
	Weight int64               `json:"weight"`
}

// Scoring strategies of NodeResourcesFit, Kubernetes' names.
const (
	LeastAllocated = "LeastAllocated"
	MostAllocated  = "MostAllocated"
)

// nodeResourcesFitPlugin: the pod's requests (cpu, memory,
// ephemeral-storage, every extended resource, and one pod slot) must fit
// in what the node's allocatable leaves after the pods counted on it,
// assumed ones included. It scores by the configured strategy.
type nodeResourcesFitPlugin struct {
	strategy  string
	resources []ResourceSpec
}

func (nodeResourcesFitPlugin) Name() string { return NodeResourcesFitName }

func (p nodeResourcesFitPlugin) Filter(state *CycleState, _ *corev1.Pod, ni *NodeInfo) *Status {
	r := state.podReq
	var reasons []string
	if int64(len(ni.pods))+1 > ni.alloc.pods {
		reasons = append(reasons, errTooManyPods)
	}
	if r.milliCPU > 0 && r.milliCPU > ni.alloc.milliCPU-ni.requested.milliCPU {
		reasons = append(reasons, "Insufficient cpu")
	}
	if r.memory > 0 && r.memory > ni.alloc.memory-ni.requested.memory {
		reasons = append(reasons, "Insufficient memory")
	}
	if r.ephemeral > 0 && r.ephemeral > ni.alloc.ephemeral-ni.requested.ephemeral {
		reasons = append(reasons, "Insufficient ephemeral-storage")
	}
	for name, v := range r.scalar {
		if v > ni.alloc.scalar[name]-ni.requested.scalar[name] {
			reasons = append(reasons, "Insufficient "+string(name))
		}
	}
	if len(reasons) > 0 {
		return unschedulable(reasons...)
	}
	return nil
}

// requestedAndAllocatable is one resource of a node with the pod on it.
// With nonZero, cpu and memory count request-less containers as 100m and
// 200 MiB (NodeResourcesFit's scoring); BalancedAllocation uses the plain
// requests, as kube-scheduler does.
func requestedAndAllocatable(r *podResources, ni *NodeInfo, name corev1.ResourceName, nonZero bool) (req, alloc int64) {
	switch name {
	case corev1.ResourceCPU:
		if !nonZero {
			return ni.requested.milliCPU + r.milliCPU, ni.alloc.milliCPU
		}
		return ni.requested.nonZeroCPU + r.nonZeroCPU, ni.alloc.milliCPU
	case corev1.ResourceMemory:
		if !nonZero {
			return ni.requested.memory + r.memory, ni.alloc.memory
		}
		return ni.requested.nonZeroMem + r.nonZeroMem, ni.alloc.memory
	case corev1.ResourceEphemeralStorage:
		return ni.requested.ephemeral + r.ephemeral, ni.alloc.ephemeral
	default:
		return ni.requested.scalar[name] + r.scalar[name], ni.alloc.scalar[name]
	}
}

func (p nodeResourcesFitPlugin) Score(state *CycleState, _ *corev1.Pod, ni *NodeInfo) int64 {
	var total, weights int64
	for _, rs := range p.resources {
		req, alloc := requestedAndAllocatable(state.podReq, ni, rs.Name, true)
		if alloc == 0 {
			continue
		}
		req = min(req, alloc)
		var s int64
		if p.strategy == MostAllocated {
			s = req * MaxNodeScore / alloc
		} else {
			s = (alloc - req) * MaxNodeScore / alloc
		}
		total += s * rs.Weight
		weights += rs.Weight
	}
	if weights == 0 {
		return 0
	}
	return total / weights
}

// balancedAllocationPlugin prefers nodes whose cpu and memory would be
// used in equal proportion: 100 × (1 − standard deviation of the
// fractions).
type balancedAllocationPlugin struct {
	resources []ResourceSpec
}

func (balancedAllocationPlugin) Name() string { return BalancedAllocationName }

func (p balancedAllocationPlugin) Score(state *CycleState, _ *corev1.Pod, ni *NodeInfo) int64 {
	var fr [8]float64
	fracs := fr[:0]
	for _, rs := range p.resources {
		req, alloc := requestedAndAllocatable(state.podReq, ni, rs.Name, false)
		if alloc == 0 {
			continue
		}
		f := float64(req) / float64(alloc)
		if f > 1 {
			f = 1
		}
		fracs = append(fracs, f)
	}
	if len(fracs) < 2 {
		return MaxNodeScore
	}
	var mean float64
	for _, f := range fracs {
		mean += f
	}
	mean /= float64(len(fracs))
	var v float64
	for _, f := range fracs {
		v += (f - mean) * (f - mean)
	}
	std := math.Sqrt(v / float64(len(fracs)))
	return int64((1 - std) * float64(MaxNodeScore))
}

// imageLocalityPlugin prefers nodes that already have the pod's images,
// by their size, as Kubernetes does (without its spread factor).
type imageLocalityPlugin struct{}

const (
	minImageThreshold int64 = 23 << 20
	maxImageThreshold int64 = 1000 << 20
)

func (imageLocalityPlugin) Name() string { return ImageLocalityName }

func (imageLocalityPlugin) Score(_ *CycleState, pod *corev1.Pod, ni *NodeInfo) int64 {
	if len(ni.imageSizes) == 0 {
		return 0
	}
	var sum int64
	for i := range pod.Spec.Containers {
		sum += ni.imageSizes[normalizeImage(pod.Spec.Containers[i].Image)]
	}
	max := maxImageThreshold * int64(len(pod.Spec.Containers))
	switch {
	case sum < minImageThreshold:
		return 0
	case sum > max:
		return MaxNodeScore
	}
	return MaxNodeScore * (sum - minImageThreshold) / (max - minImageThreshold)
}

// normalizeImage gives an image without tag ":latest", as the node lists it.
func normalizeImage(name string) string {
	if strings.Contains(name, "@") {
		return name
	}
	if i := strings.LastIndex(name, ":"); i < 0 || strings.Contains(name[i:], "/") {
		return name + ":latest"
	}
	return name
}
