package proxy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// A rule is built once, as both the expressions sent to the kernel and
// nft-like text. The text is what golden tests compare and what tells an
// incremental sync whether a chain changed, so the two never drift apart.
type rule struct {
	text  []string
	exprs []expr.Any
}

func (r *rule) String() string { return strings.Join(r.text, " ") }

func (r *rule) add(text string, exprs ...expr.Any) *rule {
	r.text = append(r.text, text)
	r.exprs = append(r.exprs, exprs...)
	return r
}

func newRule() *rule { return &rule{} }

// Registers: 1 is the scratch register; 8, 9 and 10 are the 32-bit
// registers a concatenation (address . protocol . port) is loaded into.
const (
	regScratch = 1
	regConcat0 = 8
	regConcat1 = 9
	regConcat2 = 10
)

// masqMark is the packet mark bit that says "masquerade me", the one
// kube-proxy uses.
const masqMark = 0x4000

// icmpPortUnreachable is the ICMP destination-unreachable code for "port
// unreachable" (RFC 792).
const icmpPortUnreachable = 3

func (r *rule) ipAddr(offset uint32, what string, p netip.Prefix, eq bool) *rule {
	op, sym := expr.CmpOpEq, ""
	if !eq {
		op, sym = expr.CmpOpNeq, "!= "
	}
	exprs := []expr.Any{&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4}}
	text := p.Addr().String()
	if p.Bits() < 32 {
		m := make([]byte, 4)
		for i := 0; i < p.Bits(); i++ {
			m[i/8] |= 0x80 >> (i % 8)
		}
		exprs = append(exprs, &expr.Bitwise{SourceRegister: regScratch, DestRegister: regScratch, Len: 4, Mask: m, Xor: make([]byte, 4)})
		text = p.Masked().String()
	}
	exprs = append(exprs, &expr.Cmp{Op: op, Register: regScratch, Data: p.Masked().Addr().AsSlice()})
	return r.add("ip "+what+" "+sym+text, exprs...)
}

func (r *rule) saddr(p netip.Prefix, eq bool) *rule { return r.ipAddr(12, "saddr", p, eq) }
func (r *rule) daddr(p netip.Prefix, eq bool) *rule { return r.ipAddr(16, "daddr", p, eq) }

// fibLocal matches packets whose source or destination address is one of
// this host's.
func (r *rule) fibLocal(what string) *rule {
	return r.add(fmt.Sprintf("fib %s type local", what),
		&expr.Fib{Register: regScratch, FlagSADDR: what == "saddr", FlagDADDR: what == "daddr", ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)})
}

func (r *rule) ctStateNew() *rule {
	return r.add("ct state new",
		&expr.Ct{Register: regScratch, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: regScratch, DestRegister: regScratch, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: regScratch, Data: make([]byte, 4)})
}

// ctStatusDNAT matches connections whose destination was NATed: those
// that went through a Service's rules.
func (r *rule) ctStatusDNAT() *rule {
	return r.add("ct status dnat",
		&expr.Ct{Register: regScratch, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: regScratch, DestRegister: regScratch, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: regScratch, Data: make([]byte, 4)})
}

// ipsDstNAT is IPS_DST_NAT of linux/netfilter/nf_conntrack_common.h.
const ipsDstNAT = 1 << 5

// ifname matches the name of the interface a packet came in on (key
// MetaKeyIIFNAME, "iifname") or goes out of (MetaKeyOIFNAME, "oifname"),
// padded with NULs to IFNAMSIZ as nft pads it.
func (r *rule) ifname(key expr.MetaKey, name string) *rule {
	text := "iifname"
	if key == expr.MetaKeyOIFNAME {
		text = "oifname"
	}
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return r.add(fmt.Sprintf("%s %q", text, name),
		&expr.Meta{Key: key, Register: regScratch},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: b})
}

func (r *rule) l4proto(p protocol) *rule {
	return r.add("meta l4proto "+p.String(),
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regScratch},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{byte(p)}})
}

// vmapDaddrProtoPort looks the packet's destination address, protocol and
// port up in the named verdict map.
func (r *rule) vmapDaddrProtoPort(set string) *rule {
	return r.add("ip daddr . meta l4proto . th dport vmap @"+set,
		&expr.Payload{DestRegister: regConcat0, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regConcat1},
		&expr.Payload{DestRegister: regConcat2, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: regConcat0, DestRegister: 0, IsDestRegSet: true, SetName: set})
}

// vmapProtoPort looks the packet's protocol and destination port up in the
// named verdict map.
func (r *rule) vmapProtoPort(set string) *rule {
	return r.add("meta l4proto . th dport vmap @"+set,
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regConcat0},
		&expr.Payload{DestRegister: regConcat1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: regConcat0, DestRegister: 0, IsDestRegSet: true, SetName: set})
}

