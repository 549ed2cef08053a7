package dns

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// schemaVersion is the version of Kubernetes' DNS specification served
// at dns-version.<zone>.
const schemaVersion = "1.1.0"

// zoneIndex holds every answer of the cluster zone. Informer handlers
// replace a Service's records whole; queries read under the read lock
// and use the records without copying them.
type zoneIndex struct {
	zone string // lower-case FQDN, "cluster.local."
	ttl  uint32
	// nsAddrs are the A/AAAA records of ns.dns.<zone>: the DNS Service
	// address.
	nsAddrs []dns.RR
	ns      dns.RR
	version dns.RR

	mu        sync.RWMutex
	names     map[string]*rrset
	byService map[string]*serviceRecords
	reverse   map[netip.Addr][]dns.RR
	// ipOwners are the Services with a reverse entry for each address.
	ipOwners   map[netip.Addr]map[string]bool
	namespaces map[string]bool
	soa        dns.RR
}

func newZoneIndex(zone string, ttl uint32, nsIPs []netip.Addr) *zoneIndex {
	z := &zoneIndex{
		zone: zone, ttl: ttl,
		names: map[string]*rrset{}, byService: map[string]*serviceRecords{},
		reverse: map[netip.Addr][]dns.RR{}, ipOwners: map[netip.Addr]map[string]bool{}, namespaces: map[string]bool{},
	}
	nsName := "ns.dns." + zone
	for _, ip := range nsIPs {
		z.nsAddrs = append(z.nsAddrs, addrRR(nsName, ip, ttl))
	}
	z.nsAddrs = slices.Clip(z.nsAddrs)
	z.ns = &dns.NS{Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: ttl}, Ns: nsName}
	// The spec gives the version record a TTL of its own, as CoreDNS
	// serves it.
	z.version = &dns.TXT{Hdr: dns.RR_Header{Name: "dns-version." + zone, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 28800}, Txt: []string{schemaVersion}}
	z.touch()
	return z
}

// touch renews the SOA, whose serial is the time of the last change, as
// in CoreDNS. Called with mu held for writing (or before z is shared).
func (z *zoneIndex) touch() {
	z.soa = &dns.SOA{
		Hdr: dns.RR_Header{Name: z.zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: min(z.ttl, 300)},
		Ns:  "ns.dns." + z.zone, Mbox: "hostmaster." + z.zone,
		Serial: uint32(time.Now().Unix()), Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: z.ttl,
	}
}

// setService replaces the records of the Service key (namespace/name);
// nil removes them.
func (z *zoneIndex) setService(key string, sr *serviceRecords) {
	z.mu.Lock()
	defer z.mu.Unlock()
	touched := map[netip.Addr]bool{}
	own := func(ip netip.Addr, owns bool) {
		touched[ip] = true
		owners := z.ipOwners[ip]
		if owns {
			if owners == nil {
				owners = map[string]bool{}
				z.ipOwners[ip] = owners
			}
			owners[key] = true
			return
		}
		delete(owners, key)
		if len(owners) == 0 {
			delete(z.ipOwners, ip)
		}
	}
	if old := z.byService[key]; old != nil {
		for name := range old.names {
			delete(z.names, name)
		}
		for ip := range old.clusterPTR {
			own(ip, false)
		}
		for ip := range old.endpointPTR {
			own(ip, false)
		}
		delete(z.byService, key)
	}
	if sr != nil {
		z.byService[key] = sr
		for name, rs := range sr.names {
			z.names[name] = rs
		}
		for ip := range sr.clusterPTR {
			own(ip, true)
		}
		for ip := range sr.endpointPTR {
			own(ip, true)
		}
	}
	for ip := range touched {
		z.rebuildReverse(ip)
	}
	z.touch()
}

// rebuildReverse recomputes the PTR answer of ip as CoreDNS'
// serviceRecordForIP does: the Service whose cluster IP it is, else every
// endpoint name with that address. Services are taken in key order so
// the answer does not depend on map order.
func (z *zoneIndex) rebuildReverse(ip netip.Addr) {
	keys := make([]string, 0, len(z.ipOwners[ip]))
	for k := range z.ipOwners[ip] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var cluster, endpoints []dns.RR
	for _, k := range keys {
		sr := z.byService[k]
		if rr := sr.clusterPTR[ip]; rr != nil {
			cluster = append(cluster, rr)
		}
		endpoints = append(endpoints, sr.endpointPTR[ip]...)
	}
	switch {
	case len(cluster) > 0:
		z.reverse[ip] = cluster[:1:1]
	case len(endpoints) > 0:
		z.reverse[ip] = slices.Clip(endpoints)
	default:
		delete(z.reverse, ip)
	}
}

func (z *zoneIndex) setNamespace(name string, exists bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if exists {
		z.namespaces[name] = true
	} else {
		delete(z.namespaces, name)
	}
}

// answer is the result of a lookup in the zone.
type answer struct {
	rcode         int
	answer, extra []dns.RR
	// chase is the target of a CNAME at the end of answer, still to be
	// resolved for the query's type.
	chase string
}

