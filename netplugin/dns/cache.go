package dns

import (
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// responseCache keeps upstream responses, positive and negative, for at
// most their TTL capped at maxTTL, in at most size entries; when full a
// random entry makes room, as in CoreDNS' cache plugin.
type responseCache struct {
	size   int
	maxTTL time.Duration
	now    func() time.Time

	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
}

// cacheKey tells apart the responses a resolver may get differently for
// the same name: by type, class and the DNSSEC bits.
type cacheKey struct {
	name         string
	qtype, class uint16
	do, cd       bool
}

type cacheEntry struct {
	msg     *dns.Msg
	expires time.Time
}

func newCache(size int, maxTTL time.Duration) *responseCache {
	return &responseCache{size: size, maxTTL: maxTTL, now: time.Now, entries: map[cacheKey]cacheEntry{}}
}

func keyOf(req *dns.Msg) cacheKey {
	q := req.Question[0]
	k := cacheKey{name: strings.ToLower(q.Name), qtype: q.Qtype, class: q.Qclass, cd: req.CheckingDisabled}
	if opt := req.IsEdns0(); opt != nil {
		k.do = opt.Do()
	}
	return k
}

// get is a copy of the cached response with every TTL set to the time it
// has left, or nil.
func (c *responseCache) get(k cacheKey) *dns.Msg {
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[k]
	if ok && !now.Before(e.expires) {
		delete(c.entries, k)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return nil
	}
	m := e.msg.Copy()
	setTTLs(m, e.expires.Sub(now))
	return m
}

// put stores a copy of m for its TTL (see cacheTTL) capped at maxTTL, if
// it has one, and gives m's records that TTL, so that the first answer
// says what the cached ones will (as CoreDNS' cache does).
func (c *responseCache) put(k cacheKey, m *dns.Msg) {
	ttl := min(cacheTTL(m), c.maxTTL)
	if ttl <= 0 {
		return
	}
	setTTLs(m, ttl)
	e := cacheEntry{msg: m.Copy(), expires: c.now().Add(ttl)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.size {
		for victim := range c.entries {
			delete(c.entries, victim)
			break
		}
	}
	c.entries[k] = e
}

// cacheTTL is how long m may be cached: the smallest TTL of its records
// for an answer; for NXDOMAIN and NODATA the SOA's negative TTL (RFC 2308:
// the smaller of its TTL and MINIMUM), and not at all without a SOA.
// Truncated and failed responses are not cached.
func cacheTTL(m *dns.Msg) time.Duration {
	if m.Truncated || (m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError) {
		return 0
	}
	if m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
		ttl := ^uint32(0)
		for _, section := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
			for _, rr := range section {
				if rr.Header().Rrtype != dns.TypeOPT {
					ttl = min(ttl, rr.Header().Ttl)
				}
			}
		}
		return time.Duration(ttl) * time.Second
	}
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return time.Duration(min(soa.Hdr.Ttl, soa.Minttl)) * time.Second
		}
	}
	return 0
}

// setTTLs gives every record of m the TTL left, rounded up to a second.
func setTTLs(m *dns.Msg, left time.Duration) {
	secs := uint32((left + time.Second - 1) / time.Second)
	for _, section := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range section {
			if rr.Header().Rrtype != dns.TypeOPT {
				rr.Header().Ttl = secs
			}
		}
	}
}
