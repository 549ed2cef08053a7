package dns

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
)

func TestPodIP(t *testing.T) {
	for _, tc := range []struct {
		label string
		want  string // "" when not an address
	}{
		{"10-42-0-5", "10.42.0.5"},
		{"172-17-0-3", "172.17.0.3"},
		{"fd00--1", "fd00::1"},
		{"2001-db8-0-0-0-0-0-1", "2001:db8::1"},
		{"10-42-0", ""},
		{"10-42-0-5-6", ""},
		{"010-42-0-5", ""},
		{"256-0-0-1", ""},
		{"web", ""},
		{"fe80--1%eth0", ""},
	} {
		ip, ok := podIP(tc.label)
		got := ""
		if ok {
			got = ip.String()
		}
		if got != tc.want {
			t.Errorf("podIP(%q) = %q, want %q", tc.label, got, tc.want)
		}
	}
}

func TestReverseIP(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string
	}{
		{"5.0.42.10.in-addr.arpa.", "10.42.0.5"},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", "fd00::1"},
		{"0.42.10.in-addr.arpa.", ""},
		{"05.0.42.10.in-addr.arpa.", ""},
		{"256.0.42.10.in-addr.arpa.", ""},
		{"x.0.42.10.in-addr.arpa.", ""},
		{"10.in-addr.arpa.", ""},
		{"1.0.d.f.ip6.arpa.", ""},
		{"example.com.", ""},
	} {
		ip, ok := reverseIP(tc.name)
		got := ""
		if ok {
			got = ip.String()
		}
		if got != tc.want {
			t.Errorf("reverseIP(%q) = %q, want %q", tc.name, got, tc.want)
		}
		if ok {
			if back := ptrRR(netip.MustParseAddr(got), "x.", 5).Header().Name; back != tc.name {
				t.Errorf("PTR owner of %s = %q, want %q", got, back, tc.name)
			}
		}
	}
}

// Config.TTL sets the TTL of the zone's answers and the SOA's negative
// TTL (the kubernetes plugin's ttl option).
func TestConfigurableTTL(t *testing.T) {
	s, err := New(Config{Informers: unstartedInformers(), Address: "127.0.0.1:0", Upstreams: []string{}, Logger: quietLogger(), TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.20", Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	svc.Name, svc.Namespace = "web", "default"
	s.index.setService("default/web", buildService(svc, nil, s.zone, s.index.ttl))
	s.synced.Store(true)
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  result
	}{
		{"web.default.svc.cluster.local.", dns.TypeA, result{Rcode: "NOERROR", Answer: []string{"web.default.svc.cluster.local. 30 IN A 10.43.0.20"}}},
		{"nope.default.svc.cluster.local.", dns.TypeA, result{Rcode: "NXDOMAIN",
			SOA: "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 30"}},
	} {
		req := new(dns.Msg)
		req.SetQuestion(tc.name, tc.qtype)
		w := &discardWriter{}
		s.ServeDNS(w, req)
		if diff := cmp.Diff(tc.want, summarize(w.last)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// A query in the cluster domain of another class than IN is refused,
// never forwarded.
func TestZoneOtherClassRefused(t *testing.T) {
	stub := startStub(t)
	s, err := New(Config{Informers: unstartedInformers(), Address: "127.0.0.1:0", Upstreams: []string{stub.addr}})
	if err != nil {
		t.Fatal(err)
	}
	req := new(dns.Msg)
	req.SetQuestion("web.default.svc.cluster.local.", dns.TypeA)
	req.Question[0].Qclass = dns.ClassCHAOS
	w := &discardWriter{}
	s.ServeDNS(w, req)
	if w.last.Rcode != dns.RcodeRefused {
		t.Errorf("CH query in the zone: %s, want REFUSED", dns.RcodeToString[w.last.Rcode])
	}
	if n := stub.count("web.default.svc.cluster.local.", dns.TypeA); n != 0 {
		t.Errorf("forwarded %d times", n)
	}
}

// A dual-stack ClusterIP Service answers A and AAAA and has a PTR for
// each cluster IP; its SRV targets the Service name once per port.
func TestBuildServiceDualStack(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{
		ClusterIP: "10.43.0.20", ClusterIPs: []string{"10.43.0.20", "fd00:43::20"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
	}}
	svc.Name, svc.Namespace = "web", "default"
	z := newZoneIndex("cluster.local.", 5, nil)
	z.setService("default/web", buildService(svc, nil, "cluster.local.", 5))
	z.setNamespace("default", true)
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{"web.default.svc.cluster.local.", dns.TypeA, []string{"web.default.svc.cluster.local. 5 IN A 10.43.0.20"}},
		{"web.default.svc.cluster.local.", dns.TypeAAAA, []string{"web.default.svc.cluster.local. 5 IN AAAA fd00:43::20"}},
		// CoreDNS weighs each (port, cluster IP) pair and then drops the
		// duplicate SRV: one record of weight 50.
		{"_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV, []string{"_http._tcp.web.default.svc.cluster.local. 5 IN SRV 0 50 80 web.default.svc.cluster.local."}},
	} {
		if got := rrStrings(z.lookup(tc.name, tc.qtype).answer); !cmp.Equal(got, tc.want) {
			t.Errorf("%s %s = %v, want %v", dns.TypeToString[tc.qtype], tc.name, got, tc.want)
		}
	}
	if got := rrStrings(z.lookup("_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV).extra); len(got) != 2 {
		t.Errorf("SRV extra %v, want the A and the AAAA", got)
	}
	for _, ip := range []string{"10.43.0.20", "fd00:43::20"} {
		if got := rrStrings(z.ptr(netip.MustParseAddr(ip))); len(got) != 1 || !strings.HasSuffix(got[0], "PTR web.default.svc.cluster.local.") {
			t.Errorf("PTR of %s = %v", ip, got)
		}
	}
	z.setService("default/web", nil)
	if a := z.lookup("web.default.svc.cluster.local.", dns.TypeA); a.rcode != dns.RcodeNameError {
		t.Errorf("after removal: rcode %s", dns.RcodeToString[a.rcode])
	}
	if got := z.ptr(netip.MustParseAddr("fd00:43::20")); got != nil {
		t.Errorf("PTR after removal: %v", got)
	}
}
