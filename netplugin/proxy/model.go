package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

type protocol byte

const (
	protoTCP  protocol = unix.IPPROTO_TCP
	protoUDP  protocol = unix.IPPROTO_UDP
	protoSCTP protocol = unix.IPPROTO_SCTP
)

func (p protocol) String() string {
	switch p {
	case protoUDP:
		return "udp"
	case protoSCTP:
		return "sctp"
	default:
		return "tcp"
	}
}

func protocolOf(p corev1.Protocol) protocol {
	switch p {
	case corev1.ProtocolUDP:
		return protoUDP
	case corev1.ProtocolSCTP:
		return protoSCTP
	default:
		return protoTCP
	}
}

// servicePort is one port of one Service with what the proxy needs to
// serve it: the Service's addresses and policies and its endpoints.
type servicePort struct {
	namespace, name, portName string
	proto                     protocol
	port                      uint16
	clusterIP                 netip.Addr
	nodePort                  uint16
	externalIPs               []netip.Addr   // spec.externalIPs and status.loadBalancer.ingress IPs
	lbIPs                     []netip.Addr   // the status.loadBalancer.ingress IPs alone
	sourceRanges              []netip.Prefix // loadBalancerSourceRanges (IPv4); none: every client
	affinity                  time.Duration  // 0: no session affinity
	internalLocal             bool           // internalTrafficPolicy: Local
	// node and zone are this node's name and topology.kubernetes.io/zone,
	// for topology hints.
	node, zone    string
	externalLocal bool // externalTrafficPolicy: Local (only with external addresses)
	endpoints     []endpoint
}

// id names the port in chain names, as kube-proxy does:
// namespace/name/protocol/portname.
func (sp *servicePort) id() string {
	return sp.namespace + "/" + sp.name + "/" + sp.proto.String() + "/" + sp.portName
}

func (sp *servicePort) hasExternal() bool { return sp.nodePort != 0 || len(sp.externalIPs) > 0 }

type endpoint struct {
	addr                        netip.AddrPort
	local                       bool
	ready, serving, terminating bool
	// zoneHints and nodeHints are the slice's hints.forZones and
	// hints.forNodes names.
	zoneHints, nodeHints []string
}

// labelServiceProxyName on a Service hands it to another proxy;
// kube-proxy leaves such Services alone.
const labelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// clusterIPv4 is the Service's IPv4 cluster IP, from clusterIPs (or the
// older clusterIP field alone).
func clusterIPv4(svc *corev1.Service) (netip.Addr, bool) {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// servicePorts turns a Service and its EndpointSlices into the ports the
// proxy serves. Services without a cluster IP (headless, ExternalName)
// get none: kube-proxy leaves them to DNS.
func servicePorts(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, nodeName, zone string) []servicePort {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if _, ok := svc.Labels[labelServiceProxyName]; ok {
		return nil
	}
	// The proxy programs IPv4: the Service's IPv4 cluster IP, which a
	// dual-stack Service with IPv6 first holds second.
	cip, ok := clusterIPv4(svc)
	if !ok {
		return nil
	}
	var external, lbIPs []netip.Addr
	for _, s := range svc.Spec.ExternalIPs {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			external = append(external, a)
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			// An ingress in Proxy mode is reached through the load
			// balancer, not by packets addressed to it.
			if in.IPMode != nil && *in.IPMode == corev1.LoadBalancerIPModeProxy {
				continue
			}
			if a, err := netip.ParseAddr(in.IP); err == nil && a.Is4() {
				external = append(external, a)
				lbIPs = append(lbIPs, a)
			}
		}
	}
	slicesSortUnique(&external)
	slicesSortUnique(&lbIPs)
	var ranges []netip.Prefix
	if len(lbIPs) > 0 {
		ranges = sourceRanges(svc.Spec.LoadBalancerSourceRanges)
	}

	var affinity time.Duration
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		secs := int32(corev1.DefaultClientIPServiceAffinitySeconds)
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			secs = *c.ClientIP.TimeoutSeconds
		}
		affinity = time.Duration(secs) * time.Second
	}
	var out []servicePort
	for _, p := range svc.Spec.Ports {
		sp := servicePort{
			namespace: svc.Namespace, name: svc.Name, portName: p.Name,
			proto:     protocolOf(p.Protocol),
			port:      uint16(p.Port),
			clusterIP: cip,
			affinity:  affinity,
			node:      nodeName, zone: zone,
			internalLocal: svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal,
		}
		if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			sp.nodePort = uint16(p.NodePort)
		}
		sp.externalIPs, sp.lbIPs, sp.sourceRanges = external, lbIPs, ranges
		sp.externalLocal = sp.hasExternal() && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
		sp.endpoints = endpointsFor(p, slices, nodeName)
		out = append(out, sp)
	}
	return out
}

