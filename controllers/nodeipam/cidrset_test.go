package nodeipam

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCIDRSetLimits(t *testing.T) {
	for _, tc := range []struct {
		cluster string
		mask    int
		size    int
		err     string
	}{
		{"10.42.0.0/16", 24, 256, ""},
		{"10.0.0.0/8", 24, 65536, ""},
		{"10.42.0.0/24", 24, 1, ""},
		{"10.0.0.0/8", 30, 1 << 22, ""},
		{"fd00:42::/48", 64, 65536, ""},
		{"10.42.0.0/16", 15, 0, "between"},
		{"10.42.0.0/16", 33, 0, "between"},
		{"0.0.0.0/2", 30, 0, "more than"},
	} {
		s, err := newCIDRSet(netip.MustParsePrefix(tc.cluster), tc.mask)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s /%d: error %v, want one with %q", tc.cluster, tc.mask, err, tc.err)
			}
			continue
		}
		if err != nil || s.size != tc.size {
			t.Errorf("%s /%d: size %v err %v, want %d", tc.cluster, tc.mask, s, err, tc.size)
		}
	}
}

func TestCIDRSetAllocatesInOrderAndReusesReleased(t *testing.T) {
	s, err := newCIDRSet(netip.MustParsePrefix("10.42.0.0/22"), 24)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 0; i < 4; i++ {
		p, err := s.allocateNext()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.String())
	}
	if strings.Join(got, " ") != "10.42.0.0/24 10.42.1.0/24 10.42.2.0/24 10.42.3.0/24" {
		t.Fatalf("allocated %v", got)
	}
	if _, err := s.allocateNext(); err != errFull {
		t.Fatalf("fifth allocation: %v, want errFull", err)
	}
	s.release(netip.MustParsePrefix("10.42.1.0/24"))
	if p, err := s.allocateNext(); err != nil || p.String() != "10.42.1.0/24" {
		t.Fatalf("after a release: %v %v", p, err)
	}
}

func TestCIDRSetOccupy(t *testing.T) {
	s, err := newCIDRSet(netip.MustParsePrefix("10.42.0.0/16"), 24)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p      string
		ok     bool
		marked int // in use afterwards
	}{
		{"10.42.5.0/24", true, 1},
		{"10.42.6.128/25", true, 2}, // inside 10.42.6.0/24
		{"10.42.8.0/23", true, 4},   // two node CIDRs
		{"10.43.0.0/24", false, 4},  // outside
		{"fd00::/64", false, 4},     // other family
		{"10.42.5.0/24", true, 4},   // already marked
	} {
		if ok := s.occupy(netip.MustParsePrefix(tc.p)); ok != tc.ok || s.inUse != tc.marked {
			t.Errorf("occupy %s: %v, %d in use; want %v, %d", tc.p, ok, s.inUse, tc.ok, tc.marked)
		}
	}
	if !s.taken(netip.MustParsePrefix("10.42.9.0/24")) || s.taken(netip.MustParsePrefix("10.42.7.0/24")) {
		t.Error("taken disagrees with occupy")
	}
	// Allocation skips what is occupied.
	for i := 0; i < 5; i++ {
		p, _ := s.allocateNext()
		if p.String() == "10.42.5.0/24" {
			t.Fatal("allocated an occupied CIDR")
		}
	}
}

func TestCIDRSetIPv6(t *testing.T) {
	s, err := newCIDRSet(netip.MustParsePrefix("fd00:42::/56"), 64)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.prefix(255).String(); got != "fd00:42:0:ff::/64" {
		t.Errorf("prefix(255) = %s", got)
	}
	first, last, ok := s.indexRange(netip.MustParsePrefix("fd00:42:0:10::/63"))
	if !ok || first != 16 || last != 17 {
		t.Errorf("indexRange: %d %d %v", first, last, ok)
	}
}

func TestCIDRSetSkipsFullWords(t *testing.T) {
	s, err := newCIDRSet(netip.MustParsePrefix("10.0.0.0/8"), 24)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		if _, err := s.allocateNext(); err != nil {
			t.Fatal(err)
		}
	}
	s.release(s.prefix(3))
	s.next = 0
	if p, _ := s.allocateNext(); p != s.prefix(3) {
		t.Fatalf("got %s, want the released %s", p, s.prefix(3))
	}
	if p, _ := s.allocateNext(); p != s.prefix(1000) {
		t.Fatalf("got %s, want the first never used %s", p, s.prefix(1000))
	}
}

// FuzzCIDRSet: whatever pod CIDRs nodes carry (any family, any length,
// inside, around or outside the cluster CIDR), occupying and releasing
// them never panics, the count stays within bounds, and allocation never
// returns a CIDR that is taken.
func FuzzCIDRSet(f *testing.F) {
	for _, s := range []string{"10.42.5.0/24", "10.42.6.128/25", "10.0.0.0/8", "0.0.0.0/0", "fd00::/64", "10.42.255.0/24", "10.43.0.0/24"} {
		f.Add(s, uint8(24))
	}
	f.Fuzz(func(t *testing.T, cidr string, mask uint8) {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return
		}
		s, err := newCIDRSet(netip.MustParsePrefix("10.42.0.0/20"), 20+int(mask%9))
		if err != nil {
			t.Fatal(err)
		}
		s.occupy(p)
		if s.inUse < 0 || s.inUse > s.size {
			t.Fatalf("in use %d of %d", s.inUse, s.size)
		}
		if got, err := s.allocateNext(); err == nil && got.Overlaps(p) && p.Bits() >= s.cluster.Bits() && p.Addr().Is4() {
			t.Fatalf("allocated %s, inside occupied %s", got, p)
		}
		s.release(p)
		if s.inUse < 0 || s.inUse > s.size {
			t.Fatalf("after release: in use %d of %d", s.inUse, s.size)
		}
	})
}
