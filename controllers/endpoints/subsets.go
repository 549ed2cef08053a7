package endpoints

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/servicepods"
)

// maxCapacity is the most addresses an Endpoints object holds (upstream's
// limit since 1.22); the rest are only in EndpointSlices.
const maxCapacity = 1000

// podAddress is the pod's address for svc: its IP of the Service's
// (first) family, or false when it has none.
func podAddress(svc *corev1.Service, p *corev1.Pod) (corev1.EndpointAddress, bool) {
	want6 := false
	switch {
	case len(svc.Spec.IPFamilies) > 0:
		want6 = svc.Spec.IPFamilies[0] == corev1.IPv6Protocol
	case servicepods.IsServiceIPSet(svc):
		want6 = is6(svc.Spec.ClusterIP)
	default:
		// Headless, from before families: the pod's primary IP decides.
		want6 = is6(p.Status.PodIP)
	}
	for _, ip := range servicepods.PodIPs(p) {
		if is6(ip) == want6 {
			a := corev1.EndpointAddress{
				IP:        ip,
				NodeName:  ptr(p.Spec.NodeName),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
			}
			if servicepods.ShouldSetHostname(p, svc) {
				a.Hostname = p.Spec.Hostname
			}
			return a, true
		}
	}
	return corev1.EndpointAddress{}, false
}

func is6(s string) bool {
	ip, err := netip.ParseAddr(s)
	return err == nil && ip.Is6() && !ip.Is4In6()
}

// desiredSubsets are the subsets of svc's Endpoints for pods: each pod's
// address under each port it resolves, ready or not (terminating pods
// only when the Service publishes not-ready addresses, and then as
// ready), repacked.
func desiredSubsets(svc *corev1.Service, pods []*corev1.Pod) []corev1.EndpointSubset {
	tolerateUnready := svc.Spec.PublishNotReadyAddresses
	var subsets []corev1.EndpointSubset
	add := func(p *corev1.Pod, a corev1.EndpointAddress, port *corev1.EndpointPort) {
		s := corev1.EndpointSubset{}
		if port != nil {
			s.Ports = []corev1.EndpointPort{*port}
		}
		if tolerateUnready || kit.IsPodReady(p) {
			s.Addresses = []corev1.EndpointAddress{a}
		} else {
			s.NotReadyAddresses = []corev1.EndpointAddress{a}
		}
		subsets = append(subsets, s)
	}
	for _, p := range pods {
		if !servicepods.ShouldPodBeInEndpoints(p, tolerateUnready) {
			continue
		}
		a, ok := podAddress(svc, p)
		if !ok {
			continue
		}
		// A headless Service may have no ports: its pods are still
		// published, for DNS.
		if len(svc.Spec.Ports) == 0 && svc.Spec.ClusterIP == corev1.ClusterIPNone {
			add(p, a, nil)
			continue
		}
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			n, err := servicepods.FindPort(p, sp)
			if err != nil {
				continue
			}
			add(p, a, &corev1.EndpointPort{Name: sp.Name, Port: n, Protocol: sp.Protocol, AppProtocol: sp.AppProtocol})
		}
	}
	return RepackSubsets(subsets)
}

