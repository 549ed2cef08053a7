package dns

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// Names outside the cluster domain go to the upstream, and its answers,
// positive and negative, are served from the cache until they expire.
func TestForwardAndCache(t *testing.T) {
	stub := startStub(t)
	clock := newFakeClock()
	s := startServer(t, unstartedInformers(), stub.addr, nil, clock)
	for _, tc := range []struct {
		name    string
		qname   string
		qtype   uint16
		want    result
		queries int // reaching the stub for three client queries
	}{
		{"positive answer, TTL capped at 30 s", "example.com.", dns.TypeA,
			result{Rcode: "NOERROR", Answer: []string{"example.com. 30 IN A 192.0.2.1"}}, 1},
		{"NXDOMAIN cached for the SOA's negative TTL", "nx.example.com.", dns.TypeA,
			result{Rcode: "NXDOMAIN", SOA: "example.com. 20 IN SOA ns.example.com. admin.example.com. 0 7200 1800 86400 20"}, 1},
		{"NODATA cached too", "nodata.example.com.", dns.TypeAAAA,
			result{Rcode: "NOERROR", SOA: "example.com. 20 IN SOA ns.example.com. admin.example.com. 0 7200 1800 86400 20"}, 1},
		{"SERVFAIL is not cached", "fail.example.com.", dns.TypeA, result{Rcode: "SERVFAIL"}, 3},
		{"NXDOMAIN without SOA is not cached", "nosoa.example.com.", dns.TypeA, result{Rcode: "NXDOMAIN"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, network := range []string{"udp", "udp", "tcp"} {
				got := summarize(exchange(t, s.address, network, tc.qname, tc.qtype, 0))
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("query %d over %s (-want +got):\n%s", i, network, diff)
				}
			}
			if n := stub.count(tc.qname, tc.qtype); n != tc.queries {
				t.Errorf("stub saw %d queries, want %d", n, tc.queries)
			}
		})
	}

	// Cached TTLs count down, and an expired entry is asked again.
	clock.set(12 * time.Second)
	if got := summarize(exchange(t, s.address, "udp", "example.com.", dns.TypeA, 0)).Answer; !cmp.Equal(got, []string{"example.com. 18 IN A 192.0.2.1"}) {
		t.Errorf("after 12 s: %v", got)
	}
	clock.set(31 * time.Second)
	exchange(t, s.address, "udp", "example.com.", dns.TypeA, 0)
	if n := stub.count("example.com.", dns.TypeA); n != 2 {
		t.Errorf("after expiry the stub saw %d queries in all, want 2", n)
	}

	// Names are cached case-insensitively and answered in the case asked.
	m := exchange(t, s.address, "udp", "EXAMPLE.com.", dns.TypeA, 0)
	if got := rrStrings(m.Answer); !cmp.Equal(got, []string{"EXAMPLE.com. 30 IN A 192.0.2.1"}) || m.Question[0].Name != "EXAMPLE.com." {
		t.Errorf("mixed case: question %q, answer %v", m.Question[0].Name, got)
	}
	if n := stub.count("example.com.", dns.TypeA); n != 2 {
		t.Errorf("mixed case missed the cache: %d queries", n)
	}
}

// A UDP answer larger than the client's buffer comes truncated (TC), and
// the client's TCP retry gets all of it; an EDNS0 buffer lets it through
// UDP.
func TestForwardTruncation(t *testing.T) {
	stub := startStub(t)
	s := startServer(t, unstartedInformers(), stub.addr, nil)
	udp := exchange(t, s.address, "udp", "big.example.com.", dns.TypeTXT, 0)
	if !udp.Truncated || len(udp.Answer) >= 40 {
		t.Errorf("UDP without EDNS0: TC=%v with %d records, want TC and fewer than 40", udp.Truncated, len(udp.Answer))
	}
	tcp := exchange(t, s.address, "tcp", "big.example.com.", dns.TypeTXT, 0)
	if tcp.Truncated || len(tcp.Answer) != 40 {
		t.Errorf("TCP: TC=%v with %d records, want all 40", tcp.Truncated, len(tcp.Answer))
	}
	// Now cached whole: a UDP client still gets what fits in 512 bytes.
	again := exchange(t, s.address, "udp", "big.example.com.", dns.TypeTXT, 0)
	if !again.Truncated {
		t.Error("cached large answer sent whole over UDP without EDNS0")
	}
	edns := exchange(t, s.address, "udp", "big.example.com.", dns.TypeTXT, 4096)
	if edns.Truncated || len(edns.Answer) != 40 {
		t.Errorf("UDP with a 4096-byte EDNS0 buffer: TC=%v with %d records", edns.Truncated, len(edns.Answer))
	}
	if opt := edns.IsEdns0(); opt == nil || opt.UDPSize() != 4096 {
		t.Errorf("reply OPT %v, want the client's 4096", opt)
	}
	// An answer cached from an EDNS0 query has the upstream's OPT record;
	// a client without EDNS0 must not get it.
	if opt := exchange(t, s.address, "udp", "example.com.", dns.TypeA, 1232).IsEdns0(); opt == nil || opt.UDPSize() != 1232 {
		t.Errorf("reply OPT %v, want the client's 1232", opt)
	}
	for _, network := range []string{"udp", "tcp"} {
		if opt := exchange(t, s.address, network, "example.com.", dns.TypeA, 0).IsEdns0(); opt != nil {
			t.Errorf("reply over %s to a query without EDNS0 has an OPT: %v", network, opt)
		}
	}
}

