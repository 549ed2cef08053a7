package endpointslice

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/servicepods"
)

// addressTypes are the slice address types a Service gets: one per IP
// family it has. A Service written before families existed gets its
// cluster IP's family, or both when headless (as upstream, so that an
// upgrade never drops its endpoints).
func addressTypes(svc *corev1.Service) sets.Set[discoveryv1.AddressType] {
	out := sets.New[discoveryv1.AddressType]()
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			out.Insert(discoveryv1.AddressTypeIPv4)
		case corev1.IPv6Protocol:
			out.Insert(discoveryv1.AddressTypeIPv6)
		}
	}
	if out.Len() > 0 {
		return out
	}
	if servicepods.IsServiceIPSet(svc) {
		if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && ip.Is6() && !ip.Is4In6() {
			return out.Insert(discoveryv1.AddressTypeIPv6)
		}
		return out.Insert(discoveryv1.AddressTypeIPv4)
	}
	return out.Insert(discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6)
}

// addressesOf are the pod's IPs of one address type.
func addressesOf(p *corev1.Pod, t discoveryv1.AddressType) []string {
	var out []string
	for _, s := range servicepods.PodIPs(p) {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if is6 := ip.Is6() && !ip.Is4In6(); is6 == (t == discoveryv1.AddressTypeIPv6) {
			out = append(out, s)
		}
	}
	return out
}

// endpointPorts are the Service's ports as the pod serves them: a named
// targetPort resolves to the pod's container port of that name, so pods
// may differ. A port the pod lacks is left out, as upstream does.
func endpointPorts(svc *corev1.Service, p *corev1.Pod) []discoveryv1.EndpointPort {
	out := []discoveryv1.EndpointPort{}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		n, err := servicepods.FindPort(p, sp)
		if err != nil {
			continue
		}
		out = append(out, discoveryv1.EndpointPort{
			Name: ptr(sp.Name), Protocol: ptr(sp.Protocol), Port: ptr(n), AppProtocol: sp.AppProtocol,
		})
	}
	return out
}

// podEndpoint is the endpoint of a pod. ready is never true for a
// terminating pod, unless the Service publishes not-ready addresses;
// serving is the pod's readiness whatever its termination.
func podEndpoint(p *corev1.Pod, node *corev1.Node, svc *corev1.Service, t discoveryv1.AddressType) discoveryv1.Endpoint {
	serving := kit.IsPodReady(p)
	terminating := p.DeletionTimestamp != nil
	ready := svc.Spec.PublishNotReadyAddresses || (serving && !terminating)
	ep := discoveryv1.Endpoint{
		Addresses:  addressesOf(p, t),
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
	}
	if p.Spec.NodeName != "" {
		ep.NodeName = ptr(p.Spec.NodeName)
	}
	if node != nil && node.Labels[corev1.LabelTopologyZone] != "" {
		ep.Zone = ptr(node.Labels[corev1.LabelTopologyZone])
	}
	if servicepods.ShouldSetHostname(p, svc) {
		ep.Hostname = ptr(p.Spec.Hostname)
	}
	// The topology annotations win over trafficDistribution, as
	// upstream, and set hints of their own (see zoneHints); a
	// distribution hints ready endpoints only.
	if !autoHints(svc) && ready {
		ep.Hints = trafficHints(svc, &ep)
	}
	return ep
}

// trafficHints are the hints spec.trafficDistribution asks for: a
// preference for the endpoint's own zone (PreferClose, PreferSameZone)
// or node and zone (PreferSameNode). Without one, no hints.
func trafficHints(svc *corev1.Service, ep *discoveryv1.Endpoint) *discoveryv1.EndpointHints {
	if svc.Spec.TrafficDistribution == nil {
		return nil
	}
	var h discoveryv1.EndpointHints
	switch *svc.Spec.TrafficDistribution {
	case corev1.ServiceTrafficDistributionPreferSameNode:
		if ep.NodeName != nil {
			h.ForNodes = []discoveryv1.ForNode{{Name: *ep.NodeName}}
		}
		fallthrough
	case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone:
		if ep.Zone != nil {
			h.ForZones = []discoveryv1.ForZone{{Name: *ep.Zone}}
		}
	}
	if h.ForNodes == nil && h.ForZones == nil {
		return nil
	}
	return &h
}

// endpointKey identifies an endpoint across syncs (upstream hashes the
// same fields): a changed key is a removed endpoint and a new one.
func endpointKey(ep *discoveryv1.Endpoint) string {
	addrs := slices.Clone(ep.Addresses)
	slices.Sort(addrs)
	var b strings.Builder
	if ep.TargetRef != nil {
		b.WriteString(ep.TargetRef.Namespace + "/" + ep.TargetRef.Name)
	}
	b.WriteByte('|')
	if ep.Hostname != nil {
		b.WriteString(*ep.Hostname)
	}
	b.WriteByte('|')
	b.WriteString(strings.Join(addrs, ","))
	return b.String()
}

// portsKey identifies a set of ports, whatever their order: the
// endpoints of one slice share one.
func portsKey(ports []discoveryv1.EndpointPort) string {
	keys := make([]string, len(ports))
	for i, p := range ports {
		var b strings.Builder
		if p.Name != nil {
			b.WriteString(*p.Name)
		}
		b.WriteByte('/')
		if p.Protocol != nil {
			b.WriteString(string(*p.Protocol))
		}
		b.WriteByte('/')
		if p.Port != nil {
			b.WriteString(strconv.Itoa(int(*p.Port)))
		}
		b.WriteByte('/')
		if p.AppProtocol != nil {
			b.WriteString(*p.AppProtocol)
		}
		keys[i] = b.String()
	}
	slices.Sort(keys)
	return strings.Join(keys, ";")
}

// sliceLabels are the labels a slice of svc must have: the Service's own
// (less the reserved keys), the Service name, the manager, and
// service.kubernetes.io/headless for a headless Service. Labels set on
// the slice by others are dropped, as upstream does.
func sliceLabels(svc *corev1.Service) map[string]string {
	out := make(map[string]string, len(svc.Labels)+3)
	for k, v := range svc.Labels {
		if !isReservedLabel(k) {
			out[k] = v
		}
	}
	if !servicepods.IsServiceIPSet(svc) {
		out[corev1.IsHeadlessService] = ""
	}
	out[discoveryv1.LabelServiceName] = svc.Name
	out[discoveryv1.LabelManagedBy] = ControllerName
	return out
}

func isReservedLabel(k string) bool {
	return k == discoveryv1.LabelServiceName || k == discoveryv1.LabelManagedBy || k == corev1.IsHeadlessService
}

// SlicePrefix is the generateName of a Service's (or an Endpoints')
// slices: "<name>-", or the name alone when the dash would make it too
// long.
func SlicePrefix(name string) string {
	if prefix := name + "-"; len(validation.NameIsDNSSubdomain(prefix, true)) == 0 {
		return prefix
	}
	return name
}

// newSlice is an empty slice of svc for ports and address type t, owned
// by the Service.
func newSlice(svc *corev1.Service, ports []discoveryv1.EndpointPort, t discoveryv1.AddressType) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    SlicePrefix(svc.Name),
			Namespace:       svc.Namespace,
			Labels:          sliceLabels(svc),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))},
		},
		AddressType: t,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
}

func ptr[T any](v T) *T { return &v }
