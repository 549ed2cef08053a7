package netplugin

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The tables, family ip and (with an IPv6 pod CIDR) family ip6, of one
// name, that this package owns entirely. The ip table:
//
//	chain prerouting  (nat, prerouting, dstnat)  fib daddr type local jump hostports
//	chain output      (nat, output, dstnat)      fib daddr type local jump hostports
//	chain hostports                              one DNAT rule per hostPort, comment "pod:<id>"
//	chain postrouting (nat, postrouting, srcnat)
//	    oifname <bridge> ip saddr 127.0.0.0/8 masquerade    hostPort reached on the host's loopback
//	    ip saddr <cluster> ip daddr != <cluster> masquerade traffic leaving the cluster
//	    iifname <bridge> oifname <bridge> ct status dnat masquerade
//	                                                        a pod reaching another pod's hostPort
//	    oifname <bridge> ip saddr <pod> ip daddr <pod> masquerade, comment "pod:<id>"
//	                                                        hairpin: a pod reaching its own hostPort
//	chain forward     (filter, forward, filter)  iifname/oifname <bridge> accept
//	chain input       (filter, input, filter)
//	    iifname <bridge> ip daddr 127.0.0.0/8 ct status != dnat drop
//
// The iifname/oifname rule makes hostPorts work whatever the host's
// bridge netfilter state, with no br_netfilter module at all: a pod's
// packet to a hostPort of a pod on the same bridge is DNAT'd and routed
// back out of the bridge, and without br_netfilter
// (bridge-nf-call-iptables=0) the answer is bridged straight back, past
// the conntrack entry that would undo the DNAT, and dropped by the
// client. Masqueraded to the gateway, the answer comes back through the
// node. Where br_netfilter is on it bridges the DNAT'd packet itself,
// postrouting sees no input interface, the rule does not match, and the
// server sees the client pod's address, as with the CNI portmap plugin.
// In that case a pod's connection to its own hostPort is masqueraded by
// the per-pod hairpin rule, which matches addresses alone.
//
// The ip6 table has the same chains and rules but for the two that
// concern 127.0.0.0/8: IPv6 has no route_localnet, so a hostPort is not
// reachable on ::1 (as with kube-proxy's NodePorts) and a pod cannot
// reach the host's ::1 anyway. A hostPort with no hostIP gets a rule in
// each table, each DNATing to the pod's address of that family; one with
// a hostIP of one family (0.0.0.0 and :: included) only in that family's,
// as the portmap CNI plugin does.
//
// The input rule closes the hole that route_localnet (needed for hostPorts
// on 127.0.0.1) opens: without it a pod could reach services the host binds
// to 127.0.0.1 (CVE-2020-8558). Replies of hostPort connections made from
// the host's loopback are DNAT'd connections and pass.
const (
	chainPrerouting  = "prerouting"
	chainOutput      = "output"
	chainHostPorts   = "hostports"
	chainPostrouting = "postrouting"
	chainForward     = "forward"
	chainInput       = "input"

	podCommentPrefix = "pod:"

	ipsDstNAT = 1 << 5 // IPS_DST_NAT in linux/netfilter/nf_conntrack_common.h
)

var loopbackNet = netip.MustParsePrefix("127.0.0.0/8")

// ruleset writes the table. Batches are built and flushed under mu: the
// Conn queues messages, and two goroutines' messages must not mix.
type ruleset struct {
	v6      bool
	table   *nftables.Table
	bridge  string
	cluster netip.Prefix

	mu   sync.Mutex
	conn *nftables.Conn
}

// newRuleset writes the table of cluster's family.
func newRuleset(table, bridge string, cluster netip.Prefix) (*ruleset, error) {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	v6 := cluster.Addr().Is6()
	return &ruleset{
		v6:      v6,
		table:   &nftables.Table{Name: table, Family: tableFamily(v6)},
		bridge:  bridge,
		cluster: cluster,
		conn:    conn,
	}, nil
}

func (r *ruleset) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn.CloseLasting()
}

func (r *ruleset) chain(name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: r.table}
}

// podRules is what one pod needs in the table.
type podRules struct {
	id        string
	ip        netip.Addr
	hostPorts []HostPort
}

