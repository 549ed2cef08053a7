package proxy

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// Names of the table's fixed chains and maps; see the package doc.
const (
	chainNATPrerouting    = "nat-prerouting"
	chainNATOutput        = "nat-output"
	chainNATPostrouting   = "nat-postrouting"
	chainFilterInput      = "filter-input"
	chainFilterForward    = "filter-forward"
	chainFilterOutput     = "filter-output"
	chainServices         = "services"
	chainMasquerading     = "masquerading"
	chainMarkForMasq      = "mark-for-masquerade"
	chainServiceEPCheck   = "service-endpoints-check"
	chainNodePortEPCheck  = "nodeport-endpoints-check"
	chainReject           = "reject-chain"
	chainClusterIPsCheck  = "cluster-ips-check"
	chainFilterPreDNAT    = "filter-prerouting-pre-dnat"
	chainFilterOutPreDNAT = "filter-output-pre-dnat"
	chainFirewallCheck    = "firewall-check"

	mapServiceIPs          = "service-ips"
	mapServiceNodePorts    = "service-nodeports"
	mapNoEndpointServices  = "no-endpoint-services"
	mapNoEndpointNodePorts = "no-endpoint-nodeports"
	mapFirewallIPs         = "firewall-ips"
	setClusterIPs          = "cluster-ips"
	setHairpin             = "hairpin"
)

// The endpoint maps: a chooser's (see serviceObjects) keys are in shard
// id % choiceShards of each. Every rule that looks a map up is one of its
// bindings, and the kernel checks each element it adds to a map against
// every binding, and each new binding against every element: with one
// map for 1,000 Services of 10 endpoints that was 10 million checks, a
// tenth of a full sync.
const (
	mapEndpointTargets = "endpoint-targets"
	mapEndpointChains  = "endpoint-chains"
	choiceShards       = 32
)

// choiceRange is what numgen draws below in a chooser without affinity.
// The endpoint-targets maps are interval maps, and of chooser id's n
// endpoints, endpoint i has the i-th of n equal shares of the drawn
// numbers (sizes differ by one at most: a bias under n/2^32, finer than
// the 2^-31 steps of the statistic match kube-proxy's iptables mode
// uses). The rule that draws never changes with the number of
// endpoints, only the map's elements do, so any change of endpoints
// writes elements alone: a rule written anew makes the kernel
// revalidate every jump of the table (about a millisecond with 1,000
// Services), an element of a map without verdicts does not.
//
// The kernel compares keys byte by byte, and numgen leaves its number
// in host byte order: the shares are ranges of the number's bytes read
// in that order, which are as evenly spread as the number itself, each
// byte order being a one-to-one map of the 32-bit numbers. Numbers
// below 2^32-1 read as every 4-byte string but ff ff ff ff.
const choiceRange = 1<<32 - 1

// The shards' names, made once.
var targetsMaps, chainsMaps = shardNames(mapEndpointTargets), shardNames(mapEndpointChains)

func shardNames(base string) []string {
	out := make([]string, choiceShards)
	for i := range out {
		out[i] = base + "-" + strconv.Itoa(i)
	}
	return out
}

func targetsMap(id uint32) string { return targetsMaps[id%choiceShards] }
func chainsMap(id uint32) string  { return chainsMaps[id%choiceShards] }

// isChoiceMap says whether set is a shard of an endpoint map.
func isChoiceMap(set string) bool {
	return strings.HasPrefix(set, mapEndpointTargets+"-") || strings.HasPrefix(set, mapEndpointChains+"-")
}

// hook makes a chain a base chain.
type hook struct {
	typ      nftables.ChainType
	num      *nftables.ChainHook
	prio     *nftables.ChainPriority
	hookName string // for the text form
	prioName string
}

type chainDef struct {
	name  string
	hook  *hook
	rules []*rule
}

// setDef is a set a service port owns: a session-affinity set, client
// addresses that expire after timeout unless refreshed.
type setDef struct {
	name string
	// comment is the set's long name (see setName), for people reading
	// `nft list table`.
	comment string
	timeout time.Duration
}

