package netpol

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// family tells the two tables apart: "ip <bridge>-netpol" holds the
// policies, "bridge <bridge>-netpol" sends the bridged traffic of
// policed pods through the IP layer.
type family uint8

const (
	famIP family = iota
	famBridge
)

func (f family) String() string {
	if f == famBridge {
		return "bridge"
	}
	return "ip"
}

func (f family) nft() nftables.TableFamily {
	if f == famBridge {
		return nftables.TableFamilyBridge
	}
	return nftables.TableFamilyIPv4
}

// Names of the fixed chains and sets; see the package doc.
const (
	chainEgressHook  = "egress-hook"
	chainIngressHook = "ingress-hook"
	chainInputHook   = "input-hook"
	chainOutputHook  = "output-hook"

	chainToHost    = "prerouting"
	chainL2Guard   = "forward"
	chainPolicedL2 = "policed-l2"
	chainFromHost  = "postrouting"

	setSelected    = "selected"
	setPeers       = "peers"
	setPorts       = "ports"
	setNamed       = "named"
	mapIngressPods = "ingress-pods"
	mapEgressPods  = "egress-pods"
	setHairpin     = "hairpin"

	setPodPorts     = "pod-ports"
	setPodAddrs     = "pod-addrs"
	setPoliced      = "policed"
	setPolicedPorts = "policed-ports"
)

// hook makes a chain a base chain.
type hook struct {
	typ      nftables.ChainType
	num      *nftables.ChainHook
	prio     *nftables.ChainPriority
	hookName string // for the text form
	prio0    int32
}

type chainDef struct {
	fam   family
	name  string
	hook  *hook
	rules []*rule
}

// elem is an element of one of the fixed sets and maps: with a verdict,
// of a verdict map. An element of an interval set is a range of keys,
// from key to keyEnd (exclusive), which goes to the kernel as two
// elements: key, and keyEnd flagged as an interval's end.
type elem struct {
	fam     family
	set     string
	key     []byte
	keyEnd  []byte
	keyText string
	verdict *expr.Verdict
}

func (e elem) String() string {
	s := e.fam.String() + " " + e.set + " " + e.keyText
	if e.verdict != nil {
		s += " : goto " + e.verdict.Chain
	}
	return s
}

// id is the part of an elem that names it in its set.
func (e elem) id() string { return e.fam.String() + " " + e.set + " " + e.keyText }

// objects are what one unit (the fixed part, a policy, a namespace's
// dispatch chains, a local pod) puts in the tables.
type objects struct {
	chains []chainDef
	elems  []elem
}

func (o objects) empty() bool { return len(o.chains) == 0 && len(o.elems) == 0 }

// setDefs are the tables' fixed sets and maps, elements aside.
func setDefs(ip, br *nftables.Table) map[family]map[string]*nftables.Set {
	// Interval sets keyed by "id . something" are given as one wide
	// integer, not a concatenation: the kernel keeps them in an rbtree,
	// where a concatenation of ranges would make it choose pipapo,
	// whose every transaction copies the whole set. (nft lists such a
	// key as one number.)
	wide := func(n uint32) nftables.SetDatatype {
		t := nftables.TypeInteger
		t.Bytes = n
		return t
	}
	m := map[family]map[string]*nftables.Set{famIP: {}, famBridge: {}}
	m[famIP][setSelected] = &nftables.Set{Table: ip, Name: setSelected, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeMark, nftables.TypeIPAddr)}
	m[famIP][setPeers] = &nftables.Set{Table: ip, Name: setPeers, Interval: true, KeyType: wide(8)}
	m[famIP][setPorts] = &nftables.Set{Table: ip, Name: setPorts, Interval: true, KeyType: wide(12)}
	m[famIP][setNamed] = &nftables.Set{Table: ip, Name: setNamed, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeMark, nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
	m[famIP][setHairpin] = &nftables.Set{Table: ip, Name: setHairpin, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)}
	for _, name := range []string{mapIngressPods, mapEgressPods} {
		m[famIP][name] = &nftables.Set{Table: ip, Name: name, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict}
	}
	m[famBridge][setPodPorts] = &nftables.Set{Table: br, Name: setPodPorts, KeyType: nftables.TypeIFName}
	m[famBridge][setPodAddrs] = &nftables.Set{Table: br, Name: setPodAddrs, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)}
	m[famBridge][setPolicedPorts] = &nftables.Set{Table: br, Name: setPolicedPorts, KeyType: nftables.TypeIFName}
	m[famBridge][setPoliced] = &nftables.Set{Table: br, Name: setPoliced, KeyType: nftables.TypeIPAddr}
	return m
}

