package dns

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// ServiceProxyNameLabel and ServiceProxyName mark the kube-dns Service as
// served by another proxy than the default one, as Kubernetes defines the
// label: here, by the DNS server itself.
const (
	ServiceProxyNameLabel = "service.kubernetes.io/service-proxy-name"
	ServiceProxyName      = "bonsai-dns"
)

// KubeDNSService is the kube-system/kube-dns Service k3s and kubeadm
// create for cluster DNS, at clusterIP: the same name, labels,
// annotations and ports, so that tools looking for it find it. It has no
// selector: bonsai serves DNS in-process, there are no CoreDNS pods to
// select, and a selector would only give it an empty EndpointSlice.
func KubeDNSService(clusterIP netip.Addr) *corev1.Service {
	family := corev1.IPv4Protocol
	if clusterIP.Is6() {
		family = corev1.IPv6Protocol
	}
	single := corev1.IPFamilyPolicySingleStack
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "kube-dns",
			Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{
				"k8s-app":                       "kube-dns",
				"kubernetes.io/cluster-service": "true",
				"kubernetes.io/name":            "CoreDNS",
				// The DNS server listens on the cluster IP itself, on
				// every node that runs pods: the service proxy leaves
				// the Service alone (it has no endpoints to go to).
				ServiceProxyNameLabel: ServiceProxyName,
			},
			Annotations: map[string]string{
				"prometheus.io/port":   "9153",
				"prometheus.io/scrape": "true",
			},
		},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeClusterIP,
			ClusterIP:      clusterIP.String(),
			ClusterIPs:     []string{clusterIP.String()},
			IPFamilies:     []corev1.IPFamily{family},
			IPFamilyPolicy: &single,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
			},
		},
	}
}

// EnsureService creates the kube-dns Service at clusterIP when it does
// not exist. An existing one is left as it is (an administrator may have
// changed it), unless its cluster IP is not clusterIP: then pods would be
// told of a DNS address nothing serves, which is an error.
func EnsureService(ctx context.Context, core typedcorev1.CoreV1Interface, clusterIP netip.Addr) error {
	want := KubeDNSService(clusterIP)
	got, err := core.Services(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = core.Services(want.Namespace).Create(ctx, want, metav1.CreateOptions{FieldManager: "bonsai"})
		if apierrors.IsAlreadyExists(err) {
			// Created meanwhile (another server starting): check it.
			return EnsureService(ctx, core, clusterIP)
		}
		if err != nil {
			return fmt.Errorf("dns: creating Service kube-system/kube-dns at %s: %w", clusterIP, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("dns: reading Service kube-system/kube-dns: %w", err)
	}
	if got.Spec.ClusterIP != clusterIP.String() {
		return fmt.Errorf("dns: Service kube-system/kube-dns has cluster IP %s, but cluster DNS serves %s: delete the Service to have it recreated", got.Spec.ClusterIP, clusterIP)
	}
	return nil
}
