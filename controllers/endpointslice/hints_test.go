package endpointslice

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hintNode is a node for the zones' shares: zone ("" none), allocatable
// CPU ("" none), ready, and extra labels.
func hintNode(name, zone, cpu string, ready bool, labels ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if zone != "" {
		n.Labels[corev1.LabelTopologyZone] = zone
	}
	for _, l := range labels {
		n.Labels[l] = ""
	}
	if cpu != "" {
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	return n
}

// TestZoneShares: the zones' shares of allocatable CPU, as upstream's
// topology cache's SetNodes cases; and the seed's: a zone of 2 cores
// next to one of 1 gets twice the share.
func TestZoneShares(t *testing.T) {
	tests := []struct {
		name   string
		nodes  []*corev1.Node
		want   map[string]float64
		reason string
	}{
		{name: "no nodes", reason: msgInsufficientNodeInfo},
		{name: "one node", nodes: []*corev1.Node{hintNode("a", "zone-a", "1", true)}, reason: msgOneZone},
		{name: "one zone", nodes: []*corev1.Node{hintNode("a", "zone-a", "1", true), hintNode("b", "zone-a", "2", true)}, reason: msgOneZone},
		{name: "two zones, 2 cores and 1", nodes: []*corev1.Node{hintNode("a", "zone-a", "2", true), hintNode("b", "zone-b", "1", true)},
			want: map[string]float64{"zone-a": 2.0 / 3, "zone-b": 1.0 / 3}},
		{name: "an unready node does not count", nodes: []*corev1.Node{
			hintNode("a", "zone-a", "1", true), hintNode("b", "zone-b", "1", true), hintNode("c", "zone-b", "4", false)},
			want: map[string]float64{"zone-a": 0.5, "zone-b": 0.5}},
		{name: "nor does a control-plane node", nodes: []*corev1.Node{
			hintNode("a", "zone-a", "1", true), hintNode("b", "zone-b", "1", true),
			hintNode("c", "zone-b", "4", true, "node-role.kubernetes.io/control-plane"), hintNode("d", "", "", true, "node-role.kubernetes.io/master")},
			want: map[string]float64{"zone-a": 0.5, "zone-b": 0.5}},
		{name: "unready in one zone: one zone left", nodes: []*corev1.Node{hintNode("a", "zone-a", "1", false), hintNode("b", "zone-b", "1", true)}, reason: msgOneZone},
		{name: "a node without a zone", nodes: []*corev1.Node{hintNode("a", "zone-a", "1", true), hintNode("b", "zone-b", "1", true), hintNode("c", "", "1", true)},
			reason: msgInsufficientNodeInfo},
		{name: "a node without CPU", nodes: []*corev1.Node{hintNode("a", "zone-a", "1", true), hintNode("b", "zone-b", "", true)},
			reason: msgInsufficientNodeInfo},
		{name: "3 zones, 4 nodes, 2 and 1", nodes: []*corev1.Node{
			hintNode("a1", "zone-a", "1", true), hintNode("a2", "zone-a", "1", true), hintNode("a3", "zone-a", "1", true), hintNode("a4", "zone-a", "1", true),
			hintNode("b1", "zone-b", "1", true), hintNode("b2", "zone-b", "1", true), hintNode("c1", "zone-c", "1", true)},
			want: map[string]float64{"zone-a": 4.0 / 7, "zone-b": 2.0 / 7, "zone-c": 1.0 / 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := zoneShares(tt.nodes)
			if reason != tt.reason || !cmp.Equal(tt.want, got, cmpopts.EquateApprox(0, 1e-9)) {
				t.Errorf("got %v %q, want %v %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}

// TestAllocate: the seed's safeguards. Fewer endpoints than zones: no
// hints. Zone a twice zone b with 2 endpoints: a's one endpoint would
// take twice its share, past the 20% threshold: no hints; with 3 it fits.
func TestAllocate(t *testing.T) {
	twoToOne := map[string]float64{"zone-a": 2.0 / 3, "zone-b": 1.0 / 3}
	tests := []struct {
		name   string
		shares map[string]float64
		n      int
		want   map[string]zoneAllocation
		reason string
	}{
		{name: "fewer endpoints than zones", shares: map[string]float64{"a": 0.3, "b": 0.4, "c": 0.3}, n: 2, reason: msgInsufficientEndpoints},
		{name: "2:1 with 2 endpoints overloads", shares: twoToOne, n: 2, reason: msgMinAllocationOverloads},
		{name: "2:1 with 3 endpoints", shares: twoToOne, n: 3,
			want: map[string]zoneAllocation{"zone-a": {min: 2, max: 2, desired: 2}, "zone-b": {min: 1, max: 1, desired: 1}}},
		{name: "even with 10", shares: map[string]float64{"zone-a": 0.5, "zone-b": 0.5}, n: 10,
			want: map[string]zoneAllocation{"zone-a": {min: 5, max: 5, desired: 5}, "zone-b": {min: 5, max: 5, desired: 5}}},
		{name: "0.45/0.55 with 2", shares: map[string]float64{"zone-a": 0.45, "zone-b": 0.55}, n: 2,
			want: map[string]zoneAllocation{"zone-a": {min: 1, max: 1, desired: 1}, "zone-b": {min: 1, max: 1, desired: 1.1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := allocate(tt.shares, tt.n)
			if !strings.HasPrefix(reason, tt.reason) || (tt.reason == "") != (reason == "") ||
				!cmp.Equal(tt.want, got, cmp.AllowUnexported(zoneAllocation{}), cmpopts.EquateApprox(0, 1e-9)) {
				t.Errorf("got %+v %q, want %+v %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}

// hep is an endpoint for the hint tables: address, zone ("" none),
// readiness (nil: unknown) and hint ("" none).
func hep(addr, zone string, ready *bool, hint string) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if zone != "" {
		ep.Zone = ptr(zone)
	}
	if hint != "" {
		ep.Hints = zoneHint(hint)
	}
	return ep
}

func hslice(name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Endpoints: eps}
}

// hintsOf renders slices as "name: addr>hint ..." for the tables.
func hintsOf(ss []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		var b strings.Builder
		b.WriteString(s.Name + ":")
		for _, ep := range s.Endpoints {
			h := "-"
			if ep.Hints != nil {
				var zs []string
				for _, z := range ep.Hints.ForZones {
					zs = append(zs, z.Name)
				}
				h = strings.Join(zs, ",")
			}
			fmt.Fprintf(&b, " %s>%s", ep.Addresses[0], h)
		}
		out = append(out, b.String())
	}
	return out
}

// TestAssignZoneHints follows the examples of upstream's topology cache
// (AddHints), plus what it does with unchanged slices.
func TestAssignZoneHints(t *testing.T) {
	yes, no := ptr(true), ptr(false)
	tests := []struct {
		name                      string
		shares                    map[string]float64
		create, update, unchanged []*discoveryv1.EndpointSlice
		wantCreate, wantUpdate    []string
		reason                    string
	}{
		{name: "no shares", create: []*discoveryv1.EndpointSlice{hslice("c", hep("10.1.2.3", "zone-a", yes, ""))},
			reason: msgInsufficientNodeInfo},
		{name: "2 endpoints, 3 zones", shares: map[string]float64{"zone-a": 0.3, "zone-b": 0.4, "zone-c": 0.3},
			create: []*discoveryv1.EndpointSlice{hslice("c", hep("10.1.2.3", "zone-a", yes, ""), hep("10.1.2.4", "zone-b", yes, ""))},
			reason: msgInsufficientEndpoints},
		{name: "2 endpoints, 2 zones", shares: map[string]float64{"zone-a": 0.45, "zone-b": 0.55},
			create:     []*discoveryv1.EndpointSlice{hslice("c", hep("10.1.2.3", "zone-a", yes, ""), hep("10.1.2.4", "zone-b", yes, ""))},
			wantCreate: []string{"c: 10.1.2.3>zone-a 10.1.2.4>zone-b"}},
		{name: "unready and unknown endpoints get no hint and do not count", shares: map[string]float64{"zone-a": 0.45, "zone-b": 0.55},
			create: []*discoveryv1.EndpointSlice{hslice("c", hep("10.1.2.3", "zone-a", yes, ""), hep("10.1.2.4", "zone-b", yes, ""),
				hep("10.1.2.5", "zone-b", no, "zone-b"), hep("10.1.2.6", "zone-b", nil, ""))},
			wantCreate: []string{"c: 10.1.2.3>zone-a 10.1.2.4>zone-b 10.1.2.5>- 10.1.2.6>-"}},
		// zone-a has 5 endpoints for a desired 3.5, zone-b 2 for 3.5:
		// a's first endpoint goes to b.
		{name: "3 zones: redistributed within the threshold", shares: map[string]float64{"zone-a": 0.35, "zone-b": 0.35, "zone-c": 0.30},
			create: []*discoveryv1.EndpointSlice{
				hslice("c1", hep("10.1.2.3", "zone-a", yes, ""), hep("10.1.2.4", "zone-b", yes, "")),
				hslice("c2", hep("10.1.3.3", "zone-c", yes, ""), hep("10.1.3.4", "zone-c", yes, ""), hep("10.1.3.5", "zone-a", yes, "")),
			},
			update: []*discoveryv1.EndpointSlice{
				hslice("u1", hep("10.2.2.3", "zone-a", yes, ""), hep("10.2.2.4", "zone-a", yes, "")),
				hslice("u2", hep("10.2.3.3", "zone-b", yes, ""), hep("10.2.3.4", "zone-c", yes, ""), hep("10.2.3.5", "zone-a", yes, "")),
			},
			wantCreate: []string{"c1: 10.1.2.3>zone-b 10.1.2.4>zone-b", "c2: 10.1.3.3>zone-c 10.1.3.4>zone-c 10.1.3.5>zone-a"},
			wantUpdate: []string{"u1: 10.2.2.3>zone-a 10.2.2.4>zone-a", "u2: 10.2.3.3>zone-b 10.2.3.4>zone-c 10.2.3.5>zone-a"}},
		// An unchanged slice keeps hints that still fit, and is not
		// written; one whose hints do not fit is.
		{name: "unchanged slices", shares: map[string]float64{"zone-a": 0.5, "zone-b": 0.5},
			create: []*discoveryv1.EndpointSlice{hslice("c", hep("10.1.0.1", "zone-b", yes, ""))},
			unchanged: []*discoveryv1.EndpointSlice{
				hslice("keep", hep("10.1.1.1", "zone-a", yes, "zone-a"), hep("10.1.1.2", "zone-b", no, "")),
				hslice("stale", hep("10.1.2.1", "zone-b", yes, "zone-gone"), hep("10.1.2.2", "zone-a", yes, "")),
			},
			wantCreate: []string{"c: 10.1.0.1>zone-b"},
			wantUpdate: []string{"stale: 10.1.2.1>zone-b 10.1.2.2>zone-a"}},
		{name: "a ready endpoint without a zone", shares: map[string]float64{"zone-a": 0.5, "zone-b": 0.5},
			create: []*discoveryv1.EndpointSlice{hslice("c", hep("10.1.2.3", "zone-a", yes, ""), hep("10.1.2.4", "", yes, ""))},
			reason: msgNoZone},
		{name: "an unchanged slice to rewrite with an endpoint without a zone", shares: map[string]float64{"zone-a": 0.5, "zone-b": 0.5},
			create:    []*discoveryv1.EndpointSlice{hslice("c", hep("10.1.2.3", "zone-a", yes, ""))},
			unchanged: []*discoveryv1.EndpointSlice{hslice("u", hep("10.1.2.4", "", yes, ""))},
			reason:    msgNoZone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			update, reason := assignZoneHints(tt.shares, tt.create, tt.update, tt.unchanged)
			if !strings.HasPrefix(reason, tt.reason) || (tt.reason == "") != (reason == "") {
				t.Fatalf("reason %q, want %q", reason, tt.reason)
			}
			if reason != "" {
				if len(update) != len(tt.update) {
					t.Errorf("with no hints, %d slices to update, want the %d given", len(update), len(tt.update))
				}
				return
			}
			if diff := cmp.Diff(tt.wantCreate, hintsOf(tt.create)); diff != "" {
				t.Errorf("created (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantUpdate, hintsOf(update)); diff != "" {
				t.Errorf("updated (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRemoveHints: unsafe hints go from the slices being written and
// from the unchanged ones that have any, which are then written.
func TestRemoveHints(t *testing.T) {
	yes := ptr(true)
	create := []*discoveryv1.EndpointSlice{hslice("c", hep("10.1.0.1", "zone-a", yes, "zone-a"))}
	unchanged := []*discoveryv1.EndpointSlice{
		hslice("hinted", hep("10.1.1.1", "zone-a", yes, "zone-a")),
		hslice("bare", hep("10.1.2.1", "zone-a", yes, "")),
	}
	update := removeHints(create, nil, unchanged)
	if diff := cmp.Diff([]string{"c: 10.1.0.1>-"}, hintsOf(create)); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"hinted: 10.1.1.1>-"}, hintsOf(update)); diff != "" {
		t.Errorf("updated (-want +got):\n%s", diff)
	}
	if unchanged[0].Endpoints[0].Hints == nil {
		t.Error("the lister's slice was changed in place")
	}
}

// TestReconcileZoneHints drives the reconciler: two zones of equal CPU
// and four pods, two in each, get own-zone hints; with the annotation
// hints win over trafficDistribution; a zone going unready takes every
// hint off; the annotation removed takes them off too.
func TestReconcileZoneHints(t *testing.T) {
	nodes := map[string]*corev1.Node{
		"node-a": hintNode("node-a", "z1", "2", true),
		"node-b": hintNode("node-b", "z2", "2", true),
	}
	r := &reconciler{maxPerSlice: 100,
		node: func(name string) (*corev1.Node, error) { return nodes[name], nil },
		nodes: func() ([]*corev1.Node, error) {
			return []*corev1.Node{nodes["node-a"], nodes["node-b"]}, nil
		}}
	pods := testPods(0, 4, func(p *corev1.Pod) {
		if p.Name >= "pod-0002" {
			p.Spec.NodeName = "node-b"
		}
	})
	svc := testService(func(s *corev1.Service) {
		s.Annotations = map[string]string{corev1.AnnotationTopologyMode: "Auto"}
		s.Spec.TrafficDistribution = ptr(corev1.ServiceTrafficDistributionPreferClose)
	})
	p, err := r.reconcile(svc, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{": 10.1.0.1>z1 10.1.0.2>z1 10.1.0.3>z2 10.1.0.4>z2"}
	if diff := cmp.Diff(want, hintsOf(p.create)); diff != "" {
		t.Fatalf("created (-want +got):\n%s", diff)
	}
	if len(p.events) != 1 || p.events[0].reason != reasonHintsEnabled {
		t.Errorf("events %+v, want one %s", p.events, reasonHintsEnabled)
	}
	existing := p.create[0].DeepCopy()
	existing.Name = "web-1"

	// Nothing changed: nothing written.
	if p, err = r.reconcile(svc, pods, []*discoveryv1.EndpointSlice{existing}); err != nil || p.writes() || len(p.events) > 0 {
		t.Errorf("steady state: plan %+v, err %v", p, err)
	}

	// Zone z2's node unready: one zone left, hints off.
	nodes["node-b"] = hintNode("node-b", "z2", "2", false)
	p, err = r.reconcile(svc, pods, []*discoveryv1.EndpointSlice{existing})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"web-1: 10.1.0.1>- 10.1.0.2>- 10.1.0.3>- 10.1.0.4>-"}, hintsOf(p.update)); diff != "" {
		t.Errorf("updated (-want +got):\n%s", diff)
	}
	if len(p.events) != 1 || p.events[0].reason != reasonHintsDisabled || !strings.Contains(p.events[0].message, msgOneZone) {
		t.Errorf("events %+v, want one %s saying %q", p.events, reasonHintsDisabled, msgOneZone)
	}

	// Without the annotation, no trafficDistribution either: no hints.
	nodes["node-b"] = hintNode("node-b", "z2", "2", true)
	svc.Annotations = nil
	svc.Spec.TrafficDistribution = nil
	p, err = r.reconcile(svc, pods, []*discoveryv1.EndpointSlice{existing})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"web-1: 10.1.0.1>- 10.1.0.2>- 10.1.0.3>- 10.1.0.4>-"}, hintsOf(p.update)); diff != "" {
		t.Errorf("updated (-want +got):\n%s", diff)
	}
}

// TestAutoHintsAnnotations: either annotation, Auto or auto; the older
// one wins when both are set.
func TestAutoHintsAnnotations(t *testing.T) {
	for _, tc := range []struct {
		ann  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{corev1.AnnotationTopologyMode: "Auto"}, true},
		{map[string]string{corev1.AnnotationTopologyMode: "auto"}, true},
		{map[string]string{corev1.AnnotationTopologyMode: "Disabled"}, false},
		{map[string]string{corev1.DeprecatedAnnotationTopologyAwareHints: "auto"}, true},
		{map[string]string{corev1.DeprecatedAnnotationTopologyAwareHints: "disabled", corev1.AnnotationTopologyMode: "Auto"}, false},
	} {
		if got := autoHints(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}}); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.ann, got, tc.want)
		}
	}
}

// TestZoneHintsFollowNodes runs the controller against an API server:
// an annotated Service's endpoints in two zones of equal CPU get
// own-zone hints, and when a zone's node loses its zone label (no pod
// changes) the node event alone takes every hint off.
func TestZoneHintsFollowNodes(t *testing.T) {
	e := newEnv(t, 0, nil)
	for _, n := range []*corev1.Node{hintNode("n-a", "z1", "2", true), hintNode("n-b", "z2", "2", true)} {
		status := n.Status
		created, err := e.Client.Core.Nodes().Create(e.Ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = status
		if _, err := e.Client.Core.Nodes().UpdateStatus(e.Ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.service("tah", func(s *corev1.Service) {
		s.Annotations = map[string]string{corev1.AnnotationTopologyMode: "Auto"}
	})
	for i, node := range []string{"n-a", "n-a", "n-b", "n-b"} {
		name := fmt.Sprintf("tah-%d", i)
		e.pod(name, "tah", func(p *corev1.Pod) { p.Spec.NodeName = node })
		e.setStatus(name, fmt.Sprintf("10.9.0.%d", i+1), true)
	}
	hints := func(ss []discoveryv1.EndpointSlice) string {
		var ps []*discoveryv1.EndpointSlice
		for i := range ss {
			s := ss[i].DeepCopy()
			s.Name = ""
			slicesSortEndpoints(s)
			ps = append(ps, s)
		}
		return strings.Join(hintsOf(ps), " | ")
	}
	e.waitSlices("tah", func(ss []discoveryv1.EndpointSlice) error {
		if got, want := hints(ss), ": 10.9.0.1>z1 10.9.0.2>z1 10.9.0.3>z2 10.9.0.4>z2"; got != want {
			return fmt.Errorf("hints %q, want %q", got, want)
		}
		return nil
	})

	n, err := e.Client.Core.Nodes().Get(e.Ctx, "n-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(n.Labels, corev1.LabelTopologyZone)
	if _, err := e.Client.Core.Nodes().Update(e.Ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSlices("tah", func(ss []discoveryv1.EndpointSlice) error {
		if got, want := hints(ss), ": 10.9.0.1>- 10.9.0.2>- 10.9.0.3>- 10.9.0.4>-"; got != want {
			return fmt.Errorf("hints %q, want %q", got, want)
		}
		return nil
	})
}

func slicesSortEndpoints(s *discoveryv1.EndpointSlice) {
	sort.Slice(s.Endpoints, func(i, j int) bool { return s.Endpoints[i].Addresses[0] < s.Endpoints[j].Addresses[0] })
}
