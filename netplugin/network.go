package netplugin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const (
	defaultNetnsDir = "/run/bonsai/netns"
	defaultBridge   = "bonsai0"
	defaultTable    = "bonsai"
	podInterface    = "eth0"
)

var errClosed = errors.New("netplugin: network is closed")

// Network is the pod network of one node. Its methods are safe for
// concurrent use; calls for the same pod ID are serialized.
type Network struct {
	cfg Config
	log *slog.Logger
	mtu int
	// fams are the pod network's families, in the order of
	// Config.PodCIDRs: each has its gateway, IPAM and nftables table.
	fams []*family
	// nl talks rtnetlink to the host namespace: its socket was opened
	// there in New and stays there whatever thread uses it.
	nl *netlink.Handle

	podLocks KeyedMutex
	routesMu sync.Mutex

	// life is held shared by every operation and exclusively by Close, so
	// Close waits for them and none starts after it.
	life   sync.RWMutex
	closed bool

	mu sync.Mutex
	// complete holds the pods whose Setup finished in this process; a
	// Setup for them returns at once. After a restart a Setup checks (and
	// repairs) every part instead, disturbing nothing that is right.
	complete map[string]bool

	// setupHook, when set by a test, runs before each step of Setup and
	// fails it by returning an error.
	setupHook func(step string) error
}

// family is one address family of the pod network.
type family struct {
	cluster, pod netip.Prefix
	gateway      netip.Addr
	ipam         *ipam
	rules        *ruleset
}

func (f *family) v6() bool { return f.pod.Addr().Is6() }

// ipamDir is where a family's allocations live: "ipam" for IPv4 (as
// before dual-stack), "ipam6" for IPv6.
func ipamDir(dataDir string, v6 bool) string {
	if v6 {
		return filepath.Join(dataDir, "ipam6")
	}
	return filepath.Join(dataDir, "ipam")
}

func (n *Network) hasFamily(v6 bool) bool {
	return slices.ContainsFunc(n.fams, func(f *family) bool { return f.v6() == v6 })
}

// closeFamilies releases the IPAM locks and nftables sockets.
func (n *Network) closeFamilies() error {
	var errs []error
	for _, f := range n.fams {
		if f.rules != nil {
			errs = append(errs, f.rules.close())
		}
		if f.ipam != nil {
			errs = append(errs, f.ipam.close())
		}
	}
	return errors.Join(errs...)
}

// New brings up the node's pod network: the bridge with the gateway
// address, forwarding, the nftables table (rebuilt from the persisted
// state, in one transaction) and the IPAM state. It is idempotent, and it
// leaves running pods alone: their namespaces, veths and addresses stay as
// they are.
func New(ctx context.Context, cfg Config) (*Network, error) {
	if cfg.NetnsDir == "" {
		cfg.NetnsDir = defaultNetnsDir
	}
	if cfg.Bridge == "" {
		cfg.Bridge = defaultBridge
	}
	if cfg.Table == "" {
		cfg.Table = defaultTable
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := validateConfig(&cfg); err != nil {
		return nil, err
	}
	n := &Network{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "netplugin"),
		complete: map[string]bool{},
	}
	for i, pod := range cfg.PodCIDRs {
		n.fams = append(n.fams, &family{cluster: cfg.ClusterCIDRs[i], pod: pod, gateway: pod.Addr().Next()})
	}
	var err error
	if n.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return nil, fmt.Errorf("netplugin: open rtnetlink socket: %w", err)
	}
	n.mtu = cfg.MTU
	if n.mtu == 0 {
		n.mtu = n.defaultRouteMTU()
	}
	if n.hasFamily(true) && n.mtu < 1280 {
		n.nl.Close()
		return nil, fmt.Errorf("netplugin: MTU %d is too small for IPv6 (at least 1280)", n.mtu)
	}
	for _, f := range n.fams {
		if f.ipam, err = openIPAM(ipamDir(cfg.DataDir, f.v6()), f.pod); err != nil {
			n.closeFamilies()
			n.nl.Close()
			return nil, err
		}
	}
	if err := n.start(ctx); err != nil {
		n.closeFamilies()
		n.nl.Close()
		return nil, err
	}
	n.log.Info("pod network ready", "bridge", cfg.Bridge, "podCIDRs", cfg.PodCIDRs,
		"gateway", n.fams[0].gateway, "mtu", n.mtu, "pods", len(n.fams[0].ipam.allocations()),
		"bridgeNetfilter", bridgeNetfilter())
	return n, nil
}

