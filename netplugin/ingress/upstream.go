package ingress

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/netplugin/ingress/routing"
)

// upstreamKey is a service backend: a Service port by name or number.
type upstreamKey struct {
	ns, svc    string
	portName   string
	portNumber int32
}

func keyOf(b *routing.Backend) upstreamKey {
	return upstreamKey{ns: b.Namespace, svc: b.Service, portName: b.Port.Name, portNumber: b.Port.Number}
}

func (k upstreamKey) String() string {
	port := k.portName
	if port == "" {
		port = strconv.Itoa(int(k.portNumber))
	}
	return k.ns + "/" + k.svc + ":" + port
}

// upstream is a service backend resolved: the ready endpoints requests
// go to, round robin.
type upstream struct {
	name  string
	addrs []string // ip:port
	// why there are no addrs, for the 503's body
	why string
	// problem is set when the Ingress itself is wrong (no such
	// Service or port), for a Warning event; no endpoints is not one.
	problem *problem
	next    *atomic.Uint32
}

// resolve finds the endpoints of a service backend: the Service port
// the backend names (by number or name), then the ready endpoints of
// the Service's EndpointSlices at that port, as kube-proxy would pick
// them (ready, or with unknown readiness).
func (c *Controller) resolve(k upstreamKey) *upstream {
	up := &upstream{name: k.String(), next: new(atomic.Uint32)}
	fail := func(reason, format string, args ...any) *upstream {
		up.why = fmt.Sprintf(format, args...)
		if reason != "" {
			up.problem = &problem{reason, fmt.Sprintf("backend %s: %s", up.name, up.why)}
		}
		return up
	}
	o, ok, _ := c.services.GetStore().GetByKey(k.ns + "/" + k.svc)
	if !ok {
		return fail("ServiceNotFound", "Service %s/%s not found", k.ns, k.svc)
	}
	svc := o.(*corev1.Service)
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return fail("UnsupportedBackend", "Service %s/%s is of type ExternalName, which this controller does not proxy to", k.ns, k.svc)
	}
	var port *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if (k.portName != "" && p.Name == k.portName) || (k.portName == "" && p.Port == k.portNumber) {
			port = p
			break
		}
	}
	if port == nil {
		return fail("ServicePortNotFound", "Service %s/%s has no TCP port %s", k.ns, k.svc, portOf(k))
	}
	slices, _ := c.slices.GetIndexer().ByIndex(client.SliceServiceIndex, k.ns+"/"+k.svc)
	seen := map[string]bool{}
	for _, so := range slices {
		s := so.(*discoveryv1.EndpointSlice)
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		var target int32
		for _, p := range s.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			if name == port.Name && proto == corev1.ProtocolTCP && p.Port != nil {
				target = *p.Port
			}
		}
		if target == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				hp := net.JoinHostPort(a, strconv.Itoa(int(target)))
				if !seen[hp] {
					seen[hp] = true
					up.addrs = append(up.addrs, hp)
				}
			}
		}
	}
	sort.Strings(up.addrs) // the same order across rebuilds
	if len(up.addrs) == 0 {
		return fail("", "Service %s/%s has no ready endpoints for port %s", k.ns, k.svc, portOf(k))
	}
	return up
}

func portOf(k upstreamKey) string {
	if k.portName != "" {
		return strconv.Quote(k.portName)
	}
	return strconv.Itoa(int(k.portNumber))
}
