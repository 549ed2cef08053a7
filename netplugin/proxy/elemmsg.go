package proxy

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	mnl "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Map and set elements, tens of thousands in a full sync, are encoded
// here straight into one buffer per message; the library builds every
// attribute of every element as a value of its own, which was a fifth of
// what a full sync allocated.

// attrs appends netlink attributes to a message body.
type attrs struct{ b []byte }

func (a *attrs) header(n int, typ uint16) {
	a.b = binary.NativeEndian.AppendUint16(a.b, uint16(n))
	a.b = binary.NativeEndian.AppendUint16(a.b, typ)
}

func (a *attrs) pad() {
	for len(a.b)%unix.NLA_ALIGNTO != 0 {
		a.b = append(a.b, 0)
	}
}

func (a *attrs) bytes(typ uint16, v []byte) {
	a.header(unix.NLA_HDRLEN+len(v), typ)
	a.b = append(a.b, v...)
	a.pad()
}

// str is a NUL-terminated string.
func (a *attrs) str(typ uint16, s string) {
	a.header(unix.NLA_HDRLEN+len(s)+1, typ)
	a.b = append(a.b, s...)
	a.b = append(a.b, 0)
	a.pad()
}

func (a *attrs) be32(typ uint16, v uint32) {
	a.header(unix.NLA_HDRLEN+4, typ)
	a.b = binary.BigEndian.AppendUint32(a.b, v)
}

// nest starts a nested attribute; end closes it.
func (a *attrs) nest(typ uint16) int {
	off := len(a.b)
	a.header(0, typ|unix.NLA_F_NESTED)
	return off
}

func (a *attrs) end(off int) { binary.NativeEndian.PutUint16(a.b[off:], uint16(len(a.b)-off)) }

// elemsMessage adds (or deletes) elems, all of the named set of table, in
// one NEWSETELEM (DELSETELEM) message. A deletion needs only the keys.
func elemsMessage(table, set string, elems []elem, add bool) mnl.Message {
	a := attrs{b: make([]byte, 0, 64+len(table)+len(set)+len(elems)*64)}
	a.b = append(a.b, unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0) // nfgenmsg
	a.str(unix.NFTA_SET_ELEM_LIST_TABLE, table)
	a.str(unix.NFTA_SET_ELEM_LIST_SET, set)
	list := a.nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS)
	for _, e := range elems {
		item := a.nest(unix.NFTA_LIST_ELEM)
		key := a.nest(unix.NFTA_SET_ELEM_KEY)
		a.bytes(unix.NFTA_DATA_VALUE, e.key)
		a.end(key)
		switch {
		case !add:
		case e.data != nil:
			data := a.nest(unix.NFTA_SET_ELEM_DATA)
			a.bytes(unix.NFTA_DATA_VALUE, e.data)
			a.end(data)
		case e.verdict != nil:
			data := a.nest(unix.NFTA_SET_ELEM_DATA)
			v := a.nest(unix.NFTA_DATA_VERDICT)
			a.be32(unix.NFTA_VERDICT_CODE, uint32(int32(e.verdict.Kind)))
			if e.verdict.Kind == expr.VerdictGoto || e.verdict.Kind == expr.VerdictJump {
				a.str(unix.NFTA_VERDICT_CHAIN, e.verdict.Chain)
			}
			a.end(v)
			a.end(data)
		}
		a.end(item)
		if e.keyEnd != nil {
			// A range's end: a key of its own, flagged, with no data.
			// A deletion names it the same way.
			item := a.nest(unix.NFTA_LIST_ELEM)
			key := a.nest(unix.NFTA_SET_ELEM_KEY)
			a.bytes(unix.NFTA_DATA_VALUE, e.keyEnd)
			a.end(key)
			a.be32(unix.NFTA_SET_ELEM_FLAGS, unix.NFT_SET_ELEM_INTERVAL_END)
			a.end(item)
		}
	}
	a.end(list)
	typ, flags := unix.NFT_MSG_DELSETELEM, mnl.Request
	if add {
		typ, flags = unix.NFT_MSG_NEWSETELEM, mnl.Request|mnl.Create
	}
	return mnl.Message{Header: mnl.Header{Type: mnl.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ), Flags: flags}, Data: a.b}
}