func (n *Network) start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := PrepareNetnsDir(n.cfg.NetnsDir); err != nil {
		return err
	}
	if err := n.ensureBridge(); err != nil {
		return err
	}
	// Pods' traffic to anything but their own bridge is routed by the
	// node.
	if n.hasFamily(false) {
		if err := n.setSysctl("net/ipv4/ip_forward", "1"); err != nil {
			return err
		}
		// A hostPort reached on 127.0.0.1 is DNAT'd to the pod with source
		// 127.0.0.1 still, then masqueraded: the kernel routes such a packet
		// out of the bridge only with route_localnet on it.
		if err := n.setSysctl("net/ipv4/conf/"+n.cfg.Bridge+"/route_localnet", "1"); err != nil {
			return err
		}
	}
	if n.hasFamily(true) {
		// IPv6 forwards only with the "all" switch on (the per-interface
		// one says whether an interface acts as a router for NDP and RAs,
		// and setting "all" sets every interface's).
		if err := n.setSysctl("net/ipv6/conf/all/forwarding", "1"); err != nil {
			return err
		}
	}
	// A table of a family the network no longer has (the cluster CIDRs
	// changed) would keep DNATing to addresses nobody owns.
	for _, v6 := range []bool{false, true} {
		if !n.hasFamily(v6) {
			if err := dropTable(n.cfg.Table, v6); err != nil {
				return err
			}
		}
	}
	for _, f := range n.fams {
		rules, err := newRuleset(n.cfg.Table, n.cfg.Bridge, f.cluster)
		if err != nil {
			return err
		}
		f.rules = rules
		var pods []podRules
		for ip, rec := range f.ipam.allocations() {
			if rec.ID != "" && len(rec.HostPorts) > 0 {
				pods = append(pods, podRules{id: rec.ID, ip: ip, hostPorts: rec.HostPorts})
			}
		}
		sort.Slice(pods, func(i, j int) bool { return pods[i].id < pods[j].id })
		if err := rules.sync(pods); err != nil {
			return err
		}
	}
	return nil
}

