package proxy

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/nftables"
	mnl "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftConn builds nftables messages with github.com/google/nftables and
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
type nftConn struct {
	*nftables.Conn
	netnsFD int // < 0: the caller's namespace
	nl      *mnl.Conn
	batch   []mnl.Message
	// replies is how many messages the kernel answered the last
	// transaction with: one ack when nothing is echoed.
	replies int
}

// socketBuffer is the send and receive buffer the connection asks for: a
// transaction goes out in one sendmsg, which must fit the send buffer (a
// full sync of 1,000 Services × 10 endpoints is a few MB). The kernel
// allocates only what is used.
const socketBuffer = 128 << 20

// commitTimeout bounds the wait for the kernel's answer, which is queued
// before sendmsg returns: it matters only if the kernel says nothing at
// all, which would otherwise hang the proxy.
const commitTimeout = 10 * time.Second

// openConn opens an nftables connection, in the network namespace fd
// when fd >= 0 (tests), else in the caller's.
func openConn(netnsFD int) (*nftConn, error) {
	c := &nftConn{netnsFD: netnsFD}
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
func (c *nftConn) capture(req []mnl.Message) ([]mnl.Message, error) {
	if req == nil {
		return []mnl.Message{{Header: mnl.Header{Type: mnl.Error}, Data: make([]byte, 20)}}, nil
	}
	c.batch = append(c.batch, req...)
	return nil, nil
}

func (c *nftConn) dial() (*mnl.Conn, error) {
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

// flush sends what the library built as one transaction and waits for
// the kernel's verdict on it.
func (c *nftConn) flush() error {
	if err := c.Conn.Flush(); err != nil { // into c.batch
		c.batch = nil
		return err
	}
	msgs := c.batch
	c.batch = nil
	if len(msgs) < 3 { // batch begin and end only
		return nil
	}
	last := len(msgs) - 2 // the last message before batch end
	for i := range msgs {
		msgs[i].Header.Sequence, msgs[i].Header.PID = 0, 0 // the real socket numbers them
		// The library asks for every new rule to be echoed back (for its
		// handle, which the proxy never uses): the kernel would build a
		// full dump of each rule and queue it on this socket.
		msgs[i].Header.Flags &^= unix.NLM_F_ECHO
		if i == last {
			msgs[i].Header.Flags |= mnl.Acknowledge
		} else {
			msgs[i].Header.Flags &^= mnl.Acknowledge
		}
	}
	nl, err := c.dial()
	if err != nil {
		return err
	}
	if _, err := nl.SendMessages(msgs); err != nil {
		c.Close()
		return err
	}
	want := msgs[last].Header.Sequence
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

// Close closes the netlink socket; the next flush opens another.
func (c *nftConn) Close() error {
	if c.nl == nil {
		return nil
	}
	err := c.nl.Close()
	c.nl = nil
	return err
}
