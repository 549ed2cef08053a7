package scheduler

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// InterPodAffinityName is Kubernetes' plugin name.
const InterPodAffinityName = "InterPodAffinity"

const (
	errPodAffinity          = "node(s) didn't match pod affinity rules"
	errPodAntiAffinity      = "node(s) didn't match pod anti-affinity rules"
	errExistingAntiAffinity = "node(s) didn't satisfy existing pods anti-affinity rules"
	// hardPodAffinityWeight is what an existing pod's required affinity
	// adds to the score of nodes in its topology (Kubernetes' default 1).
	hardPodAffinityWeight = 1
)

// affinityTerm is a pod (anti-)affinity term, parsed once per pod.
type affinityTerm struct {
	selector labels.Selector
	// matchLabels, when set, is the whole selector: plain lookups, many
	// times cheaper than a Selector, for the common term.
	matchLabels []labelPair
	// namespace is the one namespace of most terms (the pod's own);
	// namespaces holds a list when there are more.
	namespace     string
	namespaces    map[string]bool
	allNamespaces bool
	topologyKey   string
	weight        int64
}

func (t *affinityTerm) matches(p *corev1.Pod) bool {
	if !t.allNamespaces {
		if t.namespaces == nil {
			if p.Namespace != t.namespace {
				return false
			}
		} else if !t.namespaces[p.Namespace] {
			return false
		}
	}
	if t.matchLabels != nil {
		for _, l := range t.matchLabels {
			if have, ok := p.Labels[l.key]; !ok || have != l.value {
				return false
			}
		}
		return true
	}
	return t.selector.Matches(labels.Set(p.Labels))
}

// podAffinity is a pod's parsed inter-pod affinity.
type podAffinity struct {
	required, requiredAnti   []affinityTerm
	preferred, preferredAnti []affinityTerm
}

func (a *podAffinity) empty() bool {
	return a == nil || len(a.required)+len(a.requiredAnti)+len(a.preferred)+len(a.preferredAnti) == 0
}

// parsePodAffinity returns nil for a pod without inter-pod affinity: the
// common case costs nothing.
func parsePodAffinity(p *corev1.Pod) *podAffinity {
	aff := p.Spec.Affinity
	if aff == nil || (aff.PodAffinity == nil && aff.PodAntiAffinity == nil) {
		return nil
	}
	a := &podAffinity{}
	if pa := aff.PodAffinity; pa != nil {
		a.required = parseTerms(p, pa.RequiredDuringSchedulingIgnoredDuringExecution, 0)
		for _, w := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			a.preferred = append(a.preferred, parseTerms(p, []corev1.PodAffinityTerm{w.PodAffinityTerm}, int64(w.Weight))...)
		}
	}
	if pa := aff.PodAntiAffinity; pa != nil {
		a.requiredAnti = parseTerms(p, pa.RequiredDuringSchedulingIgnoredDuringExecution, 0)
		for _, w := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			a.preferredAnti = append(a.preferredAnti, parseTerms(p, []corev1.PodAffinityTerm{w.PodAffinityTerm}, int64(w.Weight))...)
		}
	}
	if a.empty() {
		return nil
	}
	return a
}

