package netplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ipamRecord is what one allocation file holds: who owns the address and what
// the rules for that owner must look like, so that New can rebuild them after
// a restart without asking anyone.
type ipamRecord struct {
	ID        string     `json:"id"`
	Namespace string     `json:"namespace,omitempty"`
	Name      string     `json:"name,omitempty"`
	HostPorts []HostPort `json:"hostPorts,omitempty"`
}

// ipam hands out addresses of one prefix, host-local style: one file per
// allocated address, named after the address, under dir. A file is written
// to a temporary name, fsync'd, renamed into place and the directory fsync'd
// before the address is handed out, and it is removed only when the address
// is released, so after a crash at any point every address in use still has
// its file. What a crash can leave behind is an allocation nobody uses (a
// Setup that never returned, a Teardown that did not finish): GC releases
// those.
//
// An exclusive flock on dir/.lock keeps a second process from handing out
// the same addresses.
type ipam struct {
	dir    string
	prefix netip.Prefix
	first  netip.Addr // lowest address handed out: network+2 (network+1 is the gateway)
	last   netip.Addr // highest: broadcast-1
	lock   *os.File

	mu   sync.Mutex
	byIP map[netip.Addr]ipamRecord
	byID map[string]netip.Addr
	// cursor is the last address handed out: the search for a free one
	// starts after it, so a just-released address is not reused at once
	// (stale ARP entries and conntrack state would point at the new pod).
	cursor netip.Addr
}

const (
	ipamLockName  = ".lock"
	ipamTmpPrefix = ".tmp-"
)

// allocatableRange returns the first and last address of prefix that can
// be given to a pod: not the network address, not the gateway (the first
// host address), and for IPv4 not the broadcast address (IPv6 has none,
// and host-local hands out an IPv6 prefix's last address too).
func allocatableRange(prefix netip.Prefix) (first, last netip.Addr, err error) {
	if !prefix.IsValid() {
		return first, last, fmt.Errorf("pod CIDR %q is not a prefix", prefix)
	}
	if hostBits := prefix.Addr().BitLen() - prefix.Bits(); hostBits < 3 {
		// A /30 leaves one address after the gateway; make the node
		// useful or refuse it.
		return first, last, fmt.Errorf("pod CIDR %s is too small: need at least a /%d", prefix, prefix.Addr().BitLen()-3)
	}
	prefix = prefix.Masked()
	network := prefix.Addr()
	first = network.Next().Next()
	last = lastAddr(prefix)
	if last.Is4() {
		last = last.Prev() // broadcast
	}
	return first, last, nil
}

// lastAddr is the highest address of prefix.
func lastAddr(prefix netip.Prefix) netip.Addr {
	b := prefix.Masked().Addr().AsSlice()
	for i := prefix.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// openIPAM loads the allocations under dir (creating it) and takes the
// lock. Allocations outside prefix (the node's pod CIDR changed) are kept:
// their pods may still run; they are never handed out again from here.
func openIPAM(dir string, prefix netip.Prefix) (*ipam, error) {
	first, last, err := allocatableRange(prefix)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create IPAM dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ipamLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open IPAM lock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("IPAM state in %s is in use by another process (or by a Network of this one that was not closed)", dir)
		}
		return nil, fmt.Errorf("lock IPAM state in %s: %w", dir, err)
	}
	a := &ipam{
		dir:    dir,
		prefix: prefix.Masked(),
		first:  first,
		last:   last,
		lock:   lock,
		byIP:   map[netip.Addr]ipamRecord{},
		byID:   map[string]netip.Addr{},
	}
	if err := a.load(); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

func (a *ipam) load() error {
	entries, err := os.ReadDir(a.dir)
	if err != nil {
		return fmt.Errorf("read IPAM dir: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == ipamLockName:
			continue
		case strings.HasPrefix(name, ipamTmpPrefix):
			// A write that a crash interrupted before the rename: the
			// address was never handed out.
			if err := os.Remove(filepath.Join(a.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove interrupted IPAM write %s: %w", name, err)
			}
			continue
		}
		ip, err := netip.ParseAddr(name)
		if err != nil || ip.Is4() != a.prefix.Addr().Is4() {
			continue // not ours
		}
		var rec ipamRecord
		data, err := os.ReadFile(filepath.Join(a.dir, name))
		if err != nil {
			return fmt.Errorf("read IPAM allocation %s: %w", name, err)
		}
		if json.Unmarshal(data, &rec) != nil || rec.ID == "" {
			// Unreadable: keep the address reserved (someone may use it)
			// under an owner no one is, so GC can reclaim it.
			rec = ipamRecord{}
		}
		if _, dup := a.byID[rec.ID]; dup && rec.ID != "" {
			// Two addresses for one pod cannot come from this code;
			// keep both reserved, the second one ownerless for GC.
			rec = ipamRecord{}
		}
		a.byIP[ip] = rec
		if rec.ID != "" {
			a.byID[rec.ID] = ip
		}
		if a.prefix.Contains(ip) && (!a.cursor.IsValid() || a.cursor.Less(ip)) {
			a.cursor = ip
		}
	}
	return nil
}

// close releases the lock. Nothing else needs saving: every change was
// persisted when it was made, which is also why a crash is the same as a
// close here.
func (a *ipam) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lock == nil {
		return nil
	}
	err := a.lock.Close() // closing the only descriptor drops the flock
	a.lock = nil
	return err
}

