package cni

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"bonsai.dev/bonsai/netplugin"
)

// Pod annotations the CNI host reads. The bandwidth ones are Kubernetes'
// own; a pod asks for fixed addresses or a MAC (for plugins with the ips
// and mac capabilities, such as host-local and static) with bonsai's.
const (
	AnnotationIngressBandwidth = "kubernetes.io/ingress-bandwidth"
	AnnotationEgressBandwidth  = "kubernetes.io/egress-bandwidth"
	AnnotationIPs              = "bonsai.dev/cni-ips" // comma-separated addresses or CIDRs
	AnnotationMAC              = "bonsai.dev/cni-mac"
)

// The kubelet's bounds on a bandwidth annotation, in bits per second.
var (
	minBandwidth = resource.MustParse("1k")
	maxBandwidth = resource.MustParse("1P")
)

// portMapping is one entry of the portMappings capability.
type portMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// bandwidth is the bandwidth capability: rates in bits per second, bursts
// in bits.
type bandwidth struct {
	IngressRate  int64 `json:"ingressRate,omitempty"`
	IngressBurst int64 `json:"ingressBurst,omitempty"`
	EgressRate   int64 `json:"egressRate,omitempty"`
	EgressBurst  int64 `json:"egressBurst,omitempty"`
}

// capabilityArgs is what the runtime offers plugins in runtimeConfig;
// libcni passes each plugin only the capabilities its configuration
// declares. Every value a user wrote is checked here, before anything is
// set up.
func capabilityArgs(pod netplugin.Pod) (map[string]any, error) {
	args := map[string]any{}
	if len(pod.HostPorts) > 0 {
		pms := make([]portMapping, 0, len(pod.HostPorts))
		for _, hp := range pod.HostPorts {
			proto := strings.ToLower(hp.Protocol)
			if proto == "" {
				proto = "tcp"
			}
			pms = append(pms, portMapping{HostPort: hp.HostPort, ContainerPort: hp.ContainerPort, Protocol: proto, HostIP: hp.HostIP})
		}
		args["portMappings"] = pms
	}
	bw, err := podBandwidth(pod.Annotations)
	if err != nil {
		return nil, err
	}
	if bw != nil {
		args["bandwidth"] = bw
	}
	if v, ok := pod.Annotations[AnnotationIPs]; ok {
		var ips []string
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			_, perr := netip.ParsePrefix(s)
			_, aerr := netip.ParseAddr(s)
			if perr != nil && aerr != nil {
				return nil, fmt.Errorf("annotation %s: %q is neither an IP address nor a CIDR", AnnotationIPs, s)
			}
			ips = append(ips, s)
		}
		args["ips"] = ips
	}
	if v, ok := pod.Annotations[AnnotationMAC]; ok {
		if _, err := net.ParseMAC(v); err != nil {
			return nil, fmt.Errorf("annotation %s: %q is not a MAC address", AnnotationMAC, v)
		}
		args["mac"] = v
	}
	if len(pod.DNS.Servers)+len(pod.DNS.Searches)+len(pod.DNS.Options) > 0 {
		args["dns"] = pod.DNS
	}
	return args, nil
}

// podBandwidth reads the bandwidth annotations as the kubelet does: a
// quantity of bits per second between 1k and 1P; the burst is left
// unlimited.
func podBandwidth(ann map[string]string) (*bandwidth, error) {
	var bw bandwidth
	for _, a := range []struct {
		key  string
		rate *int64
		bst  *int64
	}{{AnnotationIngressBandwidth, &bw.IngressRate, &bw.IngressBurst}, {AnnotationEgressBandwidth, &bw.EgressRate, &bw.EgressBurst}} {
		v, ok := ann[a.key]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %q is not a quantity (like 10M): %v", a.key, v, err)
		}
		if q.Cmp(minBandwidth) < 0 {
			return nil, fmt.Errorf("annotation %s: %s is unreasonably small (< 1kbit)", a.key, v)
		}
		if q.Cmp(maxBandwidth) > 0 {
			return nil, fmt.Errorf("annotation %s: %s is unreasonably large (> 1Pbit)", a.key, v)
		}
		*a.rate, *a.bst = q.Value(), math.MaxInt32
	}
	if bw == (bandwidth{}) {
		return nil, nil
	}
	return &bw, nil
}

// cniArgs are the CNI_ARGS the kubelet's runtimes pass Kubernetes-aware
// plugins (Calico, Cilium ...); IgnoreUnknown keeps the others from
// refusing them.
func cniArgs(pod netplugin.Pod) [][2]string {
	return [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", pod.Namespace},
		{"K8S_POD_NAME", pod.Name},
		{"K8S_POD_INFRA_CONTAINER_ID", pod.ID},
		{"K8S_POD_UID", pod.UID},
	}
}
