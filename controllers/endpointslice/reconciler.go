package endpointslice

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"bonsai.dev/bonsai/controllers/servicepods"
)

// plan is what one sync of a Service writes, and the Events about its
// hints it records.
type plan struct {
	create, update, delete []*discoveryv1.EndpointSlice
	events                 []hintEvent
}

func (p *plan) add(q plan) {
	p.create = append(p.create, q.create...)
	p.update = append(p.update, q.update...)
	p.delete = append(p.delete, q.delete...)
	p.events = append(p.events, q.events...)
}

// writes reports whether the plan writes anything.
func (p *plan) writes() bool { return len(p.create)+len(p.update)+len(p.delete) > 0 }

// reconciler plans the writes that bring a Service's slices to its pods,
// with upstream's algorithm: it prefers few writes to tight packing.
type reconciler struct {
	maxPerSlice int
	// node is the lister's Get; nodes lists them all (for the zones'
	// shares of CPU of topology aware hints).
	node  func(name string) (*corev1.Node, error)
	nodes func() ([]*corev1.Node, error)
}

// reconcile plans the slices of svc for pods given the existing slices
// it manages. Pods whose node is unknown are left out, and reported in
// the error so that the Service is retried; the plan is good anyway.
func (r *reconciler) reconcile(svc *corev1.Service, pods []*corev1.Pod, existing []*discoveryv1.EndpointSlice) (plan, error) {
	var out plan
	var errs []error
	types := addressTypes(svc)
	byType := map[discoveryv1.AddressType][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		if !types.Has(s.AddressType) {
			out.delete = append(out.delete, s) // the Service lost that family
			continue
		}
		byType[s.AddressType] = append(byType[s.AddressType], s)
	}
	for _, t := range slices.Sorted(maps.Keys(types)) {
		p, err := r.reconcileAddressType(svc, pods, byType[t], t)
		out.add(p)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// reconcileAddressType plans the slices of one address type: pods are
// grouped by the ports they resolve to (one set of ports per slice), and
// each group is reconciled with the slices of those ports.
func (r *reconciler) reconcileAddressType(svc *corev1.Service, pods []*corev1.Pod, existing []*discoveryv1.EndpointSlice, t discoveryv1.AddressType) (plan, error) {
	var errs []error
	desired := map[string]*endpointSet{}
	portsOf := map[string][]discoveryv1.EndpointPort{}
	for _, p := range pods {
		if !servicepods.ShouldPodBeInEndpoints(p, true) {
			continue
		}
		ports := endpointPorts(svc, p)
		key := portsKey(ports)
		if desired[key] == nil {
			desired[key] = newEndpointSet()
			portsOf[key] = ports
		}
		node, err := r.node(p.Spec.NodeName)
		if err != nil {
			if !apierrors.IsNotFound(err) {
				return plan{}, fmt.Errorf("node %s of pod %s: %w", p.Spec.NodeName, p.Name, err)
			}
			// A pod on a node that is gone may never be cleaned up; keep
			// the slices current without it and retry, unless the user
			// asked for every address to be published.
			if !svc.Spec.PublishNotReadyAddresses {
				errs = append(errs, fmt.Errorf("skipping pod %s of Service %s/%s: node %s not found", p.Name, svc.Namespace, svc.Name, p.Spec.NodeName))
				continue
			}
		}
		if ep := podEndpoint(p, node, svc, t); len(ep.Addresses) > 0 {
			desired[key].insert(&ep)
		}
	}

	existingByPorts := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		key := portsKey(s.Ports)
		existingByPorts[key] = append(existingByPorts[key], s)
	}
	var out plan
	for _, key := range slices.Sorted(maps.Keys(desired)) {
		out.add(r.reconcilePorts(svc, existingByPorts[key], desired[key], portsOf[key], t))
	}
	for key, ss := range existingByPorts {
		if _, ok := desired[key]; !ok {
			out.delete = append(out.delete, ss...)
		}
	}

	// A Service without endpoints keeps one empty slice, so that
	// consumers can tell "no endpoints" from "not processed yet".
	if len(existing) == len(out.delete) && len(out.create) == 0 {
		placeholder := newSlice(svc, []discoveryv1.EndpointPort{}, t)
		if len(out.delete) == 1 && isPlaceholder(out.delete[0], placeholder) {
			out.delete = nil // it is there already
		} else {
			out.create = append(out.create, placeholder)
		}
	}
	out = reuseDeleted(svc, out)
	if autoHints(svc) {
		if err := r.zoneHints(svc, existing, &out, t); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// zoneHints sets the topology aware hints of the slices of one address
// type that the plan writes, and rewrites the unchanged ones whose hints
// no longer fit; where hints are unsafe it takes them all off instead,
// with a warning Event, as upstream does.
func (r *reconciler) zoneHints(svc *corev1.Service, existing []*discoveryv1.EndpointSlice, out *plan, t discoveryv1.AddressType) error {
	written := map[string]bool{}
	for _, s := range append(slices.Clone(out.update), out.delete...) {
		written[s.Name] = true
	}
	var unchanged []*discoveryv1.EndpointSlice
	for _, s := range existing {
		if !written[s.Name] {
			unchanged = append(unchanged, s)
		}
	}
	had := hasHints(existing)
	nodes, err := r.nodes()
	if err != nil {
		return fmt.Errorf("list nodes for topology hints: %w", err)
	}
	shares, reason := zoneShares(nodes)
	update := out.update
	if reason == "" {
		update, reason = assignZoneHints(shares, out.create, out.update, unchanged)
	}
	if reason != "" {
		out.update = removeHints(out.create, out.update, unchanged)
		msg := reason + ", removing hints"
		if !had {
			msg = reason
		}
		out.events = append(out.events, hintEvent{warning: true, reason: reasonHintsDisabled, message: fmt.Sprintf("%s, addressType: %s", msg, t)})
		return nil
	}
	out.update = update
	if !had {
		out.events = append(out.events, hintEvent{reason: reasonHintsEnabled, message: fmt.Sprintf("%s, addressType: %s", msgHintsEnabled, t)})
	}
	return nil
}

func isPlaceholder(s, want *discoveryv1.EndpointSlice) bool {
	return len(s.Ports) == 0 && len(s.Endpoints) == 0 && s.AddressType == want.AddressType &&
		labels.Equals(s.Labels, want.Labels)
}

// reconcilePorts plans the slices of one set of ports:
//  1. in each existing slice, drop the endpoints no longer wanted and
//     refresh those that changed;
//  2. fill the slices changed in 1 with new endpoints, fullest first;
//  3. put what is left in one unchanged slice it fits in whole (the one
//     it fills best), or else in new slices: one new slice is a write
//     like one update, and leaves the other slices alone.
func (r *reconciler) reconcilePorts(svc *corev1.Service, existing []*discoveryv1.EndpointSlice, desired *endpointSet, ports []discoveryv1.EndpointPort, t discoveryv1.AddressType) plan {
	wantLabels := sliceLabels(svc)
	var updated, unchanged []*discoveryv1.EndpointSlice
	var out plan
	auto := autoHints(svc)
	for _, s := range existing {
		kept := make([]discoveryv1.Endpoint, 0, len(s.Endpoints))
		changed := false
		for i := range s.Endpoints {
			want := desired.take(&s.Endpoints[i])
			if want == nil {
				continue
			}
			if auto {
				// Topology aware hints are the zone step's to decide
				// (see zoneHints): an endpoint keeps its hint here.
				want.Hints = s.Endpoints[i].Hints
			}
			kept = append(kept, *want)
			if !apiequality.Semantic.DeepEqual(want, &s.Endpoints[i]) {
				changed = true
			}
		}
		labelsChanged := !labels.Equals(s.Labels, wantLabels)
		switch {
		case len(kept) == 0 && len(s.Endpoints) > 0:
			out.delete = append(out.delete, s)
		case changed || len(kept) != len(s.Endpoints) || labelsChanged:
			c := s.DeepCopy()
			c.Endpoints, c.Labels = kept, wantLabels
			updated = append(updated, c)
		default:
			unchanged = append(unchanged, s)
		}
	}

	if desired.len() > 0 && len(updated) > 0 {
		byFill := slices.Clone(updated)
		sort.SliceStable(byFill, func(i, j int) bool { return len(byFill[i].Endpoints) > len(byFill[j].Endpoints) })
		for _, s := range byFill {
			for desired.len() > 0 && len(s.Endpoints) < r.maxPerSlice {
				s.Endpoints = append(s.Endpoints, *desired.pop())
			}
		}
	}

	for desired.len() > 0 {
		var fill *discoveryv1.EndpointSlice
		if desired.len() < r.maxPerSlice {
			if i := bestFit(unchanged, desired.len(), r.maxPerSlice); i >= 0 {
				fill = unchanged[i].DeepCopy()
				unchanged = slices.Delete(unchanged, i, i+1)
				updated = append(updated, fill)
			}
		}
		if fill == nil {
			fill = newSlice(svc, ports, t)
			out.create = append(out.create, fill)
		}
		for desired.len() > 0 && len(fill.Endpoints) < r.maxPerSlice {
			fill.Endpoints = append(fill.Endpoints, *desired.pop())
		}
	}
	out.update = append(out.update, updated...)
	return out
}

// bestFit is the index of the slice that n more endpoints fill closest
// to max without going over, or -1.
func bestFit(ss []*discoveryv1.EndpointSlice, n, max int) int {
	best, bestRoom := -1, max
	for i, s := range ss {
		room := max - (n + len(s.Endpoints))
		if room >= 0 && room < bestRoom {
			best, bestRoom = i, room
			if room == 0 {
				break
			}
		}
	}
	return best
}

// reuseDeleted turns a create and a delete into one update of the slice
// that would be deleted, when it belongs to this very Service (not to an
// earlier one of the same name being garbage-collected) and has the same
// address type, which is immutable.
func reuseDeleted(svc *corev1.Service, p plan) plan {
	for i := 0; i < len(p.delete) && len(p.create) > 0; {
		old, s := p.delete[i], p.create[len(p.create)-1]
		if old.AddressType != s.AddressType || !ownedBy(old, svc) {
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

func ownedBy(s *discoveryv1.EndpointSlice, svc *corev1.Service) bool {
	for _, o := range s.OwnerReferences {
		if o.UID == svc.UID && o.Kind == "Service" && o.APIVersion == "v1" {
			return true
		}
	}
	return false
}

// endpointSet holds the desired endpoints of a set of ports by identity;
// pop hands them out in a stable order (by identity) so that slices are
// filled the same way for the same pods.
type endpointSet struct {
	m     map[string]*discoveryv1.Endpoint
	order []string
}

func newEndpointSet() *endpointSet { return &endpointSet{m: map[string]*discoveryv1.Endpoint{}} }

func (s *endpointSet) insert(ep *discoveryv1.Endpoint) { s.m[endpointKey(ep)] = ep }
func (s *endpointSet) len() int                        { return len(s.m) }

// take removes and returns the desired version of ep, or nil.
func (s *endpointSet) take(ep *discoveryv1.Endpoint) *discoveryv1.Endpoint {
	k := endpointKey(ep)
	want := s.m[k]
	delete(s.m, k)
	return want
}

func (s *endpointSet) pop() *discoveryv1.Endpoint {
	if s.order == nil {
		s.order = slices.Sorted(maps.Keys(s.m))
	}
	for len(s.order) > 0 {
		k := s.order[0]
		s.order = s.order[1:]
		if ep, ok := s.m[k]; ok {
			delete(s.m, k)
			return ep
		}
	}
	return nil
}
