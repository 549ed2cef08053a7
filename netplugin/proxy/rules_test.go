package proxy

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var goldenConfig = Config{
	NodeName:    testNode,
	ClusterCIDR: netip.MustParsePrefix("10.42.0.0/16"),
	ServiceCIDR: netip.MustParsePrefix("10.43.0.0/16"),
}

// goldenTable renders the table a proxier with cfg would program for
// these Services and slices; with Services, only their part.
func goldenTable(t *testing.T, cfg Config, objs ...any) string {
	t.Helper()
	services, sliceStore := testIndexers()
	zone := ""
	for _, o := range objs {
		switch o := o.(type) {
		case nodeZone:
			zone = string(o)
		case *corev1.Service:
			mustAdd(t, services, o)
		case *discoveryv1.EndpointSlice:
			mustAdd(t, sliceStore, o)
		}
	}
	p := newProxier(cfg, nil, services, sliceStore)
	p.syncZone = zone
	var all []objects
	if len(services.ListKeys()) == 0 {
		all = append(all, baseObjects(p.rc))
	}
	for _, key := range slices.Sorted(slices.Values(services.ListKeys())) {
		if o, _, ok := p.serviceObjects(key); ok {
			all = append(all, o)
		}
	}
	return renderTable(TableName(""), all)
}

// nodeZone among goldenTable's objects is the node's zone.
type nodeZone string

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

func TestGoldenRules(t *testing.T) {
	lb := newService("lb", "10.43.0.30", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyCluster), func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalIPs = []string{"192.0.2.10"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	})
	twoPorts := newService("multi", "10.43.0.40", 53, func(s *corev1.Service) {
		s.Spec.Ports[0].Name = "dns"
		s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53})
	})
	twoPortsSlice := newSlice("multi", "multi-1", 5353, readyEP("10.42.0.5", testNode))
	twoPortsSlice.Ports = []discoveryv1.EndpointPort{
		{Name: ptr("dns"), Protocol: ptr(corev1.ProtocolUDP), Port: ptr[int32](5353)},
		{Name: ptr("dns-tcp"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr[int32](5354)},
	}
	tests := []struct {
		name string
		cfg  func(*Config)
		objs []any
	}{
		// The fixed part alone: base chains, maps, masquerading.
		{name: "empty"},
		{name: "nodeport-addresses", cfg: func(c *Config) {
			c.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("127.0.0.0/8")}
		}},
		// Without a cluster CIDR nothing is masqueraded on its account.
		{name: "no-cluster-cidr", cfg: func(c *Config) { c.ClusterCIDR, c.ServiceCIDR = netip.Prefix{}, netip.Prefix{} },
			objs: []any{newService("web", "10.43.0.10", 80), newSlice("web", "web-1", 8080, readyEP("10.42.0.5", testNode))}},
		// numgen over the ready endpoints, DNAT per endpoint, hairpin and
		// off-cluster masquerade.
		{name: "clusterip", objs: []any{
			newService("web", "10.43.0.10", 80),
			newSlice("web", "web-1", 8080, readyEP("10.42.0.5", testNode), readyEP("10.42.1.7", "node-b"),
				ep{ip: "10.42.0.9", node: testNode}), // not ready, not serving: no traffic
		}},
		// The same endpoint in two slices is one endpoint.
		{name: "dedupe", objs: []any{
			newService("web", "10.43.0.10", 80),
			newSlice("web", "web-1", 8080, readyEP("10.42.0.5", testNode)),
			newSlice("web", "web-2", 8080, readyEP("10.42.0.5", testNode), readyEP("10.42.0.6", testNode)),
		}},
		// No endpoint: the ClusterIP and the NodePort reject.
		{name: "no-endpoints", objs: []any{
			newService("web", "10.43.0.10", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyCluster)),
		}},
		// Headless and ExternalName Services, and those another proxy
		// serves, are not proxied at all.
		{name: "not-proxied", objs: []any{
			newService("headless", "None", 80),
			newService("ext", "", 80, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }),
			newService("other-proxy", "10.43.0.11", 80, func(s *corev1.Service) {
				s.Labels = map[string]string{labelServiceProxyName: "someone-else"}
			}),
		}},
		{name: "nodeport", objs: []any{
			newService("web", "10.43.0.10", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyCluster)),
			newSlice("web", "web-1", 8080, readyEP("10.42.0.5", testNode), readyEP("10.42.1.7", "node-b")),
		}},
		// LoadBalancer ingress IPs and externalIPs are served like
		// external addresses.
		{name: "loadbalancer", objs: []any{lb, newSlice("lb", "lb-1", 8080, readyEP("10.42.0.5", testNode))}},
		{name: "affinity", objs: []any{
			newService("web", "10.43.0.10", 80, affinity(60)),
			newSlice("web", "web-1", 8080, readyEP("10.42.0.5", testNode), readyEP("10.42.1.7", "node-b")),
		}},
		{name: "internal-local", objs: []any{
			newService("web", "10.43.0.10", 80, internalLocal),
			newSlice("web", "web-1", 8080, readyEP("10.42.0.5", testNode), readyEP("10.42.1.7", "node-b")),
		}},
		// Local policy and no endpoint here: drop, not reject.
		{name: "internal-local-none", objs: []any{
			newService("web", "10.43.0.10", 80, internalLocal),
			newSlice("web", "web-1", 8080, readyEP("10.42.1.7", "node-b")),
		}},
		{name: "external-local", objs: []any{
			newService("web", "10.43.0.10", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyLocal)),
			newSlice("web", "web-1", 8080, readyEP("10.42.0.5", testNode), readyEP("10.42.1.7", "node-b")),
		}},
		{name: "external-local-none", objs: []any{
			newService("web", "10.43.0.10", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyLocal)),
			newSlice("web", "web-1", 8080, readyEP("10.42.1.7", "node-b")),
		}},
		// Terminating but serving endpoints get traffic only when no
		// endpoint is ready.
		{name: "terminating-fallback", objs: []any{
			newService("web", "10.43.0.10", 80),
			newSlice("web", "web-1", 8080,
				ep{ip: "10.42.0.5", node: testNode, serving: true, terminating: true},
				ep{ip: "10.42.0.6", node: testNode, terminating: true}),
		}},
		{name: "terminating-ignored", objs: []any{
			newService("web", "10.43.0.10", 80),
			newSlice("web", "web-1", 8080,
				readyEP("10.42.0.4", testNode),
				ep{ip: "10.42.0.5", node: testNode, serving: true, terminating: true}),
		}},
		{name: "multiport", objs: []any{twoPorts, twoPortsSlice}},
		// loadBalancerSourceRanges guard the load-balancer address (not
		// the external IP, node port or cluster IP), endpoints or not;
		// a range holding the node's address lets the load-balancer
		// address in as a source too.
		{name: "source-ranges", cfg: func(c *Config) { c.NodeIPs = []netip.Addr{addr("192.0.2.1")} }, objs: []any{
			withSourceRanges(lb, " 198.51.100.0/24", "192.0.2.0/28", "2001:db8::/32"),
			newSlice("lb", "lb-1", 8080, readyEP("10.42.0.5", testNode)),
			newService("lb-none", "10.43.0.31", 81, nodePort(30081, corev1.ServiceExternalTrafficPolicyCluster), func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.7/32"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}
			}),
		}},
		// Topology hints: the node's zone's endpoints for the Cluster
		// policy; the Local policy (here external) keeps all, as the
		// node itself and pods reach a NodePort Service through the
		// service chain.
		{name: "topology-hints", objs: []any{
			nodeZone("zone-a"),
			newService("web", "10.43.0.10", 80),
			zoneSlice("web", "web-1", 8080, map[string]string{"10.42.1.5": "zone-a", "10.42.1.6": "zone-b", "10.42.1.7": "zone-a"}),
			newService("local", "10.43.0.11", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyLocal)),
			zoneSlice("local", "local-1", 8080, map[string]string{"10.42.1.5": "zone-a", "10.42.1.6": "zone-b"}),
		}},
		// 0.0.0.0/0 lets everyone in: no firewall at all, as with no
		// ranges; so do ranges without a load-balancer address.
		{name: "source-ranges-open", objs: []any{
			withSourceRanges(lb, "198.51.100.0/24", "0.0.0.0/0"),
			newSlice("lb", "lb-1", 8080, readyEP("10.42.0.5", testNode)),
			newService("np", "10.43.0.32", 82, nodePort(30082, corev1.ServiceExternalTrafficPolicyCluster), func(s *corev1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
				s.Spec.ExternalIPs = []string{"192.0.2.20"}
			}),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := goldenConfig
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			checkGolden(t, tt.name, goldenTable(t, cfg, tt.objs...))
		})
	}
}