// elem is an element of one of the table's shared sets and maps: with a
// verdict, of a verdict map; with data, of an endpoint-targets map; with
// neither, of a set. An element of an endpoint-targets map is a range of
// keys, from key to keyEnd (exclusive), which goes to the kernel as two
// elements: key with the data, keyEnd flagged as an interval's end.
type elem struct {
	set      string
	key      []byte
	keyEnd   []byte
	keyText  string
	verdict  *expr.Verdict
	data     []byte
	dataText string
}

func (e elem) String() string {
	switch {
	case e.data != nil:
		return e.set + " " + e.keyText + " : " + e.dataText
	case e.verdict == nil:
		return e.set + " " + e.keyText
	case e.verdict.Kind == expr.VerdictGoto:
		return e.set + " " + e.keyText + " : goto " + e.verdict.Chain
	default:
		return e.set + " " + e.keyText + " : drop"
	}
}

// objects are what one service port, or the table's fixed part, puts in
// the table.
type objects struct {
	chains []chainDef
	sets   []setDef
	elems  []elem
	// udpEndpoints are the addresses of UDP endpoints that have rules,
	// whose flows go stale when they leave (see conntrack.go).
	udpEndpoints []netip.Addr
	// hairpin are the endpoint addresses that have rules: elements
	// "a . a" of the hairpin set, which several Services may share (see
	// kernelTable.hairpinRefs), so kept apart from elems.
	hairpin []netip.Addr
	// choosers are the chains that pick an endpoint, each of which has
	// a number of its own in the endpoint maps' keys (see chooserIDs).
	choosers []string
}

// ruleConfig is what rules depend on besides Services.
type ruleConfig struct {
	bridge        string         // the pod bridge: Service traffic that leaves where it came in is masqueraded
	clusterCIDR   netip.Prefix   // invalid: no masquerade of off-cluster ClusterIP traffic
	serviceCIDR   netip.Prefix   // invalid: no drop of traffic to unallocated service IPs
	nodePortCIDRs []netip.Prefix // empty: every local address, 127.0.0.1 included
	// nodeIPs are the node's addresses: a source range that holds one
	// lets in the load-balancer addresses too (see serviceObjects).
	nodeIPs []netip.Addr
}

// namedSets are the definitions of the table's shared sets and maps,
// elements aside: the four address maps, the endpoint maps' shards, and
// the cluster-ips and hairpin sets.
func namedSets(t *nftables.Table) map[string]*nftables.Set {
	addrProtoPort := nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	protoPort := nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
	m := map[string]*nftables.Set{}
	for name, key := range map[string]nftables.SetDatatype{
		mapServiceIPs: addrProtoPort, mapNoEndpointServices: addrProtoPort, mapFirewallIPs: addrProtoPort,
		mapServiceNodePorts: protoPort, mapNoEndpointNodePorts: protoPort,
	} {
		m[name] = &nftables.Set{Table: t, Name: name, IsMap: true, Concatenation: true, KeyType: key, DataType: nftables.TypeVerdict}
	}
	// The key types matter only to the nft tool, which lists the table
	// with them. "mark" is a 32-bit number; nft cannot list a
	// concatenation of "integer"s, which have no size of their own (it
	// aborts, and `nft list ruleset` with it).
	choice := nftables.MustConcatSetType(nftables.TypeMark, nftables.TypeMark)
	wideChoice := nftables.TypeInteger
	wideChoice.Bytes = 8
	for i := range uint32(choiceShards) {
		// A range over one 8-byte key, not a concatenation of two
		// fields: the kernel keeps it in an rbtree, two nodes a range,
		// where a concatenation of ranges (pipapo) would expand each
		// range of 32-bit numbers into up to 62 prefixes. (nft lists
		// the key as one 64-bit number.)
		m[targetsMap(i)] = &nftables.Set{Table: t, Name: targetsMap(i), IsMap: true, Interval: true, KeyType: wideChoice,
			DataType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)}
		m[chainsMap(i)] = &nftables.Set{Table: t, Name: chainsMap(i), IsMap: true, Concatenation: true, KeyType: choice,
			DataType: nftables.TypeVerdict}
	}
	m[setClusterIPs] = &nftables.Set{Table: t, Name: setClusterIPs, KeyType: nftables.TypeIPAddr}
	m[setHairpin] = &nftables.Set{Table: t, Name: setHairpin, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)}
	return m
}

