// Package nftconn sends nftables transactions built with
// github.com/google/nftables to the kernel in one sendmsg with one
// acknowledgement: the service proxy and the network policy enforcer
// write their tables through it.
package nftconn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/nftables"
	mnl "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Conn builds nftables messages with github.com/google/nftables and
// sends each transaction to the kernel itself, asking for one
// acknowledgement instead of one per message.
//
// The library sets NLM_F_ACK on every message and then reads the acks
// one by one: for a full sync of 1,000 Services that is ~10,000 replies,
// and reading them took longer than the kernel took to apply the whole
// transaction. The kernel applies a batch synchronously inside sendmsg
// and reports every failing message whether or not it asked for an ack,
// so one ack, on the last message, says the whole batch is in. Nor is
// anything echoed.
//
// The library's connection is dialled through its test hook: its Flush
// hands the finished batch to capture, which keeps it and answers each
// of the library's reads with an ack, and commit then sends the batch on
// a real netlink socket.
type Conn struct {
	*nftables.Conn
	netnsFD int // < 0: the caller's namespace
	nl      *mnl.Conn
	batch   []mnl.Message
	// Pre and Post are messages built here (see elemsMessage) that go
	// first and last in the next transaction.
	Pre, Post []mnl.Message
	seq       uint32 // the number of the last message sent
	// replies is how many messages the kernel answered the last
	// transaction with: one ack when nothing is echoed.
	replies int
}

// socketBuffer is the send and receive buffer the connection asks for: a
// transaction goes out in one sendmsg, which must fit the send buffer (a
// full sync of 1,000 Services or policies × 10 endpoints is a few MB). The kernel
// allocates only what is used.
const socketBuffer = 128 << 20

// commitTimeout bounds the wait for the kernel's answer, which is queued
// before sendmsg returns: it matters only if the kernel says nothing at
// all, which would otherwise hang the writer.
const commitTimeout = 10 * time.Second

// Open opens an nftables connection, in the network namespace fd
// when fd >= 0 (tests), else in the caller's.
func Open(netnsFD int) (*Conn, error) {
	c := &Conn{netnsFD: netnsFD}
	conn, err := nftables.New(nftables.WithTestDial(c.capture))
	if err != nil {
		return nil, fmt.Errorf("open nftables connection: %w", err)
	}
	c.Conn = conn
	if _, err := c.dial(); err != nil {
		return nil, err
	}
	return c, nil
}

// capture receives the library's batch (req) and, on each read the
// library makes (req nil), an ack.
func (c *Conn) capture(req []mnl.Message) ([]mnl.Message, error) {
	if req == nil {
		return []mnl.Message{{Header: mnl.Header{Type: mnl.Error}, Data: make([]byte, 20)}}, nil
	}
	c.batch = append(c.batch, req...)
	return nil, nil
}

func (c *Conn) dial() (*mnl.Conn, error) {
	if c.nl != nil {
		return c.nl, nil
	}
	cfg := &mnl.Config{}
	if c.netnsFD >= 0 {
		cfg.NetNS = c.netnsFD
	}
	nl, err := mnl.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	raw, err := nl.SyscallConn()
	if err == nil {
		var serr error
		err = raw.Control(func(fd uintptr) {
			// FORCE goes past net.core.[rw]mem_max; CAP_NET_ADMIN,
			// which writing nftables needs anyway, allows it.
			serr = errors.Join(
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuffer),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuffer))
		})
		err = errors.Join(err, serr)
	}
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("size nftables netlink socket buffers: %w", err)
	}
	c.nl = nl
	return nl, nil
}