// sourceRanges are the IPv4 prefixes of loadBalancerSourceRanges, as
// kube-proxy reads them: padded with spaces or not (validation lets
// that through), those of the other family left out, and none at all
// when one of them is 0.0.0.0/0, which lets every client in.
func sourceRanges(in []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range in {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || !p.Addr().Is4() {
			continue
		}
		if p.Bits() == 0 {
			return nil
		}
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

// endpointsFor collects the endpoints of a service port from all the
// Service's slices, once each: an address may show up in two slices
// while the controller moves it.
func endpointsFor(p corev1.ServicePort, eps []*discoveryv1.EndpointSlice, nodeName string) []endpoint {
	seen := map[netip.AddrPort]bool{}
	var out []endpoint
	for _, s := range eps {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		var port int32
		found := false
		for _, sp := range s.Ports {
			name, proto := "", corev1.ProtocolTCP
			if sp.Name != nil {
				name = *sp.Name
			}
			if sp.Protocol != nil {
				proto = *sp.Protocol
			}
			if name == p.Name && protocolOf(proto) == protocolOf(p.Protocol) && sp.Port != nil {
				port, found = *sp.Port, true
				break
			}
		}
		if !found || port < 1 || port > 65535 {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			// kube-proxy uses the first address: the others are the
			// same pod's, for consumers other than the proxy.
			a, err := netip.ParseAddr(e.Addresses[0])
			if err != nil || !a.Is4() {
				continue
			}
			ap := netip.AddrPortFrom(a, uint16(port))
			if seen[ap] {
				continue
			}
			seen[ap] = true
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			serving := ready
			if e.Conditions.Serving != nil {
				serving = *e.Conditions.Serving
			}
			terminating := e.Conditions.Terminating != nil && *e.Conditions.Terminating
			ep := endpoint{
				addr:  ap,
				local: e.NodeName != nil && *e.NodeName == nodeName,
				ready: ready, serving: serving, terminating: terminating,
			}
			if h := e.Hints; h != nil {
				for _, z := range h.ForZones {
					ep.zoneHints = append(ep.zoneHints, z.Name)
				}
				for _, n := range h.ForNodes {
					ep.nodeHints = append(ep.nodeHints, n.Name)
				}
			}
			out = append(out, ep)
		}
	}
	slices.SortFunc(out, func(a, b endpoint) int { return a.addr.Compare(b.addr) })
	return out
}

// usable picks the endpoints that get traffic from eps, as kube-proxy
// does: the ready ones, or, when none is ready, those that still serve
// while terminating, so that connections keep working through a rolling
// update of the last pods.
func usable(eps []endpoint, onlyLocal bool) []endpoint {
	var ready, terminating []endpoint
	for _, e := range eps {
		if onlyLocal && !e.local {
			continue
		}
		switch {
		case e.ready:
			ready = append(ready, e)
		case e.serving && e.terminating:
			terminating = append(terminating, e)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return terminating
}

// clusterEndpoints are the endpoints of sp that get traffic under the
// Cluster policies (see usable), narrowed by topology hints as
// kube-proxy narrows them: when every ready endpoint has a node hint
// and one is for this node, those for this node; else when every ready
// endpoint has a zone hint and one is for this node's zone, those for
// the zone; else all of them. Hints are not used at all when either
// traffic policy is Local (those keep to this node already), nor for
// the terminating endpoints used when none is ready.
func clusterEndpoints(sp *servicePort) []endpoint {
	eps := usable(sp.endpoints, false)
	if sp.internalLocal || sp.externalLocal || len(eps) == 0 || !eps[0].ready {
		return eps
	}
	var forNode, forZone []endpoint
	allNode, allZone := true, true
	for _, e := range eps {
		if len(e.nodeHints) == 0 {
			allNode = false
		} else if slices.Contains(e.nodeHints, sp.node) {
			forNode = append(forNode, e)
		}
		if len(e.zoneHints) == 0 {
			allZone = false
		} else if sp.zone != "" && slices.Contains(e.zoneHints, sp.zone) {
			forZone = append(forZone, e)
		}
	}
	switch {
	case allNode && len(forNode) > 0:
		return forNode
	case allZone && len(forZone) > 0:
		return forZone
	}
	return eps
}

func slicesSortUnique(a *[]netip.Addr) {
	slices.SortFunc(*a, netip.Addr.Compare)
	*a = slices.Compact(*a)
}

// serviceKey is namespace/name of the Service a slice belongs to.
func serviceKey(namespace, name string) string { return namespace + "/" + name }

func splitKey(key string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(key, "/")
	if !ok {
		return "", "", fmt.Errorf("malformed service key %q", key)
	}
	return ns, n, nil
}
