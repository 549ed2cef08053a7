package netpol

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// A rule is built once, as both the expressions sent to the kernel and
// nft-like text, as in the service proxy: the text is what golden tests
// compare and what tells an incremental sync whether a chain changed.
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

// Registers: 1 is the scratch register (16 bytes: an interface name
// fits); 8 to 11 are the 32-bit registers a concatenated key is loaded
// into, one field each.
const (
	regScratch = 1
	regConcat0 = 8
	regConcat1 = 9
	regConcat2 = 10
	regConcat3 = 11
)

// Offsets into the IPv4 header.
const (
	offSaddr = 12
	offDaddr = 16
)

func addrText(offset uint32) string {
	if offset == offSaddr {
		return "ip saddr"
	}
	return "ip daddr"
}

// ctEstablished accepts packets of connections conntrack has seen both
// ways, and those related to them (ICMP errors).
func (r *rule) ctEstablished() *rule {
	return r.add("ct state established,related",
		&expr.Ct{Register: regScratch, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: regScratch, DestRegister: regScratch, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: regScratch, Data: make([]byte, 4)})
}

// vmapAddr looks the packet's source or destination address up in a
// verdict map.
func (r *rule) vmapAddr(offset uint32, set string) *rule {
	return r.add(addrText(offset)+" vmap @"+set,
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Lookup{SourceRegister: regScratch, DestRegister: 0, IsDestRegSet: true, SetName: set})
}

// addrInSet matches packets whose source or destination address is in
// a set.
func (r *rule) addrInSet(offset uint32, set string) *rule {
	return r.add(addrText(offset)+" @"+set,
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Lookup{SourceRegister: regScratch, SetName: set})
}

// idAddrInSet matches packets for which "id . address" is in a set:
// the shared sets hold every policy's or rule's elements, told apart by
// the id in front.
func (r *rule) idAddrInSet(id uint32, offset uint32, set string) *rule {
	return r.add(strconv.FormatUint(uint64(id), 10)+" . "+addrText(offset)+" @"+set,
		&expr.Immediate{Register: regConcat0, Data: binaryutil.NativeEndian.PutUint32(id)},
		&expr.Payload{DestRegister: regConcat1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Lookup{SourceRegister: regConcat0, SetName: set})
}

// idProtoPortInSet matches packets for which "id . protocol .
// destination port" is in a set.
func (r *rule) idProtoPortInSet(id uint32, set string) *rule {
	return r.add(strconv.FormatUint(uint64(id), 10)+" . meta l4proto . th dport @"+set,
		&expr.Immediate{Register: regConcat0, Data: binaryutil.NativeEndian.PutUint32(id)},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regConcat1},
		&expr.Payload{DestRegister: regConcat2, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: regConcat0, SetName: set})
}

// idAddrProtoPortInSet matches packets for which "id . destination
// address . protocol . destination port" is in a set.
func (r *rule) idAddrProtoPortInSet(id uint32, set string) *rule {
	return r.add(strconv.FormatUint(uint64(id), 10)+" . ip daddr . meta l4proto . th dport @"+set,
		&expr.Immediate{Register: regConcat0, Data: binaryutil.NativeEndian.PutUint32(id)},
		&expr.Payload{DestRegister: regConcat1, Base: expr.PayloadBaseNetworkHeader, Offset: offDaddr, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regConcat2},
		&expr.Payload{DestRegister: regConcat3, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: regConcat0, SetName: set})
}

// saddrDaddrInSet matches packets whose source and destination address,
// as a pair, are in a set.
func (r *rule) saddrDaddrInSet(set string) *rule {
	return r.add("ip saddr . ip daddr @"+set,
		&expr.Payload{DestRegister: regConcat0, Base: expr.PayloadBaseNetworkHeader, Offset: offSaddr, Len: 4},
		&expr.Payload{DestRegister: regConcat1, Base: expr.PayloadBaseNetworkHeader, Offset: offDaddr, Len: 4},
		&expr.Lookup{SourceRegister: regConcat0, SetName: set})
}

