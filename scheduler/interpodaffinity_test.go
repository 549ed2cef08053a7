package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	c := cacheOf(
		nodeInfoOf(node("a", nil, inZone("z1")), pod("db", nil, labelled("db"))),
		nodeInfoOf(node("b", nil, inZone("z1"))),
		nodeInfoOf(node("c", nil, inZone("z2")), pod("guard", nil, labelled("guard"), avoids(term("cache", zone)))),
	)
	nis := c.list
	plugin := interPodAffinityPlugin{index: c.affinity}
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

// cacheOf is a cache holding the nodes of nis and their pods, bound.
func cacheOf(nis ...*NodeInfo) *schedCache {
	c := newSchedCache()
	for _, ni := range nis {
		c.setNode(ni.Node)
		for _, cp := range ni.pods {
			p := cp.pod.DeepCopy()
			p.UID = types.UID(ni.Node.Name + "/" + p.Name)
			p.Spec.NodeName = ni.Node.Name
			c.setPod(p)
		}
	}
	return c
}

// TestAffinityIndexMatchesAWalk drives a cache through random pod, node
// and label changes and checks, after each, that InterPodAffinity on the
// index decides every node as a walk over every pod decides it.
func TestAffinityIndexMatchesAWalk(t *testing.T) {
	const zone = "topology.kubernetes.io/zone"
	keys := []string{"kubernetes.io/hostname", zone}
	apps := []string{"a", "b", "c"}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(ss []string) string { return ss[rng.IntN(len(ss))] }
	randomTerm := func() corev1.PodAffinityTerm {
		t := corev1.PodAffinityTerm{TopologyKey: pick(keys), LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": pick(apps)}}}
		switch rng.IntN(4) {
		case 0:
			t.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{pick(apps), pick(apps)}}}}
		case 1:
			t.NamespaceSelector = &metav1.LabelSelector{}
		}
		return t
	}
	randomPod := func(name string) *corev1.Pod {
		p := pod(name, nil, func(p *corev1.Pod) {
			p.UID = types.UID(name)
			p.Labels = map[string]string{"app": pick(apps)}
			if rng.IntN(4) == 0 {
				p.Namespace = "other"
			}
		})
		if rng.IntN(2) == 0 {
			return p
		}
		a := &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}, PodAntiAffinity: &corev1.PodAntiAffinity{}}
		for range rng.IntN(3) {
			switch rng.IntN(4) {
			case 0:
				a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, randomTerm())
			case 1:
				a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, randomTerm())
			case 2:
				a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution, corev1.WeightedPodAffinityTerm{Weight: int32(1 + rng.IntN(100)), PodAffinityTerm: randomTerm()})
			default:
				a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, corev1.WeightedPodAffinityTerm{Weight: int32(1 + rng.IntN(100)), PodAffinityTerm: randomTerm()})
			}
		}
		p.Spec.Affinity = a
		return p
	}
	randomNode := func(name string) *corev1.Node {
		return node(name, nil, func(n *corev1.Node) {
			if rng.IntN(5) > 0 {
				n.Labels[zone] = pick([]string{"z1", "z2", "z3"})
			}
		})
	}
	nodeNames := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	c := newSchedCache()
	plugin := interPodAffinityPlugin{index: c.affinity}
	var bound []*corev1.Pod
	for step := range 600 {
		switch r := rng.IntN(12); {
		case r < 5:
			p := randomPod(fmt.Sprintf("p%d", step))
			p.Spec.NodeName = pick(nodeNames)
			c.setPod(p)
			bound = append(bound, p)
		case r < 7 && len(bound) > 0:
			// The informer's next version of a bound pod: mostly a
			// status write, sometimes new labels, or another node.
			i := rng.IntN(len(bound))
			p := bound[i].DeepCopy()
			p.Status.Phase = corev1.PodRunning
			switch rng.IntN(4) {
			case 0:
				p.Labels = map[string]string{"app": pick(apps)}
			case 1:
				p.Spec.NodeName = pick(nodeNames)
			}
			c.setPod(p)
			bound[i] = p
		case r < 9 && len(bound) > 0:
			i := rng.IntN(len(bound))
			c.removePod(bound[i].UID)
			bound = append(bound[:i], bound[i+1:]...)
		case r < 11:
			c.setNode(randomNode(pick(nodeNames)))
		default:
			c.removeNode(pick(nodeNames))
		}
		incoming := randomPod("incoming")
		state := newCycleState()
		plugin.PreFilter(state, incoming, c.list)
		want := walkAffinity(incoming, c.list)
		for i, ni := range c.list {
			got := nodeVerdict{score: plugin.Score(state, incoming, ni)}
			if st := plugin.Filter(state, incoming, ni); st != nil {
				got.reason = st.reasons[0]
			}
			if got != want[i] {
				t.Fatalf("step %d, node %s, pod %v: index says %+v, a walk %+v", step, ni.Node.Name, incoming.Spec.Affinity, got, want[i])
			}
		}
		// Every bound pod is counted once, on its node, as its latest
		// version.
		counted := map[types.UID]int{}
		for _, ni := range c.nodes {
			for _, cp := range ni.pods {
				counted[cp.pod.UID]++
				if cp.node != cp.pod.Spec.NodeName || c.pods[cp.pod.UID] != cp {
					t.Fatalf("step %d: %s counted on %s as a stale version", step, cp.pod.Name, cp.node)
				}
			}
		}
		if len(counted) != len(bound) || len(c.pods) != len(bound) {
			t.Fatalf("step %d: %d pods counted, %d cached, %d bound", step, len(counted), len(c.pods), len(bound))
		}
		for uid, n := range counted {
			if n != 1 {
				t.Fatalf("step %d: %s counted %d times", step, uid, n)
			}
		}
	}
}

