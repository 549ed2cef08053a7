package servicepods

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func isTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// ShouldPodBeInEndpoints says whether the pod is an endpoint at all: not
// when it finished (Succeeded or Failed), has no IP yet (not scheduled or
// not started), or is terminating unless includeTerminating.
func ShouldPodBeInEndpoints(p *corev1.Pod, includeTerminating bool) bool {
	if isTerminal(p) {
		return false
	}
	if p.Status.PodIP == "" && len(p.Status.PodIPs) == 0 {
		return false
	}
	return includeTerminating || p.DeletionTimestamp == nil
}

// ShouldSetHostname says whether the endpoint carries the pod's hostname:
// when the pod names the Service as its subdomain (the DNS records of
// headless Services and StatefulSets).
func ShouldSetHostname(p *corev1.Pod, svc *corev1.Service) bool {
	return p.Spec.Hostname != "" && p.Spec.Subdomain == svc.Name && p.Namespace == svc.Namespace
}

// IsServiceIPSet is false for headless Services (and those without a
// cluster IP yet).
func IsServiceIPSet(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP != corev1.ClusterIPNone && svc.Spec.ClusterIP != ""
}

// FindPort resolves a Service port's targetPort on the pod: a number as
// is, a name to the container port of that name and protocol (in the
// containers, then in sidecars: init containers that always restart).
func FindPort(p *corev1.Pod, sp *corev1.ServicePort) (int32, error) {
	if sp.TargetPort.Type == intstr.Int {
		return int32(sp.TargetPort.IntValue()), nil
	}
	name := sp.TargetPort.StrVal
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == name && cp.Protocol == sp.Protocol {
				return cp.ContainerPort, nil
			}
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			continue
		}
		for _, cp := range c.Ports {
			if cp.Name == name && cp.Protocol == sp.Protocol {
				return cp.ContainerPort, nil
			}
		}
	}
	return 0, fmt.Errorf("pod %s/%s has no %s container port named %q", p.Namespace, p.Name, sp.Protocol, name)
}

// PodIPs are the pod's IPs, from status.podIPs or, when a writer left
// that empty, status.podIP.
func PodIPs(p *corev1.Pod) []string {
	if len(p.Status.PodIPs) == 0 {
		if p.Status.PodIP == "" {
			return nil
		}
		return []string{p.Status.PodIP}
	}
	ips := make([]string, len(p.Status.PodIPs))
	for i, ip := range p.Status.PodIPs {
		ips[i] = ip.IP
	}
	return ips
}
