package dns

import (
	"context"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// maxChase bounds the CNAME chain followed for an ExternalName Service,
// as CoreDNS stops after eight.
const maxChase = 8

// queryTimeout bounds the upstream work for one query: a client retries
// after about 5 s anyway.
const queryTimeout = 5 * time.Second

// ServeDNS answers one query: the cluster domain from the index, PTRs of
// Service and endpoint addresses, everything else from upstream.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	tcp := isTCP(w.LocalAddr())
	q := req.Question[0] // the server's accept function ensures one question
	name := strings.ToLower(q.Name)
	var m *dns.Msg
	switch {
	case name == s.zone || strings.HasSuffix(name, s.dotZone):
		// The cluster domain never leaves this server, whatever the class.
		m = s.serveZone(req, name)
	case q.Qtype == dns.TypePTR && q.Qclass == dns.ClassINET:
		if ip, ok := reverseIP(name); ok {
			if ptrs := s.index.ptr(ip); len(ptrs) > 0 {
				m = new(dns.Msg)
				m.SetReply(req)
				m.Authoritative = true
				m.Answer = ptrs
			}
		}
	}
	if m == nil {
		// Outside the zone, or a reverse name no Service has: the
		// Corefile's "fallthrough in-addr.arpa ip6.arpa" sends those on.
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		m = s.fwd.resolve(ctx, req, tcp)
		cancel()
	}
	if name != q.Name {
		m.Answer = withOwnerCase(m.Answer, name, q.Name)
	}
	m.Answer = shuffleAddresses(m.Answer)
	w.WriteMsg(fitResponse(req, m, tcp))
}

// shuffleAddresses puts the A and AAAA records of an answer in random
// order after the others (a CNAME chain stays in front), as the
// loadbalance plugin of the k3s and kubeadm Corefiles does, so that
// clients taking the first address of a headless Service spread over
// its endpoints. It copies rrs, which may be shared with the index.
func shuffleAddresses(rrs []dns.RR) []dns.RR {
	n := 0
	for _, rr := range rrs {
		if t := rr.Header().Rrtype; t == dns.TypeA || t == dns.TypeAAAA {
			n++
		}
	}
	if n < 2 {
		return rrs
	}
	out := make([]dns.RR, 0, len(rrs))
	for _, rr := range rrs {
		if t := rr.Header().Rrtype; t != dns.TypeA && t != dns.TypeAAAA {
			out = append(out, rr)
		}
	}
	first := len(out)
	for _, rr := range rrs {
		if t := rr.Header().Rrtype; t == dns.TypeA || t == dns.TypeAAAA {
			out = append(out, rr)
		}
	}
	addrs := out[first:]
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	return out
}

// serveZone answers a name in the cluster domain.
func (s *Server) serveZone(req *dns.Msg, name string) *dns.Msg {
	q := req.Question[0]
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if q.Qclass != dns.ClassINET || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		m.Rcode = dns.RcodeRefused
		return m
	}
	a := s.index.lookup(name, q.Qtype)
	m.Answer, m.Extra = a.answer, a.extra
	for depth := 0; a.chase != "" && depth < maxChase; depth++ {
		target := a.chase
		if target != s.zone && !strings.HasSuffix(target, s.dotZone) {
			ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
			up := s.fwd.lookup(ctx, target, q.Qtype)
			cancel()
			m.Answer = append(m.Answer[:len(m.Answer):len(m.Answer)], up.Answer...)
			break
		}
		a = s.index.lookup(target, q.Qtype)
		m.Answer = append(m.Answer[:len(m.Answer):len(m.Answer)], a.answer...)
	}
	m.Rcode = a.rcode
	if len(m.Answer) > 0 {
		// A CNAME answers even when its target is not found.
		m.Rcode = dns.RcodeSuccess
	}
	if m.Rcode == dns.RcodeNameError && !s.synced.Load() {
		m.Rcode = dns.RcodeServerFailure
		return m
	}
	if len(m.Answer) == 0 {
		// NXDOMAIN and NODATA carry the zone's SOA for negative caching.
		m.Ns = []dns.RR{s.index.soaRR()}
	}
	return m
}

// withOwnerCase answers in the case the client asked in (some resolvers
// randomise it and compare), copying only the records that need it.
func withOwnerCase(rrs []dns.RR, lower, asked string) []dns.RR {
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		if rr.Header().Name == lower {
			rr = dns.Copy(rr)
			rr.Header().Name = asked
		}
		out[i] = rr
	}
	return out
}

// fitResponse gives m the client's EDNS0 buffer size and DO bit (and no
// OPT if the client sent none, whatever an upstream or the cache had),
// and truncates it, setting TC, to what the client can take over UDP:
// its EDNS0 buffer size, or 512 bytes without EDNS0.
func fitResponse(req, m *dns.Msg, tcp bool) *dns.Msg {
	if m.IsEdns0() != nil {
		extra := make([]dns.RR, 0, len(m.Extra))
		for _, rr := range m.Extra {
			if rr.Header().Rrtype != dns.TypeOPT {
				extra = append(extra, rr)
			}
		}
		m.Extra = extra
	}
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		size = max(int(opt.UDPSize()), dns.MinMsgSize)
		reply := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		reply.SetUDPSize(opt.UDPSize())
		if opt.Do() {
			reply.SetDo()
		}
		// A fresh array: m.Extra may be shared with the zone index.
		m.Extra = append(m.Extra[:len(m.Extra):len(m.Extra)], reply)
	}
	if tcp {
		size = dns.MaxMsgSize
	}
	m.Truncate(size)
	return m
}

func isTCP(a net.Addr) bool {
	_, ok := a.(*net.TCPAddr)
	return ok
}