// ifnameInSet matches frames that came in on (MetaKeyIIFNAME) or go out
// of (MetaKeyOIFNAME) a port named in a set.
func (r *rule) ifnameInSet(key expr.MetaKey, set string) *rule {
	text := "iifname"
	if key == expr.MetaKeyOIFNAME {
		text = "oifname"
	}
	return r.add(text+" @"+set,
		&expr.Meta{Key: key, Register: regScratch},
		&expr.Lookup{SourceRegister: regScratch, SetName: set})
}

// portSaddrNotInSet matches frames whose "input port . source address"
// is not in a set.
func (r *rule) portSaddrNotInSet(set string) *rule {
	return r.add("iifname . ip saddr != @"+set,
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: regConcat0},
		&expr.Payload{DestRegister: regConcat0 + 4, Base: expr.PayloadBaseNetworkHeader, Offset: offSaddr, Len: 4},
		&expr.Lookup{SourceRegister: regConcat0, SetName: set, Invert: true})
}

// ifname matches the name of the interface a packet goes out of,
// padded with NULs as nft pads it.
func (r *rule) oifname(name string) *rule {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return r.add(fmt.Sprintf("oifname %q", name),
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: regScratch},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: b})
}

// etherType matches frames of an ethertype (bridge family).
func (r *rule) etherType(typ uint16, name string) *rule {
	return r.add("ether type "+name,
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseLLHeader, Offset: 12, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: binary.BigEndian.AppendUint16(nil, typ)})
}

// unicast matches frames to a unicast MAC address: the group bit of
// the destination is clear.
func (r *rule) unicast() *rule {
	return r.add("ether daddr & 01:00:00:00:00:00 == 00:00:00:00:00:00",
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 1},
		&expr.Bitwise{SourceRegister: regScratch, DestRegister: regScratch, Len: 1, Mask: []byte{1}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{0}})
}

// etherDaddrNot matches frames to any MAC address but mac.
func (r *rule) etherDaddrNot(mac net.HardwareAddr) *rule {
	return r.add("ether daddr != "+mac.String(),
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: regScratch, Data: []byte(mac)})
}

// toHost readdresses a frame to the bridge's own MAC address and makes
// it the host's: the bridge hands it to the IP stack instead of
// forwarding it, and the node routes it back out, through the IP
// family's hooks and conntrack, whatever the bridge netfilter state.
// The kernel allows a new packet type only in the bridge's prerouting.
func (r *rule) toHost(mac net.HardwareAddr) *rule {
	return r.add("ether daddr set "+mac.String()+" meta pkttype set host",
		&expr.Immediate{Register: regScratch, Data: []byte(mac)},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: regScratch, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6},
		&expr.Immediate{Register: regScratch, Data: []byte{unix.PACKET_HOST}},
		&expr.Meta{Key: expr.MetaKeyPKTTYPE, SourceRegister: true, Register: regScratch})
}

// icmpRedirect matches ICMP redirects: the node sends one to a pod for
// every packet it routes back out of the bridge it came in on.
func (r *rule) icmpRedirect() *rule {
	return r.add("icmp type redirect",
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regScratch},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{unix.IPPROTO_ICMP}},
		&expr.Payload{DestRegister: regScratch, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regScratch, Data: []byte{5}})
}

func (r *rule) accept() *rule { return r.add("accept", &expr.Verdict{Kind: expr.VerdictAccept}) }
func (r *rule) drop() *rule   { return r.add("drop", &expr.Verdict{Kind: expr.VerdictDrop}) }
func (r *rule) ret() *rule    { return r.add("return", &expr.Verdict{Kind: expr.VerdictReturn}) }

func (r *rule) jump(chain string) *rule {
	return r.add("jump "+chain, &expr.Verdict{Kind: expr.VerdictJump, Chain: chain})
}
