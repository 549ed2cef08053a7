package netpol

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The model: what the API objects mean, with no kernel in sight. A
// policy compiles, against the pods and namespaces the node knows of,
// into the local pods it selects and, per rule, the addresses and ports
// it allows; Allowed answers for one connection the question the
// kernel's rules answer for every packet. Tests check the model against
// the API's documented semantics, and the kernel against the model.

// protocol is an IP protocol number.
type protocol uint8

const (
	protoTCP  protocol = 6
	protoUDP  protocol = 17
	protoSCTP protocol = 132
)

func (p protocol) String() string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case protoSCTP:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

// parseProtocol reads a policy's or container port's protocol; absent
// is TCP, as the API defaults it.
func parseProtocol(p *corev1.Protocol) (protocol, bool) {
	if p == nil {
		return protoTCP, true
	}
	switch *p {
	case "", corev1.ProtocolTCP:
		return protoTCP, true
	case corev1.ProtocolUDP:
		return protoUDP, true
	case corev1.ProtocolSCTP:
		return protoSCTP, true
	}
	return 0, false
}

// podPort is a named container port of a pod.
type podPort struct {
	name  string
	proto protocol
	port  uint16
}

// pod is what the model needs of a pod: only pods that have an IPv4
// address, are not on the host's network and have not finished take part
// (a finished pod's address may already be another's).
type pod struct {
	namespace, name string
	uid             string // its sandbox's: see sandboxUID
	labels          labels.Set
	ip              netip.Addr
	// local: the pod runs on this node, which enforces its policies.
	local bool
	ports []podPort
}

func (p *pod) key() string { return p.namespace + "/" + p.name }

// mirrorAnnotation marks the API's mirror of a static pod, with the UID
// the kubelet runs the static pod under.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// sandboxUID is the UID the pod's sandbox is set up under, which names
// its network: the pod's own, or for a static pod's mirror the static
// pod's.
func sandboxUID(p *corev1.Pod) string {
	if h := p.Annotations[mirrorAnnotation]; h != "" {
		return h
	}
	return string(p.UID)
}

// podFromAPI is the model's view of an API pod on node; false when the
// pod takes no part in policies. ip, when valid, is the address to use
// while the pod's status has none yet (a sandbox just set up).
func podFromAPI(p *corev1.Pod, node string, ip netip.Addr) (*pod, bool) {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, false
	}
	for _, a := range p.Status.PodIPs {
		if addr, err := netip.ParseAddr(a.IP); err == nil && addr.Unmap().Is4() {
			ip = addr.Unmap()
			break
		}
	}
	if !ip.IsValid() && p.Status.PodIP != "" {
		if addr, err := netip.ParseAddr(p.Status.PodIP); err == nil && addr.Unmap().Is4() {
			ip = addr.Unmap()
		}
	}
	if !ip.IsValid() {
		return nil, false
	}
	out := &pod{namespace: p.Namespace, name: p.Name, uid: sandboxUID(p), labels: labels.Set(p.Labels),
		ip: ip, local: node != "" && p.Spec.NodeName == node}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, cp := range c.Ports {
				proto, ok := parseProtocol(&cp.Protocol)
				if cp.Name == "" || !ok || cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
					continue
				}
				out.ports = append(out.ports, podPort{name: cp.Name, proto: proto, port: uint16(cp.ContainerPort)})
			}
		}
	}
	return out, true
}

// world is the pods and namespaces a policy compiles against.
type world struct {
	namespaces map[string]labels.Set
	// pods by namespace, then name.
	pods map[string]map[string]*pod
	// sorted caches sortedPods, until the namespace's pods change.
	sorted map[string][]*pod
	all    []*pod // caches allPods; nil when stale
}

func newWorld() *world {
	return &world{namespaces: map[string]labels.Set{}, pods: map[string]map[string]*pod{}, sorted: map[string][]*pod{}}
}

