package quota

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// computeNames are the resources a quota can only charge if every
// container states them: Kubernetes' long-standing rule, from before
// QoS classes, that quota on cpu or memory requires explicit values.
var computeNames = []corev1.ResourceName{
	corev1.ResourceCPU, corev1.ResourceMemory,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory,
}

// Constraints checks that each container of the pod states the compute
// resources the quota's hard limits name; the error lists, by
// resource, the containers that do not.
func Constraints(hard corev1.ResourceList, pod *corev1.Pod) error {
	var required []corev1.ResourceName
	for _, n := range computeNames {
		if _, ok := hard[n]; ok {
			required = append(required, n)
		}
	}
	if len(required) == 0 {
		return nil
	}
	missing := map[corev1.ResourceName][]string{}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, n := range required {
				if !states(&c, n) {
					missing[n] = append(missing[n], c.Name)
				}
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	names := make([]string, 0, len(missing))
	for n := range missing {
		names = append(names, string(n))
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		cs := missing[corev1.ResourceName(n)]
		sort.Strings(cs)
		parts[i] = fmt.Sprintf("%s for: %s", n, strings.Join(cs, ","))
	}
	return fmt.Errorf("must specify %s", strings.Join(parts, "; "))
}

// states: the container sets what the quota resource name charges (a
// bare cpu or memory name is the request).
func states(c *corev1.Container, n corev1.ResourceName) bool {
	switch n {
	case corev1.ResourceCPU, corev1.ResourceRequestsCPU:
		_, ok := c.Resources.Requests[corev1.ResourceCPU]
		return ok
	case corev1.ResourceMemory, corev1.ResourceRequestsMemory:
		_, ok := c.Resources.Requests[corev1.ResourceMemory]
		return ok
	case corev1.ResourceLimitsCPU:
		_, ok := c.Resources.Limits[corev1.ResourceCPU]
		return ok
	case corev1.ResourceLimitsMemory:
		_, ok := c.Resources.Limits[corev1.ResourceMemory]
		return ok
	}
	return true
}