// lookup returns the address and record of a pod.
func (a *ipam) lookup(id string) (netip.Addr, ipamRecord, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ip, ok := a.byID[id]
	if !ok {
		return netip.Addr{}, ipamRecord{}, false
	}
	return ip, a.byIP[ip], true
}

// allocations returns a copy of every allocation, ownerless ones included
// (with an empty ID).
func (a *ipam) allocations() map[netip.Addr]ipamRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[netip.Addr]ipamRecord, len(a.byIP))
	for ip, rec := range a.byIP {
		out[ip] = rec
	}
	return out
}

// allocate gives rec.ID an address and persists the allocation before
// returning it. A pod that already has one gets the same address back.
func (a *ipam) allocate(rec ipamRecord) (netip.Addr, error) {
	if rec.ID == "" {
		return netip.Addr{}, errors.New("allocate an IP: empty pod ID")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lock == nil {
		return netip.Addr{}, errors.New("allocate an IP: IPAM is closed")
	}
	if ip, ok := a.byID[rec.ID]; ok {
		return ip, nil
	}
	ip, ok := a.free()
	if !ok {
		return netip.Addr{}, fmt.Errorf("pod CIDR %s exhausted: all %s addresses are allocated", a.prefix, a.size())
	}
	if err := a.persist(ip, rec); err != nil {
		return netip.Addr{}, fmt.Errorf("persist IP allocation %s for pod %s: %w", ip, rec.ID, err)
	}
	a.byIP[ip] = rec
	a.byID[rec.ID] = ip
	a.cursor = ip
	return ip, nil
}

// size is the number of addresses the prefix can hand out, capped for
// the message it is used in (an IPv6 /64 has 2^64).
func (a *ipam) size() string {
	hostBits := a.prefix.Addr().BitLen() - a.prefix.Bits()
	if hostBits >= 62 {
		return fmt.Sprintf("2^%d", hostBits)
	}
	n := uint64(1)<<hostBits - 2
	if a.prefix.Addr().Is4() {
		n--
	}
	return strconv.FormatUint(n, 10)
}

// free finds the next unallocated address after the cursor, wrapping
// around once.
func (a *ipam) free() (netip.Addr, bool) {
	start := a.first
	if a.cursor.IsValid() && a.prefix.Contains(a.cursor) && a.cursor.Less(a.last) {
		start = a.cursor.Next()
	}
	ip := start
	for {
		if _, used := a.byIP[ip]; !used {
			return ip, true
		}
		if ip == a.last {
			ip = a.first
		} else {
			ip = ip.Next()
		}
		if ip == start {
			return netip.Addr{}, false
		}
	}
}

// persist writes the allocation file atomically: a reader (or a restart)
// sees either no file or the whole record.
func (a *ipam) persist(ip netip.Addr, rec ipamRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(a.dir, ipamTmpPrefix+ip.String()+"-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(a.dir, ip.String()))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return syncDir(a.dir)
}

// releaseID frees the address of a pod; releasing an unknown pod is not an
// error.
func (a *ipam) releaseID(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	ip, ok := a.byID[id]
	if !ok {
		return nil
	}
	return a.releaseLocked(ip)
}

// releaseIP frees one address whoever owns it (GC of ownerless
// allocations).
func (a *ipam) releaseIP(ip netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.byIP[ip]; !ok {
		return nil
	}
	return a.releaseLocked(ip)
}

func (a *ipam) releaseLocked(ip netip.Addr) error {
	if a.lock == nil {
		return errors.New("release an IP: IPAM is closed")
	}
	err := os.Remove(filepath.Join(a.dir, ip.String()))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("release IP %s: %w", ip, err)
	}
	// Without this a crash could bring the allocation back; GC would
	// reclaim it, but not leaking is cheaper than reclaiming.
	if err := syncDir(a.dir); err != nil {
		return fmt.Errorf("release IP %s: %w", ip, err)
	}
	rec := a.byIP[ip]
	delete(a.byIP, ip)
	if rec.ID != "" && a.byID[rec.ID] == ip {
		delete(a.byID, rec.ID)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
