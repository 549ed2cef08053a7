package endpointslice

import (
	"fmt"
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Topology aware routing (service.kubernetes.io/topology-mode: Auto, or
// the older service.kubernetes.io/topology-aware-hints: auto): the
// controller hints each ready endpoint to one zone so that every zone
// gets a share of the endpoints in proportion to its nodes' allocatable
// CPU, as upstream's topology cache does, and hints nothing where that
// is unsafe. The proxies then send a zone's traffic to the endpoints
// hinted to it.

// overloadThreshold is how much more than its fair share of traffic an
// endpoint may get (upstream's 20%): a zone needs at least
// ceil(share / 1.2) endpoints, or the Service gets no hints.
const overloadThreshold = 0.2

// Events of the hints, with upstream's reasons and messages.
const (
	reasonHintsEnabled  = "TopologyAwareHintsEnabled"
	reasonHintsDisabled = "TopologyAwareHintsDisabled"

	msgHintsEnabled           = "Topology Aware Hints has been enabled"
	msgHintsDisabled          = "Topology Aware Hints has been disabled"
	msgNoZone                 = "One or more endpoints do not have a zone specified"
	msgNoAllocatedHints       = "No hints allocated for zones"
	msgInsufficientNodeInfo   = "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes"
	msgOneZone                = "Nodes only ready in one zone"
	msgInsufficientEndpoints  = "Insufficient number of endpoints"
	msgMinAllocationOverloads = "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold"
)

// hintEvent is an Event the sync of a Service records about its hints.
type hintEvent struct {
	warning bool
	reason  string
	message string
}

// autoHints reports whether svc asks for topology aware hints: either
// annotation set to Auto or auto, the older one winning when both are
// there, as upstream reads them.
func autoHints(svc *corev1.Service) bool {
	v, ok := svc.Annotations[corev1.DeprecatedAnnotationTopologyAwareHints]
	if !ok {
		v = svc.Annotations[corev1.AnnotationTopologyMode]
	}
	return v == "Auto" || v == "auto"
}

// zoneShares is each zone's share of the allocatable CPU of the ready
// nodes, control-plane nodes aside, as upstream's topology cache counts
// it; nil, with the reason, when one of those nodes has no zone label or
// no allocatable CPU, or fewer than two zones have any.
func zoneShares(nodes []*corev1.Node) (map[string]float64, string) {
	milli := map[string]int64{}
	var total int64
	for _, n := range nodes {
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
			continue
		}
		if _, ok := n.Labels["node-role.kubernetes.io/master"]; ok {
			continue
		}
		if !nodeReady(n) {
			continue
		}
		zone := n.Labels[corev1.LabelTopologyZone]
		cpu := n.Status.Allocatable.Cpu().MilliValue()
		if zone == "" || cpu <= 0 {
			return nil, msgInsufficientNodeInfo
		}
		milli[zone] += cpu
		total += cpu
	}
	if total == 0 {
		return nil, msgInsufficientNodeInfo
	}
	if len(milli) < 2 {
		return nil, msgOneZone
	}
	out := make(map[string]float64, len(milli))
	for z, m := range milli {
		out[z] = float64(m) / float64(total)
	}
	return out, ""
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// zoneAllocation is how many endpoints a zone should have hinted to it:
// its CPU share of them (desired), no fewer than min, which keeps each
// endpoint under the overload threshold, and no more than max, which
// leaves the other zones their minimum.
type zoneAllocation struct {
	min, max int
	desired  float64
}

// allocate shares n endpoints among the zones; nil, with the reason,
// when there are fewer endpoints than zones or the zones' minimums add
// up to more than n.
func allocate(shares map[string]float64, n int) (map[string]zoneAllocation, string) {
	if len(shares) > n {
		return nil, fmt.Sprintf("%s (%d endpoints, %d zones)", msgInsufficientEndpoints, n, len(shares))
	}
	out := make(map[string]zoneAllocation, len(shares))
	minTotal := 0
	for z, share := range shares {
		desired := share * float64(n)
		minimum := int(math.Ceil(desired / (1 + overloadThreshold)))
		out[z] = zoneAllocation{min: minimum, desired: math.Max(desired, float64(minimum))}
		minTotal += minimum
	}
	if minTotal > n {
		return nil, fmt.Sprintf("%s (%d endpoints, %d zones)", msgMinAllocationOverloads, n, len(shares))
	}
	for z, a := range out {
		a.max = a.min + n - minTotal
		out[z] = a
	}
	return out, ""
}

func endpointReady(ep *discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready != nil && *ep.Conditions.Ready
}

func zoneHint(zone string) *discoveryv1.EndpointHints {
	return &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}}
}

// sliceZoneHints counts the hints of an unchanged slice by zone, or nil
// when they cannot stay: a ready endpoint without a hint, a hint to a
// zone that gets none, or more hints to a zone than its maximum with
// those already counted.
func sliceZoneHints(s *discoveryv1.EndpointSlice, counted map[string]int, allocs map[string]zoneAllocation) map[string]int {
	out := map[string]int{}
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		if !endpointReady(ep) {
			continue
		}
		if ep.Hints == nil || len(ep.Hints.ForZones) == 0 {
			return nil
		}
		for _, z := range ep.Hints.ForZones {
			if _, ok := allocs[z.Name]; !ok {
				return nil
			}
			out[z.Name]++
		}
	}
	for z, n := range out {
		if n+counted[z] > allocs[z].max {
			return nil
		}
	}
	return out
}

