package nodeipam

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
)

// maxNodeCIDRs bounds the bitmap of a cidrSet (2 MB at most): 2^24 node
// CIDRs is far beyond any cluster bonsai runs, and a bigger range (a /4
// cut into /30s) is a typo.
const maxNodeCIDRs = 1 << 24

// cidrSet is the cluster CIDR cut into equal node CIDRs, and which of them
// are taken: a bitmap indexed by a node CIDR's position in the cluster
// CIDR, as upstream's cidrset. It is not safe for concurrent use.
type cidrSet struct {
	cluster  netip.Prefix
	maskBits int // prefix length of each node CIDR
	size     int // node CIDRs in the cluster CIDR
	used     []uint64
	inUse    int
	next     int // where the next search starts: spreads reuse of released CIDRs
}

func newCIDRSet(cluster netip.Prefix, maskBits int) (*cidrSet, error) {
	cluster = cluster.Masked()
	if maskBits < cluster.Bits() || maskBits > cluster.Addr().BitLen() {
		return nil, fmt.Errorf("node CIDR mask size %d: must be between the cluster CIDR's prefix length %d and %d", maskBits, cluster.Bits(), cluster.Addr().BitLen())
	}
	if maskBits-cluster.Bits() > 24 {
		return nil, fmt.Errorf("cluster CIDR %s holds more than %d node CIDRs of size /%d", cluster, maxNodeCIDRs, maskBits)
	}
	size := 1 << (maskBits - cluster.Bits())
	return &cidrSet{cluster: cluster, maskBits: maskBits, size: size, used: make([]uint64, (size+63)/64)}, nil
}

// prefix is the i-th node CIDR.
func (s *cidrSet) prefix(i int) netip.Prefix {
	base := new(big.Int).SetBytes(s.cluster.Addr().AsSlice())
	off := new(big.Int).Lsh(big.NewInt(int64(i)), uint(s.cluster.Addr().BitLen()-s.maskBits))
	b := base.Add(base, off).FillBytes(make([]byte, s.cluster.Addr().BitLen()/8))
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, s.maskBits)
}

// indexRange is the node CIDRs p covers: the one it lies in when p is at
// least as long as a node CIDR, every one inside it when it is shorter.
// ok is false when p does not overlap the cluster CIDR.
func (s *cidrSet) indexRange(p netip.Prefix) (first, last int, ok bool) {
	p = p.Masked()
	if p.Addr().Is4() != s.cluster.Addr().Is4() || !p.Overlaps(s.cluster) {
		return 0, 0, false
	}
	if p.Bits() < s.cluster.Bits() {
		// p holds the whole cluster CIDR.
		return 0, s.size - 1, true
	}
	shift := uint(s.cluster.Addr().BitLen() - s.maskBits)
	base := new(big.Int).SetBytes(s.cluster.Addr().AsSlice())
	start := new(big.Int).SetBytes(p.Addr().AsSlice())
	start.Sub(start, base).Rsh(start, shift)
	first = int(start.Int64())
	last = first
	if p.Bits() < s.maskBits {
		last = first + 1<<(s.maskBits-p.Bits()) - 1
	}
	return first, last, true
}

func (s *cidrSet) isSet(i int) bool { return s.used[i/64]&(1<<(i%64)) != 0 }

func (s *cidrSet) set(i int, on bool) {
	if s.isSet(i) == on {
		return
	}
	s.used[i/64] ^= 1 << (i % 64)
	if on {
		s.inUse++
	} else {
		s.inUse--
	}
}

var errFull = errors.New("no free node CIDR")

// allocateNext takes the first free node CIDR at or after the cursor.
func (s *cidrSet) allocateNext() (netip.Prefix, error) {
	if s.inUse >= s.size {
		return netip.Prefix{}, errFull
	}
	for n := 0; n < s.size; n++ {
		i := (s.next + n) % s.size
		if i%64 == 0 && s.used[i/64] == ^uint64(0) && n+64 <= s.size {
			n += 63 // a full word: skip it
			continue
		}
		if !s.isSet(i) {
			s.set(i, true)
			s.next = (i + 1) % s.size
			return s.prefix(i), nil
		}
	}
	return netip.Prefix{}, errFull
}

// occupy marks every node CIDR p covers as taken; it reports false when p
// lies outside the cluster CIDR (nothing to mark).
func (s *cidrSet) occupy(p netip.Prefix) bool {
	first, last, ok := s.indexRange(p)
	for i := first; ok && i <= last; i++ {
		s.set(i, true)
	}
	return ok
}

// release frees every node CIDR p covers.
func (s *cidrSet) release(p netip.Prefix) {
	first, last, ok := s.indexRange(p)
	for i := first; ok && i <= last; i++ {
		s.set(i, false)
	}
}

// taken reports whether any node CIDR p covers is taken.
func (s *cidrSet) taken(p netip.Prefix) bool {
	first, last, ok := s.indexRange(p)
	for i := first; ok && i <= last; i++ {
		if s.isSet(i) {
			return true
		}
	}
	return false
}
