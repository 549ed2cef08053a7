package apiserver

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/apiserver/registry/core"
)

// legacyDefault applies Kubernetes' defaults to the built-in objects whose
// kinds have no defaulter of their own yet, as the generated SetDefaults_*
// functions of kube-apiserver do.
func legacyDefault(obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Pod:
		core.DefaultPodSpec(&o.Spec)
		defaultRequestsToLimits(o)
	case *corev1.PodTemplate:
		core.DefaultPodSpec(&o.Template.Spec)
	case *corev1.ReplicationController:
		if o.Spec.Replicas == nil {
			o.Spec.Replicas = ptrTo[int32](1)
		}
		if o.Spec.Template != nil {
			core.DefaultPodSpec(&o.Spec.Template.Spec)
			if len(o.Spec.Selector) == 0 {
				o.Spec.Selector = o.Spec.Template.Labels
			}
		}
	case *corev1.Service:
		defaultService(o)
	case *corev1.Secret:
		if o.Type == "" {
			o.Type = corev1.SecretTypeOpaque
		}
	case *corev1.Namespace:
		if o.Status.Phase == "" {
			o.Status.Phase = corev1.NamespaceActive
		}
	case *appsv1.Deployment:
		defaultDeployment(o)
	case *appsv1.ReplicaSet:
		if o.Spec.Replicas == nil {
			o.Spec.Replicas = ptrTo[int32](1)
		}
		core.DefaultPodSpec(&o.Spec.Template.Spec)
	case *appsv1.StatefulSet:
		defaultStatefulSet(o)
	case *appsv1.DaemonSet:
		defaultDaemonSet(o)
	case *corev1.PersistentVolumeClaim:
		if o.Spec.VolumeMode == nil {
			o.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
		}
	case *corev1.PersistentVolume:
		if o.Spec.PersistentVolumeReclaimPolicy == "" {
			o.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
		}
		if o.Spec.VolumeMode == nil {
			o.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
		}
		if o.Spec.HostPath != nil && o.Spec.HostPath.Type == nil {
			o.Spec.HostPath.Type = ptrTo(corev1.HostPathUnset)
		}
	case *corev1.Endpoints:
		for i := range o.Subsets {
			for j := range o.Subsets[i].Ports {
				if o.Subsets[i].Ports[j].Protocol == "" {
					o.Subsets[i].Ports[j].Protocol = corev1.ProtocolTCP
				}
			}
		}
	case *corev1.LimitRange:
		defaultLimitRange(o)
	}
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

func defaultDeployment(d *appsv1.Deployment) {
	if d.Spec.Replicas == nil {
		d.Spec.Replicas = ptrTo[int32](1)
	}
	st := &d.Spec.Strategy
	if st.Type == "" {
		st.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if st.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if st.RollingUpdate == nil {
			st.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		if st.RollingUpdate.MaxUnavailable == nil {
			st.RollingUpdate.MaxUnavailable = ptrTo(intstr.FromString("25%"))
		}
		if st.RollingUpdate.MaxSurge == nil {
			st.RollingUpdate.MaxSurge = ptrTo(intstr.FromString("25%"))
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = ptrTo[int32](10)
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		d.Spec.ProgressDeadlineSeconds = ptrTo[int32](600)
	}
	core.DefaultPodSpec(&d.Spec.Template.Spec)
}

func defaultStatefulSet(s *appsv1.StatefulSet) {
	if s.Spec.Replicas == nil {
		s.Spec.Replicas = ptrTo[int32](1)
	}
	if s.Spec.PodManagementPolicy == "" {
		s.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	// Only an unset strategy gets rollingUpdate filled in: upstream leaves
	// an explicit "RollingUpdate" without parameters as it is.
	if s.Spec.UpdateStrategy.Type == "" {
		s.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
		if s.Spec.UpdateStrategy.RollingUpdate == nil {
			s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
	}
	if s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && s.Spec.UpdateStrategy.RollingUpdate != nil {
		if s.Spec.UpdateStrategy.RollingUpdate.Partition == nil {
			s.Spec.UpdateStrategy.RollingUpdate.Partition = ptrTo[int32](0)
		}
		if s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == nil {
			s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptrTo(intstr.FromInt32(1))
		}
	}
	if s.Spec.RevisionHistoryLimit == nil {
		s.Spec.RevisionHistoryLimit = ptrTo[int32](10)
	}
	if s.Spec.PersistentVolumeClaimRetentionPolicy == nil {
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	p := s.Spec.PersistentVolumeClaimRetentionPolicy
	if p.WhenDeleted == "" {
		p.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if p.WhenScaled == "" {
		p.WhenScaled = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	for i := range s.Spec.VolumeClaimTemplates {
		pvc := &s.Spec.VolumeClaimTemplates[i]
		if pvc.Spec.VolumeMode == nil {
			pvc.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
		}
		if pvc.Status.Phase == "" {
			pvc.Status.Phase = corev1.ClaimPending
		}
	}
	core.DefaultPodSpec(&s.Spec.Template.Spec)
}

func defaultDaemonSet(d *appsv1.DaemonSet) {
	if d.Spec.UpdateStrategy.Type == "" {
		d.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if d.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if d.Spec.UpdateStrategy.RollingUpdate == nil {
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == nil {
			d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptrTo(intstr.FromInt32(1))
		}
		if d.Spec.UpdateStrategy.RollingUpdate.MaxSurge == nil {
			d.Spec.UpdateStrategy.RollingUpdate.MaxSurge = ptrTo(intstr.FromInt32(0))
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = ptrTo[int32](10)
	}
	core.DefaultPodSpec(&d.Spec.Template.Spec)
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
