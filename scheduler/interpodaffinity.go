package scheduler

import (
	"sort"
	"strconv"
	"strings"

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
	// key is the same for terms that match the same pods, counted under
	// the same topology key with the same weight.
	key string
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
		at.key = termKey(&at)
		out = append(out, at)
	}
	return out
}

func termKey(t *affinityTerm) string {
	var b strings.Builder
	b.WriteString(t.topologyKey)
	// Nothing and Everything both print as "".
	if t.selector.Empty() {
		b.WriteString("|all|")
	} else {
		b.WriteString("|sel|")
	}
	b.WriteString(t.selector.String())
	switch {
	case t.allNamespaces:
		b.WriteString("|*")
	case t.namespaces != nil:
		ns := make([]string, 0, len(t.namespaces))
		for n := range t.namespaces {
			ns = append(ns, n)
		}
		sort.Strings(ns)
		b.WriteString("|" + strings.Join(ns, ","))
	default:
		b.WriteString("|" + t.namespace)
	}
	b.WriteString("|" + strconv.FormatInt(t.weight, 10))
	return b.String()
}

type labelPair struct{ key, value string }

// interPodAffinityState is what PreFilter took from the affinity index for
// one pod, so each node is then a few map lookups.
type interPodAffinityState struct {
	aff *podAffinity
	// existingAnti: existing pods' required anti-affinity terms that match
	// the incoming pod, counted per topology.
	existingAnti []*topoCounts
	// affinity: per required term of the incoming pod, the existing pods
	// matching all of them; anti: per required anti term, those matching it.
	affinity, anti []*topoCounts
	// scores: preferred terms both ways and existing pods' required
	// affinity, each with its weight.
	scores []weightedCounts
}

type weightedCounts struct {
	*topoCounts
	weight int64
}

// interPodAffinityPlugin reads the cache's affinity index, under the
// cache lock as every plugin reads NodeInfos.
type interPodAffinityPlugin struct{ index *affinityIndex }

func (interPodAffinityPlugin) Name() string { return InterPodAffinityName }

func (p interPodAffinityPlugin) PreFilter(state *CycleState, pod *corev1.Pod, nodes []*NodeInfo) *Status {
	s := &interPodAffinityState{aff: parsePodAffinity(pod)}
	state.interPodAffinity = s
	x := p.index
	if x == nil {
		return nil
	}
	// Existing pods' terms against the incoming pod.
	for _, g := range x.groups {
		if len(g.counts) == 0 || !g.term.matches(pod) {
			continue
		}
		switch g.kind {
		case kindRequiredAnti:
			s.existingAnti = append(s.existingAnti, &g.topoCounts)
		case kindRequired:
			s.scores = append(s.scores, weightedCounts{&g.topoCounts, hardPodAffinityWeight})
		case kindPreferred:
			s.scores = append(s.scores, weightedCounts{&g.topoCounts, g.term.weight})
		case kindPreferredAnti:
			s.scores = append(s.scores, weightedCounts{&g.topoCounts, -g.term.weight})
		}
	}
	a := s.aff
	if a == nil {
		return nil
	}
	// The incoming pod's terms against existing pods.
	if len(a.required) > 0 {
		m := x.matching(a.required, nodes)
		for i := range m.per {
			s.affinity = append(s.affinity, &m.per[i])
		}
	}
	for i := range a.requiredAnti {
		s.anti = append(s.anti, &x.matching(a.requiredAnti[i:i+1], nodes).per[0])
	}
	for i := range a.preferred {
		s.scores = append(s.scores, weightedCounts{&x.matching(a.preferred[i:i+1], nodes).per[0], a.preferred[i].weight})
	}
	for i := range a.preferredAnti {
		s.scores = append(s.scores, weightedCounts{&x.matching(a.preferredAnti[i:i+1], nodes).per[0], -a.preferredAnti[i].weight})
	}
	return nil
}

func matchesAll(terms []affinityTerm, p *corev1.Pod) bool {
	for i := range terms {
		if !terms[i].matches(p) {
			return false
		}
	}
	return true
}

// SkipFilter: a pod with no required terms of its own, which no existing
// pod's required anti-affinity matches, fits every node.
func (interPodAffinityPlugin) SkipFilter(state *CycleState, _ *corev1.Pod) bool {
	s := state.interPodAffinity
	return len(s.existingAnti) == 0 && (s.aff == nil || len(s.aff.required)+len(s.aff.requiredAnti) == 0)
}

// SkipScore: with no preferred terms either way every node scores 0.
func (interPodAffinityPlugin) SkipScore(state *CycleState, _ *corev1.Pod) bool {
	return len(state.interPodAffinity.scores) == 0
}

// Filter checks in Kubernetes' order, so a node failing several rules
// reports the same reason: the pod's affinity, its anti-affinity, then
// existing pods' anti-affinity.
func (interPodAffinityPlugin) Filter(state *CycleState, pod *corev1.Pod, ni *NodeInfo) *Status {
	s := state.interPodAffinity
	nl := ni.Node.Labels
	if s.aff != nil {
		if !satisfiesAffinity(s, pod, nl) {
			return unresolvable(errPodAffinity)
		}
		for _, tc := range s.anti {
			if tc.on(nl) > 0 {
				return unschedulable(errPodAntiAffinity)
			}
		}
	}
	for _, tc := range s.existingAnti {
		if tc.on(nl) > 0 {
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
	matched := false
	for _, tc := range s.affinity {
		matched = matched || len(tc.counts) > 0
	}
	if !matched && matchesAll(s.aff.required, pod) {
		return true
	}
	for _, tc := range s.affinity {
		if tc.on(nl) == 0 {
			return false
		}
	}
	return true
}

func (interPodAffinityPlugin) Score(state *CycleState, _ *corev1.Pod, ni *NodeInfo) int64 {
	s := state.interPodAffinity
	var total int64
	for _, w := range s.scores {
		total += w.weight * w.on(ni.Node.Labels)
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