// An upstream that does not answer is skipped for the next; with none
// left the answer is SERVFAIL.
func TestForwardFailover(t *testing.T) {
	stub := startStub(t)
	dead := closedPort(t)
	s := startServer(t, unstartedInformers(), dead, func(c *Config) {
		c.Upstreams = []string{dead, stub.addr}
		c.UpstreamTimeout = time.Second
		c.CacheMaxTTL = time.Nanosecond // every query goes upstream
	})
	// Upstreams are tried from a rotating start: some of these start
	// with the dead one.
	for range 3 {
		if got := summarize(exchange(t, s.address, "udp", "ext.example.org.", dns.TypeA, 0)); got.Rcode != "NOERROR" || len(got.Answer) != 1 {
			t.Errorf("with one dead upstream: %+v", got)
		}
	}
	if n := stub.count("ext.example.org.", dns.TypeA); n != 3 {
		t.Errorf("stub saw %d queries, want 3", n)
	}

	none := startServer(t, unstartedInformers(), dead, func(c *Config) { c.UpstreamTimeout = time.Second })
	if m := exchange(t, none.address, "udp", "example.com.", dns.TypeA, 0); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("only a dead upstream: %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
}

// closedPort is a 127.0.0.1 UDP address nothing listens on.
func closedPort(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// Until the informers have synced, a name the zone does not have is
// SERVFAIL, not NXDOMAIN: it may just not be known yet.
func TestUnsyncedIsServfail(t *testing.T) {
	stub := startStub(t)
	s := startServer(t, unstartedInformers(), stub.addr, nil)
	if m := exchange(t, s.address, "udp", "web.shop.svc.cluster.local.", dns.TypeA, 0); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("unsynced: %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	if m := exchange(t, s.address, "udp", "dns-version.cluster.local.", dns.TypeTXT, 0); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("dns-version while unsynced: %v", m)
	}
}

// An address that cannot be bound is an error naming it, from Listen and
// from Run.
func TestBindError(t *testing.T) {
	stub := startStub(t)
	s := startServer(t, unstartedInformers(), stub.addr, nil)
	s2, err := New(Config{Informers: unstartedInformers(), Address: s.address, Upstreams: []string{stub.addr}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Listen(); err == nil || !strings.Contains(err.Error(), s.address) {
		t.Errorf("Listen on a busy address: %v", err)
	}
	if err := s2.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Run on a busy address: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Informers: unstartedInformers(), Address: "10.43.0.10"},
		{Informers: unstartedInformers(), Upstreams: []string{"not-an-ip"}},
		{Informers: unstartedInformers(), ClusterDomain: "bad..domain"},
		{Informers: unstartedInformers(), TTL: -time.Second},
		{Informers: unstartedInformers(), TTL: 2 * time.Hour},
		{},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// The server never forwards to itself: an upstream that is its own
// address is dropped, which a loopback nameserver is when it listens on
// all addresses.
func TestUpstreamAddrs(t *testing.T) {
	for _, tc := range []struct {
		listen  string
		servers []string
		want    []string
	}{
		{"10.43.0.10:53", []string{"192.0.2.53", "10.43.0.10", "127.0.0.53"}, []string{"192.0.2.53:53", "127.0.0.53:53"}},
		{"0.0.0.0:53", []string{"127.0.0.1", "127.0.0.53", "192.0.2.53:5353"}, []string{"192.0.2.53:5353"}},
		{"127.0.0.1:5300", []string{"127.0.0.1", "127.0.0.1:5300", "[::1]:53"}, []string{"127.0.0.1:53", "[::1]:53"}},
		{"[::]:53", []string{"::1", "fd00::53"}, []string{"[fd00::53]:53"}},
	} {
		got, err := upstreamAddrs(tc.servers, netip.MustParseAddrPort(tc.listen))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("listen %s, servers %v (-want +got):\n%s", tc.listen, tc.servers, diff)
		}
	}
}

// The cache holds at most its size, and keeps nothing that has no TTL.
func TestCacheBounds(t *testing.T) {
	c := newCache(3, time.Minute)
	for _, name := range []string{"a.", "b.", "c.", "d.", "e."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Answer = []dns.RR{mustRR(t, name+" 60 IN A 192.0.2.1")}
		c.put(keyOf(m), m)
	}
	if n := len(c.entries); n != 3 {
		t.Errorf("%d entries, want 3", n)
	}
	m := new(dns.Msg)
	m.SetQuestion("zero.", dns.TypeA)
	m.Answer = []dns.RR{mustRR(t, "zero. 0 IN A 192.0.2.1")}
	c.put(keyOf(m), m)
	if c.get(keyOf(m)) != nil {
		t.Error("a TTL-0 answer was cached")
	}
	tc := new(dns.Msg)
	tc.SetQuestion("tc.", dns.TypeA)
	tc.Truncated = true
	tc.Answer = []dns.RR{mustRR(t, "tc. 60 IN A 192.0.2.1")}
	c.put(keyOf(tc), tc)
	if c.get(keyOf(tc)) != nil {
		t.Error("a truncated answer was cached")
	}
}

// Run serves until its context ends, then returns nil and lets go of the
// address.
func TestRunStopsWithContext(t *testing.T) {
	stub := startStub(t)
	s, err := New(Config{Informers: unstartedInformers(), Address: "127.0.0.1:0", Upstreams: []string{stub.addr}})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	if m := exchange(t, addr, "tcp", "example.com.", dns.TypeA, 0); len(m.Answer) != 1 {
		t.Fatalf("not serving: %v", m)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	for _, network := range []string{"udp", "tcp"} {
		var err error
		if network == "udp" {
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", addr); err == nil {
				pc.Close()
			}
		} else {
			var ln net.Listener
			if ln, err = net.Listen("tcp", addr); err == nil {
				ln.Close()
			}
		}
		if err != nil {
			t.Errorf("%s %s still held after Run returned: %v", network, addr, err)
		}
	}
}