// nodePortRules are the ways a packet is addressed to a NodePort: to
// any local address, or to a local address inside one of the CIDRs.
func (c ruleConfig) nodePortRules(then func(*rule) *rule) []*rule {
	if len(c.nodePortCIDRs) == 0 {
		return []*rule{then(newRule().fibLocal("daddr"))}
	}
	var out []*rule
	for _, p := range c.nodePortCIDRs {
		out = append(out, then(newRule().fibLocal("daddr").daddr(p, true)))
	}
	return out
}

func baseObjects(c ruleConfig) objects {
	nat := func(h *nftables.ChainHook, hookName string, p *nftables.ChainPriority, prioName string) *hook {
		return &hook{typ: nftables.ChainTypeNAT, num: h, prio: p, hookName: hookName, prioName: prioName}
	}
	filter := func(h *nftables.ChainHook, hookName string) *hook {
		return &hook{typ: nftables.ChainTypeFilter, num: h, prio: nftables.ChainPriorityFilter, hookName: hookName, prioName: "filter"}
	}
	// Before DNAT, while the destination is still the load balancer's
	// address, as kube-proxy's chains of these names.
	preDNAT := func(h *nftables.ChainHook, hookName string) *hook {
		return &hook{typ: nftables.ChainTypeFilter, num: h, prio: nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest - 10),
			hookName: hookName, prioName: "dstnat - 10"}
	}
	var services []*rule
	if c.clusterCIDR.IsValid() {
		// A cluster IP reached from outside the pod network (the host,
		// another node) would get replies the pod routes elsewhere: such
		// connections are masqueraded, whichever Service and policy. One
		// rule for all, where kube-proxy writes one per Service: the mark
		// matters only to a connection that a Service's rule DNATs.
		services = append(services, newRule().daddrInSet(setClusterIPs).saddr(c.clusterCIDR, false).jump(chainMarkForMasq))
	}
	services = append(services, newRule().vmapDaddrProtoPort(mapServiceIPs))
	// A port a cluster IP does not serve refuses connections, and an
	// address of the service CIDR that no Service has goes nowhere,
	// rather than out of the default route.
	clusterIPsCheck := []*rule{newRule().daddrInSet(setClusterIPs).reject()}
	if c.serviceCIDR.IsValid() {
		// Except an address of the node's own (the cluster DNS address
		// on the pod bridge), which the node serves itself.
		clusterIPsCheck = append(clusterIPsCheck,
			newRule().fibLocal("daddr").ret(),
			newRule().daddr(c.serviceCIDR, true).drop())
	}
	services = append(services, c.nodePortRules(func(r *rule) *rule { return r.vmapProtoPort(mapServiceNodePorts) })...)
	return objects{chains: []chainDef{
		{name: chainNATPrerouting, hook: nat(nftables.ChainHookPrerouting, "prerouting", nftables.ChainPriorityNATDest, "dstnat"),
			rules: []*rule{newRule().jump(chainServices)}},
		{name: chainNATOutput, hook: nat(nftables.ChainHookOutput, "output", nftables.ChainPriorityNATDest, "dstnat"),
			rules: []*rule{newRule().jump(chainServices)}},
		// A pod that reaches itself through a Service (hairpin) must
		// see the reply come from the Service, not from itself: the
		// connection is masqueraded when, after DNAT, its source is its
		// destination. Only a DNAT'd one: the kubernetes Service's
		// endpoint may be 127.0.0.1, and a host connection to it that
		// conntrack first sees mid-stream (one opened before any NAT
		// table existed) would otherwise get a new source port and be
		// reset.
		//
		// A pod that reaches another pod of this node through a
		// Service sends to the node, which DNATs and routes the packet
		// back out of the bridge; the answer, addressed to a pod on
		// the same bridge, is bridged straight to it, and only
		// br_netfilter (bridge-nf-call-iptables=1) would make it pass
		// the conntrack entry that undoes the DNAT. Without it the pod
		// gets an answer from the endpoint's own address and drops
		// it. Masquerading such a connection to the node's bridge
		// address makes the answer come back through the node,
		// whatever the host's bridge netfilter state. The rule sees
		// only routed packets: a packet that br_netfilter bridges
		// after its DNAT reaches postrouting with no input interface
		// and keeps the pod's address, as under kube-proxy.
		{name: chainNATPostrouting, hook: nat(nftables.ChainHookPostrouting, "postrouting", nftables.ChainPriorityNATSource, "srcnat"),
			rules: []*rule{
				newRule().ctStatusDNAT().saddrDaddrInSet(setHairpin).jump(chainMarkForMasq),
				newRule().ctStatusDNAT().ifname(expr.MetaKeyIIFNAME, c.bridge).ifname(expr.MetaKeyOIFNAME, c.bridge).jump(chainMarkForMasq),
				newRule().jump(chainMasquerading),
			}},
		// The endpoint checks run in filter hooks because reject may
		// not run in nat ones. They see only packets that were not
		// DNAT'd: a DNAT'd packet's destination is no longer a
		// Service's.
		{name: chainFilterInput, hook: filter(nftables.ChainHookInput, "input"), rules: []*rule{
			newRule().ctStateNew().jump(chainNodePortEPCheck),
			newRule().ctStateNew().jump(chainServiceEPCheck),
		}},
		{name: chainFilterForward, hook: filter(nftables.ChainHookForward, "forward"), rules: []*rule{
			newRule().ctStateNew().jump(chainServiceEPCheck),
			newRule().ctStateNew().jump(chainClusterIPsCheck),
		}},
		{name: chainFilterOutput, hook: filter(nftables.ChainHookOutput, "output"), rules: []*rule{
			newRule().ctStateNew().jump(chainServiceEPCheck),
			newRule().ctStateNew().jump(chainClusterIPsCheck),
		}},
		// loadBalancerSourceRanges: a new connection to a load-balancer
		// address of a Service that has them goes to the Service's
		// firewall chain, which drops other clients.
		{name: chainFilterPreDNAT, hook: preDNAT(nftables.ChainHookPrerouting, "prerouting"), rules: []*rule{
			newRule().ctStateNew().jump(chainFirewallCheck),
		}},
		{name: chainFilterOutPreDNAT, hook: preDNAT(nftables.ChainHookOutput, "output"), rules: []*rule{
			newRule().ctStateNew().jump(chainFirewallCheck),
		}},
		{name: chainFirewallCheck, rules: []*rule{newRule().vmapDaddrProtoPort(mapFirewallIPs)}},
		{name: chainClusterIPsCheck, rules: clusterIPsCheck},
		{name: chainServices, rules: services},
		{name: chainMasquerading, rules: []*rule{
			newRule().markIsClear().ret(),
			newRule().setMark(true),
			newRule().masquerade(),
		}},
		{name: chainMarkForMasq, rules: []*rule{newRule().setMark(false)}},
		{name: chainServiceEPCheck, rules: []*rule{newRule().vmapDaddrProtoPort(mapNoEndpointServices)}},
		{name: chainNodePortEPCheck, rules: c.nodePortRules(func(r *rule) *rule { return r.vmapProtoPort(mapNoEndpointNodePorts) })},
		{name: chainReject, rules: []*rule{newRule().reject()}},
	}}
}

