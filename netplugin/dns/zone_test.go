package dns

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const soaLine = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 5"

func ptr[T any](v T) *T { return &v }

func port(name string, proto corev1.Protocol, p int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr(name), Protocol: ptr(proto), Port: ptr(p)}
}

func endpoint(ip string, ready *bool, hostname string) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if hostname != "" {
		ep.Hostname = ptr(hostname)
	}
	return ep
}

// zoneEnv is an API server with the objects of TestZone, informers
// synced past all of them, a stub upstream and a server on 127.0.0.1.
type zoneEnv struct {
	e    *clustertest.Env
	addr string
	stub *stubUpstream
}

func newZoneEnv(t *testing.T) *zoneEnv {
	e := clustertest.New(t, clustertest.Options{})
	inf := client.NewInformers(e.Config)
	stub := startStub(t)
	// Cached upstream TTLs must not count down between the UDP and TCP
	// runs of a case.
	s := startServer(t, inf, stub.addr, nil, newFakeClock())
	inf.Start(e.Ctx)
	z := &zoneEnv{e: e, addr: s.address, stub: stub}

	z.namespace("shop")
	z.service("shop", "web", corev1.ServiceSpec{ClusterIP: "10.43.1.1", Ports: []corev1.ServicePort{
		{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		{Name: "metrics", Port: 9090, Protocol: corev1.ProtocolTCP},
	}})
	z.slice("shop", "web-1", "web", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("http", corev1.ProtocolTCP, 8080)},
		endpoint("10.42.0.5", ptr(true), ""), endpoint("10.42.0.6", ptr(false), ""))

	z.service("shop", "db", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}})
	z.slice("shop", "db-v4", "db", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("pg", corev1.ProtocolTCP, 5432)},
		endpoint("10.42.0.10", ptr(true), "db-0"), endpoint("10.42.0.11", ptr(true), "db-1"),
		endpoint("10.42.0.12", ptr(false), "db-2"), endpoint("10.42.0.13", nil, ""))
	z.slice("shop", "db-v6", "db", discoveryv1.AddressTypeIPv6, []discoveryv1.EndpointPort{port("pg", corev1.ProtocolTCP, 5432)},
		endpoint("fd00::10", ptr(true), ""))
	// The same endpoint in a second slice (as while slices are
	// rebalanced) is published once.
	z.slice("shop", "db-dup", "db", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("pg", corev1.ProtocolTCP, 5432)},
		endpoint("10.42.0.10", ptr(true), "db-0"))

	z.service("shop", "pub", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
		Ports: []corev1.ServicePort{{Name: "p", Port: 1, Protocol: corev1.ProtocolTCP}}})
	z.slice("shop", "pub-1", "pub", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("p", corev1.ProtocolTCP, 1)},
		endpoint("10.42.0.20", ptr(false), ""))

	z.service("shop", "empty", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "p", Port: 1, Protocol: corev1.ProtocolTCP}}})

	z.service("shop", "noports", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone})
	z.slice("shop", "noports-1", "noports", discoveryv1.AddressTypeIPv4, nil, endpoint("10.42.0.30", ptr(true), ""))

	z.service("shop", "ext", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "ext.example.org"})
	z.service("shop", "alias", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "web.shop.svc.cluster.local"})

	// Created last: once the server answers for it, every informer has
	// delivered the objects above (each delivers in order).
	z.namespace("zz-last")
	z.service("zz-last", "last", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "p", Port: 1, Protocol: corev1.ProtocolTCP}}})
	z.slice("zz-last", "last-1", "last", discoveryv1.AddressTypeIPv4, nil, endpoint("10.42.9.9", ptr(true), ""))
	clustertest.Eventually(t, 30*time.Second, func() error {
		if m := exchange(t, z.addr, "udp", "last.zz-last.svc.cluster.local.", dns.TypeA, 0); len(m.Answer) != 1 {
			return fmt.Errorf("last object not served yet: %s", dns.RcodeToString[m.Rcode])
		}
		if m := exchange(t, z.addr, "udp", "zz-last.svc.cluster.local.", dns.TypeA, 0); m.Rcode != dns.RcodeSuccess {
			return fmt.Errorf("last namespace not seen yet: %s", dns.RcodeToString[m.Rcode])
		}
		// NXDOMAIN, not SERVFAIL, once the server knows it has synced.
		if m := exchange(t, z.addr, "udp", "nosuch.svc.cluster.local.", dns.TypeA, 0); m.Rcode != dns.RcodeNameError {
			return fmt.Errorf("not synced yet: %s", dns.RcodeToString[m.Rcode])
		}
		return nil
	})
	return z
}