// lookup answers name (lower-case FQDN inside the zone) for qtype, with
// the rules of CoreDNS' kubernetes plugin for what exists: names that
// exist but have no record of qtype get NOERROR with no answer (NODATA).
func (z *zoneIndex) lookup(name string, qtype uint16) answer {
	z.mu.RLock()
	defer z.mu.RUnlock()
	if name == z.zone {
		switch qtype {
		case dns.TypeSOA:
			return answer{answer: []dns.RR{z.soa}}
		case dns.TypeNS:
			return answer{answer: []dns.RR{z.ns}, extra: z.nsAddrs}
		}
		return answer{}
	}
	rel := name[:len(name)-len(z.zone)-1]
	switch rel {
	case "dns-version":
		if qtype == dns.TypeTXT {
			return answer{answer: []dns.RR{z.version}}
		}
		return answer{}
	case "ns.dns":
		return answer{answer: filterType(z.nsAddrs, qtype)}
	case "svc", "pod":
		return answer{}
	}
	dot := strings.LastIndexByte(rel, '.')
	if dot < 0 {
		return answer{rcode: dns.RcodeNameError}
	}
	kind, rest := rel[dot+1:], rel[:dot]
	switch kind {
	case "svc":
		if !strings.Contains(rest, ".") {
			return z.namespaceAnswer(rest)
		}
		rs := z.names[name]
		if rs == nil {
			return answer{rcode: dns.RcodeNameError}
		}
		return rs.answerFor(qtype)
	case "pod":
		dot := strings.LastIndexByte(rest, '.')
		if dot < 0 {
			return z.namespaceAnswer(rest)
		}
		host, ns := rest[:dot], rest[dot+1:]
		ip, ok := podIP(host)
		if !ok || !z.namespaces[ns] {
			return answer{rcode: dns.RcodeNameError}
		}
		if (qtype == dns.TypeA && ip.Is4()) || (qtype == dns.TypeAAAA && ip.Is6()) {
			return answer{answer: []dns.RR{addrRR(name, ip, z.ttl)}}
		}
		return answer{}
	}
	return answer{rcode: dns.RcodeNameError}
}

func (z *zoneIndex) namespaceAnswer(ns string) answer {
	if z.namespaces[ns] {
		return answer{}
	}
	return answer{rcode: dns.RcodeNameError}
}

// answerFor picks the records of one type. An ExternalName's CNAME
// answers A, AAAA, TXT and CNAME queries (CoreDNS gives other types
// NODATA, SRV included).
func (rs *rrset) answerFor(qtype uint16) answer {
	if rs.cname != nil {
		switch qtype {
		case dns.TypeCNAME:
			return answer{answer: []dns.RR{rs.cname}}
		case dns.TypeA, dns.TypeAAAA, dns.TypeTXT:
			return answer{answer: []dns.RR{rs.cname}, chase: strings.ToLower(rs.cname.Target)}
		}
		return answer{}
	}
	switch qtype {
	case dns.TypeA:
		return answer{answer: rs.a}
	case dns.TypeAAAA:
		return answer{answer: rs.aaaa}
	case dns.TypeSRV:
		return answer{answer: rs.srv, extra: rs.extra}
	}
	return answer{}
}

// ptr is the PTR answer of ip, nil when no Service or endpoint has it.
func (z *zoneIndex) ptr(ip netip.Addr) []dns.RR {
	z.mu.RLock()
	defer z.mu.RUnlock()
	return z.reverse[ip]
}

func (z *zoneIndex) soaRR() dns.RR {
	z.mu.RLock()
	defer z.mu.RUnlock()
	return z.soa
}

func filterType(rrs []dns.RR, qtype uint16) []dns.RR {
	var out []dns.RR
	for _, rr := range rrs {
		if rr.Header().Rrtype == qtype {
			out = append(out, rr)
		}
	}
	return out
}

// podIP reads a pod name of "pods insecure" mode: a-b-c-d for IPv4, the
// address with ':' as '-' for IPv6 (CoreDNS' rule: exactly three dashes
// and no "--" means IPv4).
func podIP(label string) (netip.Addr, bool) {
	var s string
	if strings.Count(label, "-") == 3 && !strings.Contains(label, "--") {
		s = strings.ReplaceAll(label, "-", ".")
	} else {
		s = strings.ReplaceAll(label, "-", ":")
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip, true
}

// reverseIP reads the address of a full reverse name (four labels in
// in-addr.arpa, 32 nibbles in ip6.arpa); false for anything else.
func reverseIP(name string) (netip.Addr, bool) {
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa."); ok {
		parts := strings.Split(rest, ".")
		if len(parts) != 4 {
			return netip.Addr{}, false
		}
		var b [4]byte
		for i, p := range parts {
			n, err := strconv.ParseUint(p, 10, 8)
			if err != nil || (len(p) > 1 && p[0] == '0') {
				return netip.Addr{}, false
			}
			b[3-i] = byte(n)
		}
		return netip.AddrFrom4(b), true
	}
	if rest, ok := strings.CutSuffix(name, ".ip6.arpa."); ok {
		parts := strings.Split(rest, ".")
		if len(parts) != 32 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i, p := range parts {
			n, err := strconv.ParseUint(p, 16, 4)
			if err != nil || len(p) != 1 {
				return netip.Addr{}, false
			}
			nib := 31 - i
			b[nib/2] |= byte(n) << (4 * (1 - nib%2))
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}