func serviceChain(sp *servicePort) string  { return "service-" + sp.id() }
func localChain(sp *servicePort) string    { return "local-" + sp.id() }
func externalChain(sp *servicePort) string { return "external-" + sp.id() }
func firewallChain(sp *servicePort) string { return "firewall-" + sp.id() }
func endpointChain(sp *servicePort, e endpoint) string {
	return "endpoint-" + sp.id() + "__" + e.addr.String()
}
func affinitySet(sp *servicePort, e endpoint) string {
	return setName("af-", affinitySetLong(sp, e))
}
func affinitySetLong(sp *servicePort, e endpoint) string {
	return "affinity-" + sp.id() + "__" + e.addr.String()
}

// setName is the kernel name of an affinity set: a prefix and a 64-bit
// FNV-1a hash of its long name, which goes in the set's comment. The
// kernel finds a set by walking the table's list of sets and comparing
// names, a strlen and a memcmp each, for every new set, every rule that
// looks one up and every element write: short names keep those walks
// short.
func setName(prefix, long string) string {
	h := fnv.New64a()
	h.Write([]byte(long))
	return fmt.Sprintf("%s%016x", prefix, h.Sum64())
}

// serviceObjects is what one service port puts in the table, following
// kube-proxy's nftables mode:
//
//   - its cluster IP, external IPs, load-balancer IPs and node port are
//     keys of the service-ips and service-nodeports maps, whose verdict
//     is a goto to the port's chains;
//   - "service-" chooses among all usable endpoints, "local-" among this
//     node's (for the Local traffic policies), "external-" handles what
//     arrives at an external address or node port;
//   - they choose by a random number looked up in an endpoint-targets
//     map, which gives the endpoint's address and port for the DNAT, or,
//     with ClientIP affinity, in an endpoint-chains map, whose verdict
//     goes to the endpoint's "endpoint-" chain that records the client
//     and does the DNAT (kube-proxy has an endpoint chain for every
//     endpoint and an anonymous map in every Service's chain);
//   - with no usable endpoint, the addresses go into the no-endpoint maps
//     instead: reject when the Service has no endpoint at all, drop when
//     a Local policy leaves none on this node.
//
// It appends to o, which may hold the Service's other ports.
func serviceObjects(o *objects, sp *servicePort, c ruleConfig, ids *chooserIDs) {
	cluster := clusterEndpoints(sp)
	var local []endpoint
	if sp.internalLocal || sp.externalLocal {
		local = usable(sp.endpoints, true)
	}
	noEndpoint := gotoVerdict(chainReject)
	if len(cluster) > 0 {
		noEndpoint = &expr.Verdict{Kind: expr.VerdictDrop}
	}

	// The "service-" chain serves ClusterIP traffic under the Cluster
	// policy and, whatever the policies, external traffic from pods and
	// from the node itself.
	needCluster := len(cluster) > 0 && (!sp.internalLocal || sp.hasExternal())
	var chosen []endpoint
	if needCluster {
		chosen = cluster
	}
	// Each endpoint either chooser uses, once: its hairpin element and,
	// with ClientIP affinity, the chain that records the client and
	// does the DNAT.
	// (A port's endpoints are distinct: only local ones can repeat
	// chosen ones.)
	for i, e := range append(slices.Clone(chosen), local...) {
		if i >= len(chosen) && slices.ContainsFunc(chosen, func(c endpoint) bool { return c.addr == e.addr }) {
			continue
		}
		if sp.proto == protoUDP {
			o.udpEndpoints = append(o.udpEndpoints, e.addr.Addr())
		}
		if !slices.Contains(o.hairpin, e.addr.Addr()) { // (another port's)
			o.hairpin = append(o.hairpin, e.addr.Addr())
		}
		if sp.affinity > 0 {
			o.sets = append(o.sets, setDef{name: affinitySet(sp, e), comment: affinitySetLong(sp, e), timeout: sp.affinity})
			o.chains = append(o.chains, chainDef{name: endpointChain(sp, e), rules: []*rule{
				newRule().updateSaddr(affinitySet(sp, e)),
				newRule().l4proto(sp.proto).dnat(e.addr),
			}})
		}
	}
	// A chooser picks one of eps with equal probability: numgen's
	// random number, with the chooser's own number, is the key of the
	// endpoint in a map the Services share. Without affinity the number
	// is below choiceRange and each endpoint has a range of it, so any
	// change of endpoints writes map elements only; with affinity it is
	// below len(eps), and a change of count rewrites the rule.
	chooser := func(name string, eps []endpoint) {
		var r []*rule
		id := ids.get(name)
		o.choosers = append(o.choosers, name)
		o.elems = slices.Grow(o.elems, len(eps))
		if sp.affinity == 0 {
			// No per-endpoint chains: the map gives the address and
			// port to DNAT to.
			r = append(r, newRule().l4proto(sp.proto).numgenDnat(id))
			for i, e := range eps {
				o.elems = append(o.elems, targetElem(id, i, len(eps), e.addr))
			}
		} else {
			for _, e := range eps {
				r = append(r, newRule().saddrInSet(affinitySet(sp, e)).gotoChain(endpointChain(sp, e)))
			}
			r = append(r, newRule().numgenVmap(id, len(eps)))
			for i, e := range eps {
				o.elems = append(o.elems, chainElem(id, i, endpointChain(sp, e)))
			}
		}
		o.chains = append(o.chains, chainDef{name: name, rules: r})
	}
	if needCluster {
		chooser(serviceChain(sp), cluster)
	}
	if len(local) > 0 {
		chooser(localChain(sp), local)
	}

	internal, internalEPs := serviceChain(sp), cluster
	if sp.internalLocal {
		internal, internalEPs = localChain(sp), local
	}
	if len(internalEPs) > 0 {
		o.elems = append(o.elems, addrElem(mapServiceIPs, sp.clusterIP, sp, gotoVerdict(internal)))
	} else {
		o.elems = append(o.elems, addrElem(mapNoEndpointServices, sp.clusterIP, sp, noEndpoint))
	}

	firewallObjects(o, sp, c)
	if !sp.hasExternal() {
		return
	}
	externalEPs := cluster
	if sp.externalLocal {
		externalEPs = local
	}
	if len(cluster) > 0 {
		var r []*rule
		if !sp.externalLocal {
			r = []*rule{newRule().jump(chainMarkForMasq), newRule().gotoChain(serviceChain(sp))}
		} else {
			// Local policy keeps the client's address, so it serves
			// only clients whose replies come back through this node.
			// Pods and the node itself are not external clients: they
			// get every endpoint, as kube-proxy gives them.
			if c.clusterCIDR.IsValid() {
				r = append(r, newRule().saddr(c.clusterCIDR, true).gotoChain(serviceChain(sp)))
			}
			r = append(r,
				newRule().fibLocal("saddr").jump(chainMarkForMasq),
				newRule().fibLocal("saddr").gotoChain(serviceChain(sp)))
			if len(local) > 0 {
				r = append(r, newRule().gotoChain(localChain(sp)))
			}
		}
		o.chains = append(o.chains, chainDef{name: externalChain(sp), rules: r})
		for _, a := range sp.externalIPs {
			o.elems = append(o.elems, addrElem(mapServiceIPs, a, sp, gotoVerdict(externalChain(sp))))
		}
		if sp.nodePort != 0 {
			o.elems = append(o.elems, portElem(mapServiceNodePorts, sp, gotoVerdict(externalChain(sp))))
		}
	}
	if len(externalEPs) == 0 {
		for _, a := range sp.externalIPs {
			o.elems = append(o.elems, addrElem(mapNoEndpointServices, a, sp, noEndpoint))
		}
		if sp.nodePort != 0 {
			o.elems = append(o.elems, portElem(mapNoEndpointNodePorts, sp, noEndpoint))
		}
	}
}

