package endpointslicemirroring

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/controllers/endpoints"
	"bonsai.dev/bonsai/controllers/endpointslice"
)

// plan is what one sync of an Endpoints writes.
type plan struct {
	create, update, delete []*discoveryv1.EndpointSlice
	// invalid addresses were not IPs; skipped counts those and the
	// addresses past the per-subset maximum.
	invalid, skipped int
}

// sliceKey groups the endpoints of one slice: an address type and a set
// of ports.
type sliceKey struct {
	addressType discoveryv1.AddressType
	ports       string
}

// desired is the mirror of one Endpoints: the endpoints and ports of each
// slice it needs.
type desired struct {
	endpoints map[sliceKey]map[string]discoveryv1.Endpoint // by identity
	ports     map[string][]discoveryv1.EndpointPort
}

// mirror computes what ep's slices must hold: its subsets, repacked,
// each address an endpoint of its IP family (ready as listed), at most
// maxPerSubset addresses of each subset.
func mirror(ep *corev1.Endpoints, maxPerSubset int) (desired, int, int) {
	d := desired{endpoints: map[sliceKey]map[string]discoveryv1.Endpoint{}, ports: map[string][]discoveryv1.EndpointPort{}}
	invalid, skipped := 0, 0
	for _, s := range endpoints.RepackSubsets(ep.Subsets) {
		ports := make([]discoveryv1.EndpointPort, len(s.Ports))
		for i, p := range s.Ports {
			ports[i] = discoveryv1.EndpointPort{Name: ptr(p.Name), Port: ptr(p.Port), Protocol: ptr(p.Protocol), AppProtocol: p.AppProtocol}
		}
		pk := portsKey(ports)
		d.ports[pk] = ports
		added := 0
		add := func(a corev1.EndpointAddress, ready bool) {
			if added >= maxPerSubset {
				skipped++
				return
			}
			ip, err := netip.ParseAddr(a.IP)
			if err != nil {
				invalid++
				skipped++
				return
			}
			t := discoveryv1.AddressTypeIPv4
			if ip.Is6() && !ip.Is4In6() {
				t = discoveryv1.AddressTypeIPv6
			}
			k := sliceKey{addressType: t, ports: pk}
			if d.endpoints[k] == nil {
				d.endpoints[k] = map[string]discoveryv1.Endpoint{}
			}
			e := addressEndpoint(a, ready)
			d.endpoints[k][endpointID(&e)] = e
			added++
		}
		for _, a := range s.Addresses {
			add(a, true)
		}
		for _, a := range s.NotReadyAddresses {
			add(a, false)
		}
	}
	return d, invalid, skipped
}

func addressEndpoint(a corev1.EndpointAddress, ready bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{
		Addresses:  []string{a.IP},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready)},
		TargetRef:  a.TargetRef,
		NodeName:   a.NodeName,
	}
	if a.Hostname != "" {
		e.Hostname = ptr(a.Hostname)
	}
	return e
}

// endpointID identifies an endpoint as the EndpointSlice controller does.
func endpointID(e *discoveryv1.Endpoint) string {
	var b strings.Builder
	if e.TargetRef != nil {
		b.WriteString(e.TargetRef.Namespace + "/" + e.TargetRef.Name)
	}
	b.WriteByte('|')
	if e.Hostname != nil {
		b.WriteString(*e.Hostname)
	}
	b.WriteByte('|')
	b.WriteString(strings.Join(e.Addresses, ","))
	return b.String()
}

func portsKey(ports []discoveryv1.EndpointPort) string {
	keys := make([]string, len(ports))
	for i, p := range ports {
		app := ""
		if p.AppProtocol != nil {
			app = *p.AppProtocol
		}
		keys[i] = *p.Name + "/" + string(*p.Protocol) + "/" + strconv.Itoa(int(*p.Port)) + "/" + app
	}
	slices.Sort(keys)
	return strings.Join(keys, ";")
}