// sync replaces the whole table with one that holds the base rules and the
// rules of pods, in one transaction: packets never see a half-built table,
// and whatever was in the table before (rules of pods that are gone, a
// different cluster CIDR) is gone.
func (r *ruleset) sync(pods []podRules) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.conn
	c.AddTable(r.table) // so that the delete cannot fail on a first start
	c.DelTable(r.table)
	c.AddTable(r.table)

	accept := nftables.ChainPolicyAccept
	base := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: name, Table: r.table, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept})
	}
	hostports := c.AddChain(r.chain(chainHostPorts))
	pre := base(chainPrerouting, nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
	out := base(chainOutput, nftables.ChainTypeNAT, nftables.ChainHookOutput, nftables.ChainPriorityNATDest)
	post := base(chainPostrouting, nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	fwd := base(chainForward, nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)

	jumpHostPorts := concat(fibDaddrLocal(), verdict(expr.VerdictJump, chainHostPorts))
	c.AddRule(&nftables.Rule{Table: r.table, Chain: pre, Exprs: jumpHostPorts})
	c.AddRule(&nftables.Rule{Table: r.table, Chain: out, Exprs: jumpHostPorts})

	if !r.v6 {
		c.AddRule(&nftables.Rule{Table: r.table, Chain: post, Exprs: concat(
			ifname(expr.MetaKeyOIFNAME, r.bridge),
			ipMatch(srcAddr, loopbackNet, true),
			[]expr.Any{&expr.Masq{FullyRandom: true}},
		)})
	}
	c.AddRule(&nftables.Rule{Table: r.table, Chain: post, Exprs: concat(
		ipMatch(srcAddr, r.cluster, true),
		ipMatch(dstAddr, r.cluster, false),
		[]expr.Any{&expr.Masq{FullyRandom: true}},
	)})
	c.AddRule(&nftables.Rule{Table: r.table, Chain: post, Exprs: concat(
		ifname(expr.MetaKeyIIFNAME, r.bridge),
		ifname(expr.MetaKeyOIFNAME, r.bridge),
		ctStatus(ipsDstNAT),
		[]expr.Any{&expr.Masq{FullyRandom: true}},
	)})

	c.AddRule(&nftables.Rule{Table: r.table, Chain: fwd, Exprs: concat(
		ifname(expr.MetaKeyIIFNAME, r.bridge), verdict(expr.VerdictAccept, ""))})
	c.AddRule(&nftables.Rule{Table: r.table, Chain: fwd, Exprs: concat(
		ifname(expr.MetaKeyOIFNAME, r.bridge), verdict(expr.VerdictAccept, ""))})

	if !r.v6 {
		in := base(chainInput, nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
		c.AddRule(&nftables.Rule{Table: r.table, Chain: in, Exprs: concat(
			ifname(expr.MetaKeyIIFNAME, r.bridge),
			ipMatch(dstAddr, loopbackNet, true),
			ctStatusNot(ipsDstNAT),
			verdict(expr.VerdictDrop, ""),
		)})
	}

	for _, p := range pods {
		for _, rule := range r.podRuleList(p, hostports, post) {
			c.AddRule(rule)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("write nftables table %s %s: %w", r.familyName(), r.table.Name, err)
	}
	return nil
}

// podRuleList builds a pod's DNAT rules and, when it has hostPorts, its
// hairpin masquerade rule.
func (r *ruleset) podRuleList(p podRules, hostports, post *nftables.Chain) []*nftables.Rule {
	if len(p.hostPorts) == 0 {
		return nil
	}
	comment := userdata.AppendString(nil, userdata.TypeComment, podCommentPrefix+p.id)
	nfproto := uint32(unix.NFPROTO_IPV4)
	if r.v6 {
		nfproto = unix.NFPROTO_IPV6
	}
	var rules []*nftables.Rule
	for _, hp := range p.hostPorts {
		hostIP, specific, v6 := hostPortAddr(hp.HostIP)
		if hp.HostIP != "" && v6 != r.v6 {
			continue // the other family's
		}
		var exprs []expr.Any
		if specific {
			exprs = ipMatch(dstAddr, netip.PrefixFrom(hostIP, hostIP.BitLen()), true)
		}
		exprs = concat(exprs,
			[]expr.Any{
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{protocolNumber(hp.Protocol)}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(hp.HostPort))},
				&expr.Immediate{Register: 1, Data: p.ip.AsSlice()},
				&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(uint16(hp.ContainerPort))},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: nfproto, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
			})
		rules = append(rules, &nftables.Rule{Table: r.table, Chain: hostports, Exprs: exprs, UserData: comment})
	}
	if len(rules) == 0 {
		return nil
	}
	self := netip.PrefixFrom(p.ip, p.ip.BitLen())
	rules = append(rules, &nftables.Rule{Table: r.table, Chain: post, UserData: comment, Exprs: concat(
		ifname(expr.MetaKeyOIFNAME, r.bridge),
		ipMatch(srcAddr, self, true),
		ipMatch(dstAddr, self, true),
		[]expr.Any{&expr.Masq{}},
	)})
	return rules
}

