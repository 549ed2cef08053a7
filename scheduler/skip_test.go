package scheduler

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSkippedPluginsChangeNothing checks kube-scheduler's Skip as bonsai
// does it: for pods of every kind, on nodes that differ in every way a
// plugin reads, a filter that says Skip passes every node, a scorer that
// says Skip gives every node the same normalised score, and the plain
// pod, the common case, skips all of them but the resource, taint and
// unschedulable checks (a pod without resource claims skips
// DynamicResources).
func TestSkippedPluginsChangeNothing(t *testing.T) {
	const host, zone = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
	term := func(app, key string) corev1.PodAffinityTerm {
		return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, TopologyKey: key}
	}
	labelled := func(app string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Labels = map[string]string{"app": app} }
	}
	avoids := func(t corev1.PodAffinityTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{t}}}
		}
	}
	hostPort := func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolTCP}}
	}
	inZone := func(z string) func(*corev1.Node) { return func(n *corev1.Node) { n.Labels[zone] = z } }
	tainted := func(e corev1.TaintEffect) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "x", Effect: e}} }
	}
	c := cacheOf(
		nodeInfoOf(node("a", nil, inZone("z1")), pod("web", nil, labelled("web"), hostPort), pod("t", nil)),
		nodeInfoOf(node("b", nil, inZone("z1"), tainted(corev1.TaintEffectPreferNoSchedule))),
		nodeInfoOf(node("c", nil, inZone("z2")), pod("guard", nil, labelled("guard"), avoids(term("cache", zone)))),
		nodeInfoOf(node("d", nil, tainted(corev1.TaintEffectNoSchedule))),
		nodeInfoOf(node("e", nil, func(n *corev1.Node) { n.Spec.Unschedulable = true })),
	)
	s := &Scheduler{cfg: Config{Options: DefaultOptions()}, cache: c}
	s.buildPlugins()
	spread := func(action corev1.UnsatisfiableConstraintAction) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zone, WhenUnsatisfiable: action,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "test"}}}}
		}
	}
	pods := map[string]*corev1.Pod{
		"plain":           pod("p", nil),
		"node selector":   pod("p", nil, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zone: "z1"} }),
		"host port":       pod("p", nil, hostPort),
		"hard spread":     pod("p", nil, spread(corev1.DoNotSchedule)),
		"soft spread":     pod("p", nil, spread(corev1.ScheduleAnyway)),
		"anti-affinity":   pod("p", nil, avoids(term("web", host))),
		"a guarded cache": pod("p", nil, labelled("cache")),
		"preferred node affinity": pod("p", nil, func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 5, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zone, Operator: corev1.NodeSelectorOpIn, Values: []string{"z2"}}}}}}}}
		}),
	}
	skippedFor := map[string][]string{}
	for name, p := range pods {
		state := newCycleState()
		state.podReq = computePodResources(p)
		for _, pf := range s.preFilters {
			if st := pf.PreFilter(state, p, c.list); st != nil {
				t.Fatalf("%s: PreFilter %s: %v", name, pf.Name(), st.reasons)
			}
		}
		for _, f := range s.filters {
			sk, ok := f.(FilterSkipper)
			if !ok || !sk.SkipFilter(state, p) {
				continue
			}
			skippedFor[name] = append(skippedFor[name], f.Name())
			for _, ni := range c.list {
				if st := f.Filter(state, p, ni); st != nil {
					t.Errorf("%s: %s said Skip but fails node %s: %v", name, f.Name(), ni.Node.Name, st.reasons)
				}
			}
		}
		for _, sp := range s.scorers {
			sk, ok := sp.ScorePlugin.(ScoreSkipper)
			if !ok || !sk.SkipScore(state, p) {
				continue
			}
			scores := make([]int64, len(c.list))
			for i, ni := range c.list {
				scores[i] = sp.Score(state, p, ni)
			}
			if norm, ok := sp.ScorePlugin.(ScoreNormalizer); ok {
				norm.NormalizeScore(state, p, scores)
			}
			for i := range scores {
				if scores[i] != scores[0] {
					t.Errorf("%s: %s said Skip but scores %v", name, sp.Name(), scores)
					break
				}
			}
		}
	}
	for name, want := range map[string]string{
		"plain":           fmt.Sprint([]string{NodeNameName, NodeAffinityName, NodePortsName, VolumeBindingName, PodTopologySpreadName, InterPodAffinityName, DynamicResourcesName}),
		"node selector":   fmt.Sprint([]string{NodeNameName, NodePortsName, VolumeBindingName, PodTopologySpreadName, InterPodAffinityName, DynamicResourcesName}),
		"host port":       fmt.Sprint([]string{NodeNameName, NodeAffinityName, VolumeBindingName, PodTopologySpreadName, InterPodAffinityName, DynamicResourcesName}),
		"hard spread":     fmt.Sprint([]string{NodeNameName, NodeAffinityName, NodePortsName, VolumeBindingName, InterPodAffinityName, DynamicResourcesName}),
		"anti-affinity":   fmt.Sprint([]string{NodeNameName, NodeAffinityName, NodePortsName, VolumeBindingName, PodTopologySpreadName, DynamicResourcesName}),
		"a guarded cache": fmt.Sprint([]string{NodeNameName, NodeAffinityName, NodePortsName, VolumeBindingName, PodTopologySpreadName, DynamicResourcesName}),
	} {
		if got := fmt.Sprint(skippedFor[name]); got != want {
			t.Errorf("%s: skipped filters %s, want %s", name, got, want)
		}
	}
}