// parseTerms follows Kubernetes: no namespaces and no namespaceSelector
// mean the pod's own namespace; an empty namespaceSelector means every
// namespace. A non-empty namespaceSelector needs namespace labels, which
// this scheduler does not watch: such a term matches the namespaces it
// lists (or the pod's own) only.
func parseTerms(p *corev1.Pod, terms []corev1.PodAffinityTerm, weight int64) []affinityTerm {
	out := make([]affinityTerm, 0, len(terms))
	for i := range terms {
		t := &terms[i]
		sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
		if err != nil {
			sel = labels.Nothing()
		}
		if t.LabelSelector == nil {
			sel = labels.Nothing()
		}
		// matchLabelKeys and mismatchLabelKeys take their values from the
		// incoming pod's own labels.
		for _, k := range t.MatchLabelKeys {
			if v, ok := p.Labels[k]; ok {
				if r, err := labels.NewRequirement(k, "in", []string{v}); err == nil {
					sel = sel.Add(*r)
				}
			}
		}
		for _, k := range t.MismatchLabelKeys {
			if v, ok := p.Labels[k]; ok {
				if r, err := labels.NewRequirement(k, "notin", []string{v}); err == nil {
					sel = sel.Add(*r)
				}
			}
		}
		at := affinityTerm{selector: sel, topologyKey: t.TopologyKey, weight: weight}
		if ls := t.LabelSelector; ls != nil && len(ls.MatchLabels) > 0 && len(ls.MatchExpressions) == 0 &&
			len(t.MatchLabelKeys) == 0 && len(t.MismatchLabelKeys) == 0 {
			for k, v := range ls.MatchLabels {
				at.matchLabels = append(at.matchLabels, labelPair{k, v})
			}
		}
		switch {
		case t.NamespaceSelector != nil && len(t.NamespaceSelector.MatchLabels) == 0 && len(t.NamespaceSelector.MatchExpressions) == 0:
			at.allNamespaces = true
		case len(t.Namespaces) == 0:
			at.namespace = p.Namespace
		case len(t.Namespaces) == 1:
			at.namespace = t.Namespaces[0]
		default:
			at.namespaces = map[string]bool{}
			for _, ns := range t.Namespaces {
				at.namespaces[ns] = true
			}
		}
		out = append(out, at)
	}
	return out
}

type topologyPair struct{ key, value string }

type labelPair struct{ key, value string }

// interPodAffinityState is what PreFilter counted over every pod in the
// cluster, so each node is then a few map lookups.
type interPodAffinityState struct {
	aff *podAffinity
	// existingAnti: topologies where an existing pod's required
	// anti-affinity matches the incoming pod; existingAntiKeys their keys,
	// so a node is checked with a lookup per key, not a walk of the map.
	existingAnti     map[topologyPair]int
	existingAntiKeys []string
	// affinity and anti: topologies of existing pods matching the
	// incoming pod's required terms.
	affinity, anti map[topologyPair]int
	// scores: preferred terms both ways, summed per topology.
	scores map[topologyPair]int64
}

type interPodAffinityPlugin struct{}

func (interPodAffinityPlugin) Name() string { return InterPodAffinityName }

