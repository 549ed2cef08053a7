package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestInterPodAffinity(t *testing.T) {
	const host, zone = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
	inZone := func(z string) func(*corev1.Node) { return func(n *corev1.Node) { n.Labels[zone] = z } }
	labelled := func(app string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Labels = map[string]string{"app": app} }
	}
	term := func(app, key string) corev1.PodAffinityTerm {
		return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, TopologyKey: key}
	}
	requires := func(ts ...corev1.PodAffinityTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: ts}}
		}
	}
	avoids := func(ts ...corev1.PodAffinityTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: ts}}
		}
	}
	prefers := func(w int32, t corev1.PodAffinityTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: w, PodAffinityTerm: t}}}}
		}
	}
	prefersNot := func(w int32, t corev1.PodAffinityTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: w, PodAffinityTerm: t}}}}
		}
	}
	// a and b in zone z1, c in z2; a db on a, and on c a pod that keeps
	// caches out of its zone.
	nis := []*NodeInfo{
		nodeInfoOf(node("a", nil, inZone("z1")), pod("db", nil, labelled("db"))),
		nodeInfoOf(node("b", nil, inZone("z1"))),
		nodeInfoOf(node("c", nil, inZone("z2")), pod("guard", nil, labelled("guard"), avoids(term("cache", zone)))),
	}
	plugin := interPodAffinityPlugin{}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		want   []string // per node: "" fits
		scores []int64
	}{
		{name: "with the db on its host", pod: pod("p", nil, requires(term("db", host))), want: []string{"", errPodAffinity, errPodAffinity}},
		{name: "with the db in its zone", pod: pod("p", nil, requires(term("db", zone))), want: []string{"", "", errPodAffinity}},
		{name: "away from the db's host", pod: pod("p", nil, avoids(term("db", host))), want: []string{errPodAntiAffinity, "", ""}},
		{name: "away from the db's zone", pod: pod("p", nil, avoids(term("db", zone))), want: []string{errPodAntiAffinity, errPodAntiAffinity, ""}},
		{name: "an existing pod's anti-affinity", pod: pod("p", nil, labelled("cache")), want: []string{"", "", errExistingAntiAffinity}},
		{name: "first of its group", pod: pod("p", nil, labelled("new"), requires(term("new", host))), want: []string{"", "", ""}},
		{name: "nothing to be with", pod: pod("p", nil, requires(term("none", host))), want: []string{errPodAffinity, errPodAffinity, errPodAffinity}},
		{name: "other namespace", pod: pod("p", nil, avoids(corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, TopologyKey: host, Namespaces: []string{"other"}})), want: []string{"", "", ""}},
		{name: "every namespace", pod: pod("p", nil, func(p *corev1.Pod) { p.Namespace = "other" }, avoids(corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, TopologyKey: host, NamespaceSelector: &metav1.LabelSelector{}})), want: []string{errPodAntiAffinity, "", ""}},
		{name: "prefers the db's zone", pod: pod("p", nil, prefers(10, term("db", zone))), want: []string{"", "", ""}, scores: []int64{100, 100, 0}},
		{name: "prefers not the db's host", pod: pod("p", nil, prefersNot(10, term("db", host))), want: []string{"", "", ""}, scores: []int64{0, 100, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := newCycleState()
			state.podReq = computePodResources(tc.pod)
			plugin.PreFilter(state, tc.pod, nis)
			var got []string
			for _, ni := range nis {
				r := ""
				if st := plugin.Filter(state, tc.pod, ni); st != nil {
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
			scores := make([]int64, len(nis))
			for i, ni := range nis {
				scores[i] = plugin.Score(state, tc.pod, ni)
			}
			plugin.NormalizeScore(state, tc.pod, scores)
			if diff := cmp.Diff(tc.scores, scores); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}
