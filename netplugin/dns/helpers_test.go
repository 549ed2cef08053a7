package dns

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/client"
)

// stubUpstream is a resolver on 127.0.0.1 standing in for the host's:
// it answers from records, counts the queries it gets per name and type,
// and truncates UDP answers to the client's buffer as a real one does.
type stubUpstream struct {
	addr string

	mu      sync.Mutex
	counts  map[string]int
	answers map[string]func(q dns.Question) *dns.Msg
}

func stubKey(name string, qtype uint16) string {
	return strings.ToLower(name) + "/" + dns.TypeToString[qtype]
}

// startStub serves until the test ends. Answers: example.com A (TTL 60),
// ext.example.org A (TTL 60), nx.example.com NXDOMAIN and
// nodata.example.com NODATA (SOA TTL 60, MINIMUM 20), fail.example.com
// SERVFAIL, big.example.com TXT larger than 512 bytes.
func startStub(t testing.TB) *stubUpstream {
	t.Helper()
	s := &stubUpstream{counts: map[string]int{}}
	soa := func(q dns.Question) dns.RR {
		return mustRR(t, "example.com. 60 IN SOA ns.example.com. admin.example.com. 1 7200 1800 86400 20")
	}
	withAnswer := func(rrs ...string) func(q dns.Question) *dns.Msg {
		return func(q dns.Question) *dns.Msg {
			m := new(dns.Msg)
			for _, r := range rrs {
				m.Answer = append(m.Answer, mustRR(t, r))
			}
			return m
		}
	}
	var big []string
	for i := range 40 {
		big = append(big, fmt.Sprintf("big.example.com. 60 IN TXT \"record %02d padding padding padding\"", i))
	}
	s.answers = map[string]func(q dns.Question) *dns.Msg{
		stubKey("example.com.", dns.TypeA):       withAnswer("example.com. 60 IN A 192.0.2.1"),
		stubKey("ext.example.org.", dns.TypeA):   withAnswer("ext.example.org. 60 IN A 192.0.2.7"),
		stubKey("big.example.com.", dns.TypeTXT): withAnswer(big...),
		stubKey("nx.example.com.", dns.TypeA): func(q dns.Question) *dns.Msg {
			return &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError}, Ns: []dns.RR{soa(q)}}
		},
		stubKey("nodata.example.com.", dns.TypeAAAA): func(q dns.Question) *dns.Msg {
			return &dns.Msg{Ns: []dns.RR{soa(q)}}
		},
		stubKey("fail.example.com.", dns.TypeA): func(q dns.Question) *dns.Msg {
			return &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeServerFailure}}
		},
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		q := r.Question[0]
		k := stubKey(q.Name, q.Qtype)
		s.mu.Lock()
		s.counts[k]++
		answer := s.answers[k]
		s.mu.Unlock()
		m := &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: dns.RcodeNameError}}
		if answer != nil {
			m = answer(q)
		}
		rcode := m.Rcode
		m.SetReply(r)
		m.Rcode = rcode
		m.RecursionAvailable = true
		if opt := r.IsEdns0(); opt != nil {
			m.SetEdns0(opt.UDPSize(), false)
		}
		if _, udp := w.LocalAddr().(*net.UDPAddr); udp {
			size := dns.MinMsgSize
			if opt := r.IsEdns0(); opt != nil {
				size = int(opt.UDPSize())
			}
			m.Truncate(size)
		}
		w.WriteMsg(m)
	})
	pc, ln := listenPair(t)
	s.addr = pc.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
	return s
}

func (s *stubUpstream) count(name string, qtype uint16) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[stubKey(name, qtype)]
}

// listenPair binds UDP and TCP on one free port of 127.0.0.1.
func listenPair(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))
		if err == nil {
			return pc, ln
		}
		pc.Close()
	}
	t.Fatal("no port free for both UDP and TCP on 127.0.0.1")
	return nil, nil
}

func mustRR(t testing.TB, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatalf("record %q: %v", s, err)
	}
	return rr
}

// startServer runs a server on a free port of 127.0.0.1 with the given
// informers (started by the caller, or never for tests that only forward)
// and upstream, until the test ends.
func startServer(t testing.TB, inf *client.Informers, upstream string, mod func(*Config), clock ...*fakeClock) *Server {
	t.Helper()
	cfg := Config{
		Informers: inf,
		Address:   "127.0.0.1:0",
		Upstreams: []string{upstream},
		Logger:    quietLogger(),
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range clock {
		s.fwd.cache.now = c.now
	}
	if _, err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// fakeClock is the cache's clock in tests: it stands still until moved.
type fakeClock struct {
	base   time.Time
	offset atomic.Int64
}

func newFakeClock() *fakeClock { return &fakeClock{base: time.Now()} }

func (c *fakeClock) now() time.Time { return c.base.Add(time.Duration(c.offset.Load())) }

// set moves the clock to d after its start.
func (c *fakeClock) set(d time.Duration) { c.offset.Store(int64(d)) }

// unstartedInformers never list or watch anything: for tests of the
// forwarding path, which needs no API server.
func unstartedInformers() *client.Informers {
	return client.NewInformers(&rest.Config{Host: "http://127.0.0.1:1"})
}

// exchange sends one query over network ("udp" or "tcp"), with an EDNS0
// buffer of ednsSize when it is not 0.
func exchange(t testing.TB, addr, network, name string, qtype uint16, ednsSize uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if ednsSize > 0 {
		m.SetEdns0(ednsSize, false)
	}
	c := &dns.Client{Net: network, Timeout: 10 * time.Second, UDPSize: dns.MaxMsgSize}
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s over %s: %v", dns.TypeToString[qtype], name, network, err)
	}
	return resp
}

// result is a response reduced to what the tests compare: records as
// sorted one-line strings, SOA serials zeroed since they are timestamps.
type result struct {
	Rcode  string
	Answer []string
	Extra  []string
	// SOA is the authority section's SOA, if any.
	SOA string
}

func summarize(m *dns.Msg) result {
	r := result{Rcode: dns.RcodeToString[m.Rcode], Answer: rrStrings(m.Answer), Extra: rrStrings(m.Extra)}
	for _, rr := range m.Ns {
		if rr.Header().Rrtype == dns.TypeSOA {
			r.SOA = oneLine(rr)
		}
	}
	return r
}

func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		out = append(out, oneLine(rr))
	}
	slices.Sort(out)
	return out
}

func oneLine(rr dns.RR) string {
	if soa, ok := rr.(*dns.SOA); ok {
		c := *soa
		c.Serial = 0
		rr = &c
	}
	return strings.Join(strings.Fields(rr.String()), " ")
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