func validateConfig(cfg *Config) error {
	if cfg.DataDir == "" {
		return errors.New("netplugin: DataDir is required")
	}
	if len(cfg.ClusterCIDRs) == 0 {
		cfg.ClusterCIDRs = []netip.Prefix{cfg.ClusterCIDR}
	}
	if len(cfg.PodCIDRs) == 0 {
		cfg.PodCIDRs = []netip.Prefix{cfg.PodCIDR}
	}
	if len(cfg.ClusterCIDRs) > 2 || len(cfg.PodCIDRs) > 2 {
		return fmt.Errorf("netplugin: cluster CIDRs %v, pod CIDRs %v: want at most one of each family", cfg.ClusterCIDRs, cfg.PodCIDRs)
	}
	if len(cfg.ClusterCIDRs) == 2 && cfg.ClusterCIDRs[0].Addr().Is4() == cfg.ClusterCIDRs[1].Addr().Is4() {
		return fmt.Errorf("netplugin: cluster CIDRs %v: two of one family; want one IPv4 and one IPv6", cfg.ClusterCIDRs)
	}
	// The node's pod CIDRs say which families its pods get, in their
	// order: a node given its pod CIDR before the cluster became
	// dual-stack keeps networking pods of that family alone, as the
	// kubelet networks the podCIDRs it is given.
	clusters := make([]netip.Prefix, len(cfg.PodCIDRs))
	pods := make([]netip.Prefix, len(cfg.PodCIDRs))
	for i, pod := range cfg.PodCIDRs {
		if !pod.IsValid() {
			return fmt.Errorf("netplugin: pod CIDR %q is not a prefix", pod)
		}
		if i == 1 && pod.Addr().Is4() == cfg.PodCIDRs[0].Addr().Is4() {
			return fmt.Errorf("netplugin: pod CIDRs %v: two of one family; want one IPv4 and one IPv6", cfg.PodCIDRs)
		}
		j := slices.IndexFunc(cfg.ClusterCIDRs, func(c netip.Prefix) bool { return c.IsValid() && c.Addr().Is4() == pod.Addr().Is4() })
		if j < 0 {
			return fmt.Errorf("netplugin: pod CIDR %s is not inside cluster CIDR %v: none is of its family", pod, cfg.ClusterCIDRs)
		}
		cluster := cfg.ClusterCIDRs[j].Masked()
		pod = pod.Masked()
		if pod.Bits() < cluster.Bits() || !cluster.Contains(pod.Addr()) {
			// Pods outside the cluster CIDR would be masqueraded when
			// talking to each other across nodes, and not at all otherwise.
			return fmt.Errorf("netplugin: pod CIDR %s is not inside cluster CIDR %s", pod, cluster)
		}
		if _, _, err := allocatableRange(pod); err != nil {
			return fmt.Errorf("netplugin: %w", err)
		}
		clusters[i], pods[i] = cluster, pod
	}
	cfg.ClusterCIDRs, cfg.PodCIDRs = clusters, pods
	cfg.ClusterCIDR, cfg.PodCIDR = cfg.ClusterCIDRs[0], cfg.PodCIDRs[0]
	if len(cfg.Bridge) >= unix.IFNAMSIZ || strings.ContainsAny(cfg.Bridge, "/ \t\n") {
		return fmt.Errorf("netplugin: bridge name %q is not a valid interface name", cfg.Bridge)
	}
	if cfg.MTU < 0 || (cfg.MTU > 0 && cfg.MTU < 576) {
		return fmt.Errorf("netplugin: MTU %d is too small (at least 576)", cfg.MTU)
	}
	for _, a := range cfg.LocalAddrs {
		if !slices.ContainsFunc(cfg.PodCIDRs, func(p netip.Prefix) bool { return p.Addr().Is4() == a.Is4() }) ||
			slices.ContainsFunc(cfg.PodCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return fmt.Errorf("netplugin: local address %s must be of a pod CIDR's family and outside the pod CIDRs %v", a, cfg.PodCIDRs)
		}
	}
	return nil
}

// defaultRouteMTU is the MTU of the interface of the host's default route:
// pod traffic leaves through it, and a bigger MTU would fragment.
func (n *Network) defaultRouteMTU() int {
	routes, err := retryDump(func() ([]netlink.Route, error) { return n.nl.RouteList(nil, unix.AF_INET) })
	if err == nil {
		for _, r := range routes {
			if r.Dst != nil && !(r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)) {
				continue
			}
			if l, err := n.nl.LinkByIndex(r.LinkIndex); err == nil && l.Attrs().MTU >= 576 {
				return l.Attrs().MTU
			}
		}
	}
	return 1500
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

// ensureBridge makes the bridge exist, be up, and carry exactly the
// gateway address and the LocalAddrs.
func (n *Network) ensureBridge() error {
	name := n.cfg.Bridge
	link, err := n.nl.LinkByName(name)
	if errors.As(err, &netlink.LinkNotFoundError{}) {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = name
		attrs.MTU = n.mtu
		// A bridge whose address was never set takes the lowest of its
		// ports' addresses, so the pods' gateway MAC would change as pods
		// come and go. One set at creation stays.
		attrs.HardwareAddr = randomMAC()
		if err := n.nl.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create bridge %s: %w", name, err)
		}
		link, err = n.nl.LinkByName(name)
	}
	if err != nil {
		return fmt.Errorf("look up bridge %s: %w", name, err)
	}
	if link.Type() != "bridge" {
		return fmt.Errorf("interface %s exists and is a %s, not a bridge", name, link.Type())
	}
	if link.Attrs().MTU != n.mtu {
		if err := n.nl.LinkSetMTU(link, n.mtu); err != nil {
			return fmt.Errorf("set MTU %d on bridge %s: %w", n.mtu, name, err)
		}
	}
	want := map[netip.Prefix]bool{}
	for _, f := range n.fams {
		want[netip.PrefixFrom(f.gateway, f.pod.Bits())] = false
	}
	for _, a := range n.cfg.LocalAddrs {
		want[netip.PrefixFrom(a, a.BitLen())] = false
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return n.nl.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("list addresses of bridge %s: %w", name, err)
	}
	for _, a := range addrs {
		p, ok := ipNetToPrefix(a.IPNet)
		if ok && p.Addr().IsLinkLocalUnicast() && p.Addr().Is6() {
			continue // the kernel's own fe80:: address
		}
		if _, wanted := want[p]; ok && wanted {
			want[p] = true
			continue
		}
		// The bridge is ours: an old gateway (the pod CIDR changed) goes.
		if err := n.nl.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("remove stale address %s from bridge %s: %w", a.IPNet, name, err)
		}
	}
	for p, have := range want {
		if have {
			continue
		}
		if err := n.nl.AddrAdd(link, linkAddr(p)); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add address %s to bridge %s: %w", p, name, err)
		}
	}
	if err := n.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("set bridge %s up: %w", name, err)
	}
	return nil
}