func (interPodAffinityPlugin) PreFilter(state *CycleState, pod *corev1.Pod, nodes []*NodeInfo) *Status {
	s := &interPodAffinityState{aff: parsePodAffinity(pod)}
	state.write(InterPodAffinityName, s)
	for _, ni := range nodes {
		if len(ni.podsWithAffinity) == 0 && s.aff == nil {
			continue
		}
		nl := ni.Node.Labels
		// Existing pods' terms against the incoming pod.
		for _, cp := range ni.podsWithAffinity {
			for i := range cp.affinity.requiredAnti {
				t := &cp.affinity.requiredAnti[i]
				if v, ok := nl[t.topologyKey]; ok && t.matches(pod) {
					s.existingAnti = inc(s.existingAnti, topologyPair{t.topologyKey, v}, 1)
					if !contains(s.existingAntiKeys, t.topologyKey) {
						s.existingAntiKeys = append(s.existingAntiKeys, t.topologyKey)
					}
				}
			}
			for i := range cp.affinity.required {
				t := &cp.affinity.required[i]
				if v, ok := nl[t.topologyKey]; ok && t.matches(pod) {
					s.scores = add(s.scores, topologyPair{t.topologyKey, v}, hardPodAffinityWeight)
				}
			}
			for i := range cp.affinity.preferred {
				t := &cp.affinity.preferred[i]
				if v, ok := nl[t.topologyKey]; ok && t.matches(pod) {
					s.scores = add(s.scores, topologyPair{t.topologyKey, v}, t.weight)
				}
			}
			for i := range cp.affinity.preferredAnti {
				t := &cp.affinity.preferredAnti[i]
				if v, ok := nl[t.topologyKey]; ok && t.matches(pod) {
					s.scores = add(s.scores, topologyPair{t.topologyKey, v}, -t.weight)
				}
			}
		}
		if s.aff == nil {
			continue
		}
		// The incoming pod's terms against existing pods.
		for _, cp := range ni.pods {
			if len(s.aff.required) > 0 && matchesAll(s.aff.required, cp.pod) {
				for i := range s.aff.required {
					if v, ok := nl[s.aff.required[i].topologyKey]; ok {
						s.affinity = inc(s.affinity, topologyPair{s.aff.required[i].topologyKey, v}, 1)
					}
				}
			}
			for i := range s.aff.requiredAnti {
				t := &s.aff.requiredAnti[i]
				if v, ok := nl[t.topologyKey]; ok && t.matches(cp.pod) {
					s.anti = inc(s.anti, topologyPair{t.topologyKey, v}, 1)
				}
			}
			for i := range s.aff.preferred {
				t := &s.aff.preferred[i]
				if v, ok := nl[t.topologyKey]; ok && t.matches(cp.pod) {
					s.scores = add(s.scores, topologyPair{t.topologyKey, v}, t.weight)
				}
			}
			for i := range s.aff.preferredAnti {
				t := &s.aff.preferredAnti[i]
				if v, ok := nl[t.topologyKey]; ok && t.matches(cp.pod) {
					s.scores = add(s.scores, topologyPair{t.topologyKey, v}, -t.weight)
				}
			}
		}
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func matchesAll(terms []affinityTerm, p *corev1.Pod) bool {
	for i := range terms {
		if !terms[i].matches(p) {
			return false
		}
	}
	return true
}

func inc(m map[topologyPair]int, k topologyPair, n int) map[topologyPair]int {
	if m == nil {
		m = map[topologyPair]int{}
	}
	m[k] += n
	return m
}

func add(m map[topologyPair]int64, k topologyPair, n int64) map[topologyPair]int64 {
	if m == nil {
		m = map[topologyPair]int64{}
	}
	m[k] += n
	return m
}

// Filter checks in Kubernetes' order, so a node failing several rules
// reports the same reason: the pod's affinity, its anti-affinity, then
// existing pods' anti-affinity.
func (interPodAffinityPlugin) Filter(state *CycleState, pod *corev1.Pod, ni *NodeInfo) *Status {
	s := state.read(InterPodAffinityName).(*interPodAffinityState)
	nl := ni.Node.Labels
	if s.aff != nil {
		if !satisfiesAffinity(s, pod, nl) {
			return unresolvable(errPodAffinity)
		}
		for i := range s.aff.requiredAnti {
			t := &s.aff.requiredAnti[i]
			if v, ok := nl[t.topologyKey]; ok && s.anti[topologyPair{t.topologyKey, v}] > 0 {
				return unschedulable(errPodAntiAffinity)
			}
		}
	}
	for _, k := range s.existingAntiKeys {
		if v, ok := nl[k]; ok && s.existingAnti[topologyPair{k, v}] > 0 {
			return unschedulable(errExistingAntiAffinity)
		}
	}
	return nil
}

func satisfiesAffinity(s *interPodAffinityState, pod *corev1.Pod, nl map[string]string) bool {
	if len(s.aff.required) == 0 {
		return true
	}
	for i := range s.aff.required {
		if _, ok := nl[s.aff.required[i].topologyKey]; !ok {
			return false
		}
	}
	// The first pod of a group that wants to be with its own kind may go
	// anywhere its topology keys exist.
	if len(s.affinity) == 0 && matchesAll(s.aff.required, pod) {
		return true
	}
	for i := range s.aff.required {
		t := &s.aff.required[i]
		if s.affinity[topologyPair{t.topologyKey, nl[t.topologyKey]}] == 0 {
			return false
		}
	}
	return true
}

func (interPodAffinityPlugin) Score(state *CycleState, _ *corev1.Pod, ni *NodeInfo) int64 {
	s := state.read(InterPodAffinityName).(*interPodAffinityState)
	var total int64
	for pair, w := range s.scores {
		if v, ok := ni.Node.Labels[pair.key]; ok && v == pair.value {
			total += w
		}
	}
	return total
}

// NormalizeScore maps the sums onto 0..100 between the lowest and the
// highest, as Kubernetes does.
func (interPodAffinityPlugin) NormalizeScore(_ *CycleState, _ *corev1.Pod, scores []int64) {
	if len(scores) == 0 {
		return
	}
	lo, hi := scores[0], scores[0]
	for _, v := range scores {
		lo, hi = min(lo, v), max(hi, v)
	}
	for i, v := range scores {
		if hi == lo {
			scores[i] = 0
			continue
		}
		scores[i] = MaxNodeScore * (v - lo) / (hi - lo)
	}
}
