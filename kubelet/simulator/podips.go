package simulator

import (
	"errors"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// podIPs hands out fake pod IPs from each simulated node's pod CIDR, as
// host-local IPAM would on a real node: unique per node, and never given
// to a second pod while the first still exists.
type podIPs struct {
	mu    sync.Mutex
	pools map[string]*ipPool    // by node name
	byPod map[string]assignment // by pod key (namespace/name)
}

type assignment struct {
	node string
	uid  types.UID
	addr netip.Addr
}

type ipPool struct {
	cidr netip.Prefix
	used map[netip.Addr]string // address -> pod key
	next netip.Addr            // where the next search starts
}

func newPodIPs() *podIPs {
	return &podIPs{pools: map[string]*ipPool{}, byPod: map[string]assignment{}}
}

var errNoFreeIP = errors.New("no free pod IP")

// assign returns the pod's IP on node: the one it already holds, the one
// its status names (after a restart) if that one is free, else the next
// free one.
func (p *podIPs) assign(key string, uid types.UID, node string, cidr netip.Prefix, current string) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.byPod[key]; ok {
		if a.uid == uid && a.node == node && cidr.Contains(a.addr) {
			return a.addr, nil
		}
		p.releaseLocked(key)
	}
	pool := p.pools[node]
	if pool == nil || pool.cidr != cidr {
		// A node's CIDR never changes; a new one means a new node of the
		// same name, whose pods are all new.
		pool = &ipPool{cidr: cidr, used: map[netip.Addr]string{}, next: firstPodIP(cidr)}
		p.pools[node] = pool
	}
	if cur, err := netip.ParseAddr(current); err == nil && usable(cidr, cur) {
		if _, taken := pool.used[cur]; !taken {
			p.takeLocked(key, uid, node, pool, cur)
			return cur, nil
		}
	}
	addr := pool.next
	for range maxScan(cidr) {
		if !usable(cidr, addr) {
			addr = firstPodIP(cidr)
		}
		if _, taken := pool.used[addr]; !taken {
			p.takeLocked(key, uid, node, pool, addr)
			pool.next = addr.Next()
			return addr, nil
		}
		addr = addr.Next()
	}
	return netip.Addr{}, errNoFreeIP
}

func (p *podIPs) takeLocked(key string, uid types.UID, node string, pool *ipPool, addr netip.Addr) {
	pool.used[addr] = key
	p.byPod[key] = assignment{node: node, uid: uid, addr: addr}
}

// release gives back a pod's IP (the pod is gone).
func (p *podIPs) release(key string) {
	p.mu.Lock()
	p.releaseLocked(key)
	p.mu.Unlock()
}

func (p *podIPs) releaseLocked(key string) {
	a, ok := p.byPod[key]
	if !ok {
		return
	}
	delete(p.byPod, key)
	if pool := p.pools[a.node]; pool != nil && pool.used[a.addr] == key {
		delete(pool.used, a.addr)
		if len(pool.used) == 0 {
			delete(p.pools, a.node)
		}
	}
}

// firstPodIP skips the network address and the node's own (the first).
func firstPodIP(cidr netip.Prefix) netip.Addr { return cidr.Addr().Next().Next() }

// usable says whether addr may be a pod's: inside the CIDR, not the
// network address, not the node's, not IPv4's broadcast address.
func usable(cidr netip.Prefix, addr netip.Addr) bool {
	if !addr.IsValid() || !cidr.Contains(addr) || addr.Less(firstPodIP(cidr)) {
		return false
	}
	if addr.Is4() && !cidr.Contains(addr.Next()) {
		return false // broadcast
	}
	return true
}

// maxScan bounds one search: the whole CIDR up to 65,536 addresses (a
// node runs at most a few hundred pods, so a search never gets far).
func maxScan(cidr netip.Prefix) int {
	bits := cidr.Addr().BitLen() - cidr.Bits()
	if bits >= 16 {
		return 1 << 16
	}
	return 1 << bits
}