func (w *world) setPod(p *pod) {
	m := w.pods[p.namespace]
	if m == nil {
		m = map[string]*pod{}
		w.pods[p.namespace] = m
	}
	m[p.name] = p
	delete(w.sorted, p.namespace)
	w.all = nil
}

func (w *world) deletePod(namespace, name string) {
	delete(w.sorted, namespace)
	w.all = nil
	if m := w.pods[namespace]; m != nil {
		delete(m, name)
		if len(m) == 0 {
			delete(w.pods, namespace)
		}
	}
}

func (w *world) pod(namespace, name string) *pod { return w.pods[namespace][name] }

// sortedPods are a namespace's pods by name, for stable output. The
// caller must not change the slice.
func (w *world) sortedPods(namespace string) []*pod {
	if out, ok := w.sorted[namespace]; ok {
		return out
	}
	m := w.pods[namespace]
	out := make([]*pod, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *pod) int { return strings.Compare(a.name, b.name) })
	w.sorted[namespace] = out
	return out
}

// allPods are every pod the world knows, by namespace and name. The
// caller must not change the slice.
func (w *world) allPods() []*pod {
	if w.all != nil {
		return w.all
	}
	nss := make([]string, 0, len(w.pods))
	for ns := range w.pods {
		nss = append(nss, ns)
	}
	slices.Sort(nss)
	var out []*pod
	for _, ns := range nss {
		out = append(out, w.sortedPods(ns)...)
	}
	w.all = out
	return out
}

// ipRange is an inclusive range of IPv4 addresses, as numbers.
type ipRange struct{ lo, hi uint32 }

func (r ipRange) String() string {
	lo, hi := u32Addr(r.lo), u32Addr(r.hi)
	if r.lo == r.hi {
		return lo.String()
	}
	return lo.String() + "-" + hi.String()
}

func addrU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func u32Addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func prefixRange(p netip.Prefix) ipRange {
	p = p.Masked()
	lo := addrU32(p.Addr())
	return ipRange{lo: lo, hi: lo | uint32(uint64(1)<<(32-p.Bits())-1)}
}