// numgenVmap picks one of chooser id's n endpoints with equal
// probability, from the endpoint-chains verdict map, whose key is the
// chooser's number and a random number below n.
func (r *rule) numgenVmap(id uint32, n int) *rule {
	return r.add(strconv.FormatUint(uint64(id), 10)+" . numgen random mod "+strconv.Itoa(n)+" vmap @"+chainsMap(id),
		&expr.Immediate{Register: regConcat0, Data: binaryutil.NativeEndian.PutUint32(id)},
		&expr.Numgen{Register: regConcat1, Type: unix.NFT_NG_RANDOM, Modulus: uint32(n)},
		&expr.Lookup{SourceRegister: regConcat0, DestRegister: 0, IsDestRegSet: true, SetName: chainsMap(id)})
}

// numgenDnat DNATs to one of chooser id's endpoints, picked with equal
// probability: a random number below choiceRange, after the chooser's
// number, falls in one endpoint's range of the endpoint-targets map,
// which leaves its address and port in registers 8 and 9. The rule is
// the same whatever the number of endpoints.
func (r *rule) numgenDnat(id uint32) *rule {
	return r.add("dnat to "+strconv.FormatUint(uint64(id), 10)+" . numgen random mod "+strconv.FormatUint(choiceRange, 10)+" map @"+targetsMap(id),
		&expr.Immediate{Register: regConcat0, Data: binaryutil.NativeEndian.PutUint32(id)},
		&expr.Numgen{Register: regConcat1, Type: unix.NFT_NG_RANDOM, Modulus: choiceRange},
		&expr.Lookup{SourceRegister: regConcat0, DestRegister: regConcat0, IsDestRegSet: true, SetName: targetsMap(id)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: regConcat0, RegProtoMin: regConcat1, Specified: true})
}

// saddrDaddrInSet matches packets whose source and destination address,
// as a pair, are in the named set.
func (r *rule) saddrDaddrInSet(set string) *rule {
	return r.add("ip saddr . ip daddr @"+set,
		&expr.Payload{DestRegister: regConcat0, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: regConcat1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: regConcat0, SetName: set})
}

// saddrInSet matches packets whose source address is in the named set.
func (r *rule) saddrInSet(set string) *rule {
	return r.add("ip saddr @"+set,
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: regScratch, SetName: set})
}

// daddrInSet matches packets whose destination address is in the named
// set.
func (r *rule) daddrInSet(set string) *rule {
	return r.add("ip daddr @"+set,
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: regScratch, SetName: set})
}

// updateSaddr adds (or refreshes the timeout of) the packet's source
// address in the named set.
func (r *rule) updateSaddr(set string) *rule {
	return r.add("update @"+set+" { ip saddr }",
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Dynset{SrcRegKey: regScratch, SetName: set, Operation: uint32(unix.NFT_DYNSET_OP_UPDATE)})
}

func (r *rule) markIsClear() *rule {
	return r.add(fmt.Sprintf("meta mark & 0x%x == 0", masqMark),
		&expr.Meta{Key: expr.MetaKeyMARK, Register: regScratch},
		&expr.Bitwise{SourceRegister: regScratch, DestRegister: regScratch, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(masqMark), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: make([]byte, 4)})
}

// setMark sets the masquerade bit (or clears it, with clear) in the mark.
func (r *rule) setMark(clear bool) *rule {
	mask, xor, text := ^uint32(masqMark), uint32(masqMark), fmt.Sprintf("meta mark set meta mark | 0x%x", masqMark)
	if clear {
		mask, xor, text = ^uint32(masqMark), 0, fmt.Sprintf("meta mark set meta mark & 0x%x", ^uint32(masqMark))
	}
	return r.add(text,
		&expr.Meta{Key: expr.MetaKeyMARK, Register: regScratch},
		&expr.Bitwise{SourceRegister: regScratch, DestRegister: regScratch, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: binaryutil.NativeEndian.PutUint32(xor)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: regScratch})
}

func (r *rule) masquerade() *rule {
	return r.add("masquerade fully-random", &expr.Masq{FullyRandom: true})
}

func (r *rule) dnat(a netip.AddrPort) *rule {
	return r.add("dnat to "+a.String(),
		&expr.Immediate{Register: regScratch, Data: a.Addr().AsSlice()},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(a.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: regScratch, RegProtoMin: 2, Specified: true})
}

// reject answers with ICMP port unreachable, which a TCP client sees as
// "connection refused", as kube-proxy's plain reject does.
func (r *rule) reject() *rule {
	return r.add("reject", &expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: icmpPortUnreachable})
}

func (r *rule) jump(chain string) *rule {
	return r.add("jump "+chain, &expr.Verdict{Kind: expr.VerdictJump, Chain: chain})
}

func (r *rule) gotoChain(chain string) *rule {
	return r.add("goto "+chain, &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain})
}

func (r *rule) drop() *rule { return r.add("drop", &expr.Verdict{Kind: expr.VerdictDrop}) }

func (r *rule) ret() *rule { return r.add("return", &expr.Verdict{Kind: expr.VerdictReturn}) }