type nodeVerdict struct {
	reason string
	score  int64
}

// walkAffinity decides every node by matching the pod's terms against
// every pod on the nodes, and every pod's terms against the pod.
func walkAffinity(pod *corev1.Pod, nodes []*NodeInfo) []nodeVerdict {
	type pair struct{ key, value string }
	aff := parsePodAffinity(pod)
	existingAnti, affinity, anti, scores := map[pair]int{}, map[pair]int{}, map[pair]int{}, map[pair]int64{}
	count := func(terms []affinityTerm, p *corev1.Pod, nl map[string]string, f func(pair, *affinityTerm)) {
		for i := range terms {
			if v, ok := nl[terms[i].topologyKey]; ok && terms[i].matches(p) {
				f(pair{terms[i].topologyKey, v}, &terms[i])
			}
		}
	}
	for _, ni := range nodes {
		nl := ni.Node.Labels
		for _, cp := range ni.pods {
			if a := cp.affinity; a != nil {
				count(a.requiredAnti, pod, nl, func(k pair, _ *affinityTerm) { existingAnti[k]++ })
				count(a.required, pod, nl, func(k pair, _ *affinityTerm) { scores[k] += hardPodAffinityWeight })
				count(a.preferred, pod, nl, func(k pair, t *affinityTerm) { scores[k] += t.weight })
				count(a.preferredAnti, pod, nl, func(k pair, t *affinityTerm) { scores[k] -= t.weight })
			}
			if aff == nil {
				continue
			}
			if len(aff.required) > 0 && matchesAll(aff.required, cp.pod) {
				for _, t := range aff.required {
					if v, ok := nl[t.topologyKey]; ok {
						affinity[pair{t.topologyKey, v}]++
					}
				}
			}
			count(aff.requiredAnti, cp.pod, nl, func(k pair, _ *affinityTerm) { anti[k]++ })
			count(aff.preferred, cp.pod, nl, func(k pair, t *affinityTerm) { scores[k] += t.weight })
			count(aff.preferredAnti, cp.pod, nl, func(k pair, t *affinityTerm) { scores[k] -= t.weight })
		}
	}
	out := make([]nodeVerdict, len(nodes))
	for i, ni := range nodes {
		nl := ni.Node.Labels
		for k, w := range scores {
			if nl[k.key] == k.value {
				if _, ok := nl[k.key]; ok {
					out[i].score += w
				}
			}
		}
		if aff != nil {
			ok := true
			for _, t := range aff.required {
				if _, has := nl[t.topologyKey]; !has {
					ok = false
				}
			}
			if ok && len(aff.required) > 0 && !(len(affinity) == 0 && matchesAll(aff.required, pod)) {
				for _, t := range aff.required {
					if affinity[pair{t.topologyKey, nl[t.topologyKey]}] == 0 {
						ok = false
					}
				}
			}
			if !ok {
				out[i].reason = errPodAffinity
				continue
			}
			for _, t := range aff.requiredAnti {
				if v, has := nl[t.topologyKey]; has && anti[pair{t.topologyKey, v}] > 0 {
					out[i].reason = errPodAntiAffinity
				}
			}
			if out[i].reason != "" {
				continue
			}
		}
		for k, n := range existingAnti {
			if v, has := nl[k.key]; has && v == k.value && n > 0 {
				out[i].reason = errExistingAntiAffinity
			}
		}
	}
	return out
}
