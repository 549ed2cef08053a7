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
	cfg     Config
	log     *slog.Logger
	gateway netip.Addr
	mtu     int
	ipam    *ipam
	rules   *ruleset
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
		gateway:  cfg.PodCIDR.Addr().Next(),
		complete: map[string]bool{},
	}
	var err error
	if n.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return nil, fmt.Errorf("netplugin: open rtnetlink socket: %w", err)
	}
	n.mtu = cfg.MTU
	if n.mtu == 0 {
		n.mtu = n.defaultRouteMTU()
	}
	if n.ipam, err = openIPAM(filepath.Join(cfg.DataDir, "ipam"), cfg.PodCIDR); err != nil {
		n.nl.Close()
		return nil, err
	}
	if err := n.start(ctx); err != nil {
		n.ipam.close()
		if n.rules != nil {
			n.rules.close()
		}
		n.nl.Close()
		return nil, err
	}
	n.log.Info("pod network ready", "bridge", cfg.Bridge, "podCIDR", cfg.PodCIDR,
		"gateway", n.gateway, "mtu", n.mtu, "pods", len(n.ipam.allocations()),
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
	if err := n.setSysctl("net/ipv4/ip_forward", "1"); err != nil {
		return err
	}
	// A hostPort reached on 127.0.0.1 is DNAT'd to the pod with source
	// 127.0.0.1 still, then masqueraded: the kernel routes such a packet
	// out of the bridge only with route_localnet on it.
	if err := n.setSysctl("net/ipv4/conf/"+n.cfg.Bridge+"/route_localnet", "1"); err != nil {
		return err
	}
	rules, err := newRuleset(n.cfg.Table, n.cfg.Bridge, n.cfg.ClusterCIDR)
	if err != nil {
		return err
	}
	n.rules = rules
	var pods []podRules
	for ip, rec := range n.ipam.allocations() {
		if rec.ID != "" && len(rec.HostPorts) > 0 {
			pods = append(pods, podRules{id: rec.ID, ip: ip, hostPorts: rec.HostPorts})
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].id < pods[j].id })
	return rules.sync(pods)
}

func validateConfig(cfg *Config) error {
	if cfg.DataDir == "" {
		return errors.New("netplugin: DataDir is required")
	}
	if !cfg.ClusterCIDR.IsValid() || !cfg.ClusterCIDR.Addr().Is4() {
		return fmt.Errorf("netplugin: cluster CIDR %q is not an IPv4 prefix", cfg.ClusterCIDR)
	}
	if !cfg.PodCIDR.IsValid() || !cfg.PodCIDR.Addr().Is4() {
		return fmt.Errorf("netplugin: pod CIDR %q is not an IPv4 prefix", cfg.PodCIDR)
	}
	cfg.ClusterCIDR = cfg.ClusterCIDR.Masked()
	cfg.PodCIDR = cfg.PodCIDR.Masked()
	if cfg.PodCIDR.Bits() < cfg.ClusterCIDR.Bits() || !cfg.ClusterCIDR.Contains(cfg.PodCIDR.Addr()) {
		// Pods outside the cluster CIDR would be masqueraded when
		// talking to each other across nodes, and not at all otherwise.
		return fmt.Errorf("netplugin: pod CIDR %s is not inside cluster CIDR %s", cfg.PodCIDR, cfg.ClusterCIDR)
	}
	if _, _, err := allocatableRange(cfg.PodCIDR); err != nil {
		return fmt.Errorf("netplugin: %w", err)
	}
	if len(cfg.Bridge) >= unix.IFNAMSIZ || strings.ContainsAny(cfg.Bridge, "/ \t\n") {
		return fmt.Errorf("netplugin: bridge name %q is not a valid interface name", cfg.Bridge)
	}
	if cfg.MTU < 0 || (cfg.MTU > 0 && cfg.MTU < 576) {
		return fmt.Errorf("netplugin: MTU %d is too small (at least 576)", cfg.MTU)
	}
	for _, a := range cfg.LocalAddrs {
		if !a.Is4() || cfg.PodCIDR.Contains(a) {
			return fmt.Errorf("netplugin: local address %s must be IPv4 and outside the pod CIDR %s", a, cfg.PodCIDR)
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
	want := map[netip.Prefix]bool{netip.PrefixFrom(n.gateway, n.cfg.PodCIDR.Bits()): false}
	for _, a := range n.cfg.LocalAddrs {
		want[netip.PrefixFrom(a, 32)] = false
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return n.nl.AddrList(link, unix.AF_INET) })
	if err != nil {
		return fmt.Errorf("list addresses of bridge %s: %w", name, err)
	}
	for _, a := range addrs {
		p, ok := ipNetToPrefix(a.IPNet)
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
		if err := n.nl.AddrAdd(link, &netlink.Addr{IPNet: prefixToIPNet(p)}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add address %s to bridge %s: %w", p, name, err)
		}
	}
	if err := n.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("set bridge %s up: %w", name, err)
	}
	return nil
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
	ip, _, ok := n.ipam.lookup(id)
	if !ok {
		return Attachment{}, false
	}
	return n.attachment(id, ip), true
}