// firewallObjects enforce a Service's loadBalancerSourceRanges, as
// kube-proxy does: a new connection to one of its load-balancer
// addresses (not its external IPs, node port or cluster IP) from a
// client outside the ranges is dropped, whether or not the Service has
// endpoints. A range that holds a node address lets the load-balancer
// addresses in as sources too: the node reaching a load-balancer address
// it holds itself may come from it.
func firewallObjects(o *objects, sp *servicePort, c ruleConfig) {
	if len(sp.lbIPs) == 0 || len(sp.sourceRanges) == 0 {
		return
	}
	var r []*rule
	fromNode := false
	for _, p := range sp.sourceRanges {
		r = append(r, newRule().saddr(p, true).ret())
		fromNode = fromNode || slices.ContainsFunc(c.nodeIPs, p.Contains)
	}
	if fromNode {
		for _, a := range sp.lbIPs {
			r = append(r, newRule().saddr(netip.PrefixFrom(a, 32), true).ret())
		}
	}
	r = append(r, newRule().drop())
	o.chains = append(o.chains, chainDef{name: firewallChain(sp), rules: r})
	for _, a := range sp.lbIPs {
		o.elems = append(o.elems, addrElem(mapFirewallIPs, a, sp, gotoVerdict(firewallChain(sp))))
	}
}