func (z *zoneEnv) namespace(name string) {
	z.e.T.Helper()
	if _, err := z.e.Client.Core.Namespaces().Create(z.e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		z.e.T.Fatal(err)
	}
}

func (z *zoneEnv) service(ns, name string, spec corev1.ServiceSpec) {
	z.e.T.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	if _, err := z.e.Client.Core.Services(ns).Create(z.e.Ctx, svc, metav1.CreateOptions{}); err != nil {
		z.e.T.Fatalf("service %s/%s: %v", ns, name, err)
	}
}

func (z *zoneEnv) slice(ns, name, svc string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) {
	z.e.T.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family, Ports: ports, Endpoints: eps,
	}
	if _, err := z.e.Client.Discovery.EndpointSlices(ns).Create(z.e.Ctx, s, metav1.CreateOptions{}); err != nil {
		z.e.T.Fatalf("slice %s/%s: %v", ns, name, err)
	}
}

// Every record type and existence rule of the cluster zone, over UDP and
// TCP, against Services and EndpointSlices in a real API server.
func TestZone(t *testing.T) {
	z := newZoneEnv(t)
	nodata := func() result { return result{Rcode: "NOERROR", SOA: soaLine} }
	nxdomain := func() result { return result{Rcode: "NXDOMAIN", SOA: soaLine} }
	ok := func(answer []string, extra ...string) result {
		return result{Rcode: "NOERROR", Answer: answer, Extra: extra}
	}
	for _, tc := range []struct {
		name  string
		qname string
		qtype uint16
		want  result
	}{
		// ClusterIP Service (DNS-10, DNS-16).
		{"clusterIP A", "web.shop.svc.cluster.local.", dns.TypeA, ok([]string{"web.shop.svc.cluster.local. 5 IN A 10.43.1.1"})},
		{"clusterIP AAAA is NODATA", "web.shop.svc.cluster.local.", dns.TypeAAAA, nodata()},
		{"TXT of a Service is NODATA", "web.shop.svc.cluster.local.", dns.TypeTXT, nodata()},
		{"names are case-insensitive, answered in the case asked", "Web.SHOP.svc.Cluster.Local.", dns.TypeA, ok([]string{"Web.SHOP.svc.Cluster.Local. 5 IN A 10.43.1.1"})},
		// SRV of named ports (DNS-12, DNS-13, DNS-15).
		{"SRV of a named TCP port", "_http._tcp.web.shop.svc.cluster.local.", dns.TypeSRV,
			ok([]string{"_http._tcp.web.shop.svc.cluster.local. 5 IN SRV 0 100 80 web.shop.svc.cluster.local."}, "web.shop.svc.cluster.local. 5 IN A 10.43.1.1")},
		{"SRV of a named UDP port", "_dns._udp.web.shop.svc.cluster.local.", dns.TypeSRV,
			ok([]string{"_dns._udp.web.shop.svc.cluster.local. 5 IN SRV 0 100 53 web.shop.svc.cluster.local."}, "web.shop.svc.cluster.local. 5 IN A 10.43.1.1")},
		{"SRV with the wrong protocol", "_http._udp.web.shop.svc.cluster.local.", dns.TypeSRV, nxdomain()},
		{"SRV of an unknown port", "_nope._tcp.web.shop.svc.cluster.local.", dns.TypeSRV, nxdomain()},
		{"A of a port name gives the Service's address", "_http._tcp.web.shop.svc.cluster.local.", dns.TypeA,
			ok([]string{"_http._tcp.web.shop.svc.cluster.local. 5 IN A 10.43.1.1"})},
		{"SRV of the Service name lists every port", "web.shop.svc.cluster.local.", dns.TypeSRV, ok([]string{
			"web.shop.svc.cluster.local. 5 IN SRV 0 33 53 web.shop.svc.cluster.local.",
			"web.shop.svc.cluster.local. 5 IN SRV 0 33 80 web.shop.svc.cluster.local.",
			"web.shop.svc.cluster.local. 5 IN SRV 0 33 9090 web.shop.svc.cluster.local.",
		}, "web.shop.svc.cluster.local. 5 IN A 10.43.1.1")},
		// Endpoint names of any Service (DNS-18).
		{"ready endpoint of a clusterIP Service", "10-42-0-5.web.shop.svc.cluster.local.", dns.TypeA,
			ok([]string{"10-42-0-5.web.shop.svc.cluster.local. 5 IN A 10.42.0.5"})},
		{"not-ready endpoint has no name", "10-42-0-6.web.shop.svc.cluster.local.", dns.TypeA, nxdomain()},
		{"too many labels", "a.10-42-0-5.web.shop.svc.cluster.local.", dns.TypeA, nxdomain()},
		// Headless Service (DNS-11, HL-03, HL-05).
		{"headless A: ready endpoints, unset readiness counts as ready", "db.shop.svc.cluster.local.", dns.TypeA, ok([]string{
			"db.shop.svc.cluster.local. 5 IN A 10.42.0.10", "db.shop.svc.cluster.local. 5 IN A 10.42.0.11", "db.shop.svc.cluster.local. 5 IN A 10.42.0.13",
		})},
		{"headless AAAA from an IPv6 slice", "db.shop.svc.cluster.local.", dns.TypeAAAA, ok([]string{"db.shop.svc.cluster.local. 5 IN AAAA fd00::10"})},
		{"endpoint hostname (DNS-21, DNS-22)", "db-0.db.shop.svc.cluster.local.", dns.TypeA, ok([]string{"db-0.db.shop.svc.cluster.local. 5 IN A 10.42.0.10"})},
		{"not-ready hostname", "db-2.db.shop.svc.cluster.local.", dns.TypeA, nxdomain()},
		{"endpoint without hostname: dashed IP", "10-42-0-13.db.shop.svc.cluster.local.", dns.TypeA, ok([]string{"10-42-0-13.db.shop.svc.cluster.local. 5 IN A 10.42.0.13"})},
		{"endpoint with a hostname has no dashed name", "10-42-0-10.db.shop.svc.cluster.local.", dns.TypeA, nxdomain()},
		{"IPv6 endpoint name", "fd00--10.db.shop.svc.cluster.local.", dns.TypeAAAA, ok([]string{"fd00--10.db.shop.svc.cluster.local. 5 IN AAAA fd00::10"})},
		{"headless SRV: one per endpoint (DNS-14)", "_pg._tcp.db.shop.svc.cluster.local.", dns.TypeSRV, ok([]string{
			"_pg._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 25 5432 10-42-0-13.db.shop.svc.cluster.local.",
			"_pg._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 25 5432 db-0.db.shop.svc.cluster.local.",
			"_pg._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 25 5432 db-1.db.shop.svc.cluster.local.",
			"_pg._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 25 5432 fd00--10.db.shop.svc.cluster.local.",
		}, "10-42-0-13.db.shop.svc.cluster.local. 5 IN A 10.42.0.13", "db-0.db.shop.svc.cluster.local. 5 IN A 10.42.0.10",
			"db-1.db.shop.svc.cluster.local. 5 IN A 10.42.0.11", "fd00--10.db.shop.svc.cluster.local. 5 IN AAAA fd00::10")},
		{"SRV of one endpoint", "db-1.db.shop.svc.cluster.local.", dns.TypeSRV, ok([]string{
			"db-1.db.shop.svc.cluster.local. 5 IN SRV 0 100 5432 db-1.db.shop.svc.cluster.local.",
		}, "db-1.db.shop.svc.cluster.local. 5 IN A 10.42.0.11")},
		{"publishNotReadyAddresses publishes not-ready endpoints", "pub.shop.svc.cluster.local.", dns.TypeA, ok([]string{"pub.shop.svc.cluster.local. 5 IN A 10.42.0.20"})},
		{"headless without ready endpoints does not exist", "empty.shop.svc.cluster.local.", dns.TypeA, nxdomain()},
		{"headless without ports has addresses", "noports.shop.svc.cluster.local.", dns.TypeA, ok([]string{"noports.shop.svc.cluster.local. 5 IN A 10.42.0.30"})},
		{"headless without ports has no SRV", "noports.shop.svc.cluster.local.", dns.TypeSRV, nodata()},
		// ExternalName (EN-02, TYPE-04).
		{"ExternalName CNAME, target resolved upstream", "ext.shop.svc.cluster.local.", dns.TypeA, ok([]string{
			"ext.example.org. 30 IN A 192.0.2.7", "ext.shop.svc.cluster.local. 5 IN CNAME ext.example.org.",
		})},
		{"ExternalName CNAME query", "ext.shop.svc.cluster.local.", dns.TypeCNAME, ok([]string{"ext.shop.svc.cluster.local. 5 IN CNAME ext.example.org."})},
		{"ExternalName SRV is NODATA", "ext.shop.svc.cluster.local.", dns.TypeSRV, nodata()},
		{"ExternalName to an in-cluster name resolves it here", "alias.shop.svc.cluster.local.", dns.TypeA, ok([]string{
			"alias.shop.svc.cluster.local. 5 IN CNAME web.shop.svc.cluster.local.", "web.shop.svc.cluster.local. 5 IN A 10.43.1.1",
		})},
		// Pods, "pods insecure" (DNS-17).
		{"pod A from its name", "10-42-0-99.shop.pod.cluster.local.", dns.TypeA, ok([]string{"10-42-0-99.shop.pod.cluster.local. 5 IN A 10.42.0.99"})},
		{"pod AAAA from its name", "fd00--1.shop.pod.cluster.local.", dns.TypeAAAA, ok([]string{"fd00--1.shop.pod.cluster.local. 5 IN AAAA fd00::1"})},
		{"IPv4 pod name, AAAA is NODATA", "10-42-0-99.shop.pod.cluster.local.", dns.TypeAAAA, nodata()},
		{"pod in a namespace that does not exist", "10-42-0-99.nosuch.pod.cluster.local.", dns.TypeA, nxdomain()},
		{"pod name that is not an address", "web.shop.pod.cluster.local.", dns.TypeA, nxdomain()},
		// Namespaces, apex and the spec's special names.
		{"existing namespace is NODATA", "shop.svc.cluster.local.", dns.TypeA, nodata()},
		{"missing namespace is NXDOMAIN", "nosuch.svc.cluster.local.", dns.TypeA, nxdomain()},
		{"namespace under pod", "shop.pod.cluster.local.", dns.TypeA, nodata()},
		{"missing Service (DNS-04)", "data.shop.svc.cluster.local.", dns.TypeA, nxdomain()},
		{"Service in another namespace", "web.zz-last.svc.cluster.local.", dns.TypeA, nxdomain()},
		{"svc apex", "svc.cluster.local.", dns.TypeA, nodata()},
		{"zone apex A", "cluster.local.", dns.TypeA, nodata()},
		{"zone SOA", "cluster.local.", dns.TypeSOA, result{Rcode: "NOERROR", Answer: []string{soaLine}}},
		{"zone NS", "cluster.local.", dns.TypeNS, ok([]string{"cluster.local. 5 IN NS ns.dns.cluster.local."}, "ns.dns.cluster.local. 5 IN A 127.0.0.1")},
		{"NS address", "ns.dns.cluster.local.", dns.TypeA, ok([]string{"ns.dns.cluster.local. 5 IN A 127.0.0.1"})},
		{"dns-version TXT", "dns-version.cluster.local.", dns.TypeTXT, ok([]string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`})},
		{"unknown name in the zone", "foo.cluster.local.", dns.TypeA, nxdomain()},
		{"zone transfers are refused", "cluster.local.", dns.TypeAXFR, result{Rcode: "REFUSED"}},
		// PTR (in-addr.arpa and ip6.arpa).
		{"PTR of a cluster IP", "1.1.43.10.in-addr.arpa.", dns.TypePTR, ok([]string{"1.1.43.10.in-addr.arpa. 5 IN PTR web.shop.svc.cluster.local."})},
		{"PTR of an endpoint with a hostname", "10.0.42.10.in-addr.arpa.", dns.TypePTR, ok([]string{"10.0.42.10.in-addr.arpa. 5 IN PTR db-0.db.shop.svc.cluster.local."})},
		{"PTR of an endpoint of a clusterIP Service", "5.0.42.10.in-addr.arpa.", dns.TypePTR, ok([]string{"5.0.42.10.in-addr.arpa. 5 IN PTR 10-42-0-5.web.shop.svc.cluster.local."})},
		{"PTR of an IPv6 endpoint", "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", dns.TypePTR,
			ok([]string{"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. 5 IN PTR fd00--10.db.shop.svc.cluster.local."})},
		{"PTR of an unknown address goes upstream", "1.2.0.192.in-addr.arpa.", dns.TypePTR, result{Rcode: "NXDOMAIN"}},
	} {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(tc.name+"/"+network, func(t *testing.T) {
				got := summarize(exchange(t, z.addr, network, tc.qname, tc.qtype, 0))
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s %s (-want +got):\n%s", dns.TypeToString[tc.qtype], tc.qname, diff)
				}
			})
		}
	}
	if n := z.stub.count("1.2.0.192.in-addr.arpa.", dns.TypePTR); n == 0 {
		t.Error("the unknown PTR never reached the upstream")
	}
}

// Answers in the zone are authoritative and follow changes in the API.
func TestZoneFollowsTheAPI(t *testing.T) {
	z := newZoneEnv(t)
	for _, q := range []string{"web.shop.svc.cluster.local.", "nosuch.shop.svc.cluster.local."} {
		if m := exchange(t, z.addr, "udp", q, dns.TypeA, 0); !m.Authoritative {
			t.Errorf("%s: AA not set", q)
		}
	}

	// Addresses come in varying order, so that clients taking the first
	// spread over the endpoints (the Corefile's loadbalance).
	firsts := map[string]bool{}
	for range 50 {
		m := exchange(t, z.addr, "udp", "db.shop.svc.cluster.local.", dns.TypeA, 0)
		firsts[oneLine(m.Answer[0])] = true
	}
	if len(firsts) < 2 {
		t.Errorf("50 answers all began with %v", firsts)
	}

	// The records follow the API: an endpoint going not ready leaves,
	// and a deleted Service takes its names and PTRs with it.
	e := z.e
	s, err := e.Client.Discovery.EndpointSlices("shop").Get(e.Ctx, "db-v4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoints[1].Conditions.Ready = ptr(false) // db-1
	if _, err := e.Client.Discovery.EndpointSlices("shop").Update(e.Ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRcode(t, z.addr, "db-1.db.shop.svc.cluster.local.", dns.TypeA, dns.RcodeNameError)
	if got := summarize(exchange(t, z.addr, "udp", "db.shop.svc.cluster.local.", dns.TypeA, 0)).Answer; len(got) != 2 {
		t.Errorf("headless A after db-1 went not ready: %v", got)
	}
	if err := e.Client.Core.Services("shop").Delete(e.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRcode(t, z.addr, "web.shop.svc.cluster.local.", dns.TypeA, dns.RcodeNameError)
	for _, q := range []string{"_http._tcp.web.shop.svc.cluster.local.", "10-42-0-5.web.shop.svc.cluster.local."} {
		if m := exchange(t, z.addr, "udp", q, dns.TypeA, 0); m.Rcode != dns.RcodeNameError {
			t.Errorf("%s after the Service was deleted: %s", q, dns.RcodeToString[m.Rcode])
		}
	}
	// The PTR of the cluster IP now goes upstream, which knows nothing.
	if m := exchange(t, z.addr, "udp", "1.1.43.10.in-addr.arpa.", dns.TypePTR, 0); len(m.Answer) != 0 {
		t.Errorf("PTR of a deleted Service's IP: %v", m.Answer)
	}
}

func waitRcode(t *testing.T, addr, name string, qtype uint16, rcode int) {
	t.Helper()
	clustertest.Eventually(t, 10*time.Second, func() error {
		if m := exchange(t, addr, "udp", name, qtype, 0); m.Rcode != rcode {
			return fmt.Errorf("%s %s: %s, want %s", dns.TypeToString[qtype], name, dns.RcodeToString[m.Rcode], dns.RcodeToString[rcode])
		}
		return nil
	})
}

// A headless Service with more addresses than fit in 512 bytes: UDP
// without EDNS0 gets TC and the TCP retry gets them all; an EDNS0 buffer
// of 4096 gets them all over UDP.
func TestZoneTruncation(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{})
	inf := client.NewInformers(e.Config)
	s := startServer(t, inf, startStub(t).addr, nil)
	inf.Start(e.Ctx)
	z := &zoneEnv{e: e, addr: s.address}
	z.service("default", "many", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "p", Port: 1, Protocol: corev1.ProtocolTCP}}})
	var eps []discoveryv1.Endpoint
	for i := range 60 {
		eps = append(eps, endpoint(fmt.Sprintf("10.42.1.%d", i+1), ptr(true), ""))
	}
	z.slice("default", "many-1", "many", discoveryv1.AddressTypeIPv4, nil, eps...)
	const name = "many.default.svc.cluster.local."
	clustertest.Eventually(t, 10*time.Second, func() error {
		if m := exchange(t, z.addr, "tcp", name, dns.TypeA, 0); len(m.Answer) != 60 {
			return fmt.Errorf("%d addresses over TCP", len(m.Answer))
		}
		return nil
	})
	udp := exchange(t, z.addr, "udp", name, dns.TypeA, 0)
	if !udp.Truncated || len(udp.Answer) == 0 || len(udp.Answer) >= 60 {
		t.Errorf("UDP without EDNS0: TC=%v with %d addresses, want TC with a part", udp.Truncated, len(udp.Answer))
	}
	// Len counts compressed, as the answer was sent.
	udp.Compress = true
	if l := udp.Len(); l > dns.MinMsgSize {
		t.Errorf("UDP answer of %d bytes, over 512", l)
	}
	edns := exchange(t, z.addr, "udp", name, dns.TypeA, 4096)
	if edns.Truncated || len(edns.Answer) != 60 {
		t.Errorf("UDP with EDNS0 4096: TC=%v with %d addresses", edns.Truncated, len(edns.Answer))
	}
	small := exchange(t, z.addr, "udp", name, dns.TypeA, 600)
	small.Compress = true
	if !small.Truncated || small.Len() > 600 {
		t.Errorf("UDP with EDNS0 600: TC=%v, %d bytes", small.Truncated, small.Len())
	}
}