// Commit sends what the library built as one transaction and waits for
// the kernel's verdict on it.
func (c *Conn) Commit() error {
	pre, post := c.Pre, c.Post
	c.Pre, c.Post = nil, nil
	if err := c.Conn.Flush(); err != nil { // into c.batch
		c.batch = nil
		return err
	}
	lib := c.batch
	c.batch = nil
	if len(lib) >= 2 { // the library's own batch begin and end go
		lib = lib[1 : len(lib)-1]
	}
	if len(pre)+len(lib)+len(post) == 0 {
		return nil
	}
	msgs := make([]mnl.Message, 0, len(pre)+len(lib)+len(post)+2)
	msgs = append(msgs, batchMessage(unix.NFNL_MSG_BATCH_BEGIN))
	msgs = append(append(append(msgs, pre...), lib...), post...)
	msgs = append(msgs, batchMessage(unix.NFNL_MSG_BATCH_END))
	nl, err := c.dial()
	if err != nil {
		return err
	}
	want, err := c.send(nl, msgs)
	if err != nil {
		c.Close()
		return err
	}
	if err := nl.SetReadDeadline(time.Now().Add(commitTimeout)); err != nil {
		c.Close()
		return err
	}
	c.replies = 0
	for {
		replies, err := nl.Receive()
		if err != nil {
			// A message failed and the kernel undid the batch. What
			// else it has to say is of no use; a new socket starts
			// clean.
			c.Close()
			return err
		}
		c.replies += len(replies)
		for _, m := range replies {
			if m.Header.Sequence == want {
				return nil
			}
		}
	}
}

// Discard drops what was queued for the next transaction, when building
// it failed: a later transaction must not carry half of this one.
func (c *Conn) Discard() {
	_ = c.Conn.Flush() // into c.batch, not to the kernel
	c.batch, c.Pre, c.Post = nil, nil, nil
}

// send writes msgs to the kernel in one write, numbering them, and
// returns the number of the last before batch end, the one the kernel
// acknowledges. The library would marshal each message on its own and
// then copy them all into a buffer grown as it goes.
//
// The library asks for every new rule to be echoed back (for its
// handle, which the writers never use): the kernel would build a full dump
// of each rule and queue it on this socket. Only the last message before
// batch end asks for an ack.
func (c *Conn) send(nl *mnl.Conn, msgs []mnl.Message) (uint32, error) {
	const headerLen = 16
	size := 0
	for _, m := range msgs {
		size += nlmsgAlign(headerLen + len(m.Data))
	}
	buf := make([]byte, size)
	last := len(msgs) - 2
	var want uint32
	off := 0
	for i, m := range msgs {
		c.seq++
		flags := m.Header.Flags &^ (unix.NLM_F_ECHO | mnl.Acknowledge)
		if i == last {
			flags |= mnl.Acknowledge
			want = c.seq
		}
		n := headerLen + len(m.Data)
		binary.NativeEndian.PutUint32(buf[off:], uint32(n))
		binary.NativeEndian.PutUint16(buf[off+4:], uint16(m.Header.Type))
		binary.NativeEndian.PutUint16(buf[off+6:], uint16(flags))
		binary.NativeEndian.PutUint32(buf[off+8:], c.seq)
		// The port id stays 0: the kernel knows the sender.
		copy(buf[off+headerLen:], m.Data)
		off += nlmsgAlign(n)
	}
	raw, err := nl.SyscallConn()
	if err != nil {
		return 0, err
	}
	var werr error
	err = raw.Write(func(fd uintptr) bool {
		_, werr = unix.Write(int(fd), buf)
		return werr != unix.EAGAIN
	})
	return want, errors.Join(err, werr)
}

func nlmsgAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// Close closes the netlink socket; the next flush opens another.
func (c *Conn) Close() error {
	if c.nl == nil {
		return nil
	}
	err := c.nl.Close()
	c.nl = nil
	return err
}

// Replies is how many messages the kernel answered the last transaction
// with: one acknowledgement when nothing is echoed.
func (c *Conn) Replies() int { return c.replies }

// batchMessage is the message that begins (or ends) a transaction.
func batchMessage(typ int) mnl.Message {
	return mnl.Message{Header: mnl.Header{Type: mnl.HeaderType(typ), Flags: mnl.Request},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES}} // res_id, big-endian
}