// RepackSubsets puts subsets in canonical form, as upstream's: one
// subset per group of addresses that share the same set of ports, an
// address ready if it is ready anywhere, everything sorted.
func RepackSubsets(subsets []corev1.EndpointSubset) []corev1.EndpointSubset {
	type addrState struct {
		addr  *corev1.EndpointAddress
		ready bool
	}
	noPort := corev1.EndpointPort{Port: -1} // addresses without ports
	byPort := map[corev1.EndpointPort]map[string]*addrState{}
	note := func(port corev1.EndpointPort, a *corev1.EndpointAddress, ready bool) {
		if byPort[port] == nil {
			byPort[port] = map[string]*addrState{}
		}
		k := addressKey(a)
		if st, ok := byPort[port][k]; ok {
			st.ready = st.ready || ready
			return
		}
		byPort[port][k] = &addrState{addr: a, ready: ready}
	}
	for i := range subsets {
		ports := subsets[i].Ports
		if len(ports) == 0 {
			ports = []corev1.EndpointPort{noPort}
		}
		for _, port := range ports {
			for j := range subsets[i].Addresses {
				note(port, &subsets[i].Addresses[j], true)
			}
			for j := range subsets[i].NotReadyAddresses {
				note(port, &subsets[i].NotReadyAddresses[j], false)
			}
		}
	}
	// Group the ports by the exact set of addresses (and readiness)
	// behind them.
	type group struct {
		addrs map[string]*addrState
		ports []corev1.EndpointPort
	}
	groups := map[string]*group{}
	for port, addrs := range byPort {
		keys := make([]string, 0, len(addrs))
		for k, st := range addrs {
			keys = append(keys, fmt.Sprintf("%s=%t", k, st.ready))
		}
		slices.Sort(keys)
		gk := strings.Join(keys, ",")
		g := groups[gk]
		if g == nil {
			g = &group{addrs: addrs}
			groups[gk] = g
		}
		if port != noPort {
			g.ports = append(g.ports, port)
		}
	}
	out := make([]corev1.EndpointSubset, 0, len(groups))
	for _, g := range groups {
		var s corev1.EndpointSubset
		for _, st := range g.addrs {
			if st.ready {
				s.Addresses = append(s.Addresses, *st.addr)
			} else {
				s.NotReadyAddresses = append(s.NotReadyAddresses, *st.addr)
			}
		}
		sortAddresses(s.Addresses)
		sortAddresses(s.NotReadyAddresses)
		slices.SortFunc(g.ports, func(a, b corev1.EndpointPort) int { return strings.Compare(portKey(a), portKey(b)) })
		s.Ports = g.ports
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b corev1.EndpointSubset) int { return strings.Compare(subsetKey(a), subsetKey(b)) })
	return out
}

func addressKey(a *corev1.EndpointAddress) string {
	if a.TargetRef != nil {
		return a.IP + "/" + string(a.TargetRef.UID)
	}
	return a.IP + "/"
}

func sortAddresses(as []corev1.EndpointAddress) {
	slices.SortFunc(as, func(a, b corev1.EndpointAddress) int { return strings.Compare(addressKey(&a), addressKey(&b)) })
}

func portKey(p corev1.EndpointPort) string {
	app := ""
	if p.AppProtocol != nil {
		app = *p.AppProtocol
	}
	return fmt.Sprintf("%s/%d/%s/%s", p.Name, p.Port, p.Protocol, app)
}

func subsetKey(s corev1.EndpointSubset) string {
	var b strings.Builder
	for _, p := range s.Ports {
		b.WriteString(portKey(p) + ";")
	}
	for _, a := range s.Addresses {
		b.WriteString(addressKey(&a) + ";")
	}
	b.WriteByte('|')
	for _, a := range s.NotReadyAddresses {
		b.WriteString(addressKey(&a) + ";")
	}
	return b.String()
}

// truncate cuts subsets down to maxCapacity addresses, as upstream does:
// not-ready addresses go first; if the ready ones alone are too many,
// every not-ready one goes and each subset keeps its share (rounded up)
// of the ready ones. It says whether anything was cut.
func truncate(subsets []corev1.EndpointSubset) bool {
	ready, notReady := 0, 0
	for _, s := range subsets {
		ready += len(s.Addresses)
		notReady += len(s.NotReadyAddresses)
	}
	if ready+notReady <= maxCapacity {
		return false
	}
	cutReady := ready > maxCapacity
	room, total := maxCapacity-ready, notReady
	if cutReady {
		room, total = maxCapacity, ready
	}
	left := room
	for i := range subsets {
		s := &subsets[i]
		n := len(s.NotReadyAddresses)
		if cutReady {
			n = len(s.Addresses)
		}
		keep := min(int(math.Ceil(float64(n)/float64(total)*float64(room))), left)
		left -= keep
		if cutReady {
			s.Addresses = s.Addresses[:keep]
			s.NotReadyAddresses = nil
		} else {
			s.NotReadyAddresses = s.NotReadyAddresses[:keep]
		}
	}
	return true
}

func ptr[T any](v T) *T { return &v }