// podChains are the chains that hold per-pod rules.
var podChains = []string{chainHostPorts, chainPostrouting}

// setPodRules replaces the rules of pod p.id with the ones p needs, in one
// transaction. With no hostPorts it only deletes.
func (r *ruleset) setPodRules(p podRules) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.conn
	for _, name := range podChains {
		rules, err := c.GetRules(r.table, r.chain(name))
		if err != nil {
			return fmt.Errorf("list nftables rules of chain %s: %w", name, err)
		}
		for _, rule := range rules {
			if id, ok := ruleOwner(rule); ok && id == p.id {
				if err := c.DelRule(rule); err != nil {
					return fmt.Errorf("delete nftables rule of pod %s: %w", p.id, err)
				}
			}
		}
	}
	for _, rule := range r.podRuleList(p, r.chain(chainHostPorts), r.chain(chainPostrouting)) {
		c.AddRule(rule)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("write nftables rules of pod %s: %w", p.id, err)
	}
	return nil
}

// ruleOwners returns the pods that have rules in the table.
func (r *ruleset) ruleOwners() (map[string]bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	owners := map[string]bool{}
	for _, name := range podChains {
		rules, err := r.conn.GetRules(r.table, r.chain(name))
		if err != nil {
			return nil, fmt.Errorf("list nftables rules of chain %s: %w", name, err)
		}
		for _, rule := range rules {
			if id, ok := ruleOwner(rule); ok {
				owners[id] = true
			}
		}
	}
	return owners, nil
}

// dropTable deletes the table of one family, if there is one.
func dropTable(name string, v6 bool) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("open nftables netlink socket: %w", err)
	}
	defer c.CloseLasting()
	t := &nftables.Table{Name: name, Family: tableFamily(v6)}
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("delete nftables table %s: %w", name, err)
	}
	return nil
}

// destroy deletes the table; a missing table is not an error.
func (r *ruleset) destroy() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conn.AddTable(r.table)
	r.conn.DelTable(r.table)
	if err := r.conn.Flush(); err != nil {
		return fmt.Errorf("delete nftables table %s %s: %w", r.familyName(), r.table.Name, err)
	}
	return nil
}

func ruleOwner(rule *nftables.Rule) (string, bool) {
	comment, ok := userdata.GetString(rule.UserData, userdata.TypeComment)
	if !ok {
		return "", false
	}
	return strings.CutPrefix(comment, podCommentPrefix)
}

// hostPortAddr returns the address a hostPort is bound to, whether it is
// one address (not every local address of a family), and its family.
// An empty hostIP is every address of both families.
func hostPortAddr(hostIP string) (ip netip.Addr, specific, v6 bool) {
	if hostIP == "" {
		return netip.Addr{}, false, false
	}
	ip, err := netip.ParseAddr(hostIP)
	if err != nil {
		return netip.Addr{}, false, false
	}
	ip = ip.Unmap()
	return ip, !ip.IsUnspecified(), ip.Is6()
}

func tableFamily(v6 bool) nftables.TableFamily {
	if v6 {
		return nftables.TableFamilyIPv6
	}
	return nftables.TableFamilyIPv4
}

func (r *ruleset) familyName() string {
	if r.v6 {
		return "ip6"
	}
	return "ip"
}