// linkAddr is an address to put on a link. An IPv6 one skips duplicate
// address detection (nodad): the prefix is the node's own, and a
// tentative address cannot be used, bound or routed from for a second
// or more.
func linkAddr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: prefixToIPNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

func randomMAC() net.HardwareAddr {
	mac := make(net.HardwareAddr, 6)
	rand.Read(mac)
	mac[0] = mac[0]&0xfe | 0x02 // unicast, locally administered
	return mac
}

// setSysctl sets a sysctl the pod network needs, in the namespace of the
// calling thread, and logs a change: the pod network cannot work without
// it, so failing to set it fails, and says which.
func (n *Network) setSysctl(key, value string) error {
	name := strings.ReplaceAll(key, "/", ".")
	path := "/proc/sys/" + key
	cur, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(cur)) == value {
		return nil
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("the pod network needs sysctl %s=%s and cannot set it: %w", name, value, err)
	}
	n.log.Info("set sysctl for the pod network", "sysctl", name, "value", value, "was", strings.TrimSpace(string(cur)))
	return nil
}

// bridgeNetfilter says, for the log, whether bridged IPv4 traffic passes
// the IP netfilter hooks in the calling thread's namespace: "on"
// (br_netfilter with bridge-nf-call-iptables=1), "off", or "absent" (no
// br_netfilter). The pod network works either way (see doc.go).
func bridgeNetfilter() string {
	v, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
	switch {
	case err != nil:
		return "absent"
	case strings.TrimSpace(string(v)) == "1":
		return "on"
	default:
		return "off"
	}
}

// enter admits an operation unless the network is closed; the caller
// must call n.life.RUnlock when done.
func (n *Network) enter() error {
	n.life.RLock()
	if n.closed {
		n.life.RUnlock()
		return errClosed
	}
	return nil
}

func (n *Network) netnsPath(id string) string {
	return filepath.Join(n.cfg.NetnsDir, id)
}

// vethName is the host end of a pod's veth: derived from the pod ID (so
// Teardown finds it with no state) and the bridge (so two networks on one
// host, as in tests, never collide).
func (n *Network) vethName(id string) string { return VethName(n.cfg.Bridge, id) }

// VethName is the name of the host end of the veth of the pod sandbox id
// on bridge: its port on the bridge. IFNAMSIZ allows 15 characters.
func VethName(bridge, id string) string {
	sum := sha256.Sum256([]byte(bridge + "/" + id))
	return "bv" + hex.EncodeToString(sum[:])[:13]
}

// ValidateID checks a pod sandbox ID: it names files and netns mounts.
func ValidateID(id string) error {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return fmt.Errorf("invalid pod sandbox ID %q: want 1-128 characters of [A-Za-z0-9_.-], not starting with '.'", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("invalid pod sandbox ID %q: want 1-128 characters of [A-Za-z0-9_.-], not starting with '.'", id)
		}
	}
	return nil
}

// Get returns the attachment of a pod that Setup set up, in this process
// or before a restart (from the persisted state).
func (n *Network) Get(id string) (Attachment, bool) {
	var ips []netip.Addr
	for _, f := range n.fams {
		ip, _, ok := f.ipam.lookup(id)
		if !ok {
			return Attachment{}, false
		}
		ips = append(ips, ip)
	}
	return n.attachment(id, ips), true
}

