package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// nodeInfoOf is a NodeInfo with pods already counted on it.
func nodeInfoOf(n *corev1.Node, pods ...*corev1.Pod) *NodeInfo {
	ni := newNodeInfo()
	ni.setNode(n)
	for _, p := range pods {
		ni.addPod(&cachedPod{pod: p, node: n.Name, req: computePodResources(p), affinity: parsePodAffinity(p)})
	}
	return ni
}

func stateFor(p *corev1.Pod) *CycleState {
	s := newCycleState()
	s.podReq = computePodResources(p)
	nodeAffinityPlugin{}.PreFilter(s, p, nil)
	interPodAffinityPlugin{}.PreFilter(s, p, nil)
	return s
}

func reasons(st *Status) []string {
	if st == nil {
		return nil
	}
	return st.reasons
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func TestFilters(t *testing.T) {
	withLabels := func(l map[string]string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			for k, v := range l {
				n.Labels[k] = v
			}
		}
	}
	required := func(terms ...corev1.NodeSelectorTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
		}
	}
	expr := func(key string, op corev1.NodeSelectorOperator, vals ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: vals}}}
	}
	tainted := func(ts ...corev1.Taint) func(*corev1.Node) { return func(n *corev1.Node) { n.Spec.Taints = ts } }
	tolerating := func(ts ...corev1.Toleration) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.Tolerations = ts }
	}
	hostPortPod := func(name, ip string, port int32, proto corev1.Protocol) *corev1.Pod {
		return pod(name, nil, func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: port, HostIP: ip, Protocol: proto}}
		})
	}
	fit := nodeResourcesFitPlugin{strategy: LeastAllocated}

	for _, tc := range []struct {
		name   string
		plugin FilterPlugin
		pod    *corev1.Pod
		node   *corev1.Node
		on     []*corev1.Pod
		want   []string
	}{
		{name: "node name matches", plugin: nodeNamePlugin{}, pod: pod("p", nil, func(p *corev1.Pod) { p.Spec.NodeName = "n" }), node: node("n", nil)},
		{name: "node name differs", plugin: nodeNamePlugin{}, pod: pod("p", nil, func(p *corev1.Pod) { p.Spec.NodeName = "m" }), node: node("n", nil), want: []string{errNodeName}},
		{name: "schedulable node", plugin: nodeUnschedulablePlugin{}, pod: pod("p", nil), node: node("n", nil)},
		{name: "cordoned node", plugin: nodeUnschedulablePlugin{}, pod: pod("p", nil), node: node("n", nil, func(n *corev1.Node) { n.Spec.Unschedulable = true }), want: []string{errNodeUnschedulable}},
		{name: "cordoned node tolerated", plugin: nodeUnschedulablePlugin{},
			pod:  pod("p", nil, tolerating(corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})),
			node: node("n", nil, func(n *corev1.Node) { n.Spec.Unschedulable = true })},
		{name: "nodeSelector matches", plugin: nodeAffinityPlugin{}, pod: pod("p", nil, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"} }), node: node("n", nil, withLabels(map[string]string{"zone": "a"}))},
		{name: "nodeSelector differs", plugin: nodeAffinityPlugin{}, pod: pod("p", nil, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"} }), node: node("n", nil, withLabels(map[string]string{"zone": "b"})), want: []string{errNodeAffinity}},
		{name: "affinity In", plugin: nodeAffinityPlugin{}, pod: pod("p", nil, required(expr("zone", corev1.NodeSelectorOpIn, "a", "b"))), node: node("n", nil, withLabels(map[string]string{"zone": "b"}))},
		{name: "affinity NotIn", plugin: nodeAffinityPlugin{}, pod: pod("p", nil, required(expr("zone", corev1.NodeSelectorOpNotIn, "b"))), node: node("n", nil, withLabels(map[string]string{"zone": "b"})), want: []string{errNodeAffinity}},
		{name: "affinity Exists", plugin: nodeAffinityPlugin{}, pod: pod("p", nil, required(expr("gpu", corev1.NodeSelectorOpExists))), node: node("n", nil, withLabels(map[string]string{"gpu": ""}))},
		{name: "affinity DoesNotExist", plugin: nodeAffinityPlugin{}, pod: pod("p", nil, required(expr("gpu", corev1.NodeSelectorOpDoesNotExist))), node: node("n", nil, withLabels(map[string]string{"gpu": ""})), want: []string{errNodeAffinity}},
		{name: "affinity Gt", plugin: nodeAffinityPlugin{}, pod: pod("p", nil, required(expr("cores", corev1.NodeSelectorOpGt, "4"))), node: node("n", nil, withLabels(map[string]string{"cores": "8"}))},
		{name: "affinity Lt", plugin: nodeAffinityPlugin{}, pod: pod("p", nil, required(expr("cores", corev1.NodeSelectorOpLt, "4"))), node: node("n", nil, withLabels(map[string]string{"cores": "8"})), want: []string{errNodeAffinity}},
		{name: "affinity terms are ORed", plugin: nodeAffinityPlugin{}, pod: pod("p", nil, required(expr("zone", corev1.NodeSelectorOpIn, "x"), expr("zone", corev1.NodeSelectorOpIn, "a"))), node: node("n", nil, withLabels(map[string]string{"zone": "a"}))},
		{name: "affinity matchFields name", plugin: nodeAffinityPlugin{},
			pod:  pod("p", nil, required(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n"}}}})),
			node: node("n", nil)},
		{name: "affinity matchFields other name", plugin: nodeAffinityPlugin{},
			pod:  pod("p", nil, required(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"m"}}}})),
			node: node("n", nil), want: []string{errNodeAffinity}},
		{name: "untolerated NoSchedule", plugin: taintTolerationPlugin{}, pod: pod("p", nil),
			node: node("n", nil, tainted(corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})),
			want: []string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{name: "untolerated NoExecute", plugin: taintTolerationPlugin{}, pod: pod("p", nil),
			node: node("n", nil, tainted(corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})),
			want: []string{"node(s) had untolerated taint {node.kubernetes.io/unreachable: }"}},
		{name: "PreferNoSchedule does not filter", plugin: taintTolerationPlugin{}, pod: pod("p", nil),
			node: node("n", nil, tainted(corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}))},
		{name: "tolerated taint", plugin: taintTolerationPlugin{},
			pod:  pod("p", nil, tolerating(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule})),
			node: node("n", nil, tainted(corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}))},
		{name: "toleration for another value", plugin: taintTolerationPlugin{},
			pod:  pod("p", nil, tolerating(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cpu"})),
			node: node("n", nil, tainted(corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})),
			want: []string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{name: "fits", plugin: fit, pod: pod("p", rl("cpu", "1", "memory", "1Gi", string(gpu), "2")), node: node("n", rl(string(gpu), "2"))},
		{name: "insufficient cpu and memory", plugin: fit, pod: pod("p", rl("cpu", "5", "memory", "9Gi")), node: node("n", nil),
			on: []*corev1.Pod{pod("q", rl("cpu", "4", "memory", "8Gi"))}, want: []string{"Insufficient cpu", "Insufficient memory"}},
		{name: "extended resource never overcommitted", plugin: fit, pod: pod("p", rl(string(gpu), "1")), node: node("n", rl(string(gpu), "2")),
			on: []*corev1.Pod{pod("q", rl(string(gpu), "2"))}, want: []string{"Insufficient vendor.example/gpu"}},
		{name: "an unhealthy device: allocatable, not capacity, counts", plugin: fit, pod: pod("p", rl(string(gpu), "4")),
			node: node("n", rl(string(gpu), "3"), func(n *corev1.Node) {
				n.Status.Capacity = n.Status.Allocatable.DeepCopy()
				n.Status.Capacity[gpu] = resource.MustParse("4")
			}), want: []string{"Insufficient vendor.example/gpu"}},
		{name: "extended resource the node lacks", plugin: fit, pod: pod("p", rl(string(gpu), "1")), node: node("n", nil), want: []string{"Insufficient vendor.example/gpu"}},
		{name: "ephemeral storage", plugin: fit, pod: pod("p", rl("ephemeral-storage", "2Gi")), node: node("n", rl("ephemeral-storage", "1Gi")), want: []string{"Insufficient ephemeral-storage"}},
		{name: "too many pods", plugin: fit, pod: pod("p", nil), node: node("n", rl("pods", "1")), on: []*corev1.Pod{pod("q", nil)}, want: []string{errTooManyPods}},
		{name: "init containers count by the max rule", plugin: fit,
			// max(init 3, app 1+1) = 3 CPUs: fits in 3, not in 2.
			pod: pod("p", rl("cpu", "1"), func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "d", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1")}})
				p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "3")}}}
			}),
			node: node("n", rl("cpu", "2")), want: []string{"Insufficient cpu"}},
		{name: "init containers within allocatable", plugin: fit,
			pod: pod("p", rl("cpu", "1"), func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "3")}}}
			}),
			node: node("n", rl("cpu", "3"))},
		{name: "overhead counts", plugin: fit, pod: pod("p", rl("cpu", "1"), func(p *corev1.Pod) { p.Spec.Overhead = rl("cpu", "1500m") }),
			node: node("n", rl("cpu", "2")), want: []string{"Insufficient cpu"}},
		{name: "free host port", plugin: nodePortsPlugin{}, pod: hostPortPod("p", "", 8080, ""), node: node("n", nil), on: []*corev1.Pod{hostPortPod("q", "", 8081, "")}},
		{name: "host port taken", plugin: nodePortsPlugin{}, pod: hostPortPod("p", "", 8080, ""), node: node("n", nil), on: []*corev1.Pod{hostPortPod("q", "", 8080, "")}, want: []string{errNodePorts}},
		{name: "host port on another protocol", plugin: nodePortsPlugin{}, pod: hostPortPod("p", "", 53, corev1.ProtocolUDP), node: node("n", nil), on: []*corev1.Pod{hostPortPod("q", "", 53, corev1.ProtocolTCP)}},
		{name: "host port on other addresses", plugin: nodePortsPlugin{}, pod: hostPortPod("p", "10.0.0.1", 80, ""), node: node("n", nil), on: []*corev1.Pod{hostPortPod("q", "10.0.0.2", 80, "")}},
		{name: "host port against wildcard", plugin: nodePortsPlugin{}, pod: hostPortPod("p", "10.0.0.1", 80, ""), node: node("n", nil), on: []*corev1.Pod{hostPortPod("q", "0.0.0.0", 80, "")}, want: []string{errNodePorts}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reasons(tc.plugin.Filter(stateFor(tc.pod), tc.pod, nodeInfoOf(tc.node, tc.on...)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScores(t *testing.T) {
	preferred := func(w int32, key, val string) corev1.PreferredSchedulingTerm {
		return corev1.PreferredSchedulingTerm{Weight: w, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{val}}}}}
	}
	prefers := func(terms ...corev1.PreferredSchedulingTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: terms}}
		}
	}
	labelled := func(k, v string) func(*corev1.Node) { return func(n *corev1.Node) { n.Labels[k] = v } }
	soft := func(keys ...string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			for _, k := range keys {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectPreferNoSchedule})
			}
		}
	}
	cpuMem := []ResourceSpec{{Name: corev1.ResourceCPU, Weight: 1}, {Name: corev1.ResourceMemory, Weight: 1}}
	type nodeWith struct {
		node *corev1.Node
		on   []*corev1.Pod
	}
	for _, tc := range []struct {
		name   string
		plugin ScorePlugin
		pod    *corev1.Pod
		nodes  []nodeWith
		want   []int64
	}{
		{name: "least allocated", plugin: nodeResourcesFitPlugin{strategy: LeastAllocated, resources: cpuMem},
			pod: pod("p", rl("cpu", "2", "memory", "4Gi")),
			// 8 CPUs / 16 Gi: empty → (6/8, 12/16) = 75; half used → (2/8, 4/16) = 25.
			nodes: []nodeWith{{node: node("a", nil)}, {node: node("b", nil), on: []*corev1.Pod{pod("q", rl("cpu", "4", "memory", "8Gi"))}}},
			want:  []int64{75, 25}},
		{name: "most allocated", plugin: nodeResourcesFitPlugin{strategy: MostAllocated, resources: cpuMem},
			pod:   pod("p", rl("cpu", "2", "memory", "4Gi")),
			nodes: []nodeWith{{node: node("a", nil)}, {node: node("b", nil), on: []*corev1.Pod{pod("q", rl("cpu", "4", "memory", "8Gi"))}}},
			want:  []int64{25, 75}},
		{name: "least allocated counts request-less pods as 100m/200Mi", plugin: nodeResourcesFitPlugin{strategy: LeastAllocated, resources: []ResourceSpec{{Name: corev1.ResourceCPU, Weight: 1}}},
			pod:   pod("p", nil),
			nodes: []nodeWith{{node: node("a", rl("cpu", "1"))}},
			want:  []int64{90}},
		{name: "extended resource weights", plugin: nodeResourcesFitPlugin{strategy: MostAllocated, resources: []ResourceSpec{{Name: gpu, Weight: 1}}},
			pod:   pod("p", rl(string(gpu), "1")),
			nodes: []nodeWith{{node: node("a", rl(string(gpu), "4"))}, {node: node("b", rl(string(gpu), "2"))}},
			want:  []int64{25, 50}},
		{name: "balanced allocation", plugin: balancedAllocationPlugin{resources: cpuMem},
			pod: pod("p", rl("cpu", "4", "memory", "4Gi")),
			// a: cpu 4/8, mem 4/16 → std 0.125 → 87; b: 4/8, 8/16 → 100.
			nodes: []nodeWith{{node: node("a", nil)}, {node: node("b", nil), on: []*corev1.Pod{pod("q", rl("memory", "4Gi"))}}},
			want:  []int64{87, 100}},
		{name: "preferred node affinity", plugin: nodeAffinityPlugin{},
			pod:   pod("p", nil, prefers(preferred(10, "zone", "a"), preferred(30, "disk", "ssd"))),
			nodes: []nodeWith{{node: node("a", nil, labelled("zone", "a"))}, {node: node("b", nil, labelled("disk", "ssd"))}, {node: node("c", nil)}},
			want:  []int64{33, 100, 0}},
		{name: "PreferNoSchedule taints", plugin: taintTolerationPlugin{},
			pod: pod("p", nil, func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: "ok", Operator: corev1.TolerationOpExists}}
			}),
			nodes: []nodeWith{{node: node("a", nil)}, {node: node("b", nil, soft("x"))}, {node: node("c", nil, soft("x", "y"))}, {node: node("d", nil, soft("ok"))}},
			want:  []int64{100, 50, 0, 100}},
		{name: "image locality", plugin: imageLocalityPlugin{},
			pod: pod("p", nil, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.local/big:1" }),
			nodes: []nodeWith{{node: node("a", nil, func(n *corev1.Node) {
				n.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.local/big:1"}, SizeBytes: 500 << 20}}
			})}, {node: node("b", nil)}},
			want: []int64{48, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := stateFor(tc.pod)
			got := make([]int64, len(tc.nodes))
			for i, n := range tc.nodes {
				got[i] = tc.plugin.Score(state, tc.pod, nodeInfoOf(n.node, n.on...))
			}
			if norm, ok := tc.plugin.(ScoreNormalizer); ok {
				norm.NormalizeScore(state, tc.pod, got)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFitErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  fitError
		want string
	}{
		{fitError{}, "no nodes available to schedule pods"},
		{fitError{numNodes: 3, reasons: map[string]int{"node(s) had untolerated taint {node.kubernetes.io/unreachable: }": 2, "Insufficient vendor.example/gpu": 1}},
			"0/3 nodes are available: 1 Insufficient vendor.example/gpu, 2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."},
		{fitError{numNodes: 2, reasons: map[string]int{"Insufficient cpu": 2, "Insufficient memory": 1}},
			"0/2 nodes are available: 1 Insufficient memory, 2 Insufficient cpu."},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