func protocolNumber(p string) byte {
	switch strings.ToUpper(p) {
	case "UDP":
		return unix.IPPROTO_UDP
	case "SCTP":
		return unix.IPPROTO_SCTP
	default:
		return unix.IPPROTO_TCP
	}
}

// validateHostPorts rejects what the rules cannot express, before Setup
// changes anything. v4 and v6 say which families the pod network has: a
// hostIP of another family cannot be mapped.
func validateHostPorts(ports []HostPort, v4, v6 bool) error {
	seen := map[string]bool{}
	for _, hp := range ports {
		switch strings.ToUpper(hp.Protocol) {
		case "", "TCP", "UDP", "SCTP":
		default:
			return fmt.Errorf("hostPort %d: unsupported protocol %q", hp.HostPort, hp.Protocol)
		}
		if hp.HostPort < 1 || hp.HostPort > 65535 {
			return fmt.Errorf("hostPort %d: out of range 1-65535", hp.HostPort)
		}
		if hp.ContainerPort < 1 || hp.ContainerPort > 65535 {
			return fmt.Errorf("hostPort %d: containerPort %d out of range 1-65535", hp.HostPort, hp.ContainerPort)
		}
		if hp.HostIP != "" {
			ip, err := netip.ParseAddr(hp.HostIP)
			if err != nil {
				return fmt.Errorf("hostPort %d: hostIP %q: %w", hp.HostPort, hp.HostIP, err)
			}
			if ip = ip.Unmap(); (ip.Is4() && !v4) || (ip.Is6() && !v6) {
				return fmt.Errorf("hostPort %d: hostIP %s: the pod network has no %s pod CIDR", hp.HostPort, ip, familyLabel(ip.Is6()))
			}
			if ip.IsLoopback() && ip.Is6() {
				return fmt.Errorf("hostPort %d: hostIP %s: IPv6 has no route_localnet, a hostPort cannot be mapped on ::1", hp.HostPort, ip)
			}
		}
		key := strconv.Itoa(int(protocolNumber(hp.Protocol))) + "/" + hp.HostIP + "/" + strconv.Itoa(int(hp.HostPort))
		if seen[key] {
			return fmt.Errorf("hostPort %d/%s listed twice", hp.HostPort, hp.Protocol)
		}
		seen[key] = true
	}
	return nil
}

// Expression helpers. Register 1 is the scratch register throughout.

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func verdict(kind expr.VerdictKind, chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: kind, Chain: chain}}
}

// ifname matches an interface name the way nft does: the name padded
// with NULs to IFNAMSIZ.
func ifname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

type addrField int

const (
	srcAddr addrField = iota
	dstAddr
)

// ipMatch matches the source or destination address of prefix's family
// (IPv4 header offsets 12 and 16, IPv6 8 and 24) against prefix, or
// against its complement when in is false.
func ipMatch(field addrField, prefix netip.Prefix, in bool) []expr.Any {
	op := expr.CmpOpEq
	if !in {
		op = expr.CmpOpNeq
	}
	size := uint32(prefix.Addr().BitLen() / 8)
	offset := map[bool][2]uint32{false: {12, 16}, true: {8, 24}}[prefix.Addr().Is6()][field]
	out := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size}}
	if prefix.Bits() < prefix.Addr().BitLen() {
		m := make([]byte, size)
		for i := 0; i < prefix.Bits(); i++ {
			m[i/8] |= 0x80 >> (i % 8)
		}
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: size, Mask: m, Xor: make([]byte, size)})
	}
	return append(out, &expr.Cmp{Op: op, Register: 1, Data: prefix.Masked().Addr().AsSlice()})
}

func fibDaddrLocal() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}
}

// ctStatusNot matches connections whose conntrack status lacks bit.
func ctStatusNot(bit uint32) []expr.Any {
	return ctStatusCmp(bit, expr.CmpOpEq)
}

// ctStatus matches connections whose conntrack status has bit.
func ctStatus(bit uint32) []expr.Any {
	return ctStatusCmp(bit, expr.CmpOpNeq)
}

func ctStatusCmp(bit uint32, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bit), Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: make([]byte, 4)},
	}
}

func familyLabel(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}