// reconcile plans the writes that make existing (the mirrored slices of
// ep) its mirror: one slice per address type and set of ports, updated
// in place when there is one, the extras deleted.
func reconcile(ep *corev1.Endpoints, existing []*discoveryv1.EndpointSlice, maxPerSubset int) plan {
	d, invalid, skipped := mirror(ep, maxPerSubset)
	p := plan{invalid: invalid, skipped: skipped}
	byKey := map[sliceKey][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k := sliceKey{addressType: s.AddressType, ports: portsKey(s.Ports)}
		byKey[k] = append(byKey[k], s)
	}
	for _, k := range slices.SortedFunc(maps.Keys(d.endpoints), func(a, b sliceKey) int {
		return strings.Compare(string(a.addressType)+a.ports, string(b.addressType)+b.ports)
	}) {
		want := d.endpoints[k]
		have := byKey[k]
		name := ""
		if len(have) > 0 {
			p.delete = append(p.delete, have[1:]...)
			if matches(ep, have[0], want) {
				continue
			}
			name = have[0].Name
		}
		s := newSlice(ep, d.ports[k.ports], k.addressType, name)
		for _, id := range slices.Sorted(maps.Keys(want)) {
			s.Endpoints = append(s.Endpoints, want[id])
		}
		if name != "" {
			s.ResourceVersion = have[0].ResourceVersion
			p.update = append(p.update, s)
		} else {
			p.create = append(p.create, s)
		}
	}
	for k, ss := range byKey {
		if _, ok := d.endpoints[k]; !ok {
			p.delete = append(p.delete, ss...)
		}
	}
	// Reuse a slice about to be deleted for a slice to create, when the
	// immutable address type allows and it mirrors this very Endpoints
	// (not an earlier one of the same name): one write instead of two.
	for i := 0; i < len(p.delete) && len(p.create) > 0; {
		old, s := p.delete[i], p.create[len(p.create)-1]
		if old.AddressType != s.AddressType || !metav1.IsControlledBy(old, ep) {
			i++
			continue
		}
		s.Name, s.ResourceVersion = old.Name, old.ResourceVersion
		p.create = p.create[:len(p.create)-1]
		p.update = append(p.update, s)
		p.delete = slices.Delete(p.delete, i, i+1)
	}
	return p
}

// matches says whether s already mirrors want and ep's labels and
// annotations.
func matches(ep *corev1.Endpoints, s *discoveryv1.EndpointSlice, want map[string]discoveryv1.Endpoint) bool {
	if len(s.Endpoints) != len(want) {
		return false
	}
	for i := range s.Endpoints {
		w, ok := want[endpointID(&s.Endpoints[i])]
		if !ok || !apiequality.Semantic.DeepEqual(w, s.Endpoints[i]) {
			return false
		}
	}
	wantMeta := newSlice(ep, nil, s.AddressType, s.Name)
	return maps.Equal(wantMeta.Labels, s.Labels) && maps.Equal(wantMeta.Annotations, s.Annotations)
}

// newSlice is an empty mirrored slice of ep, owned by it: its labels and
// annotations (less the trigger time and kubectl's last-applied
// configuration), the Service name and this controller as manager.
func newSlice(ep *corev1.Endpoints, ports []discoveryv1.EndpointPort, t discoveryv1.AddressType, name string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       ep.Namespace,
			Labels:          make(map[string]string, len(ep.Labels)+2),
			Annotations:     make(map[string]string, len(ep.Annotations)),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ep, corev1.SchemeGroupVersion.WithKind("Endpoints"))},
		},
		AddressType: t,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	maps.Copy(s.Labels, ep.Labels)
	s.Labels[discoveryv1.LabelServiceName] = ep.Name
	s.Labels[discoveryv1.LabelManagedBy] = ControllerName
	for k, v := range ep.Annotations {
		if k != corev1.EndpointsLastChangeTriggerTime && k != corev1.LastAppliedConfigAnnotation {
			s.Annotations[k] = v
		}
	}
	if name == "" {
		s.GenerateName = endpointslice.SlicePrefix(ep.Name)
	}
	return s
}

func ptr[T any](v T) *T { return &v }