// setText is a fixed set's definition in the text form.
func setText(fam family, s *nftables.Set) string {
	typ := s.KeyType.Name
	if s.IsMap {
		typ += " : verdict"
	}
	flags := ""
	if s.Interval {
		flags = " flags interval;"
	}
	return fmt.Sprintf("%s set %s { type %s;%s }\n", fam, s.Name, typ, flags)
}

// baseConfig is what the fixed part depends on.
type baseConfig struct {
	bridge string
	// mac is the bridge's address; nil while the bridge is not there,
	// when no frame needs sending up (no pod is on it).
	mac net.HardwareAddr
}

// baseObjects are the tables' fixed chains.
//
// ip: two base chains on the forward hook, one for each side of a pod,
// so that an accept of the first (its egress allows) still leaves the
// packet to the second (its peer's ingress); one on the input hook for
// pods' traffic to the node, which only the pod's egress can stop;
// traffic from the node to its pods is not filtered, as Kubernetes
// wants. Replies and related packets of allowed connections pass, and
// so does a pod that reaches itself through a Service (the hairpin set):
// loopback follows no policy.
//
// bridge: frames between pods of the bridge that a policed pod (one
// isolated either way) sends or receives are readdressed to the node,
// which routes them back out: they meet the ip table's rules and
// conntrack whether or not br_netfilter hands bridged traffic to the IP
// hooks. What a policed pod's port would still bridge, other than ARP
// and unicast IPv4 (which only br_netfilter's bridged DNAT leaves
// there, after its IP hooks saw it), is dropped: IPv6 (link-local
// addresses), multicast and broadcast would pass no policy.
func baseObjects(c baseConfig) objects {
	filter := func(fam family, h *nftables.ChainHook, name string, prio int32) *hook {
		return &hook{typ: nftables.ChainTypeFilter, num: h, prio: nftables.ChainPriorityRef(nftables.ChainPriority(prio)), hookName: name, prio0: prio}
	}
	established := newRule().ctEstablished().accept()
	// The redirects the node would send for the frames it routes back
	// out of the bridge: the pod already sends to the peer's address,
	// and would ignore them.
	output := chainDef{fam: famIP, name: chainOutputHook, hook: filter(famIP, nftables.ChainHookOutput, "output", 0)}
	if c.bridge != "" {
		output.rules = []*rule{newRule().oifname(c.bridge).icmpRedirect().drop()}
	}
	hairpin := newRule().saddrDaddrInSet(setHairpin).accept()
	o := objects{chains: []chainDef{
		{fam: famIP, name: chainEgressHook, hook: filter(famIP, nftables.ChainHookForward, "forward", 0),
			rules: []*rule{established, hairpin, newRule().vmapAddr(offSaddr, mapEgressPods)}},
		{fam: famIP, name: chainIngressHook, hook: filter(famIP, nftables.ChainHookForward, "forward", 1),
			rules: []*rule{established, hairpin, newRule().vmapAddr(offDaddr, mapIngressPods)}},
		{fam: famIP, name: chainInputHook, hook: filter(famIP, nftables.ChainHookInput, "input", 0),
			rules: []*rule{established, newRule().vmapAddr(offSaddr, mapEgressPods)}},
		output,
		{fam: famBridge, name: chainL2Guard, hook: filter(famBridge, nftables.ChainHookForward, "forward", -200),
			rules: []*rule{
				newRule().ifnameInSet(expr.MetaKeyIIFNAME, setPolicedPorts).jump(chainPolicedL2),
				newRule().ifnameInSet(expr.MetaKeyOIFNAME, setPolicedPorts).jump(chainPolicedL2),
			}},
		{fam: famBridge, name: chainPolicedL2, rules: []*rule{
			newRule().etherType(unix.ETH_P_ARP, "arp").ret(),
			newRule().etherType(unix.ETH_P_IP, "ip").unicast().ret(),
			newRule().drop(),
		}},
	}}
	// Before br_netfilter's own prerouting hook (priority 0), which
	// would otherwise hand the frame to the IP hooks as bridged.
	pre := chainDef{fam: famBridge, name: chainToHost, hook: filter(famBridge, nftables.ChainHookPrerouting, "prerouting", -300)}
	// Policies are enforced for IPv4 only: a policed pod gets no IPv6
	// at all, to or from the node either (which would route it on, to
	// pods and beyond, past every policy), not only bridged.
	pre.rules = append(pre.rules, newRule().ifnameInSet(expr.MetaKeyIIFNAME, setPolicedPorts).etherType(unix.ETH_P_IPV6, "ip6").drop())
	o.chains = append(o.chains, chainDef{fam: famBridge, name: chainFromHost, hook: filter(famBridge, nftables.ChainHookPostrouting, "postrouting", -300),
		rules: []*rule{newRule().ifnameInSet(expr.MetaKeyOIFNAME, setPolicedPorts).etherType(unix.ETH_P_IPV6, "ip6").drop()}})
	// A pod sends from its own address: one that says it is another pod
	// would have that pod's policies, or a peer's rule naming it, let
	// it through.
	pre.rules = append(pre.rules, newRule().ifnameInSet(expr.MetaKeyIIFNAME, setPodPorts).etherType(unix.ETH_P_IP, "ip").
		portSaddrNotInSet(setPodAddrs).drop())
	if c.mac != nil {
		for _, off := range []uint32{offSaddr, offDaddr} {
			pre.rules = append(pre.rules, newRule().ifnameInSet(expr.MetaKeyIIFNAME, setPodPorts).etherType(unix.ETH_P_IP, "ip").
				unicast().etherDaddrNot(c.mac).addrInSet(off, setPoliced).toHost(c.mac))
		}
	}
	o.chains = append(o.chains, pre)
	return o
}

