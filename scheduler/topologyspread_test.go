package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTopologySpread(t *testing.T) {
	const zone = "topology.kubernetes.io/zone"
	inZone := func(z string) func(*corev1.Node) { return func(n *corev1.Node) { n.Labels[zone] = z } }
	web := func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web"} }
	spread := func(mod ...func(*corev1.TopologySpreadConstraint)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			c := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: zone, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
			for _, m := range mod {
				m(&c)
			}
			p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
		}
	}
	honor, ignore := corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore
	three := int32(3)
	tainted := func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectNoSchedule}}
	}
	// Two web pods on a (zone z1); b also z1; c is z2; d has no zone.
	twoOnA := func() []*NodeInfo {
		return []*NodeInfo{
			nodeInfoOf(node("a", nil, inZone("z1")), pod("w1", nil, web), pod("w2", nil, web)),
			nodeInfoOf(node("b", nil, inZone("z1"))),
			nodeInfoOf(node("c", nil, inZone("z2"), tainted)),
			nodeInfoOf(node("d", nil)),
		}
	}
	oneEach := func() []*NodeInfo {
		return []*NodeInfo{
			nodeInfoOf(node("a", nil, inZone("z1")), pod("w1", nil, web)),
			nodeInfoOf(node("b", nil, inZone("z1"))),
			nodeInfoOf(node("c", nil, inZone("z2")), pod("w2", nil, web)),
			nodeInfoOf(node("d", nil)),
		}
	}
	skew, label := errTopologySpread, errTopologySpreadLabel
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		nodes  []*NodeInfo
		want   []string
		scores []int64
	}{
		{name: "max skew", pod: pod("p", nil, web, spread()), nodes: twoOnA(), want: []string{skew, skew, "", label}},
		{name: "balanced zones", pod: pod("p", nil, web, spread()), nodes: oneEach(), want: []string{"", "", "", label}},
		{name: "minDomains above the domains there are", pod: pod("p", nil, web, spread(func(c *corev1.TopologySpreadConstraint) { c.MinDomains = &three })), nodes: oneEach(), want: []string{skew, skew, skew, label}},
		{name: "nodeAffinityPolicy Honor counts only matching nodes", pod: pod("p", nil, web, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zone: "z1"} }, spread(func(c *corev1.TopologySpreadConstraint) { c.NodeAffinityPolicy = &honor })), nodes: twoOnA(), want: []string{"", "", "", label}},
		{name: "nodeAffinityPolicy Ignore counts every node", pod: pod("p", nil, web, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zone: "z1"} }, spread(func(c *corev1.TopologySpreadConstraint) { c.NodeAffinityPolicy = &ignore })), nodes: twoOnA(), want: []string{skew, skew, "", label}},
		{name: "nodeTaintsPolicy Honor leaves out tainted nodes", pod: pod("p", nil, web, spread(func(c *corev1.TopologySpreadConstraint) { c.NodeTaintsPolicy = &honor })), nodes: twoOnA(), want: []string{"", "", "", label}},
		{name: "ScheduleAnyway scores emptier domains higher", pod: pod("p", nil, web, spread(func(c *corev1.TopologySpreadConstraint) { c.WhenUnsatisfiable = corev1.ScheduleAnyway })), nodes: twoOnA(), want: []string{"", "", "", ""}, scores: []int64{0, 0, 100, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := topologySpreadPlugin{}
			state := newCycleState()
			p.PreFilter(state, tc.pod, tc.nodes)
			var got []string
			for _, ni := range tc.nodes {
				r := ""
				if st := p.Filter(state, tc.pod, ni); st != nil {
					r = st.reasons[0]
				}
				got = append(got, r)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("filter (-want +got):\n%s", diff)
			}
			if tc.scores == nil {
				return
			}
			scores := make([]int64, len(tc.nodes))
			for i, ni := range tc.nodes {
				scores[i] = p.Score(state, tc.pod, ni)
			}
			p.NormalizeScore(state, tc.pod, scores)
			if diff := cmp.Diff(tc.scores, scores); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}