func (n *Network) attachment(id string, ips []netip.Addr) Attachment {
	return Attachment{NetnsPath: n.netnsPath(id), IP: ips[0], IPs: ips, Gateway: n.fams[0].gateway}
}

// Ready is always nil: once New returned, the built-in network can
// attach pods.
func (n *Network) Ready(context.Context) error { return nil }

var _ PodNetwork = (*Network)(nil)

// Setup gives a pod its network: a new namespace bind-mounted at
// NetnsDir/<ID> with lo up, a veth whose host end is on the bridge and
// whose pod end is eth0 with an address from the pod CIDR and a default
// route via the gateway, and the pod's hostPort rules. For a pod that is
// already set up it returns the existing attachment (hostPorts of the
// first call stay). On failure it undoes what it did.
func (n *Network) Setup(ctx context.Context, pod Pod) (Attachment, error) {
	if err := ValidateID(pod.ID); err != nil {
		return Attachment{}, err
	}
	who := pod.Namespace + "/" + pod.Name
	if err := validateHostPorts(pod.HostPorts, n.hasFamily(false), n.hasFamily(true)); err != nil {
		return Attachment{}, fmt.Errorf("set up pod %s: %w", who, err)
	}
	if err := n.enter(); err != nil {
		return Attachment{}, err
	}
	defer n.life.RUnlock()
	unlock := n.podLocks.Lock(pod.ID)
	defer unlock()

	n.mu.Lock()
	done := n.complete[pod.ID]
	n.mu.Unlock()
	if done {
		if att, ok := n.Get(pod.ID); ok {
			return att, nil
		}
	}

	start := time.Now()
	s := &podSetup{n: n, id: pod.ID, who: who, ctx: ctx}
	att, err := s.run(pod)
	if err != nil {
		s.undo()
		return Attachment{}, err
	}
	n.mu.Lock()
	n.complete[pod.ID] = true
	n.mu.Unlock()
	n.log.Debug("pod network set up", "pod", who, "id", pod.ID, "ip", att.IP, "took", time.Since(start))
	return att, nil
}

// podSetup is one Setup call: the steps it took, so that a failure undoes
// exactly those and nothing that was there before.
type podSetup struct {
	n     *Network
	id    string
	who   string
	ctx   context.Context
	undos []func() error
}

func (s *podSetup) step(name string) error {
	if err := s.ctx.Err(); err != nil {
		return fmt.Errorf("set up pod %s: %w", s.who, err)
	}
	if s.n.setupHook != nil {
		if err := s.n.setupHook(name); err != nil {
			return fmt.Errorf("%s for pod %s: %w", name, s.who, err)
		}
	}
	return nil
}

func (s *podSetup) undo() {
	for i := len(s.undos) - 1; i >= 0; i-- {
		if err := s.undos[i](); err != nil {
			s.n.log.Warn("undo a failed pod network setup", "pod", s.who, "id", s.id, "err", err)
		}
	}
}

