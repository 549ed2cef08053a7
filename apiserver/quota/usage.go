// Package quota holds Kubernetes' ResourceQuota evaluators: what one
// object uses of a quota (object counts, compute requests and limits,
// storage), which quotas' scopes cover a pod, and the per-container
// constraints a compute quota imposes. The API server's quota admission
// charges an object's usage to the quotas of its namespace; the
// resourcequota controller (controllers/resourcequota) recounts usage
// from the objects there are. Both must agree, so both use this package.
// It holds no state and talks to nothing.
package quota

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Resource names quotas track beyond the plain core ones.
const (
	storageClassSuffix = ".storageclass.storage.k8s.io/"
	countPrefix        = "count/"
)

// Kinds with usage beyond their count.
var (
	Pods      = schema.GroupResource{Resource: "pods"}
	Services  = schema.GroupResource{Resource: "services"}
	Claims    = schema.GroupResource{Resource: "persistentvolumeclaims"}
	legacyCnt = map[schema.GroupResource]corev1.ResourceName{
		{Resource: "pods"}:                   corev1.ResourcePods,
		{Resource: "services"}:               corev1.ResourceServices,
		{Resource: "configmaps"}:             corev1.ResourceConfigMaps,
		{Resource: "secrets"}:                corev1.ResourceSecrets,
		{Resource: "persistentvolumeclaims"}: corev1.ResourcePersistentVolumeClaims,
		{Resource: "replicationcontrollers"}: corev1.ResourceReplicationControllers,
		{Resource: "resourcequotas"}:         corev1.ResourceQuotas,
	}
)

// CountName is the count/<resource>[.<group>] name of a kind.
func CountName(gr schema.GroupResource) corev1.ResourceName {
	if gr.Group == "" {
		return corev1.ResourceName(countPrefix + gr.Resource)
	}
	return corev1.ResourceName(countPrefix + gr.Resource + "." + gr.Group)
}

// ParseCountName is the kind a count/ name counts.
func ParseCountName(name corev1.ResourceName) (schema.GroupResource, bool) {
	rest, ok := strings.CutPrefix(string(name), countPrefix)
	if !ok {
		return schema.GroupResource{}, false
	}
	res, group, _ := strings.Cut(rest, ".")
	return schema.GroupResource{Group: group, Resource: res}, true
}

// Usage is what obj, of kind gr, uses: one of its count, and for pods,
// services and claims what they hold. A pod that finished, or whose
// deletion grace period is over, only counts in count/pods.
func Usage(gr schema.GroupResource, obj runtime.Object, now time.Time) corev1.ResourceList {
	out := corev1.ResourceList{CountName(gr): *resource.NewQuantity(1, resource.DecimalSI)}
	if n, ok := legacyCnt[gr]; ok {
		out[n] = *resource.NewQuantity(1, resource.DecimalSI)
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		// count/pods is every pod stored; "pods" and compute only the
		// pods still alive.
		if !podCounts(o, now) {
			return corev1.ResourceList{CountName(gr): *resource.NewQuantity(1, resource.DecimalSI)}
		}
		addPodCompute(out, o)
	case *corev1.Service:
		addServiceUsage(out, o)
	case *corev1.PersistentVolumeClaim:
		addClaimUsage(out, o)
	}
	return out
}

// podCounts: a terminal pod, or one past its deletion grace period,
// holds nothing any more.
func podCounts(pod *corev1.Pod, now time.Time) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil {
		if now.After(pod.DeletionTimestamp.Add(time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second)) {
			return false
		}
	}
	return true
}

func addPodCompute(out corev1.ResourceList, pod *corev1.Pod) {
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	lim := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	for name, q := range req {
		switch name {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
			out[name] = q
		}
		out[corev1.ResourceName("requests."+string(name))] = q
	}
	for name, q := range lim {
		switch name {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
			out[corev1.ResourceName("limits."+string(name))] = q
		}
	}
}

func addServiceUsage(out corev1.ResourceList, svc *corev1.Service) {
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		n := int64(len(svc.Spec.Ports))
		// A load balancer that allocates no node ports holds only the
		// ones the user asked for.
		if a := svc.Spec.AllocateLoadBalancerNodePorts; svc.Spec.Type == corev1.ServiceTypeLoadBalancer && a != nil && !*a {
			n = 0
			for _, p := range svc.Spec.Ports {
				if p.NodePort != 0 {
					n++
				}
			}
		}
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		out[corev1.ResourceServicesLoadBalancers] = *resource.NewQuantity(1, resource.DecimalSI)
	}
}

