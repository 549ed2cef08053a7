package daemonset

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"bonsai.dev/bonsai/controllers/history"
)

// Labels and annotations of daemon pods, upstream's.
const (
	// templateGenerationLabel on a pod is the DaemonSet's template
	// generation it was made from, which the API server keeps in
	// templateGenerationAnnotation of the DaemonSet.
	templateGenerationLabel      = "pod-template-generation"
	templateGenerationAnnotation = appsv1.DeprecatedTemplateGeneration
)

// nologger: the helpers below log only at levels bonsai does not show.
var nologger = klog.Background()

// daemonTolerations are what upstream adds to every daemon pod: node
// problems must neither evict nor keep off a pod that exists to run on
// every node (and a hostNetwork pod does not need the pod network).
func daemonTolerations(hostNetwork bool) []corev1.Toleration {
	t := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if hostNetwork {
		t = append(t, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return t
}

// addDaemonTolerations adds the daemon tolerations to spec, replacing a
// toleration of the same key, operator, value and effect, as upstream's
// AddOrUpdateTolerationInPodSpec (so a user's tolerationSeconds on
// not-ready is dropped: a daemon pod stays).
func addDaemonTolerations(spec *corev1.PodSpec) {
	for _, want := range daemonTolerations(spec.HostNetwork) {
		replaced := false
		for i := range spec.Tolerations {
			if spec.Tolerations[i].MatchToleration(&want) {
				spec.Tolerations[i] = want
				replaced = true
			}
		}
		if !replaced {
			spec.Tolerations = append(spec.Tolerations, want)
		}
	}
}

// podTemplate is the template of ds's pods at hash: the daemon
// tolerations and the generation and hash labels added.
func podTemplate(ds *appsv1.DaemonSet, hash string) *corev1.PodTemplateSpec {
	t := ds.Spec.Template.DeepCopy()
	addDaemonTolerations(&t.Spec)
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	if gen := templateGeneration(ds); gen != nil {
		t.Labels[templateGenerationLabel] = strconv.FormatInt(*gen, 10)
	}
	t.Labels[history.HashLabel] = hash
	return t
}

// templateGeneration is the generation the API server counts in the
// DaemonSet's annotation; nil when missing or unreadable (the hash label
// then decides alone whether a pod is up to date).
func templateGeneration(ds *appsv1.DaemonSet) *int64 {
	v, ok := ds.Annotations[templateGenerationAnnotation]
	if !ok {
		return nil
	}
	g, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil
	}
	return &g
}

// podUpdated says whether pod was made from the DaemonSet's current
// template: its hash label or, for pods of older controllers, its
// template generation label.
func podUpdated(pod *corev1.Pod, hash string, gen *int64) bool {
	return (hash != "" && pod.Labels[history.HashLabel] == hash) ||
		(gen != nil && pod.Labels[templateGenerationLabel] == strconv.FormatInt(*gen, 10))
}

// nodeAffinityFor pins a pod to node the way upstream does: the required
// node affinity becomes the single term metadata.name In [node], so the
// scheduler binds it there (the DaemonSet's own terms were checked
// before).
func nodeAffinityFor(a *corev1.Affinity, node string) *corev1.Affinity {
	terms := []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
	}}}}
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	if a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
	return a
}

// targetNode is the node a daemon pod is for: where it is bound or, before
// binding, the node its required affinity names.
func targetNode(pod *corev1.Pod) (string, error) {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName, nil
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
					return f.Values[0], nil
				}
			}
		}
	}
	return "", fmt.Errorf("pod %s/%s has no node name nor a node name affinity", pod.Namespace, pod.Name)
}

// shouldRun says whether ds wants a pod on node (its node name, selector,
// required affinity and the taints it does not tolerate, with the daemon
// tolerations) and whether a pod already there may stay (only NoExecute
// taints evict).
func shouldRun(node *corev1.Node, ds *appsv1.DaemonSet) (run, keep bool) {
	spec := ds.Spec.Template.Spec.DeepCopy()
	if spec.NodeName != "" && spec.NodeName != node.Name {
		return false, false
	}
	addDaemonTolerations(spec)
	// An unparsable selector matches nothing, as upstream ignores the
	// error and gets false.
	if ok, _ := nodeaffinity.NewRequiredNodeAffinity(spec.NodeSelector, spec.Affinity).Match(node); !ok {
		return false, false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(nologger, node.Spec.Taints, spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
	}, false)
	if !untolerated {
		return true, true
	}
	_, evicts := corev1helpers.FindMatchingUntoleratedTaint(nologger, node.Spec.Taints, spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return false, !evicts
}
