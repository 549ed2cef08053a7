package scheduler

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// PodTopologySpreadName is Kubernetes' plugin name.
const PodTopologySpreadName = "PodTopologySpread"

const (
	errTopologySpread      = "node(s) didn't match pod topology spread constraints"
	errTopologySpreadLabel = "node(s) didn't match pod topology spread constraints (missing required label)"
)

type spreadConstraint struct {
	maxSkew                    int32
	key                        string
	minDomains                 int32
	selector                   labels.Selector
	honorAffinity, honorTaints bool
	// counts are matching pods per domain value over eligible nodes;
	// min is the smallest count (0 with fewer domains than minDomains).
	counts    map[string]int
	min       int
	selfMatch int
}

type topologySpreadState struct {
	hard, soft []*spreadConstraint
}

// topologySpreadPlugin is Kubernetes' PodTopologySpread: DoNotSchedule
// constraints filter (maxSkew, minDomains, nodeAffinityPolicy,
// nodeTaintsPolicy, matchLabelKeys), ScheduleAnyway ones score nodes with
// fewer matching pods in their domain higher. Cluster-level default
// constraints are not applied.
type topologySpreadPlugin struct{}

func (topologySpreadPlugin) Name() string { return PodTopologySpreadName }

func parseConstraints(pod *corev1.Pod, want corev1.UnsatisfiableConstraintAction) []*spreadConstraint {
	var out []*spreadConstraint
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable != want {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil || c.LabelSelector == nil {
			sel = labels.Nothing()
		}
		for _, k := range c.MatchLabelKeys {
			if v, ok := pod.Labels[k]; ok {
				if r, err := labels.NewRequirement(k, "in", []string{v}); err == nil {
					sel = sel.Add(*r)
				}
			}
		}
		sc := &spreadConstraint{maxSkew: c.MaxSkew, key: c.TopologyKey, minDomains: 1, selector: sel,
			honorAffinity: c.NodeAffinityPolicy == nil || *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor,
			honorTaints:   c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor,
			counts:        map[string]int{}}
		if c.MinDomains != nil {
			sc.minDomains = *c.MinDomains
		}
		if sel.Matches(labels.Set(pod.Labels)) {
			sc.selfMatch = 1
		}
		out = append(out, sc)
	}
	return out
}

func (topologySpreadPlugin) PreFilter(state *CycleState, pod *corev1.Pod, nodes []*NodeInfo) *Status {
	s := &topologySpreadState{
		hard: parseConstraints(pod, corev1.DoNotSchedule),
		soft: parseConstraints(pod, corev1.ScheduleAnyway),
	}
	state.topologySpread = s
	if len(s.hard)+len(s.soft) == 0 {
		return nil
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	for _, ni := range nodes {
		for _, group := range [][]*spreadConstraint{s.hard, s.soft} {
			if !hasAllKeys(ni.Node, group) {
				continue // Kubernetes counts only nodes with every key
			}
			for _, c := range group {
				if c.honorAffinity {
					if ok, _ := required.Match(ni.Node); !ok {
						continue
					}
				}
				if c.honorTaints {
					if _, bad := corev1helpers.FindMatchingUntoleratedTaint(nologger, ni.taints, pod.Spec.Tolerations, hardTaint, false); bad {
						continue
					}
				}
				v := ni.Node.Labels[c.key]
				n := 0
				for _, cp := range ni.pods {
					if cp.pod.Namespace == pod.Namespace && cp.pod.DeletionTimestamp == nil && c.selector.Matches(labels.Set(cp.pod.Labels)) {
						n++
					}
				}
				c.counts[v] += n
			}
		}
	}
	for _, c := range s.hard {
		c.min = -1
		for _, n := range c.counts {
			if c.min < 0 || n < c.min {
				c.min = n
			}
		}
		if c.min < 0 || int32(len(c.counts)) < c.minDomains {
			c.min = 0
		}
	}
	return nil
}

func hasAllKeys(n *corev1.Node, cs []*spreadConstraint) bool {
	for _, c := range cs {
		if _, ok := n.Labels[c.key]; !ok {
			return false
		}
	}
	return true
}

// SkipFilter and SkipScore: without constraints of the kind every node
// passes, or scores 0.
func (topologySpreadPlugin) SkipFilter(state *CycleState, _ *corev1.Pod) bool {
	return len(state.topologySpread.hard) == 0
}

func (topologySpreadPlugin) SkipScore(state *CycleState, _ *corev1.Pod) bool {
	return len(state.topologySpread.soft) == 0
}

func (topologySpreadPlugin) Filter(state *CycleState, _ *corev1.Pod, ni *NodeInfo) *Status {
	s := state.topologySpread
	for _, c := range s.hard {
		v, ok := ni.Node.Labels[c.key]
		if !ok {
			return unresolvable(errTopologySpreadLabel)
		}
		if skew := c.counts[v] + c.selfMatch - c.min; skew > int(c.maxSkew) {
			return unschedulable(errTopologySpread)
		}
	}
	return nil
}

// Score counts the matching pods in the node's domains; fewer is better.
func (topologySpreadPlugin) Score(state *CycleState, _ *corev1.Pod, ni *NodeInfo) int64 {
	s := state.topologySpread
	var total int64
	for _, c := range s.soft {
		if v, ok := ni.Node.Labels[c.key]; ok {
			total += int64(c.counts[v])
		}
	}
	return total
}

func (topologySpreadPlugin) NormalizeScore(_ *CycleState, _ *corev1.Pod, scores []int64) {
	normalize(scores, true)
}