func addClaimUsage(out corev1.ResourceList, pvc *corev1.PersistentVolumeClaim) {
	storage := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	out[corev1.ResourceRequestsStorage] = storage
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	} else if c, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		class = c
	}
	if class != "" {
		out[corev1.ResourceName(class+storageClassSuffix+string(corev1.ResourcePersistentVolumeClaims))] = *resource.NewQuantity(1, resource.DecimalSI)
		out[corev1.ResourceName(class+storageClassSuffix+string(corev1.ResourceRequestsStorage))] = storage
	}
}

// KindOf is the kind whose objects a quota resource name adds up, as
// the controller needs to know what to list.
func KindOf(name corev1.ResourceName) schema.GroupResource {
	if gr, ok := ParseCountName(name); ok {
		return gr
	}
	for gr, n := range legacyCnt {
		if n == name {
			return gr
		}
	}
	s := string(name)
	switch {
	case name == corev1.ResourceRequestsStorage || strings.Contains(s, storageClassSuffix):
		return Claims
	case strings.HasPrefix(s, "services."):
		return Services
	}
	return Pods
}

// Scoped: a quota with scopes (or a scope selector) covers pods only.
func Scoped(q *corev1.ResourceQuota) bool {
	return len(q.Spec.Scopes) > 0 || q.Spec.ScopeSelector != nil
}

// Matches reports whether the quota covers obj: every object when it
// has no scopes, otherwise only the pods all its scopes match.
func Matches(q *corev1.ResourceQuota, obj runtime.Object) (bool, error) {
	if !Scoped(q) {
		return true, nil
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return false, nil
	}
	for _, s := range q.Spec.Scopes {
		if !podMatchesScope(pod, corev1.ScopedResourceSelectorRequirement{ScopeName: s, Operator: corev1.ScopeSelectorOpExists}) {
			return false, nil
		}
	}
	if q.Spec.ScopeSelector != nil {
		for _, req := range q.Spec.ScopeSelector.MatchExpressions {
			ok, err := podMatchesSelector(pod, req)
			if err != nil || !ok {
				return false, err
			}
		}
	}
	return true, nil
}

func podMatchesScope(pod *corev1.Pod, req corev1.ScopedResourceSelectorRequirement) bool {
	ok, _ := podMatchesSelector(pod, req)
	return ok
}

func podMatchesSelector(pod *corev1.Pod, req corev1.ScopedResourceSelectorRequirement) (bool, error) {
	switch req.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds >= 0, nil
	case corev1.ResourceQuotaScopeNotTerminating:
		return pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds < 0, nil
	case corev1.ResourceQuotaScopeBestEffort:
		return bestEffort(pod), nil
	case corev1.ResourceQuotaScopeNotBestEffort:
		return !bestEffort(pod), nil
	case corev1.ResourceQuotaScopePriorityClass:
		switch req.Operator {
		case corev1.ScopeSelectorOpExists:
			return pod.Spec.PriorityClassName != "", nil
		case corev1.ScopeSelectorOpDoesNotExist:
			return pod.Spec.PriorityClassName == "", nil
		case corev1.ScopeSelectorOpIn:
			return slices.Contains(req.Values, pod.Spec.PriorityClassName), nil
		case corev1.ScopeSelectorOpNotIn:
			return !slices.Contains(req.Values, pod.Spec.PriorityClassName), nil
		}
	case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return crossNamespaceAffinity(pod), nil
	}
	return false, fmt.Errorf("unsupported scope %q with operator %q", req.ScopeName, req.Operator)
}

// bestEffort: no container asks for or caps cpu or memory.
func bestEffort(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				if _, ok := l[corev1.ResourceCPU]; ok {
					return false
				}
				if _, ok := l[corev1.ResourceMemory]; ok {
					return false
				}
			}
		}
	}
	return true
}

func crossNamespaceAffinity(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	var terms []corev1.PodAffinityTerm
	if a.PodAffinity != nil {
		terms = append(terms, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	if a.PodAntiAffinity != nil {
		terms = append(terms, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	for _, t := range terms {
		if len(t.Namespaces) > 0 || t.NamespaceSelector != nil {
			return true
		}
	}
	return false
}

// Tracks: whether a resource name is one a scoped quota may track (pod
// resources only).
func Tracks(q *corev1.ResourceQuota, name corev1.ResourceName) bool {
	return !Scoped(q) || KindOf(name) == Pods
}