func withSourceRanges(svc *corev1.Service, ranges ...string) *corev1.Service {
	svc = svc.DeepCopy()
	svc.Spec.LoadBalancerSourceRanges = ranges
	return svc
}

func TestUsableEndpoints(t *testing.T) {
	eps := []endpoint{
		{addr: netip.MustParseAddrPort("10.0.0.1:80"), ready: true, serving: true},
		{addr: netip.MustParseAddrPort("10.0.0.2:80"), local: true, serving: true, terminating: true},
		{addr: netip.MustParseAddrPort("10.0.0.3:80"), local: true, terminating: true},
	}
	tests := []struct {
		name      string
		eps       []endpoint
		onlyLocal bool
		want      []string
	}{
		{"ready wins", eps, false, []string{"10.0.0.1:80"}},
		{"local falls back to serving terminating", eps, true, []string{"10.0.0.2:80"}},
		{"none", eps[2:], false, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, epAddrs(usable(tt.eps, tt.onlyLocal))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The text form is built with the expressions; a rule's text must name
// what the expressions do, so check a sample stays consistent.
func TestRuleTextMatchesExpressions(t *testing.T) {
	r := newRule().daddr(netip.MustParsePrefix("10.43.0.0/16"), true).drop()
	if got, want := r.String(), "ip daddr 10.43.0.0/16 drop"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	if got := len(r.exprs); got != 4 { // payload, bitwise, cmp, verdict
		t.Errorf("%d expressions, want 4: %v", got, r.exprs)
	}
	if got, want := newRule().numgenVmap(7, 2).String(), "7 . numgen random mod 2 vmap @endpoint-chains-7"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
}

// A dual-stack Service is served at its IPv4 cluster IP wherever its
// families put it; an IPv6-only one is not served by this IPv4 proxy.
func TestDualStackServiceClusterIP(t *testing.T) {
	v6first := newService("web", "fd43::10", 80)
	v6first.Spec.ClusterIPs = []string{"fd43::10", "10.43.0.10"}
	slices := []*discoveryv1.EndpointSlice{newSlice("web", "web-1", 8080, readyEP("10.42.0.5", "n"))}
	ports := servicePorts(v6first, slices, "n", "")
	if len(ports) != 1 || ports[0].clusterIP != netip.MustParseAddr("10.43.0.10") {
		t.Errorf("[IPv6, IPv4] Service: %+v, want one port on 10.43.0.10", ports)
	}
	v6only := newService("six", "fd43::11", 80)
	v6only.Spec.ClusterIPs = []string{"fd43::11"}
	if ports := servicePorts(v6only, slices, "n", ""); len(ports) != 0 {
		t.Errorf("IPv6-only Service: %+v, want none", ports)
	}
}