func (s *podSetup) run(pod Pod) (Attachment, error) {
	n := s.n

	if err := s.step("allocate IP"); err != nil {
		return Attachment{}, err
	}
	// One address per family. A pod set up before the network had its
	// second family gets that address now; its hostPorts are the ones of
	// the first allocation, whichever family that was.
	ips := make([]netip.Addr, len(n.fams))
	recs := make([]ipamRecord, len(n.fams))
	hads := make([]bool, len(n.fams))
	var known *ipamRecord
	for i, f := range n.fams {
		ips[i], recs[i], hads[i] = f.ipam.lookup(s.id)
		if hads[i] && known == nil {
			known = &recs[i]
		}
	}
	for i, f := range n.fams {
		if hads[i] {
			continue
		}
		recs[i] = ipamRecord{ID: s.id, Namespace: pod.Namespace, Name: pod.Name, HostPorts: pod.HostPorts}
		if known != nil {
			recs[i] = *known
		}
		var err error
		if ips[i], err = f.ipam.allocate(recs[i]); err != nil {
			return Attachment{}, fmt.Errorf("allocate IP for pod %s: %w", s.who, err)
		}
		s.undos = append(s.undos, func() error { return f.ipam.releaseID(s.id) })
	}

	if err := s.step("create netns"); err != nil {
		return Attachment{}, err
	}
	nsPath := n.netnsPath(s.id)
	if !IsNetnsMount(nsPath) {
		if err := RemoveNetns(nsPath); err != nil { // an empty file left by a crash
			return Attachment{}, fmt.Errorf("create netns for pod %s: %w", s.who, err)
		}
		if err := CreateNetns(nsPath); err != nil {
			return Attachment{}, fmt.Errorf("create netns for pod %s: %w", s.who, err)
		}
		s.undos = append(s.undos, func() error { return RemoveNetns(nsPath) })
	}
	podNS, err := netns.GetFromPath(nsPath)
	if err != nil {
		return Attachment{}, fmt.Errorf("open netns of pod %s: %w", s.who, err)
	}
	defer podNS.Close()
	podNL, err := netlinkHandleIn(nsPath)
	if err != nil {
		return Attachment{}, fmt.Errorf("open netlink in netns of pod %s: %w", s.who, err)
	}
	defer podNL.Close()

	if err := s.step("create veth"); err != nil {
		return Attachment{}, err
	}
	if err := s.ensureVeth(podNS, podNL); err != nil {
		return Attachment{}, err
	}

	if err := s.step("configure eth0"); err != nil {
		return Attachment{}, err
	}
	if err := s.configurePod(podNL, ips); err != nil {
		return Attachment{}, err
	}

	if err := s.step("add hostPort rules"); err != nil {
		return Attachment{}, err
	}
	for i, f := range n.fams {
		// A new pod without hostPorts has no rules to add, nor any to
		// clean up: Teardown removes rules before it releases the IP.
		if len(recs[i].HostPorts) == 0 && !hads[i] {
			continue
		}
		if err := f.rules.setPodRules(podRules{id: s.id, ip: ips[i], hostPorts: recs[i].HostPorts}); err != nil {
			return Attachment{}, fmt.Errorf("add hostPort rules for pod %s: %w", s.who, err)
		}
		if !hads[i] {
			s.undos = append(s.undos, func() error { return f.rules.setPodRules(podRules{id: s.id}) })
		}
	}
	if err := s.step("finish"); err != nil {
		return Attachment{}, err
	}
	return n.attachment(s.id, ips), nil
}

// ensureVeth makes the pod's veth pair exist: host end on the bridge and
// up, pod end eth0 in the pod's namespace. A pair that is already there
// (a Setup after a restart) is kept as it is.
func (s *podSetup) ensureVeth(podNS netns.NsHandle, podNL *netlink.Handle) error {
	n := s.n
	name := n.vethName(s.id)
	bridge, err := n.nl.LinkByName(n.cfg.Bridge)
	if err != nil {
		return fmt.Errorf("create veth for pod %s: look up bridge %s: %w", s.who, n.cfg.Bridge, err)
	}
	host, err := n.nl.LinkByName(name)
	if err == nil {
		if _, perr := podNL.LinkByName(podInterface); perr == nil && host.Type() == "veth" {
			if host.Attrs().MasterIndex != bridge.Attrs().Index {
				if err := n.nl.LinkSetMasterByIndex(host, bridge.Attrs().Index); err != nil {
					return fmt.Errorf("attach veth %s of pod %s to bridge %s: %w", name, s.who, n.cfg.Bridge, err)
				}
			}
			if err := n.nl.LinkSetUp(host); err != nil {
				return fmt.Errorf("set veth %s of pod %s up: %w", name, s.who, err)
			}
			return nil
		}
		// Half a pair from an interrupted Setup: start over.
		if err := n.nl.LinkDel(host); err != nil {
			return fmt.Errorf("create veth for pod %s: remove stale %s: %w", s.who, name, err)
		}
	} else if !errors.As(err, &netlink.LinkNotFoundError{}) {
		return fmt.Errorf("create veth for pod %s: look up %s: %w", s.who, name, err)
	}
	if stale, err := podNL.LinkByName(podInterface); err == nil {
		podNL.LinkDel(stale)
	}

	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	attrs.MTU = n.mtu
	attrs.Flags = net.FlagUp
	attrs.MasterIndex = bridge.Attrs().Index
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: podInterface, PeerNamespace: netlink.NsFd(int(podNS))}
	if err := n.nl.LinkAdd(veth); err != nil {
		// LinkAdd enslaves after creating: the pair may exist.
		n.deleteLink(name)
		return fmt.Errorf("create veth for pod %s: %w", s.who, err)
	}
	s.undos = append(s.undos, func() error { return n.deleteLink(name) })
	// With br_netfilter, a pod's packet to its own hostPort or Service
	// is DNAT'd in the bridge's prerouting and bridged straight back out
	// of the port it came in on, which a bridge does only in hairpin
	// mode. Without br_netfilter the node routes it, and it leaves from
	// the bridge's own port: hairpin mode is then unused, and harmless.
	if err := n.nl.LinkSetHairpin(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}}, true); err != nil {
		return fmt.Errorf("set hairpin mode on veth %s of pod %s: %w", name, s.who, err)
	}
	return nil
}