func gotoVerdict(chain string) *expr.Verdict {
	return &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain}
}

// hairpinKey is an address's element of the hairpin set: "a . a".
func hairpinKey(a netip.Addr) []byte { return append(a.AsSlice(), a.AsSlice()...) }

// clusterIPElem puts a Service's cluster IP in the cluster-ips set.
func clusterIPElem(a netip.Addr) elem {
	return elem{set: setClusterIPs, key: a.AsSlice(), keyText: a.String()}
}

// Concatenated keys put each field in a 4-byte register of its own.
func addrElem(set string, a netip.Addr, sp *servicePort, v *expr.Verdict) elem {
	key := make([]byte, 12)
	copy(key, a.AsSlice())
	key[4] = byte(sp.proto)
	binary.BigEndian.PutUint16(key[8:], sp.port)
	return elem{set: set, key: key, keyText: a.String() + " . " + sp.proto.String() + " . " + strconv.Itoa(int(sp.port)), verdict: v}
}

// choiceKey is an endpoint-chains map's key: a chooser's number and an
// endpoint's index, each in a 4-byte register in host byte order, as
// numgen writes the index.
func choiceKey(id uint32, i int) []byte {
	b := make([]byte, 8)
	binary.NativeEndian.PutUint32(b, id)
	binary.NativeEndian.PutUint32(b[4:], uint32(i))
	return b
}

