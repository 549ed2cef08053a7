package dns

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// rrset is everything one owner name answers. Its slices are shared by
// every response that uses them and never changed after they are built:
// an update builds new sets.
type rrset struct {
	a, aaaa []dns.RR
	srv     []dns.RR
	// extra holds the address records of the SRV targets, for the
	// additional section.
	extra []dns.RR
	// cname is set for an ExternalName Service, and then nothing else is.
	cname *dns.CNAME
}

// entry is one (target, address, port) the kubernetes plugin derives from
// a Service port and cluster IP, or from an endpoint and slice port. A
// port of -1 stands for an endpoint of a slice without ports: it gives an
// address but no SRV record.
type entry struct {
	target string
	ip     netip.Addr
	port   int32
}

// newRRSet builds owner's records from its entries as CoreDNS does: one
// A/AAAA per distinct address; one SRV per distinct (target, port), each
// weighted 100/len(entries); the address of every SRV target in extra.
func newRRSet(owner string, entries []entry, ttl uint32) *rrset {
	rs := &rrset{}
	seenIP := map[netip.Addr]bool{}
	type targetPort struct {
		target string
		port   int32
	}
	type targetIP struct {
		target string
		ip     netip.Addr
	}
	seenSRV := map[targetPort]bool{}
	seenExtra := map[targetIP]bool{}
	weight := uint16(max(1, 100/len(entries)))
	for _, e := range entries {
		if !seenIP[e.ip] {
			seenIP[e.ip] = true
			if e.ip.Is4() {
				rs.a = append(rs.a, addrRR(owner, e.ip, ttl))
			} else {
				rs.aaaa = append(rs.aaaa, addrRR(owner, e.ip, ttl))
			}
		}
		if e.port < 0 {
			continue
		}
		if tp := (targetPort{e.target, e.port}); !seenSRV[tp] {
			seenSRV[tp] = true
			rs.srv = append(rs.srv, &dns.SRV{
				Hdr:      dns.RR_Header{Name: owner, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: ttl},
				Priority: 0, Weight: weight, Port: uint16(e.port), Target: e.target,
			})
		}
		if ti := (targetIP{e.target, e.ip}); !seenExtra[ti] {
			seenExtra[ti] = true
			rs.extra = append(rs.extra, addrRR(e.target, e.ip, ttl))
		}
	}
	// Responses append to copies of these, never to the shared arrays.
	rs.a, rs.aaaa, rs.srv, rs.extra = slices.Clip(rs.a), slices.Clip(rs.aaaa), slices.Clip(rs.srv), slices.Clip(rs.extra)
	return rs
}

func addrRR(owner string, ip netip.Addr, ttl uint32) dns.RR {
	if ip.Is4() {
		return &dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: ip.AsSlice()}
	}
	return &dns.AAAA{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: ip.AsSlice()}
}

func ptrRR(ip netip.Addr, target string, ttl uint32) dns.RR {
	name, _ := dns.ReverseAddr(ip.String())
	return &dns.PTR{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: ttl}, Ptr: target}
}

// serviceRecords is what one Service contributes to the zone: the names
// under <svc>.<ns>.svc.<zone> and the reverse entries of its cluster IPs
// and endpoint addresses.
type serviceRecords struct {
	names       map[string]*rrset
	clusterPTR  map[netip.Addr]dns.RR
	endpointPTR map[netip.Addr][]dns.RR
}

// endpointAddr is one ready address of a Service's slices with the ports
// of its slice.
type endpointAddr struct {
	label string // hostname, or the address with dashes
	ip    netip.Addr
	ports []discoveryv1.EndpointPort
}