// deleteLink deletes a link by name; one that is not there is not an
// error.
func (n *Network) deleteLink(name string) error {
	link, err := n.nl.LinkByName(name)
	if errors.As(err, &netlink.LinkNotFoundError{}) {
		return nil
	}
	if err == nil {
		err = n.nl.LinkDel(link)
	}
	if err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// configurePod sets up the pod's side: lo and eth0 up, an address and a
// default route per family. Every call is idempotent.
func (s *podSetup) configurePod(podNL *netlink.Handle, ips []netip.Addr) error {
	lo, err := podNL.LinkByName("lo")
	if err == nil {
		err = podNL.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("set lo up in netns of pod %s: %w", s.who, err)
	}
	eth0, err := podNL.LinkByName(podInterface)
	if err != nil {
		return fmt.Errorf("configure %s of pod %s: %w", podInterface, s.who, err)
	}
	for i, f := range s.n.fams {
		if err := podNL.AddrReplace(eth0, linkAddr(netip.PrefixFrom(ips[i], f.pod.Bits()))); err != nil {
			return fmt.Errorf("add address %s to %s of pod %s: %w", ips[i], podInterface, s.who, err)
		}
	}
	if err := podNL.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("set %s of pod %s up: %w", podInterface, s.who, err)
	}
	for _, f := range s.n.fams {
		any := netip.IPv4Unspecified()
		if f.v6() {
			any = netip.IPv6Unspecified()
		}
		route := &netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: f.gateway.AsSlice(), Dst: prefixToIPNet(netip.PrefixFrom(any, 0))}
		if err := podNL.RouteReplace(route); err != nil {
			return fmt.Errorf("add default route via %s for pod %s: %w", f.gateway, s.who, err)
		}
	}
	return nil
}

// Teardown removes a pod's network: its hostPort rules, its veth, its
// namespace mount, and then its IP. A pod that is not (or no longer) set
// up is not an error. If a step fails the IP stays allocated, so that no
// other pod gets it while something may still use it; a later Teardown
// or GC finishes the job.
func (n *Network) Teardown(ctx context.Context, id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if err := n.enter(); err != nil {
		return err
	}
	defer n.life.RUnlock()
	unlock := n.podLocks.Lock(id)
	defer unlock()
	return n.teardownLocked(ctx, id)
}

