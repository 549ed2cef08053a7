package dns

import (
	"net/netip"
	"testing"
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