// buildService computes svc's records from its EndpointSlices, following
// CoreDNS' findServices: ExternalName → a CNAME; a headless Service → its
// ready endpoints; any other → its cluster IPs; every non-ExternalName
// Service also names each ready endpoint <hostname or dashed IP>.<svc>...
func buildService(svc *corev1.Service, slicesOf []*discoveryv1.EndpointSlice, zone string, ttl uint32) *serviceRecords {
	sr := &serviceRecords{names: map[string]*rrset{}, clusterPTR: map[netip.Addr]dns.RR{}, endpointPTR: map[netip.Addr][]dns.RR{}}
	base := strings.ToLower(svc.Name + "." + svc.Namespace + ".svc." + zone)
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		// CoreDNS only answers an ExternalName that is a name, not an IP.
		if target := svc.Spec.ExternalName; target != "" && !isIP(target) {
			sr.names[base] = &rrset{cname: &dns.CNAME{
				Hdr:    dns.RR_Header{Name: base, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: ttl},
				Target: dns.Fqdn(target),
			}}
		}
		return sr
	}
	headless := svc.Spec.ClusterIP == corev1.ClusterIPNone
	eps := readyEndpoints(svc, slicesOf)

	// Endpoint names, for every kind of Service.
	byLabel := map[string][]entry{}
	var all []entry
	for _, ep := range eps {
		target := ep.label + "." + base
		for _, p := range portsOrSentinel(ep.ports) {
			e := entry{target: target, ip: ep.ip, port: p}
			byLabel[ep.label] = append(byLabel[ep.label], e)
			all = append(all, e)
		}
		sr.endpointPTR[ep.ip] = append(sr.endpointPTR[ep.ip], ptrRR(ep.ip, target, ttl))
	}
	for label, entries := range byLabel {
		owner := label + "." + base
		sr.names[owner] = newRRSet(owner, entries, ttl)
	}

	if headless {
		if len(all) > 0 {
			sr.names[base] = newRRSet(base, all, ttl)
		}
		named := map[string][]entry{}
		for _, ep := range eps {
			for _, p := range ep.ports {
				if p.Name == nil || *p.Name == "" || p.Port == nil {
					continue
				}
				owner := portName(*p.Name, protocolOf(p.Protocol), base)
				named[owner] = append(named[owner], entry{target: ep.label + "." + base, ip: ep.ip, port: *p.Port})
			}
		}
		for owner, entries := range named {
			sr.names[owner] = newRRSet(owner, entries, ttl)
		}
		return sr
	}

	ips := clusterIPs(svc)
	if len(ips) == 0 || len(svc.Spec.Ports) == 0 {
		return sr
	}
	var entries []entry
	for _, p := range svc.Spec.Ports {
		var byPort []entry
		for _, ip := range ips {
			byPort = append(byPort, entry{target: base, ip: ip, port: p.Port})
		}
		entries = append(entries, byPort...)
		if p.Name != "" {
			owner := portName(p.Name, p.Protocol, base)
			sr.names[owner] = newRRSet(owner, byPort, ttl)
		}
	}
	sr.names[base] = newRRSet(base, entries, ttl)
	for _, ip := range ips {
		sr.clusterPTR[ip] = ptrRR(ip, base, ttl)
	}
	return sr
}

// readyEndpoints lists the addresses DNS publishes: ready ones (an unset
// condition counts as ready, as the API documents), and all of them when
// the Service publishes not-ready addresses. An address in several slices
// (as happens while they are rebalanced) counts once per port set.
func readyEndpoints(svc *corev1.Service, slicesOf []*discoveryv1.EndpointSlice) []endpointAddr {
	var out []endpointAddr
	type key struct {
		label string
		ip    netip.Addr
		ports string
	}
	seen := map[key]bool{}
	for _, s := range slicesOf {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		portsKey := portsKey(s.Ports)
		for _, ep := range s.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			if !ready && !svc.Spec.PublishNotReadyAddresses {
				continue
			}
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				ip = ip.Unmap()
				label := dashed(ip)
				if ep.Hostname != nil && *ep.Hostname != "" {
					label = strings.ToLower(*ep.Hostname)
				}
				k := key{label, ip, portsKey}
				if seen[k] {
					continue
				}
				seen[k] = true
				out = append(out, endpointAddr{label: label, ip: ip, ports: s.Ports})
			}
		}
	}
	return out
}

func portsKey(ports []discoveryv1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ports {
		if p.Name != nil {
			b.WriteString(*p.Name)
		}
		b.WriteByte('/')
		b.WriteString(string(protocolOf(p.Protocol)))
		b.WriteByte('/')
		if p.Port != nil {
			b.WriteString(strconv.Itoa(int(*p.Port)))
		}
		b.WriteByte(';')
	}
	return b.String()
}

func portsOrSentinel(ports []discoveryv1.EndpointPort) []int32 {
	var out []int32
	for _, p := range ports {
		if p.Port != nil {
			out = append(out, *p.Port)
		}
	}
	if len(out) == 0 {
		return []int32{-1}
	}
	return out
}

func protocolOf(p *corev1.Protocol) corev1.Protocol {
	if p == nil {
		return corev1.ProtocolTCP
	}
	return *p
}

// portName is the SRV owner _<port>._<proto>.<base>, lower-cased since
// names are matched case-insensitively.
func portName(name string, proto corev1.Protocol, base string) string {
	return strings.ToLower("_" + name + "._" + string(proto) + "." + base)
}

func clusterIPs(svc *corev1.Service) []netip.Addr {
	raw := svc.Spec.ClusterIPs
	if len(raw) == 0 && svc.Spec.ClusterIP != "" {
		raw = []string{svc.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, s := range raw {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// dashed is an address as a DNS label: 10.42.0.5 → 10-42-0-5,
// fd00::1 → fd00--1.
func dashed(ip netip.Addr) string {
	if ip.Is4() {
		return strings.ReplaceAll(ip.String(), ".", "-")
	}
	return strings.ReplaceAll(ip.String(), ":", "-")
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}