func (n *Network) teardownLocked(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.complete, id)
	n.mu.Unlock()

	var errs []error
	var rec ipamRecord
	known := false
	for _, f := range n.fams {
		_, r, ok := f.ipam.lookup(id)
		if ok && !known {
			rec, known = r, true
		}
		if !ok || len(r.HostPorts) > 0 {
			if err := f.rules.setPodRules(podRules{id: id}); err != nil {
				errs = append(errs, fmt.Errorf("tear down pod %s: %w", id, err))
			}
		}
	}
	if err := n.deleteLink(n.vethName(id)); err != nil {
		errs = append(errs, fmt.Errorf("tear down pod %s: veth: %w", id, err))
	}
	if err := RemoveNetns(n.netnsPath(id)); err != nil {
		errs = append(errs, fmt.Errorf("tear down pod %s: %w", id, err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, f := range n.fams {
		if err := f.ipam.releaseID(id); err != nil {
			return fmt.Errorf("tear down pod %s: %w", id, err)
		}
	}
	if known {
		n.log.Debug("pod network torn down", "pod", rec.Namespace+"/"+rec.Name, "id", id)
	}
	return nil
}

// GC tears down every pod this network knows of (allocated IP, namespace
// under NetnsDir, nftables rules) for which live returns false, and
// releases IPs whose allocation file was unreadable. live is asked with
// the pod's lock held, after any Setup for it finished, and must not call
// back into the Network. It must return true for every sandbox the caller
// has or is about to set up: the usual place for GC is at start, before
// pod workers run, and then periodically from the loop that creates
// sandboxes.
func (n *Network) GC(ctx context.Context, live func(id string) bool) error {
	if err := n.enter(); err != nil {
		return err
	}
	defer n.life.RUnlock()

	ids := map[string]bool{}
	var errs []error
	for _, f := range n.fams {
		for ip, rec := range f.ipam.allocations() {
			if rec.ID != "" {
				ids[rec.ID] = true
				continue
			}
			if err := f.ipam.releaseIP(ip); err != nil {
				errs = append(errs, err)
			} else {
				n.log.Info("released IP with an unreadable allocation record", "ip", ip)
			}
		}
	}
	entries, err := os.ReadDir(n.cfg.NetnsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("list netns dir: %w", err))
	}
	for _, e := range entries {
		if ValidateID(e.Name()) == nil {
			ids[e.Name()] = true
		}
	}
	for _, f := range n.fams {
		owners, err := f.rules.ruleOwners()
		if err != nil {
			errs = append(errs, err)
		}
		for id := range owners {
			if ValidateID(id) == nil {
				ids[id] = true
			}
		}
	}

	errs = append(errs, TeardownDead(ctx, ids, live, n.podLocks.Lock, n.teardownLocked, n.log))
	return errors.Join(errs...)
}

// TeardownDead is the heart of a PodNetwork's GC: in ID order, it tears
// down each of ids for which live returns false, asking live and tearing
// down under lock(id) so that no Setup of that pod runs meanwhile.
func TeardownDead(ctx context.Context, ids map[string]bool, live func(id string) bool, lock func(id string) (unlock func()), teardown func(ctx context.Context, id string) error, log *slog.Logger) error {
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	slices.Sort(sorted)
	var errs []error
	for _, id := range sorted {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		unlock := lock(id)
		if !live(id) {
			if err := teardown(ctx, id); err != nil {
				errs = append(errs, err)
			} else {
				log.Info("removed the network of a pod that is gone", "id", id)
			}
		}
		unlock()
	}
	return errors.Join(errs...)
}

// Close releases what the network holds in memory (the IPAM lock, the
// nftables socket). Pods keep their network: a new New on the same
// DataDir takes them over.
func (n *Network) Close() error {
	n.life.Lock()
	defer n.life.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	n.nl.Close()
	return n.closeFamilies()
}

// Destroy removes the bridge, the nftables table, the routes SetRoutes
// made and the NetnsDir mount.
// It leaves pods' veths and namespaces to Teardown (or GC), which should
// run first; and the IPAM state, which belongs to the data dir.
func (n *Network) Destroy(ctx context.Context) error {
	if err := n.enter(); err != nil {
		return err
	}
	defer n.life.RUnlock()
	var errs []error
	for _, f := range n.fams {
		if err := f.rules.destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	n.routesMu.Lock()
	defer n.routesMu.Unlock()
	if err := n.setRoutesLocked(ctx, nil); err != nil {
		errs = append(errs, err)
	}
	if err := n.deleteLink(n.cfg.Bridge); err != nil {
		errs = append(errs, fmt.Errorf("bridge: %w", err))
	}
	if err := unix.Unmount(n.cfg.NetnsDir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount netns dir %s: %w", n.cfg.NetnsDir, err))
	}
	return errors.Join(errs...)
}

// KeyedMutex serializes work per key (pod ID) and lets different keys run
// at once.
type KeyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *KeyedMutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func ipNetToPrefix(n *net.IPNet) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones), true
}

// retryDump repeats a netlink dump that concurrent changes interrupted
// (NLM_F_DUMP_INTR): the partial answer may miss entries.
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	for i := 0; ; i++ {
		out, err := dump()
		if errors.Is(err, netlink.ErrDumpInterrupted) && i < 10 {
			continue
		}
		return out, err
	}
}