// mergeRanges sorts ranges and joins those that overlap or touch: the
// kernel's interval sets refuse overlapping elements.
func mergeRanges(rs []ipRange) []ipRange {
	if len(rs) == 0 {
		return nil
	}
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b ipRange) int { return cmp.Compare(a.lo, b.lo) })
	out := []ipRange{rs[0]}
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if uint64(r.lo) <= uint64(last.hi)+1 {
			last.hi = max(last.hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// subtractRanges is rs minus cut; both merged.
func subtractRanges(rs, cut []ipRange) []ipRange {
	var out []ipRange
	for _, r := range rs {
		cur := []ipRange{r}
		for _, c := range cut {
			var next []ipRange
			for _, x := range cur {
				if c.hi < x.lo || c.lo > x.hi {
					next = append(next, x)
					continue
				}
				if c.lo > x.lo {
					next = append(next, ipRange{x.lo, c.lo - 1})
				}
				if c.hi < x.hi {
					next = append(next, ipRange{c.hi + 1, x.hi})
				}
			}
			cur = next
		}
		out = append(out, cur...)
	}
	return mergeRanges(out)
}

func containsAddr(rs []ipRange, a netip.Addr) bool {
	v := addrU32(a)
	for _, r := range rs {
		if v >= r.lo && v <= r.hi {
			return true
		}
	}
	return false
}

// portRange is a protocol and an inclusive range of its ports; lo 0 and
// hi 65535 with a protocol is "every port of the protocol".
type portRange struct {
	proto  protocol
	lo, hi uint16
}

func (p portRange) String() string {
	s := p.proto.String() + " . " + strconv.Itoa(int(p.lo))
	if p.lo != p.hi {
		s += "-" + strconv.Itoa(int(p.hi))
	}
	return s
}

// addrPort is an address, protocol and port: a named port resolved on
// a pod.
type addrPort struct {
	ip    netip.Addr
	proto protocol
	port  uint16
}

func (a addrPort) String() string {
	return a.ip.String() + " . " + a.proto.String() + " . " + strconv.Itoa(int(a.port))
}

// direction is the side of a pod a rule guards.
type direction uint8

const (
	ingress direction = iota
	egress
)

func (d direction) String() string {
	if d == egress {
		return "egress"
	}
	return "ingress"
}

// The sets policies are made of are shared by content: every policy of
// a namespace with one podSelector has one selection, every rule with
// the same peers (the same selectors, and namespace where it matters)
// one peer set, every rule with the same ports one port set. Many
// policies say the same thing (allow from the monitoring namespace, on
// port 80): their pods and addresses are worked out, and sent to the
// kernel, once.

// selection is the local pods a podSelector selects in a namespace.
type selection struct {
	key       string
	namespace string
	sel       labels.Selector
	members   []*pod       // by address
	ips       []netip.Addr // sorted, without repeats
}

func selectionKeyOf(namespace string, sel labels.Selector) string {
	return "selection " + namespace + " " + sel.String()
}

func (s *selection) concerns(p *pod) bool {
	return p.local && p.namespace == s.namespace && s.sel.Matches(p.labels)
}

func (s *selection) compute(w *world) {
	s.members, s.ips = nil, nil
	for _, p := range w.sortedPods(s.namespace) {
		if p.local && s.sel.Matches(p.labels) {
			s.members = append(s.members, p)
			s.ips = append(s.ips, p.ip)
		}
	}
	slices.SortFunc(s.members, func(a, b *pod) int { return a.ip.Compare(b.ip) })
	slices.SortFunc(s.ips, netip.Addr.Compare)
	s.ips = slices.Compact(s.ips)
}

func (s *selection) has(a netip.Addr) bool {
	_, found := slices.BinarySearchFunc(s.ips, a, netip.Addr.Compare)
	return found
}

// parsedPeer is a peer with its selectors parsed.
type parsedPeer struct {
	peer          networkingv1.NetworkPolicyPeer
	podSel, nsSel labels.Selector // nil when absent
	err           error
	key           string
}

// peerSet is what a rule's peers match: pods (by selectors) and address
// ranges (ipBlocks, less their exceptions; an IPv6 block matches no
// IPv4 traffic, and this network carries no other).
type peerSet struct {
	key       string
	namespace string // the policy's, for peers without a namespaceSelector
	peers     []parsedPeer
	ranges    []ipRange // merged
	pods      []*pod
	problems  []string
}

func (s *peerSet) concerns(p *pod, nsLabels labels.Set) bool {
	for i := range s.peers {
		if s.peers[i].matchesPod(s.namespace, p, nsLabels) {
			return true
		}
	}
	return false
}

func (s *peerSet) concernsNamespace(nsLabels labels.Set) bool {
	for _, peer := range s.peers {
		if peer.err == nil && peer.nsSel != nil && peer.nsSel.Matches(nsLabels) {
			return true
		}
	}
	return false
}

// matchesPod says whether a selector peer matches p.
func (peer *parsedPeer) matchesPod(policyNS string, p *pod, nsLabels labels.Set) bool {
	if peer.err != nil || peer.peer.IPBlock != nil {
		return false
	}
	if peer.nsSel == nil {
		if p.namespace != policyNS {
			return false
		}
	} else if !peer.nsSel.Matches(nsLabels) {
		return false
	}
	return peer.podSel == nil || peer.podSel.Matches(p.labels)
}

func (s *peerSet) compute(w *world) {
	s.ranges, s.pods, s.problems = nil, nil, nil
	var ranges []ipRange
	seen := map[string]bool{}
	for i := range s.peers {
		pods, blocks, err := peerMatches(&s.peers[i], s.namespace, w)
		if err != nil {
			s.problems = append(s.problems, fmt.Sprintf("peer %d: %v (matching nothing)", i, err))
			continue
		}
		for _, p := range pods {
			ranges = append(ranges, ipRange{addrU32(p.ip), addrU32(p.ip)})
			if !seen[p.key()] {
				seen[p.key()] = true
				s.pods = append(s.pods, p)
			}
		}
		ranges = append(ranges, blocks...)
	}
	s.ranges = mergeRanges(ranges)
}

// portSet is a rule's numeric ports, merged.
type portSet struct {
	key   string
	ports []portRange
}

func portsKeyOf(ports []portRange) string {
	parts := make([]string, len(ports))
	for i, p := range ports {
		parts[i] = p.String()
	}
	return "ports " + strings.Join(parts, ", ")
}

// parsedRule is an ingress or egress rule, read: a connection matches
// it when its peer (source for ingress, destination for egress) is in
// the peer set, unless allPeers, and its protocol and destination port
// are in ports or, for named ports, on the pod it goes to, unless
// allPorts.
type parsedRule struct {
	allPeers bool
	peers    *peerSet // its key and peers; the shared one holds the matches
	allPorts bool
	ports    portSet
	named    []namedPort
	problems []string
}

// namedPort is a port a rule names.
type namedPort struct {
	name  string
	proto protocol
}

// parsedPolicy is a NetworkPolicy with its selectors and ports parsed
// once: the syncer asks, for every pod that changes, which sets it
// concerns.
type parsedPolicy struct {
	np       *networkingv1.NetworkPolicy
	types    [2]bool
	podSel   labels.Selector
	selKey   string
	rules    [2][]parsedRule
	problems []string
	// anyPod: an egress rule resolves named ports on every pod whose
	// address it allows (no peers, or an ipBlock), so any pod's change
	// may change it.
	anyPod bool
}

func (pp *parsedPolicy) key() string { return pp.np.Namespace + "/" + pp.np.Name }

func parsePolicy(np *networkingv1.NetworkPolicy) *parsedPolicy {
	pp := &parsedPolicy{np: np, types: policyTypes(np)}
	var err error
	if pp.podSel, err = metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil {
		// A selector that cannot be read selects every pod: a broken
		// policy isolates rather than opens.
		pp.problems = append(pp.problems, fmt.Sprintf("podSelector: %v (selecting every pod)", err))
		pp.podSel = labels.Everything()
	}
	pp.selKey = selectionKeyOf(np.Namespace, pp.podSel)
	if pp.types[ingress] {
		for i, r := range np.Spec.Ingress {
			pp.rules[ingress] = append(pp.rules[ingress], parseRule(fmt.Sprintf("ingress[%d]", i), np.Namespace, r.From, r.Ports))
		}
	}
	if pp.types[egress] {
		for i, r := range np.Spec.Egress {
			rule := parseRule(fmt.Sprintf("egress[%d]", i), np.Namespace, r.To, r.Ports)
			if len(rule.named) > 0 {
				pp.anyPod = pp.anyPod || rule.allPeers
				for _, p := range rule.peers.peers {
					pp.anyPod = pp.anyPod || p.peer.IPBlock != nil
				}
			}
			pp.rules[egress] = append(pp.rules[egress], rule)
		}
	}
	for dir := ingress; dir <= egress; dir++ {
		for _, r := range pp.rules[dir] {
			pp.problems = append(pp.problems, r.problems...)
		}
	}
	return pp
}

func parseRule(where, namespace string, peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) parsedRule {
	r := parsedRule{allPeers: len(peers) == 0, allPorts: len(ports) == 0, peers: &peerSet{namespace: namespace}}
	var keys []string
	for i, peer := range peers {
		p := parsedPeer{peer: peer}
		switch {
		case peer.IPBlock != nil:
			if peer.PodSelector != nil || peer.NamespaceSelector != nil {
				p.err = fmt.Errorf("ipBlock with a selector")
			}
		case peer.PodSelector == nil && peer.NamespaceSelector == nil:
			p.err = fmt.Errorf("a peer with neither selectors nor ipBlock")
		}
		if peer.PodSelector != nil && p.err == nil {
			if p.podSel, p.err = metav1.LabelSelectorAsSelector(peer.PodSelector); p.err != nil {
				p.err = fmt.Errorf("podSelector: %v", p.err)
			}
		}
		if peer.NamespaceSelector != nil && p.err == nil {
			if p.nsSel, p.err = metav1.LabelSelectorAsSelector(peer.NamespaceSelector); p.err != nil {
				p.err = fmt.Errorf("namespaceSelector: %v", p.err)
			}
		}
		switch {
		case p.err != nil:
			r.problems = append(r.problems, fmt.Sprintf("%s peer %d: %v (matching nothing)", where, i, p.err))
			p.key = "nothing"
		case peer.IPBlock != nil:
			ex := slices.Clone(peer.IPBlock.Except)
			slices.Sort(ex)
			p.key = "ipBlock " + peer.IPBlock.CIDR + " except " + strings.Join(ex, ",")
		default:
			ns := "namespace=" + namespace
			if p.nsSel != nil {
				ns = "namespaces " + p.nsSel.String()
			}
			pods := ""
			if p.podSel != nil {
				pods = p.podSel.String()
			}
			p.key = ns + " pods " + pods
		}
		r.peers.peers = append(r.peers.peers, p)
		keys = append(keys, p.key)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	r.peers.key = "peers " + strings.Join(keys, " | ")
	if r.allPorts {
		return r
	}
	for i, p := range ports {
		proto, ok := parseProtocol(p.Protocol)
		if !ok {
			r.problems = append(r.problems, fmt.Sprintf("%s port %d: protocol %q (matching nothing)", where, i, *p.Protocol))
			continue
		}
		switch {
		case p.Port == nil:
			r.ports.ports = append(r.ports.ports, portRange{proto: proto, lo: 0, hi: 65535})
		case p.Port.Type == intstr.String:
			r.named = append(r.named, namedPort{p.Port.StrVal, proto})
		default:
			lo := p.Port.IntVal
			hi := lo
			if p.EndPort != nil {
				hi = *p.EndPort
			}
			if lo < 1 || lo > 65535 || hi < lo || hi > 65535 {
				r.problems = append(r.problems, fmt.Sprintf("%s port %d: %d-%d is not a port range (matching nothing)", where, i, lo, hi))
				continue
			}
			r.ports.ports = append(r.ports.ports, portRange{proto: proto, lo: uint16(lo), hi: uint16(hi)})
		}
	}
	r.ports.ports = mergePorts(r.ports.ports)
	r.ports.key = portsKeyOf(r.ports.ports)
	return r
}

// sharedSets are the selections and peer sets computed so far, by key.
// A set that may have changed is dropped (forget) and computed again
// when next asked for.
type sharedSets struct {
	selections map[string]*selection
	peers      map[string]*peerSet
}

func newSharedSets() *sharedSets {
	return &sharedSets{selections: map[string]*selection{}, peers: map[string]*peerSet{}}
}

func (s *sharedSets) selection(pp *parsedPolicy, w *world) *selection {
	if sel := s.selections[pp.selKey]; sel != nil {
		return sel
	}
	sel := &selection{key: pp.selKey, namespace: pp.np.Namespace, sel: pp.podSel}
	sel.compute(w)
	s.selections[sel.key] = sel
	return sel
}

func (s *sharedSets) peerSet(r *parsedRule, w *world) *peerSet {
	if ps := s.peers[r.peers.key]; ps != nil {
		return ps
	}
	ps := &peerSet{key: r.peers.key, namespace: r.peers.namespace, peers: r.peers.peers}
	ps.compute(w)
	s.peers[ps.key] = ps
	return ps
}

// compiledRule is a parsed rule with its peers and named ports
// resolved.
type compiledRule struct {
	allPeers bool
	peers    *peerSet
	allPorts bool
	ports    portSet
	// named are named ports resolved on the pods they name: the
	// selected pods for ingress, the peer pods for egress.
	named []addrPort
	// hasNamed: the rule lists named ports (matching none is not the
	// same as listing none).
	hasNamed bool
}

// compiledPolicy is what one NetworkPolicy means on this node.
type compiledPolicy struct {
	namespace, name string
	// types: the directions the policy isolates its pods in.
	types     [2]bool
	selection *selection // the local pods the policy applies to
	rules     [2][]compiledRule
	// problems are parts of the policy that could not be read (a
	// selector the API server should have refused): they allow
	// nothing, and the policy still isolates its pods.
	problems []string
}

func (c *compiledPolicy) key() string { return c.namespace + "/" + c.name }

// policyTypes are the directions np isolates in, defaulted as the API
// defaults them: Ingress always, Egress when egress rules are given.
func policyTypes(np *networkingv1.NetworkPolicy) [2]bool {
	var t [2]bool
	if len(np.Spec.PolicyTypes) == 0 {
		t[ingress] = true
		t[egress] = len(np.Spec.Egress) > 0
		return t
	}
	for _, pt := range np.Spec.PolicyTypes {
		switch pt {
		case networkingv1.PolicyTypeIngress:
			t[ingress] = true
		case networkingv1.PolicyTypeEgress:
			t[egress] = true
		}
	}
	return t
}

// compile resolves a policy against w, through the shared sets. Only
// local pods are selected: the node enforces policies for its own pods,
// and other nodes for theirs.
func compile(pp *parsedPolicy, w *world, sets *sharedSets) *compiledPolicy {
	c := &compiledPolicy{namespace: pp.np.Namespace, name: pp.np.Name, types: pp.types,
		selection: sets.selection(pp, w), problems: slices.Clone(pp.problems)}
	for dir := ingress; dir <= egress; dir++ {
		for i := range pp.rules[dir] {
			r := &pp.rules[dir][i]
			cr := compiledRule{allPeers: r.allPeers, allPorts: r.allPorts, ports: r.ports, hasNamed: len(r.named) > 0}
			if !r.allPeers {
				cr.peers = sets.peerSet(r, w)
				for _, p := range cr.peers.problems {
					if !slices.Contains(c.problems, p) {
						c.problems = append(c.problems, p)
					}
				}
			}
			if cr.hasNamed {
				cr.named = resolveNamed(dir, r.named, c.selection, cr, w)
			}
			c.rules[dir] = append(c.rules[dir], cr)
		}
	}
	return c
}

// resolveNamed finds named ports on the pods a connection goes to: for
// ingress, the selected pods; for egress, the peers, whichever way they
// matched (an ipBlock, or every destination, match the pods whose
// addresses they hold).
func resolveNamed(dir direction, named []namedPort, sel *selection, r compiledRule, w *world) []addrPort {
	targets := sel.members
	if dir == egress {
		switch {
		case r.allPeers:
			targets = w.allPods()
		case len(r.peers.ranges) == 0:
			targets = r.peers.pods
		default:
			targets = nil
			for _, p := range w.allPods() {
				if containsAddr(r.peers.ranges, p.ip) {
					targets = append(targets, p)
				}
			}
		}
	}
	var out []addrPort
	for _, t := range targets {
		for _, n := range named {
			for _, pp := range t.ports {
				if pp.name == n.name && pp.proto == n.proto {
					out = append(out, addrPort{ip: t.ip, proto: pp.proto, port: pp.port})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b addrPort) int {
		return cmp.Or(a.ip.Compare(b.ip), cmp.Compare(a.proto, b.proto), cmp.Compare(a.port, b.port))
	})
	return slices.Compact(out)
}

// mergePorts sorts port ranges and joins those of a protocol that
// overlap or touch.
func mergePorts(ps []portRange) []portRange {
	if len(ps) == 0 {
		return nil
	}
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b portRange) int { return cmp.Or(cmp.Compare(a.proto, b.proto), cmp.Compare(a.lo, b.lo)) })
	out := []portRange{ps[0]}
	for _, p := range ps[1:] {
		last := &out[len(out)-1]
		if p.proto == last.proto && uint32(p.lo) <= uint32(last.hi)+1 {
			last.hi = max(last.hi, p.hi)
			continue
		}
		out = append(out, p)
	}
	return out
}

// peerMatches is what one peer matches: pods (for selectors) or address
// ranges (for an ipBlock, less its exceptions).
func peerMatches(peer *parsedPeer, namespace string, w *world) ([]*pod, []ipRange, error) {
	if peer.err != nil {
		return nil, nil, peer.err
	}
	if b := peer.peer.IPBlock; b != nil {
		cidr, err := netip.ParsePrefix(b.CIDR)
		if err != nil {
			return nil, nil, fmt.Errorf("ipBlock cidr %q: %v", b.CIDR, err)
		}
		if !cidr.Addr().Is4() {
			return nil, nil, nil
		}
		var except []ipRange
		for _, e := range b.Except {
			ep, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, nil, fmt.Errorf("ipBlock except %q: %v", e, err)
			}
			if ep.Addr().Is4() {
				except = append(except, prefixRange(ep))
			}
		}
		return nil, subtractRanges([]ipRange{prefixRange(cidr)}, mergeRanges(except)), nil
	}
	nss := []string{namespace}
	if peer.nsSel != nil {
		nss = nss[:0]
		for ns, l := range w.namespaces {
			if peer.nsSel.Matches(l) {
				nss = append(nss, ns)
			}
		}
		slices.Sort(nss)
	}
	var out []*pod
	for _, ns := range nss {
		for _, p := range w.sortedPods(ns) {
			if peer.podSel == nil || peer.podSel.Matches(p.labels) {
				out = append(out, p)
			}
		}
	}
	return out, nil, nil
}

// connection is one connection attempt, for Allowed: from src to dst
// (either may be outside the pod network: then its pod is nil).
type connection struct {
	src, dst       netip.Addr
	srcPod, dstPod *pod
	proto          protocol
	port           uint16
}

// allowedBy says whether the compiled policies let conn through the
// side dir of pod p (the destination for ingress, the source for
// egress): true when no policy isolates p in dir, else when a rule of
// a policy selecting p matches.
func allowedBy(policies []*compiledPolicy, p *pod, dir direction, conn connection) bool {
	peer := conn.src
	if dir == egress {
		peer = conn.dst
	}
	isolated := false
	for _, c := range policies {
		if c.namespace != p.namespace || !c.types[dir] {
			continue
		}
		if !c.selection.has(p.ip) {
			continue
		}
		isolated = true
		for _, r := range c.rules[dir] {
			if !r.allPeers && !containsAddr(r.peers.ranges, peer) {
				continue
			}
			if r.allPorts {
				return true
			}
			for _, pr := range r.ports.ports {
				if pr.proto == conn.proto && conn.port >= pr.lo && conn.port <= pr.hi {
					return true
				}
			}
			for _, n := range r.named {
				if n.ip == conn.dst && n.proto == conn.proto && n.port == conn.port {
					return true
				}
			}
		}
	}
	return !isolated
}

// Allowed says whether the policies let a new connection through: the
// source pod's egress, if it is local, and the destination pod's
// ingress, if it is local, must both allow it. Traffic from the node
// itself is not this function's to judge.
func allowed(policies []*compiledPolicy, conn connection) bool {
	if conn.src == conn.dst {
		return true // loopback follows no policy
	}
	if conn.srcPod != nil && conn.srcPod.local && !allowedBy(policies, conn.srcPod, egress, conn) {
		return false
	}
	if conn.dstPod != nil && conn.dstPod.local && !allowedBy(policies, conn.dstPod, ingress, conn) {
		return false
	}
	return true
}
