package netpol

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// check is one connection and whether the policies should allow it:
// "ns/pod" or an address on either end, "tcp/80" for the port.
type check struct {
	from, to, port string
	want           bool
}

func allow(from, to, port string) check { return check{from, to, port, true} }
func deny(from, to, port string) check  { return check{from, to, port, false} }

// endpoint resolves one end of a check.
func endpoint(t *testing.T, w *world, s string) (netip.Addr, *pod) {
	t.Helper()
	if ns, name, ok := strings.Cut(s, "/"); ok {
		p := w.pod(ns, name)
		if p == nil {
			t.Fatalf("no pod %s", s)
		}
		return p.ip, p
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a, nil
}

func parsePort(t *testing.T, s string) (protocol, uint16) {
	t.Helper()
	proto, num, _ := strings.Cut(s, "/")
	n, err := strconv.Atoi(num)
	if err != nil {
		t.Fatal(err)
	}
	p := map[string]protocol{"tcp": protoTCP, "udp": protoUDP, "sctp": protoSCTP}[proto]
	return p, uint16(n)
}

// The common cast: namespaces default and other (project=myproject)
// and plain; pods on this node unless named "remote-*".
func cast() []any {
	return []any{
		newNamespace("default", nil),
		newNamespace("other", map[string]string{"project": "myproject"}),
		newNamespace("plain", nil),
		newPod("default", "db", "10.42.0.10", map[string]string{"role": "db"}),
		newPod("default", "frontend", "10.42.0.11", map[string]string{"role": "frontend"}),
		newPod("default", "backend", "10.42.0.12", map[string]string{"role": "backend"}),
		newPod("other", "client", "10.42.0.20", map[string]string{"role": "client"}),
		newPod("plain", "frontend", "10.42.0.30", map[string]string{"role": "frontend"}),
		newPod("plain", "remote-frontend", "10.42.1.30", map[string]string{"role": "frontend"}, onNode("node-b")),
	}
}

func TestModelSemantics(t *testing.T) {
	tests := []struct {
		name     string
		objs     []any // added to cast()
		policies []*networkingv1.NetworkPolicy
		checks   []check
	}{
		{
			name: "no policy: everything goes",
			checks: []check{
				allow("default/frontend", "default/db", "tcp/6379"),
				allow("plain/frontend", "default/db", "udp/53"),
				allow("default/db", "8.8.8.8", "tcp/443"),
			},
		},
		{
			name:     "test-network-policy",
			policies: []*networkingv1.NetworkPolicy{testNetworkPolicy()},
			checks: []check{
				allow("default/frontend", "default/db", "tcp/6379"),
				deny("default/frontend", "default/db", "tcp/6380"),
				deny("default/frontend", "default/db", "udp/6379"),
				deny("default/backend", "default/db", "tcp/6379"),
				// namespaceSelector alone: every pod of a matching
				// namespace.
				allow("other/client", "default/db", "tcp/6379"),
				// podSelector alone: the policy's namespace only.
				deny("plain/frontend", "default/db", "tcp/6379"),
				deny("plain/remote-frontend", "default/db", "tcp/6379"),
				allow("172.17.0.5", "default/db", "tcp/6379"),
				allow("172.17.255.255", "default/db", "tcp/6379"),
				deny("172.17.1.5", "default/db", "tcp/6379"),
				deny("172.18.0.1", "default/db", "tcp/6379"),
				allow("default/db", "10.0.0.7", "tcp/5978"),
				deny("default/db", "10.0.0.7", "tcp/5979"),
				deny("default/db", "10.0.1.7", "tcp/5978"),
				// Egress is isolated too: not even to a pod it serves.
				deny("default/db", "default/frontend", "tcp/80"),
				// Pods the policy does not select are untouched.
				allow("plain/frontend", "default/backend", "tcp/1"),
				allow("default/backend", "8.8.8.8", "udp/53"),
			},
		},
		{
			name:     "default-deny ingress",
			policies: []*networkingv1.NetworkPolicy{defaultDenyIngress("default")},
			checks: []check{
				deny("default/frontend", "default/db", "tcp/80"),
				deny("plain/frontend", "default/backend", "udp/53"),
				deny("10.1.2.3", "default/db", "tcp/80"),
				allow("default/db", "plain/frontend", "tcp/80"),
				allow("default/db", "8.8.8.8", "tcp/80"),
				allow("plain/frontend", "other/client", "tcp/80"),
				// Loopback follows no policy.
				allow("default/db", "default/db", "tcp/80"),
			},
		},
		{
			name:     "allow-all ingress beside default-deny: policies add up",
			policies: []*networkingv1.NetworkPolicy{defaultDenyIngress("default"), allowAllIngress("default")},
			checks: []check{
				allow("default/frontend", "default/db", "tcp/80"),
				allow("10.1.2.3", "default/db", "sctp/9"),
			},
		},
		{
			name:     "default-deny egress",
			policies: []*networkingv1.NetworkPolicy{defaultDenyEgress("default")},
			checks: []check{
				deny("default/db", "default/frontend", "tcp/80"),
				deny("default/db", "8.8.8.8", "udp/53"),
				deny("default/db", "plain/remote-frontend", "tcp/80"),
				allow("plain/frontend", "default/db", "tcp/80"),
			},
		},
		{
			name:     "allow-all egress beside default-deny egress",
			policies: []*networkingv1.NetworkPolicy{defaultDenyEgress("default"), allowAllEgress("default")},
			checks: []check{
				allow("default/db", "8.8.8.8", "udp/53"),
				allow("default/db", "plain/frontend", "tcp/80"),
			},
		},
		{
			name:     "default-deny all",
			policies: []*networkingv1.NetworkPolicy{defaultDenyAll("default")},
			checks: []check{
				deny("default/db", "default/frontend", "tcp/80"),
				deny("plain/frontend", "default/db", "tcp/80"),
				deny("default/db", "8.8.8.8", "tcp/80"),
				allow("plain/frontend", "other/client", "tcp/80"),
			},
		},
		{
			name:     "endPort range",
			policies: []*networkingv1.NetworkPolicy{multiPortEgress()},
			checks: []check{
				allow("default/db", "10.0.0.1", "tcp/32000"),
				allow("default/db", "10.0.0.1", "tcp/32500"),
				allow("default/db", "10.0.0.1", "tcp/32768"),
				deny("default/db", "10.0.0.1", "tcp/31999"),
				deny("default/db", "10.0.0.1", "tcp/32769"),
				deny("default/db", "10.0.0.1", "udp/32000"),
				deny("default/db", "10.0.1.1", "tcp/32000"),
				// Ingress is not isolated by an Egress-only policy.
				allow("default/frontend", "default/db", "tcp/1"),
			},
		},
		{
			name: "policyTypes default: Ingress, and Egress with egress rules",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "implicit", sel("role", "db"),
					egressRules(egressRule(ports(port(udp, 53))))),
			},
			checks: []check{
				deny("default/frontend", "default/db", "tcp/80"),
				allow("default/db", "8.8.8.8", "udp/53"),
				deny("default/db", "8.8.8.8", "tcp/53"),
			},
		},
		{
			name: "namespace and pod selectors in one peer: both must match",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "and", sel("role", "db"), ingressRules(ingressRule(nil,
					bothPeer(sel("kubernetes.io/metadata.name", "plain"), sel("role", "frontend"))))),
			},
			checks: []check{
				allow("plain/frontend", "default/db", "tcp/80"),
				allow("plain/remote-frontend", "default/db", "tcp/80"),
				deny("default/frontend", "default/db", "tcp/80"),
				deny("other/client", "default/db", "tcp/80"),
			},
		},
		{
			name: "namespace and pod selectors in two peers: either matches",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "or", sel("role", "db"), ingressRules(ingressRule(nil,
					nsPeer(sel("kubernetes.io/metadata.name", "plain")), podPeer(sel("role", "frontend"))))),
			},
			checks: []check{
				allow("plain/frontend", "default/db", "tcp/80"),
				allow("default/frontend", "default/db", "tcp/80"),
				deny("other/client", "default/db", "tcp/80"),
				deny("default/backend", "default/db", "tcp/80"),
			},
		},
		{
			name: "empty namespaceSelector: every namespace",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "all-ns", sel("role", "db"), ingressRules(ingressRule(nil,
					bothPeer(sel(), sel("role", "frontend"))))),
			},
			checks: []check{
				allow("plain/frontend", "default/db", "tcp/80"),
				allow("default/frontend", "default/db", "tcp/80"),
				deny("other/client", "default/db", "tcp/80"),
				deny("10.42.0.99", "default/db", "tcp/80"),
			},
		},
		{
			name: "matchExpressions",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "expr", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"db", "backend"}}}},
					ingressRules(ingressRule(nil, nsPeer(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "project", Operator: metav1.LabelSelectorOpExists}}})))),
			},
			checks: []check{
				allow("other/client", "default/db", "tcp/80"),
				allow("other/client", "default/backend", "tcp/80"),
				deny("plain/frontend", "default/backend", "tcp/80"),
				allow("plain/frontend", "default/frontend", "tcp/80"),
			},
		},
		{
			name: "ports: protocol alone is every port of it; SCTP is not TCP",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "proto", sel("role", "db"), ingressRules(ingressRule(ports(protoOnly(udp), port(sctp, 80))))),
			},
			checks: []check{
				allow("default/frontend", "default/db", "udp/1"),
				allow("default/frontend", "default/db", "udp/65535"),
				allow("default/frontend", "default/db", "sctp/80"),
				deny("default/frontend", "default/db", "tcp/80"),
				deny("default/frontend", "default/db", "sctp/81"),
			},
		},
		{
			name: "named ports resolve on the selected pod for ingress",
			objs: []any{
				newPod("default", "web-1", "10.42.0.40", map[string]string{"app": "web"}, withPort("http", tcp, 80)),
				newPod("default", "web-2", "10.42.0.41", map[string]string{"app": "web"}, withPort("http", tcp, 8080), withPort("dns", udp, 5353)),
				newPod("default", "web-3", "10.42.0.42", map[string]string{"app": "web"}, withPort("http", udp, 80)),
			},
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "named", sel("app", "web"), ingressRules(ingressRule(ports(namedPortRef(tcp, "http"), namedPortRef(udp, "dns"))))),
			},
			checks: []check{
				allow("default/frontend", "default/web-1", "tcp/80"),
				deny("default/frontend", "default/web-1", "tcp/8080"),
				allow("default/frontend", "default/web-2", "tcp/8080"),
				deny("default/frontend", "default/web-2", "tcp/80"),
				allow("default/frontend", "default/web-2", "udp/5353"),
				// web-3's "http" is UDP: the TCP "http" the rule names
				// is not there.
				deny("default/frontend", "default/web-3", "tcp/80"),
				deny("default/frontend", "default/web-3", "udp/80"),
			},
		},
		{
			name: "named ports resolve on the destination for egress",
			objs: []any{
				newPod("plain", "web-1", "10.42.0.40", map[string]string{"app": "web"}, withPort("http", tcp, 80)),
				newPod("plain", "web-2", "10.42.1.41", map[string]string{"app": "web"}, withPort("http", tcp, 8080), onNode("node-b")),
			},
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "named-egress", sel("role", "db"), types_(tEgress),
					egressRules(egressRule(ports(namedPortRef(tcp, "http")), bothPeer(sel(), sel("app", "web"))))),
			},
			checks: []check{
				allow("default/db", "plain/web-1", "tcp/80"),
				deny("default/db", "plain/web-1", "tcp/8080"),
				allow("default/db", "plain/web-2", "tcp/8080"),
				deny("default/db", "plain/web-2", "tcp/80"),
				deny("default/db", "plain/frontend", "tcp/80"),
			},
		},
		{
			name: "both ends must allow",
			policies: []*networkingv1.NetworkPolicy{
				allowAllIngress("default"),
				newPolicy("plain", "deny-egress", sel("role", "frontend"), types_(tEgress)),
			},
			checks: []check{
				deny("plain/frontend", "default/db", "tcp/80"),
				allow("default/frontend", "default/db", "tcp/80"),
			},
		},
		{
			name: "policies of other nodes' pods are theirs to enforce",
			policies: []*networkingv1.NetworkPolicy{
				defaultDenyAll("plain"),
			},
			checks: []check{
				// The remote pod's ingress is judged on its node.
				allow("default/db", "plain/remote-frontend", "tcp/80"),
				deny("default/db", "plain/frontend", "tcp/80"),
			},
		},
		{
			name: "ipBlock: pod addresses inside it match, IPv6 blocks match nothing",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "blocks", sel("role", "db"), ingressRules(ingressRule(nil,
					blockPeer("10.42.0.0/24", "10.42.0.11/32"), blockPeer("::/0")))),
			},
			checks: []check{
				allow("default/backend", "default/db", "tcp/80"),
				deny("default/frontend", "default/db", "tcp/80"),
				deny("plain/remote-frontend", "default/db", "tcp/80"),
			},
		},
		{
			name: "an unreadable peer allows nothing, and the policy still isolates",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "broken", sel("role", "db"), ingressRules(ingressRule(nil,
					podPeer(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Bogus"}}})))),
			},
			checks: []check{
				deny("default/frontend", "default/db", "tcp/80"),
			},
		},
		{
			name: "hostNetwork and finished pods take no part",
			objs: []any{
				newPod("default", "host", "10.42.0.50", map[string]string{"role": "db"}, func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
				newPod("default", "done", "10.42.0.51", map[string]string{"role": "frontend"}, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
			},
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("default", "frontend-only", sel("role", "db"), ingressRules(ingressRule(nil, podPeer(sel("role", "frontend"))))),
			},
			checks: []check{
				deny("10.42.0.51", "default/db", "tcp/80"),
				allow("default/frontend", "default/db", "tcp/80"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := testWorld(t, append(cast(), tt.objs...)...)
			compiled := compileAll(w, tt.policies...)
			for _, c := range compiled {
				if len(c.problems) > 0 && !strings.Contains(tt.name, "unreadable") {
					t.Errorf("policy %s: problems %v", c.key(), c.problems)
				}
			}
			for _, c := range tt.checks {
				src, srcPod := endpoint(t, w, c.from)
				dst, dstPod := endpoint(t, w, c.to)
				proto, p := parsePort(t, c.port)
				got := allowed(compiled, connection{src: src, dst: dst, srcPod: srcPod, dstPod: dstPod, proto: proto, port: p})
				if got != c.want {
					t.Errorf("%s -> %s %s: allowed %v, want %v", c.from, c.to, c.port, got, c.want)
				}
			}
		})
	}
}

func TestHostNetworkPodsAreNotSelected(t *testing.T) {
	p := newPod("default", "host", "192.0.2.1", nil, func(p *corev1.Pod) { p.Spec.HostNetwork = true })
	if _, ok := podFromAPI(p, testNodeName, netip.Addr{}); ok {
		t.Error("a hostNetwork pod is in the model")
	}
	// A pod whose sandbox has an address its status does not show yet.
	p = newPod("default", "new", "", nil)
	v, ok := podFromAPI(p, testNodeName, netip.MustParseAddr("10.42.0.9"))
	if !ok || v.ip != netip.MustParseAddr("10.42.0.9") || !v.local {
		t.Errorf("new pod: %+v, %v", v, ok)
	}
}

func TestRanges(t *testing.T) {
	r := func(a, b string) ipRange {
		return ipRange{addrU32(netip.MustParseAddr(a)), addrU32(netip.MustParseAddr(b))}
	}
	got := subtractRanges([]ipRange{prefixRange(netip.MustParsePrefix("172.17.0.0/16"))},
		mergeRanges([]ipRange{prefixRange(netip.MustParsePrefix("172.17.1.0/24")), prefixRange(netip.MustParsePrefix("172.17.255.0/24"))}))
	want := []ipRange{r("172.17.0.0", "172.17.0.255"), r("172.17.2.0", "172.17.254.255")}
	if diff := cmp.Diff(fmt.Sprint(want), fmt.Sprint(got)); diff != "" {
		t.Errorf("172.17.0.0/16 except two /24s (-want +got):\n%s", diff)
	}
	all := prefixRange(netip.MustParsePrefix("0.0.0.0/0"))
	if all.lo != 0 || all.hi != 1<<32-1 {
		t.Errorf("0.0.0.0/0 = %v", all)
	}
	merged := mergeRanges([]ipRange{r("10.0.0.5", "10.0.0.5"), r("10.0.0.0", "10.0.0.255"), r("10.0.1.0", "10.0.1.0")})
	if want := []ipRange{r("10.0.0.0", "10.0.1.0")}; fmt.Sprint(merged) != fmt.Sprint(want) {
		t.Errorf("merged = %v, want %v", merged, want)
	}
}