// chainName is the name of a policy's or a namespace's chain for dir:
// "ingress:<namespace>" dispatches a namespace's pods to its policies'
// "ingress:<namespace>/<name>" chains. Names the kernel cannot take
// (256 bytes with the NUL) end in a hash of the policy's name instead.
func chainName(dir direction, namespace, name string) string {
	s := dir.String() + ":" + namespace
	if name == "" {
		return s
	}
	if long := s + "/" + name; len(long) < 256 {
		return long
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s/%016x", s, h.Sum64())
}

// ruleIDs numbers the shared sets' parts in their keys: each
// selection, peer set and port set, and each rule's named ports.
// Numbers are reused once freed.
type ruleIDs struct {
	next  uint32
	free  []uint32
	byKey map[string]uint32
}

func newRuleIDs() *ruleIDs { return &ruleIDs{next: 1, byKey: map[string]uint32{}} }

func (r *ruleIDs) get(key string) uint32 {
	if id, ok := r.byKey[key]; ok {
		return id
	}
	var id uint32
	if n := len(r.free); n > 0 {
		id, r.free = r.free[n-1], r.free[:n-1]
	} else {
		id = r.next
		r.next++
	}
	r.byKey[key] = id
	return id
}

func (r *ruleIDs) release(key string) {
	if id, ok := r.byKey[key]; ok {
		delete(r.byKey, key)
		r.free = append(r.free, id)
	}
}

// namedKey is the key of a rule's number in the named set: named ports
// resolve on pods of that rule's own, so they are not shared.
func namedKey(policy string, dir direction, i int) string {
	return "named " + policy + " " + dir.String() + " " + strconv.Itoa(i)
}

// policyObjects is what one compiled policy puts in the tables: a chain
// per direction it isolates in, holding one rule per way a rule of the
// policy can match, which look up the shared sets by number, and the
// elements of its named ports. The chains depend on the policy alone
// (and the numbers of its sets), not on pods: a pod that comes, goes or
// changes labels changes elements only. It returns the keys of the
// named ports' numbers it used.
func policyObjects(c *compiledPolicy, ids *ruleIDs) (objects, []string) {
	var o objects
	var keys []string
	for dir := ingress; dir <= egress; dir++ {
		// A policy with no rules in a direction only isolates, which
		// the pod maps do: it needs no chain.
		if !c.types[dir] || len(c.rules[dir]) == 0 {
			continue
		}
		peerOff := uint32(offSaddr)
		if dir == egress {
			peerOff = offDaddr
		}
		ch := chainDef{fam: famIP, name: chainName(dir, c.namespace, c.name)}
		for i, r := range c.rules[dir] {
			start := func() *rule {
				nr := newRule()
				if !r.allPeers {
					nr.idAddrInSet(ids.get(r.peers.key), peerOff, setPeers)
				}
				return nr
			}
			if r.allPorts {
				ch.rules = append(ch.rules, start().accept())
				continue
			}
			if len(r.ports.ports) > 0 {
				ch.rules = append(ch.rules, start().idProtoPortInSet(ids.get(r.ports.key), setPorts).accept())
			}
			if r.hasNamed {
				keys = append(keys, namedKey(c.key(), dir, i))
				nid := ids.get(keys[len(keys)-1])
				ch.rules = append(ch.rules, start().idAddrProtoPortInSet(nid, setNamed).accept())
				for _, n := range r.named {
					o.elems = append(o.elems, namedElem(nid, n))
				}
			}
		}
		o.chains = append(o.chains, ch)
	}
	return o, keys
}

// setKeys are the keys of the shared sets a compiled policy uses.
func setKeys(c *compiledPolicy) []string {
	keys := []string{c.selection.key}
	for dir := ingress; dir <= egress; dir++ {
		for _, r := range c.rules[dir] {
			if !r.allPeers {
				keys = append(keys, r.peers.key)
			}
			if !r.allPorts && len(r.ports.ports) > 0 {
				keys = append(keys, r.ports.key)
			}
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// selectionObjects are a selection's elements: "id . address" of each
// pod it selects.
func selectionObjects(s *selection, id uint32) objects {
	var o objects
	for _, a := range s.ips {
		o.elems = append(o.elems, idAddrElem(setSelected, id, a))
	}
	return o
}

func peerSetObjects(s *peerSet, id uint32) objects {
	var o objects
	for _, r := range s.ranges {
		o.elems = append(o.elems, peerElem(id, r))
	}
	return o
}

func portSetObjects(s portSet, id uint32) objects {
	var o objects
	for _, p := range s.ports {
		o.elems = append(o.elems, portElem(id, p))
	}
	return o
}

// namespaceObjects are a namespace's dispatch chains: its pods that a
// policy isolates come here (from the pod maps), and go through each
// policy of the namespace that selects them; none allowing, the packet
// is dropped.
func namespaceObjects(namespace string, policies []*compiledPolicy, ids *ruleIDs) objects {
	var o objects
	for dir := ingress; dir <= egress; dir++ {
		off := uint32(offDaddr)
		if dir == egress {
			off = offSaddr
		}
		ch := chainDef{fam: famIP, name: chainName(dir, namespace, "")}
		isolates := false
		for _, c := range policies {
			isolates = isolates || c.types[dir]
			if c.types[dir] && len(c.rules[dir]) > 0 {
				ch.rules = append(ch.rules, newRule().idAddrInSet(ids.get(c.selection.key), off, setSelected).jump(chainName(dir, c.namespace, c.name)))
			}
		}
		if isolates {
			ch.rules = append(ch.rules, newRule().drop())
			o.chains = append(o.chains, ch)
		}
	}
	return o
}

// localPod is a pod of this node as its unit sees it.
type localPod struct {
	namespace string
	ip        netip.Addr
	port      string // its bridge port; "" if unknown
	isolated  [2]bool
}

// podObjects are a local pod's elements: the pod maps send its traffic
// to its namespace's chains in the directions it is isolated in; the
// bridge table knows its port and, if it is policed, sends its frames
// through the node.
func podObjects(p localPod) objects {
	var o objects
	policed := p.isolated[ingress] || p.isolated[egress]
	if p.port != "" {
		o.elems = append(o.elems, portNameElem(setPodPorts, p.port), portAddrElem(p.port, p.ip))
		if policed {
			o.elems = append(o.elems, portNameElem(setPolicedPorts, p.port))
		}
	}
	if !policed {
		return o
	}
	o.elems = append(o.elems,
		elem{fam: famBridge, set: setPoliced, key: p.ip.AsSlice(), keyText: p.ip.String()},
		elem{fam: famIP, set: setHairpin, key: append(p.ip.AsSlice(), p.ip.AsSlice()...), keyText: p.ip.String() + " . " + p.ip.String()})
	for dir, m := range []string{mapIngressPods, mapEgressPods} {
		if p.isolated[dir] {
			o.elems = append(o.elems, elem{fam: famIP, set: m, key: p.ip.AsSlice(), keyText: p.ip.String(),
				verdict: &expr.Verdict{Kind: expr.VerdictGoto, Chain: chainName(direction(dir), p.namespace, "")}})
		}
	}
	return o
}

func idBytes(id uint32) []byte { return binary.NativeEndian.AppendUint32(nil, id) }

func idText(id uint32) string { return strconv.FormatUint(uint64(id), 10) + " . " }

func idAddrElem(set string, id uint32, a netip.Addr) elem {
	return elem{fam: famIP, set: set, key: append(idBytes(id), a.AsSlice()...), keyText: idText(id) + a.String()}
}

// successor is the byte string that follows key in the kernel's byte
// by byte order: the exclusive end of a range whose last key is key.
func successor(key []byte) []byte {
	out := append([]byte(nil), key...)
	for i := len(out) - 1; i >= 0; i-- {
		out[i]++
		if out[i] != 0 {
			break
		}
	}
	return out
}

// peerElem is a range of peer addresses of rule id: "id . lo" to
// "id . hi" inclusive.
func peerElem(id uint32, r ipRange) elem {
	lo := binary.BigEndian.AppendUint32(idBytes(id), r.lo)
	hi := binary.BigEndian.AppendUint32(idBytes(id), r.hi)
	return elem{fam: famIP, set: setPeers, key: lo, keyEnd: successor(hi), keyText: idText(id) + r.String()}
}

// protoPortKey is "id . protocol . port", each field in a 4-byte
// register as the rule loads it.
func protoPortKey(id uint32, proto protocol, port uint16) []byte {
	b := append(idBytes(id), byte(proto), 0, 0, 0)
	return append(binary.BigEndian.AppendUint16(b, port), 0, 0)
}

func portElem(id uint32, p portRange) elem {
	return elem{fam: famIP, set: setPorts, key: protoPortKey(id, p.proto, p.lo), keyEnd: successor(protoPortKey(id, p.proto, p.hi)),
		keyText: idText(id) + p.String()}
}

func namedElem(id uint32, n addrPort) elem {
	b := append(idBytes(id), n.ip.AsSlice()...)
	b = append(b, byte(n.proto), 0, 0, 0)
	b = append(binary.BigEndian.AppendUint16(b, n.port), 0, 0)
	return elem{fam: famIP, set: setNamed, key: b, keyText: idText(id) + n.String()}
}

// portAddrElem says a pod's port carries its address: "port . address".
func portAddrElem(port string, a netip.Addr) elem {
	b := make([]byte, unix.IFNAMSIZ, unix.IFNAMSIZ+4)
	copy(b, port)
	return elem{fam: famBridge, set: setPodAddrs, key: append(b, a.AsSlice()...), keyText: strconv.Quote(port) + " . " + a.String()}
}

func portNameElem(set, name string) elem {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return elem{fam: famBridge, set: set, key: b, keyText: strconv.Quote(name)}
}
