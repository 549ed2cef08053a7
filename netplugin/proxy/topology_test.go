package proxy

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// hinted is a ready endpoint of this test node's with zone (and node)
// hints; no names: no hints.
func hinted(a string, zones []string, nodes ...string) endpoint {
	return endpoint{addr: netip.MustParseAddrPort(a), ready: true, serving: true, zoneHints: zones, nodeHints: nodes}
}

// TestClusterEndpointsTopology: the endpoints for this node's zone when
// every ready endpoint has a zone hint and one is for the zone; all of
// them otherwise; none of it under a Local policy; node hints first.
func TestClusterEndpointsTopology(t *testing.T) {
	za, zb := []string{"zone-a"}, []string{"zone-b"}
	tests := []struct {
		name string
		sp   servicePort
		want []string
	}{
		{"own zone only", servicePort{zone: "zone-a", endpoints: []endpoint{
			hinted("10.0.0.1:80", za), hinted("10.0.0.2:80", zb), hinted("10.0.0.3:80", za)}},
			[]string{"10.0.0.1:80", "10.0.0.3:80"}},
		{"one endpoint without a hint: all", servicePort{zone: "zone-a", endpoints: []endpoint{
			hinted("10.0.0.1:80", za), hinted("10.0.0.2:80", nil)}},
			[]string{"10.0.0.1:80", "10.0.0.2:80"}},
		{"an unready endpoint without a hint does not count", servicePort{zone: "zone-a", endpoints: []endpoint{
			hinted("10.0.0.1:80", za), hinted("10.0.0.2:80", zb), {addr: netip.MustParseAddrPort("10.0.0.3:80")}}},
			[]string{"10.0.0.1:80"}},
		{"no hint for this zone: all", servicePort{zone: "zone-c", endpoints: []endpoint{
			hinted("10.0.0.1:80", za), hinted("10.0.0.2:80", zb)}},
			[]string{"10.0.0.1:80", "10.0.0.2:80"}},
		{"node without a zone: all", servicePort{endpoints: []endpoint{
			hinted("10.0.0.1:80", za), hinted("10.0.0.2:80", zb)}},
			[]string{"10.0.0.1:80", "10.0.0.2:80"}},
		{"internalTrafficPolicy Local: no hints", servicePort{zone: "zone-a", internalLocal: true, endpoints: []endpoint{
			hinted("10.0.0.1:80", za), hinted("10.0.0.2:80", zb)}},
			[]string{"10.0.0.1:80", "10.0.0.2:80"}},
		{"externalTrafficPolicy Local: no hints", servicePort{zone: "zone-a", externalLocal: true, endpoints: []endpoint{
			hinted("10.0.0.1:80", za), hinted("10.0.0.2:80", zb)}},
			[]string{"10.0.0.1:80", "10.0.0.2:80"}},
		{"node hints win", servicePort{node: testNode, zone: "zone-a", endpoints: []endpoint{
			hinted("10.0.0.1:80", za, "node-b"), hinted("10.0.0.2:80", za, testNode), hinted("10.0.0.3:80", zb, "node-c")}},
			[]string{"10.0.0.2:80"}},
		{"terminating fallback: no hints", servicePort{zone: "zone-a", endpoints: []endpoint{
			{addr: netip.MustParseAddrPort("10.0.0.1:80"), serving: true, terminating: true, zoneHints: zb},
			{addr: netip.MustParseAddrPort("10.0.0.2:80"), serving: true, terminating: true, zoneHints: za}}},
			[]string{"10.0.0.1:80", "10.0.0.2:80"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, epAddrs(clusterEndpoints(&tt.sp))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// zoneSlice is a slice of ready endpoints of node-b with zone hints:
// address → zone ("" none).
func zoneSlice(svc, name string, port int32, hints map[string]string) *discoveryv1.EndpointSlice {
	var eps []ep
	for _, a := range slices.Sorted(maps.Keys(hints)) {
		eps = append(eps, readyEP(a, "node-b"))
	}
	s := newSlice(svc, name, port, eps...)
	for i := range s.Endpoints {
		if z := hints[s.Endpoints[i].Addresses[0]]; z != "" {
			s.Endpoints[i].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: z}}}
		}
	}
	return s
}

// TestTopologyHintsInTheKernel programs hinted endpoints and reads the
// Service's choice back: the node's zone's endpoints, all of them once
// one lacks a hint, and the new zone's after the node moves.
func TestTopologyHintsInTheKernel(t *testing.T) {
	requireRoot(t)
	p := newTestProxier(t, newNetns(t))
	p.nodeChanged(&corev1.Node{ObjectMeta: metaNode(testNode, "zone-a")})
	svc := newService("web", "10.96.0.10", 80)
	hints := map[string]string{"10.200.0.10": "zone-a", "10.200.0.11": "zone-b", "10.200.0.12": "zone-a"}
	p.set(t, svc, zoneSlice("web", "web-1", 8080, hints))
	checkKernelView(t, p)
	targets := func() []string {
		t.Helper()
		c, err := nftables.New(nftables.WithNetNSFd(int(p.ns)))
		must(t, "netlink", err)
		got, err := readTargets(c, testTable, "service-default/web/tcp/http")
		must(t, "read targets", err)
		var out []string
		for _, a := range got {
			out = append(out, a.String())
		}
		slices.Sort(out)
		return out
	}
	if diff := cmp.Diff([]string{"10.200.0.10:8080", "10.200.0.12:8080"}, targets()); diff != "" {
		t.Errorf("zone-a's endpoints (-want +got):\n%s", diff)
	}

	// One endpoint without a hint: a transition, every endpoint.
	hints["10.200.0.13"] = ""
	p.set(t, zoneSlice("web", "web-1", 8080, hints))
	checkKernelView(t, p)
	if got := targets(); len(got) != 4 {
		t.Errorf("with an endpoint without a hint: %v, want all four", got)
	}
	delete(hints, "10.200.0.13")
	p.set(t, zoneSlice("web", "web-1", 8080, hints))

	// The node moves to zone-b: a full sync writes zone-b's choice.
	p.nodeChanged(&corev1.Node{ObjectMeta: metaNode(testNode, "zone-b")})
	if !p.needFull {
		t.Fatal("a zone change did not ask for a full sync")
	}
	if err := p.sync(); err != nil {
		t.Fatal(err)
	}
	checkKernelView(t, p)
	if diff := cmp.Diff([]string{"10.200.0.11:8080"}, targets()); diff != "" {
		t.Errorf("zone-b's endpoints (-want +got):\n%s", diff)
	}
}