// assignZoneHints hints the ready endpoints of one address type's slices
// to zones, as upstream's topology cache: the hints of an unchanged slice
// stay if they still fit (else it is rewritten); every ready endpoint of
// a slice being written is hinted to its own zone, then zones with more
// than their desired share give endpoints to zones with less, until no
// zone is half an endpoint or more off. It returns the slices to update
// (update, and the unchanged ones it rewrites), and a reason (with no
// hints written) when hints are unsafe: then removeHints must be used.
//
// Zones are taken in name order, not in a map's, so that the same
// slices get the same hints every time.
func assignZoneHints(shares map[string]float64, create, update, unchanged []*discoveryv1.EndpointSlice) (newUpdate []*discoveryv1.EndpointSlice, reason string) {
	if shares == nil {
		return update, msgInsufficientNodeInfo
	}
	n := 0
	for _, group := range [][]*discoveryv1.EndpointSlice{create, update, unchanged} {
		for _, s := range group {
			for i := range s.Endpoints {
				if endpointReady(&s.Endpoints[i]) {
					n++
				}
			}
		}
	}
	allocs, reason := allocate(shares, n)
	if reason != "" {
		return update, reason
	}
	// Every ready endpoint of a slice being written needs a zone.
	for _, group := range [][]*discoveryv1.EndpointSlice{create, update} {
		for _, s := range group {
			for i := range s.Endpoints {
				if ep := &s.Endpoints[i]; endpointReady(ep) && (ep.Zone == nil || *ep.Zone == "") {
					return update, msgNoZone
				}
			}
		}
	}
	counted := map[string]int{}
	given := update
	update = slices.Clip(update)
	for _, s := range unchanged {
		hz := sliceZoneHints(s, counted, allocs)
		if hz == nil {
			for i := range s.Endpoints {
				if ep := &s.Endpoints[i]; endpointReady(ep) && (ep.Zone == nil || *ep.Zone == "") {
					return given, msgNoZone
				}
			}
			update = append(update, s.DeepCopy())
			continue
		}
		for z, k := range hz {
			counted[z] += k
		}
	}
	writable := append(slices.Clone(create), update...)
	for _, s := range writable {
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			if !endpointReady(ep) {
				ep.Hints = nil
				continue
			}
			ep.Hints = zoneHint(*ep.Zone)
			counted[*ep.Zone]++
		}
	}
	giving, receiving := givingAndReceiving(allocs, counted)
	for _, s := range writable {
		for i := range s.Endpoints {
			if len(giving) == 0 || len(receiving) == 0 {
				break
			}
			ep := &s.Endpoints[i]
			if !endpointReady(ep) || giving[*ep.Zone] == 0 {
				continue
			}
			to := slices.Sorted(maps.Keys(receiving))[0]
			ep.Hints = zoneHint(to)
			counted[to]++
			counted[*ep.Zone]--
			if giving[*ep.Zone]--; giving[*ep.Zone] == 0 {
				delete(giving, *ep.Zone)
			}
			if receiving[to]--; receiving[to] == 0 {
				delete(receiving, to)
			}
		}
	}
	if len(counted) == 0 {
		return given, msgNoAllocatedHints
	}
	return update, ""
}

// givingAndReceiving is how many hints each zone over its desired share
// should give and each under it should get: one at a time from the zone
// furthest over to the one furthest under, while both are at least half
// an endpoint off and one of them a whole one.
func givingAndReceiving(allocs map[string]zoneAllocation, counted map[string]int) (giving, receiving map[string]int) {
	over, under := map[string]float64{}, map[string]float64{}
	for z, a := range allocs {
		switch d := float64(counted[z]) - a.desired; {
		case d > 0:
			over[z] = d
		case d < 0:
			under[z] = -d
		}
	}
	giving, receiving = map[string]int{}, map[string]int{}
	for {
		g, give := most(over)
		r, get := most(under)
		if g == "" || r == "" || give < 1 && get < 1 || give < 0.5 || get < 0.5 {
			return giving, receiving
		}
		giving[g]++
		over[g]--
		receiving[r]++
		under[r]--
	}
}

// most is the zone with the largest positive value (the first by name
// of equals), or "".
func most(m map[string]float64) (string, float64) {
	zone, best := "", 0.0
	for _, z := range slices.Sorted(maps.Keys(m)) {
		if m[z] > best {
			zone, best = z, m[z]
		}
	}
	return zone, best
}

// removeHints takes every hint off the slices being written, and
// rewrites the unchanged slices that have any; it returns the slices to
// update.
func removeHints(create, update, unchanged []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	for _, group := range [][]*discoveryv1.EndpointSlice{create, update} {
		for _, s := range group {
			for i := range s.Endpoints {
				s.Endpoints[i].Hints = nil
			}
		}
	}
	for _, s := range unchanged {
		if !slices.ContainsFunc(s.Endpoints, func(ep discoveryv1.Endpoint) bool { return ep.Hints != nil }) {
			continue
		}
		c := s.DeepCopy()
		for i := range c.Endpoints {
			c.Endpoints[i].Hints = nil
		}
		update = append(update, c)
	}
	return update
}

// hasHints reports whether any endpoint of the slices has a zone hint.
func hasHints(ss []*discoveryv1.EndpointSlice) bool {
	for _, s := range ss {
		for i := range s.Endpoints {
			if h := s.Endpoints[i].Hints; h != nil && len(h.ForZones) > 0 {
				return true
			}
		}
	}
	return false
}