func (n *Network) attachment(id string, ip netip.Addr) Attachment {
	return Attachment{NetnsPath: n.netnsPath(id), IP: ip, IPs: []netip.Addr{ip}, Gateway: n.gateway}
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
	if err := validateHostPorts(pod.HostPorts); err != nil {
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
	ip, rec, had := n.ipam.lookup(s.id)
	if !had {
		rec = ipamRecord{ID: s.id, Namespace: pod.Namespace, Name: pod.Name, HostPorts: pod.HostPorts}
		var err error
		if ip, err = n.ipam.allocate(rec); err != nil {
			return Attachment{}, fmt.Errorf("allocate IP for pod %s: %w", s.who, err)
		}
		s.undos = append(s.undos, func() error { return n.ipam.releaseID(s.id) })
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
	if err := s.configurePod(podNL, ip); err != nil {
		return Attachment{}, err
	}

	if err := s.step("add hostPort rules"); err != nil {
		return Attachment{}, err
	}
	// A new pod without hostPorts has no rules to add, nor any to clean
	// up: Teardown removes rules before it releases the IP.
	if len(rec.HostPorts) > 0 || had {
		if err := n.rules.setPodRules(podRules{id: s.id, ip: ip, hostPorts: rec.HostPorts}); err != nil {
			return Attachment{}, fmt.Errorf("add hostPort rules for pod %s: %w", s.who, err)
		}
		if !had {
			s.undos = append(s.undos, func() error { return n.rules.setPodRules(podRules{id: s.id}) })
		}
	}
	if err := s.step("finish"); err != nil {
		return Attachment{}, err
	}
	return n.attachment(s.id, ip), nil
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

// configurePod sets up the pod's side: lo and eth0 up, the address, the
// default route. Every call is idempotent.
func (s *podSetup) configurePod(podNL *netlink.Handle, ip netip.Addr) error {
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
	addr := &netlink.Addr{IPNet: prefixToIPNet(netip.PrefixFrom(ip, s.n.cfg.PodCIDR.Bits()))}
	if err := podNL.AddrReplace(eth0, addr); err != nil {
		return fmt.Errorf("add address %s to %s of pod %s: %w", ip, podInterface, s.who, err)
	}
	if err := podNL.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("set %s of pod %s up: %w", podInterface, s.who, err)
	}
	route := &netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: s.n.gateway.AsSlice(), Dst: prefixToIPNet(netip.PrefixFrom(netip.IPv4Unspecified(), 0))}
	if err := podNL.RouteReplace(route); err != nil {
		return fmt.Errorf("add default route via %s for pod %s: %w", s.n.gateway, s.who, err)
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
	_, rec, known := n.ipam.lookup(id)
	if !known || len(rec.HostPorts) > 0 {
		if err := n.rules.setPodRules(podRules{id: id}); err != nil {
			errs = append(errs, fmt.Errorf("tear down pod %s: %w", id, err))
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
	if err := n.ipam.releaseID(id); err != nil {
		return fmt.Errorf("tear down pod %s: %w", id, err)
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
	for ip, rec := range n.ipam.allocations() {
		if rec.ID != "" {
			ids[rec.ID] = true
			continue
		}
		if err := n.ipam.releaseIP(ip); err != nil {
			errs = append(errs, err)
		} else {
			n.log.Info("released IP with an unreadable allocation record", "ip", ip)
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
	owners, err := n.rules.ruleOwners()
	if err != nil {
		errs = append(errs, err)
	}
	for id := range owners {
		if ValidateID(id) == nil {
			ids[id] = true
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
	return errors.Join(n.rules.close(), n.ipam.close())
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
	if err := n.rules.destroy(); err != nil {
		errs = append(errs, err)
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
