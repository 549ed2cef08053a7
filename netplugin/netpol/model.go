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
	uid             string
	labels          labels.Set
	ip              netip.Addr
	// local: the pod runs on this node, which enforces its policies.
	local bool
	ports []podPort
}

func (p *pod) key() string { return p.namespace + "/" + p.name }

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
	out := &pod{namespace: p.Namespace, name: p.Name, uid: string(p.UID), labels: labels.Set(p.Labels),
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
	if p.lo == p.hi {
		return fmt.Sprintf("%s . %d", p.proto, p.lo)
	}
	return fmt.Sprintf("%s . %d-%d", p.proto, p.lo, p.hi)
}

// addrPort is an address, protocol and port: a named port resolved on
// a pod.
type addrPort struct {
	ip    netip.Addr
	proto protocol
	port  uint16
}

func (a addrPort) String() string { return fmt.Sprintf("%s . %s . %d", a.ip, a.proto, a.port) }

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

// compiledRule is one ingress or egress rule: a connection matches it
// when its peer (source for ingress, destination for egress) is in
// peers, unless allPeers, and its protocol and destination port are in
// ports or, for named ports, its destination address, protocol and
// port are in named, unless allPorts.
type compiledRule struct {
	allPeers bool
	peers    []ipRange // merged
	allPorts bool
	ports    []portRange
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
	types [2]bool
	// selected are the local pods the policy applies to, sorted.
	selected []netip.Addr
	rules    [2][]compiledRule
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

// parsedPeer is a peer with its selectors parsed.
type parsedPeer struct {
	peer          networkingv1.NetworkPolicyPeer
	podSel, nsSel labels.Selector // nil when absent
	err           error
}

// parsedPolicy is a NetworkPolicy with its selectors parsed once: the
// syncer asks, for every pod that changes, which policies it concerns.
type parsedPolicy struct {
	np     *networkingv1.NetworkPolicy
	types  [2]bool
	podSel labels.Selector
	selErr error
	peers  [2][][]parsedPeer // by direction, rule, peer
	// anyPod: an egress rule resolves named ports on every pod whose
	// address it allows (no peers, or an ipBlock), so any pod's change
	// may change it.
	anyPod bool
}

func (pp *parsedPolicy) key() string { return pp.np.Namespace + "/" + pp.np.Name }

func parsePolicy(np *networkingv1.NetworkPolicy) *parsedPolicy {
	pp := &parsedPolicy{np: np, types: policyTypes(np)}
	pp.podSel, pp.selErr = metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if pp.selErr != nil {
		// A selector that cannot be read selects every pod: a broken
		// policy isolates rather than opens.
		pp.podSel = labels.Everything()
	}
	parse := func(peers []networkingv1.NetworkPolicyPeer) []parsedPeer {
		out := make([]parsedPeer, 0, len(peers))
		for _, peer := range peers {
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
			out = append(out, p)
		}
		return out
	}
	for _, r := range np.Spec.Ingress {
		pp.peers[ingress] = append(pp.peers[ingress], parse(r.From))
	}
	for _, r := range np.Spec.Egress {
		peers := parse(r.To)
		pp.peers[egress] = append(pp.peers[egress], peers)
		named := false
		for _, port := range r.Ports {
			named = named || port.Port != nil && port.Port.Type == intstr.String
		}
		if named && pp.types[egress] {
			if len(peers) == 0 {
				pp.anyPod = true
			}
			for _, p := range peers {
				pp.anyPod = pp.anyPod || p.peer.IPBlock != nil
			}
		}
	}
	return pp
}

// concerns says whether p, in a namespace labelled nsLabels, may be
// selected by the policy or match one of its peers: the policy must be
// compiled again when p changes.
func (pp *parsedPolicy) concerns(p *pod, nsLabels labels.Set) bool {
	if pp.anyPod {
		return true
	}
	if p.namespace == pp.np.Namespace && p.local && pp.podSel.Matches(p.labels) {
		return true
	}
	for dir := ingress; dir <= egress; dir++ {
		if !pp.types[dir] {
			continue
		}
		for _, peers := range pp.peers[dir] {
			for _, peer := range peers {
				if peer.matchesPod(pp.np.Namespace, p, nsLabels) {
					return true
				}
			}
		}
	}
	return false
}

// concernsNamespace says whether a namespace with these labels may be
// selected by one of the policy's namespace selectors.
func (pp *parsedPolicy) concernsNamespace(nsLabels labels.Set) bool {
	for dir := ingress; dir <= egress; dir++ {
		for _, peers := range pp.peers[dir] {
			for _, peer := range peers {
				if peer.err == nil && peer.nsSel != nil && peer.nsSel.Matches(nsLabels) {
					return true
				}
			}
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

// compile compiles a policy against w. Only local pods are selected: the
// node enforces policies for its own pods, and other nodes for theirs.
func compile(pp *parsedPolicy, w *world) *compiledPolicy {
	np := pp.np
	c := &compiledPolicy{namespace: np.Namespace, name: np.Name, types: pp.types}
	if pp.selErr != nil {
		c.problems = append(c.problems, fmt.Sprintf("podSelector: %v (selecting every pod)", pp.selErr))
	}
	var selectedPods []*pod
	for _, p := range w.sortedPods(np.Namespace) {
		if p.local && pp.podSel.Matches(p.labels) {
			selectedPods = append(selectedPods, p)
			c.selected = append(c.selected, p.ip)
		}
	}
	slices.SortFunc(c.selected, netip.Addr.Compare)
	c.selected = slices.Compact(c.selected)
	if c.types[ingress] {
		for i, r := range np.Spec.Ingress {
			c.rules[ingress] = append(c.rules[ingress], c.compileRule(fmt.Sprintf("ingress[%d]", i), ingress, pp.peers[ingress][i], r.Ports, np.Namespace, selectedPods, w))
		}
	}
	if c.types[egress] {
		for i, r := range np.Spec.Egress {
			c.rules[egress] = append(c.rules[egress], c.compileRule(fmt.Sprintf("egress[%d]", i), egress, pp.peers[egress][i], r.Ports, np.Namespace, selectedPods, w))
		}
	}
	return c
}

func (c *compiledPolicy) compileRule(where string, dir direction, peers []parsedPeer, ports []networkingv1.NetworkPolicyPort, namespace string, selected []*pod, w *world) compiledRule {
	var r compiledRule
	var peerPods []*pod // for egress named ports
	if len(peers) == 0 {
		r.allPeers = true
	}
	var ranges []ipRange
	for i := range peers {
		pods, blocks, err := peerMatches(&peers[i], namespace, w)
		if err != nil {
			c.problems = append(c.problems, fmt.Sprintf("%s peer %d: %v (matching nothing)", where, i, err))
			continue
		}
		for _, p := range pods {
			ranges = append(ranges, ipRange{addrU32(p.ip), addrU32(p.ip)})
		}
		peerPods = append(peerPods, pods...)
		ranges = append(ranges, blocks...)
	}
	r.peers = mergeRanges(ranges)

	if len(ports) == 0 {
		r.allPorts = true
		return r
	}
	type namedPort struct {
		name  string
		proto protocol
	}
	var named []namedPort
	for i, p := range ports {
		proto, ok := parseProtocol(p.Protocol)
		if !ok {
			c.problems = append(c.problems, fmt.Sprintf("%s port %d: protocol %q (matching nothing)", where, i, *p.Protocol))
			continue
		}
		switch {
		case p.Port == nil:
			r.ports = append(r.ports, portRange{proto: proto, lo: 0, hi: 65535})
		case p.Port.Type == intstr.String:
			r.hasNamed = true
			named = append(named, namedPort{p.Port.StrVal, proto})
		default:
			lo := p.Port.IntVal
			hi := lo
			if p.EndPort != nil {
				hi = *p.EndPort
			}
			if lo < 1 || lo > 65535 || hi < lo || hi > 65535 {
				c.problems = append(c.problems, fmt.Sprintf("%s port %d: %d-%d is not a port range (matching nothing)", where, i, lo, hi))
				continue
			}
			r.ports = append(r.ports, portRange{proto: proto, lo: uint16(lo), hi: uint16(hi)})
		}
	}
	r.ports = mergePorts(r.ports)
	if len(named) == 0 {
		return r
	}
	// A named port is the port of that name and protocol on the pod
	// the connection goes to: for ingress, the selected pod; for
	// egress, the peer, whichever way it matched (an ipBlock, or every
	// destination, match the pods whose addresses they hold).
	targets := selected
	if dir == egress {
		switch {
		case r.allPeers:
			targets = w.allPods()
		default:
			targets = nil
			seen := map[string]bool{}
			for _, p := range peerPods {
				if !seen[p.key()] {
					seen[p.key()] = true
					targets = append(targets, p)
				}
			}
			for _, p := range w.allPods() {
				if !seen[p.key()] && containsAddr(r.peers, p.ip) {
					seen[p.key()] = true
					targets = append(targets, p)
				}
			}
		}
	}
	for _, t := range targets {
		for _, n := range named {
			for _, pp := range t.ports {
				if pp.name == n.name && pp.proto == n.proto {
					r.named = append(r.named, addrPort{ip: t.ip, proto: pp.proto, port: pp.port})
				}
			}
		}
	}
	slices.SortFunc(r.named, func(a, b addrPort) int {
		return cmp.Or(a.ip.Compare(b.ip), cmp.Compare(a.proto, b.proto), cmp.Compare(a.port, b.port))
	})
	r.named = slices.Compact(r.named)
	return r
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
// ranges (for an ipBlock, less its exceptions; an IPv6 block matches no
// IPv4 traffic, and this network carries no other).
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
		if _, found := slices.BinarySearchFunc(c.selected, p.ip, netip.Addr.Compare); !found {
			continue
		}
		isolated = true
		for _, r := range c.rules[dir] {
			if !r.allPeers && !containsAddr(r.peers, peer) {
				continue
			}
			if r.allPorts {
				return true
			}
			for _, pr := range r.ports {
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
