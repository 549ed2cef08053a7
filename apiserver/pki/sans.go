package pki

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// SANs are the names a serving certificate is valid for.
type SANs struct {
	DNSNames []string
	IPs      []netip.Addr
}

// ServingSANs are the names clients reach the API server by: loopback, the
// host's name and addresses, the in-cluster names of the kubernetes service
// and its ClusterIP (the first address of serviceCIDR), plus extra
// (--tls-san: names or IPs).
func ServingSANs(clusterDomain string, serviceCIDR netip.Prefix, extra []string) (SANs, error) {
	s := SANs{
		DNSNames: []string{
			"localhost",
			"kubernetes",
			"kubernetes.default",
			"kubernetes.default.svc",
			"kubernetes.default.svc." + clusterDomain,
		},
		IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()},
	}
	if serviceCIDR.IsValid() {
		ip, err := FirstServiceIP(serviceCIDR)
		if err != nil {
			return SANs{}, err
		}
		s.IPs = append(s.IPs, ip)
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		s.DNSNames = append(s.DNSNames, strings.ToLower(h))
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return SANs{}, fmt.Errorf("list interface addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				s.IPs = append(s.IPs, ip.Unmap())
			}
		}
	}
	for _, e := range extra {
		if ip, err := netip.ParseAddr(e); err == nil {
			s.IPs = append(s.IPs, ip.Unmap())
		} else {
			s.DNSNames = append(s.DNSNames, strings.ToLower(e))
		}
	}
	return s.normalize(), nil
}

// FirstServiceIP is the ClusterIP Kubernetes gives the kubernetes service:
// the first address after the network address of the service CIDR.
func FirstServiceIP(cidr netip.Prefix) (netip.Addr, error) {
	ip := cidr.Masked().Addr().Next()
	if !ip.IsValid() || !cidr.Contains(ip) {
		return netip.Addr{}, fmt.Errorf("service CIDR %s has no first address", cidr)
	}
	return ip, nil
}

// normalize sorts and de-duplicates, so that two SAN sets compare equal
// whatever order their names were found in.
func (s SANs) normalize() SANs {
	out := SANs{DNSNames: slices.Clone(s.DNSNames), IPs: make([]netip.Addr, 0, len(s.IPs))}
	for _, ip := range s.IPs {
		// Zones cannot go into a certificate.
		out.IPs = append(out.IPs, ip.Unmap().WithZone(""))
	}
	slices.Sort(out.DNSNames)
	out.DNSNames = slices.Compact(out.DNSNames)
	slices.SortFunc(out.IPs, func(a, b netip.Addr) int { return a.Compare(b) })
	out.IPs = slices.Compact(out.IPs)
	return out
}

func (s SANs) equal(o SANs) bool {
	return slices.Equal(s.DNSNames, o.DNSNames) && slices.Equal(s.IPs, o.IPs)
}

func sansOf(c *x509.Certificate) SANs {
	s := SANs{DNSNames: c.DNSNames}
	for _, ip := range c.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok {
			s.IPs = append(s.IPs, a)
		}
	}
	return s.normalize()
}
