package core

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func defaultPod(obj runtime.Object) {
	o := obj.(*corev1.Pod)
	DefaultPodSpec(&o.Spec)
	defaultRequestsToLimits(o)
}

func defaultPodTemplate(obj runtime.Object) {
	o := obj.(*corev1.PodTemplate)
	DefaultPodSpec(&o.Template.Spec)
}

func defaultServiceObject(obj runtime.Object) {
	o := obj.(*corev1.Service)
	defaultService(o)
}

func defaultSecret(obj runtime.Object) {
	o := obj.(*corev1.Secret)
	if o.Type == "" {
		o.Type = corev1.SecretTypeOpaque
	}
}

func defaultNamespace(obj runtime.Object) {
	o := obj.(*corev1.Namespace)
	if o.Status.Phase == "" {
		o.Status.Phase = corev1.NamespaceActive
	}
}

func defaultPersistentVolumeClaim(obj runtime.Object) {
	o := obj.(*corev1.PersistentVolumeClaim)
	if o.Spec.VolumeMode == nil {
		o.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
	}
}

func defaultPersistentVolume(obj runtime.Object) {
	o := obj.(*corev1.PersistentVolume)
	if o.Spec.PersistentVolumeReclaimPolicy == "" {
		o.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	}
	if o.Spec.VolumeMode == nil {
		o.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
	}
	if o.Spec.HostPath != nil && o.Spec.HostPath.Type == nil {
		o.Spec.HostPath.Type = ptrTo(corev1.HostPathUnset)
	}
}

func defaultEndpoints(obj runtime.Object) {
	o := obj.(*corev1.Endpoints)
	for i := range o.Subsets {
		for j := range o.Subsets[i].Ports {
			if o.Subsets[i].Ports[j].Protocol == "" {
				o.Subsets[i].Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
	}
}

func defaultLimitRangeObject(obj runtime.Object) {
	o := obj.(*corev1.LimitRange)
	defaultLimitRange(o)
}

func defaultService(s *corev1.Service) {
	if s.Spec.Type == "" {
		s.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if s.Spec.SessionAffinity == "" {
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if s.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		if s.Spec.SessionAffinityConfig == nil {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{}
		}
		if s.Spec.SessionAffinityConfig.ClientIP == nil {
			s.Spec.SessionAffinityConfig.ClientIP = &corev1.ClientIPConfig{}
		}
		if s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = ptrTo[int32](corev1.DefaultClientIPServiceAffinitySeconds)
		}
	}
	for i := range s.Spec.Ports {
		p := &s.Spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if s.Spec.Type != corev1.ServiceTypeExternalName && s.Spec.InternalTrafficPolicy == nil {
		s.Spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyCluster)
	}
	if (s.Spec.Type == corev1.ServiceTypeNodePort || s.Spec.Type == corev1.ServiceTypeLoadBalancer) && s.Spec.ExternalTrafficPolicy == "" {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.AllocateLoadBalancerNodePorts == nil {
		s.Spec.AllocateLoadBalancerNodePorts = ptrTo(true)
	}
}

// defaultRequestsToLimits gives a pod's containers that set a limit and
// no request the limit as request, as Kubernetes does for pods (not for
// pod templates, so a LimitRange default request still applies to the
// pods made from them).
func defaultRequestsToLimits(p *corev1.Pod) {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			r := &cs[i].Resources
			for k, v := range r.Limits {
				if _, ok := r.Requests[k]; !ok {
					if r.Requests == nil {
						r.Requests = corev1.ResourceList{}
					}
					r.Requests[k] = v.DeepCopy()
				}
			}
		}
	}
}

// defaultLimitRange fills a Container item's defaults as Kubernetes
// does: the default limit is the max, the default request the default
// limit or else the min.
func defaultLimitRange(lr *corev1.LimitRange) {
	for i := range lr.Spec.Limits {
		item := &lr.Spec.Limits[i]
		if item.Type != corev1.LimitTypeContainer {
			continue
		}
		for k, v := range item.Max {
			if _, ok := item.Default[k]; !ok {
				if item.Default == nil {
					item.Default = corev1.ResourceList{}
				}
				item.Default[k] = v.DeepCopy()
			}
		}
		for k, v := range item.Default {
			if _, ok := item.DefaultRequest[k]; !ok {
				if item.DefaultRequest == nil {
					item.DefaultRequest = corev1.ResourceList{}
				}
				item.DefaultRequest[k] = v.DeepCopy()
			}
		}
		for k, v := range item.Min {
			if _, ok := item.DefaultRequest[k]; !ok {
				if item.DefaultRequest == nil {
					item.DefaultRequest = corev1.ResourceList{}
				}
				item.DefaultRequest[k] = v.DeepCopy()
			}
		}
	}
}