// targetElem maps endpoint i of chooser id's n, the i-th of n equal
// shares of [0, choiceRange), to the address and port to DNAT to. A key
// is the chooser's number in host byte order, as the rule's immediate
// loads it, then a share's bound in network byte order, the order in
// which the kernel compares the bytes the rule's numgen writes (see
// choiceRange).
func targetElem(id uint32, i, n int, a netip.AddrPort) elem {
	lo := uint32(uint64(i) * choiceRange / uint64(n))
	end := uint32(uint64(i+1) * choiceRange / uint64(n)) // exclusive; choiceRange at most
	// The key, the end key, then the data: address . port, each in a
	// 4-byte register.
	b := make([]byte, 24)
	binary.NativeEndian.PutUint32(b, id)
	binary.BigEndian.PutUint32(b[4:], lo)
	binary.NativeEndian.PutUint32(b[8:], id)
	binary.BigEndian.PutUint32(b[12:], end)
	addr := a.Addr().As4()
	copy(b[16:], addr[:])
	binary.BigEndian.PutUint16(b[20:], a.Port())
	return elem{set: targetsMap(id), key: b[:8:8], keyEnd: b[8:16:16],
		keyText: strconv.FormatUint(uint64(id), 10) + " . " + strconv.FormatUint(uint64(lo), 10) + "-" + strconv.FormatUint(uint64(end-1), 10),
		data:    b[16:], dataText: a.Addr().String() + " . " + strconv.Itoa(int(a.Port()))}
}

// chainElem maps endpoint i of chooser id to the endpoint's chain.
func chainElem(id uint32, i int, chain string) elem {
	return elem{set: chainsMap(id), key: choiceKey(id, i), keyText: choiceText(id, i), verdict: gotoVerdict(chain)}
}

func choiceText(id uint32, i int) string {
	return strconv.FormatUint(uint64(id), 10) + " . " + strconv.Itoa(i)
}

func portElem(set string, sp *servicePort, v *expr.Verdict) elem {
	key := make([]byte, 8)
	key[0] = byte(sp.proto)
	binary.BigEndian.PutUint16(key[4:], sp.nodePort)
	return elem{set: set, key: key, keyText: sp.proto.String() + " . " + strconv.Itoa(int(sp.nodePort)), verdict: v}
}
