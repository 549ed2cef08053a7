package dns

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// forwarder sends queries outside the cluster domain to the upstream
// resolvers, over the transport the client used (as CoreDNS' forward
// plugin does, so a truncated UDP answer makes the client retry over TCP
// and that retry reaches the upstream over TCP), through the cache.
type forwarder struct {
	upstreams []string
	udp, tcp  *dns.Client
	cache     *responseCache
	next      atomic.Uint32
}

func newForwarder(upstreams []string, timeout time.Duration, c *responseCache) *forwarder {
	return &forwarder{
		upstreams: upstreams,
		// UDPSize lets an upstream answer a client that asked for a large
		// EDNS0 buffer; without EDNS0 the upstream truncates at 512.
		udp:   &dns.Client{Net: "udp", Timeout: timeout, UDPSize: dns.MaxMsgSize},
		tcp:   &dns.Client{Net: "tcp", Timeout: timeout},
		cache: c,
	}
}

// resolve answers req from the cache or the first upstream that answers,
// trying them in turn from a rotating start; SERVFAIL when none does.
func (f *forwarder) resolve(ctx context.Context, req *dns.Msg, tcp bool) *dns.Msg {
	key := keyOf(req)
	if m := f.cache.get(key); m != nil {
		m.Id = req.Id
		m.Question = req.Question
		return m
	}
	c := f.udp
	if tcp {
		c = f.tcp
	}
	n := len(f.upstreams)
	start := int(f.next.Add(1))
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		resp, _, err := c.ExchangeContext(ctx, req, f.upstreams[(start+i)%n])
		if err != nil {
			continue
		}
		f.cache.put(key, resp)
		resp.Id = req.Id
		return resp
	}
	m := new(dns.Msg)
	m.SetRcode(req, dns.RcodeServerFailure)
	return m
}

// lookup resolves name/qtype upstream for the CNAME of an ExternalName
// Service, over TCP when the UDP answer was truncated.
func (f *forwarder) lookup(ctx context.Context, name string, qtype uint16) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	m := f.resolve(ctx, q, false)
	if m.Truncated {
		m = f.resolve(ctx, q, true)
	}
	return m
}
