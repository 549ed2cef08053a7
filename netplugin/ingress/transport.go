package ingress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// upstreamTransport speaks HTTP/1.1 to endpoints, keeping connections
// alive per endpoint. It does what the proxy needs and no more, in the
// request's own goroutine: net/http's Transport hands every request to
// a writer and a reader goroutine of the connection, which at tens of
// thousands of requests a second costs more than the proxying itself.
type upstreamTransport struct {
	dialer                net.Dialer
	responseHeaderTimeout time.Duration
	idleTimeout           time.Duration
	maxIdle               int // per endpoint

	mu   sync.Mutex
	idle map[string][]*upConn // by endpoint, most recent last
}

// upConn is one connection to an endpoint.
type upConn struct {
	net.Conn
	addr      string
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

// alive reports whether an idle connection is still open at the other
// end, with one non-blocking peek: an endpoint closes idle connections
// at its own keep-alive timeout (Node's is 5 s), and a request with a
// body sent on such a connection could not go again on another, its
// body being spent. A close that races with the request is still
// retried for requests without a body (roundTrip).
func (c *upConn) alive() bool {
	if c.br.Buffered() > 0 {
		return false // bytes no request asked for
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		// Nothing to read yet is alive; EOF (0 bytes), an error, or
		// bytes nobody asked for are not.
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && alive
}

func newUpstreamTransport(dialTimeout, responseHeaderTimeout time.Duration) *upstreamTransport {
	return &upstreamTransport{
		dialer:                net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		responseHeaderTimeout: responseHeaderTimeout,
		idleTimeout:           60 * time.Second, // nginx's upstream keepalive_timeout
		maxIdle:               320,              // ingress-nginx's upstream-keepalive-connections
		idle:                  map[string][]*upConn{},
	}
}

// get is an idle connection to addr, nil if none is fresh enough.
func (t *upstreamTransport) get(addr string) *upConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	conns := t.idle[addr]
	for len(conns) > 0 {
		c := conns[len(conns)-1]
		conns = conns[:len(conns)-1]
		if time.Since(c.idleSince) < t.idleTimeout && c.alive() {
			t.idle[addr] = conns
			return c
		}
		c.Close()
	}
	delete(t.idle, addr)
	return nil
}

func (t *upstreamTransport) put(c *upConn) {
	c.idleSince = time.Now()
	t.mu.Lock()
	if len(t.idle[c.addr]) < t.maxIdle {
		t.idle[c.addr] = append(t.idle[c.addr], c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// closeIdle closes the idle connections, all of them or those idle too
// long.
func (t *upstreamTransport) closeIdle(all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for addr, conns := range t.idle {
		keep := conns[:0]
		for _, c := range conns {
			if all || time.Since(c.idleSince) >= t.idleTimeout {
				c.Close()
			} else {
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = keep
		}
	}
}

// sweep closes connections idle too long, until ctx ends.
func (t *upstreamTransport) sweep(ctx context.Context) {
	tick := time.NewTicker(t.idleTimeout / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.closeIdle(false)
		}
	}
}

func (t *upstreamTransport) dial(ctx context.Context, addr string) (*upConn, error) {
	nc, err := t.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &upConn{Conn: nc, addr: addr, br: bufio.NewReaderSize(nc, 4096), bw: bufio.NewWriterSize(nc, 4096)}, nil
}

// roundTrip sends req to addr. A kept-alive connection the endpoint
// closed meanwhile is replaced by a new one, once, when nothing of the
// request's body was read yet.
func (t *upstreamTransport) roundTrip(ctx context.Context, req *http.Request, addr string, body *trackedBody) (*http.Response, error) {
	c := t.get(addr)
	reused := c != nil
	for {
		if c == nil {
			var err error
			if c, err = t.dial(ctx, addr); err != nil {
				return nil, err
			}
		}
		resp, err := t.exchange(ctx, c, req)
		if err == nil {
			return resp, nil
		}
		c.Close()
		if !reused || (body != nil && body.read) || ctx.Err() != nil || !staleConn(err) {
			return nil, err
		}
		c, reused = nil, false
	}
}

// staleConn tells the errors of a kept-alive connection the endpoint
// closed before it got the request.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// aLongTimeAgo is a deadline that has passed: it wakes a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// exchange writes req on c and reads the response's head. The response
// body gives c back to the pool once read to its end.
func (t *upstreamTransport) exchange(ctx context.Context, c *upConn, req *http.Request) (*http.Response, error) {
	// The client leaving, or ctx ending otherwise, interrupts the
	// exchange; the connection is then not reused.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	if err := writeRequest(c.bw, req); err != nil {
		stop()
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		stop()
		return nil, err
	}
	if t.responseHeaderTimeout > 0 {
		c.SetReadDeadline(time.Now().Add(t.responseHeaderTimeout))
	}
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			stop()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		// 1xx informational responses other than 101 come before the
		// real one (100 Continue to an Expect).
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		break
	}
	if t.responseHeaderTimeout > 0 {
		c.SetReadDeadline(time.Time{})
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The connection is the upgraded stream's now; ReverseProxy
		// copies both ways and closes it.
		stop()
		c.SetDeadline(time.Time{})
		resp.Body = upgradedConn{Reader: c.br, Conn: c.Conn}
		return resp, nil
	}
	b := &upBody{body: resp.Body, c: c, t: t, stop: stop, keep: !resp.Close && !req.Close}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// upgradedConn is an upgraded connection as ReverseProxy wants it, with
// what was read ahead of the 101's end.
type upgradedConn struct {
	io.Reader
	net.Conn
}

func (u upgradedConn) Read(p []byte) (int, error) { return u.Reader.Read(p) }

// upBody is a response body that hands its connection back once read to
// its end, and closes it when abandoned.
type upBody struct {
	body io.ReadCloser
	c    *upConn
	t    *upstreamTransport
	stop func() bool
	keep bool
	done bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.finish(true)
	} else if err != nil {
		b.finish(false)
	}
	return n, err
}

func (b *upBody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

// finish gives the connection back (the body was read to its end) or
// closes it.
func (b *upBody) finish(complete bool) {
	if b.done {
		return
	}
	b.done = true
	// stop false: the context ended and the deadline may be set.
	if b.stop() && complete && b.keep {
		b.t.put(b.c)
		return
	}
	b.c.Close()
}

// writeRequest writes req to w in HTTP/1.1 as Request.Write does, with
// its headers in map order: Request.Write sorts them, a sort and a
// slice for every request, which no HTTP peer needs. The request comes
// from net/http's server (its method, target and headers checked
// there) or from ReverseProxy; line breaks in a value still become
// spaces, so no value can start a header of its own.
func writeRequest(w *bufio.Writer, req *http.Request) error {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	w.WriteString(method)
	w.WriteByte(' ')
	writeValue(w, req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	writeValue(w, host)
	w.WriteString("\r\n")
	writeHeader(w, req.Header, true)
	body := req.Body
	if body == http.NoBody {
		body = nil
	}
	chunked := false
	switch {
	case body == nil:
		if req.ContentLength == 0 && (method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch) {
			w.WriteString("Content-Length: 0\r\n")
		}
	case req.ContentLength > 0:
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.FormatInt(req.ContentLength, 10))
		w.WriteString("\r\n")
	default:
		chunked = true
		w.WriteString("Transfer-Encoding: chunked\r\n")
		if len(req.Trailer) > 0 {
			w.WriteString("Trailer: ")
			first := true
			for k := range req.Trailer {
				if !first {
					w.WriteByte(',')
				}
				first = false
				w.WriteString(k)
			}
			w.WriteString("\r\n")
		}
	}
	if _, err := w.WriteString("\r\n"); err != nil {
		return err
	}
	switch {
	case body == nil:
		return nil
	case !chunked:
		n, err := io.Copy(w, io.LimitReader(body, req.ContentLength))
		if err == nil && n < req.ContentLength {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	cw := httputil.NewChunkedWriter(w)
	if _, err := io.Copy(cw, body); err != nil {
		return err
	}
	if err := cw.Close(); err != nil {
		return err
	}
	writeHeader(w, req.Trailer, false)
	_, err := w.WriteString("\r\n")
	return err
}

// framing are the headers writeRequest writes itself.
var framing = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}

// writeHeader writes h's fields, less framing ones when skipFraming,
// and less an empty User-Agent (ReverseProxy's way to send none).
func writeHeader(w *bufio.Writer, h http.Header, skipFraming bool) {
	for k, vv := range h {
		if skipFraming && framing[k] {
			continue
		}
		for _, v := range vv {
			if v == "" && k == "User-Agent" {
				continue
			}
			w.WriteString(k)
			w.WriteString(": ")
			writeValue(w, v)
			w.WriteString("\r\n")
		}
	}
}

// writeValue writes v with line breaks as spaces.
func writeValue(w *bufio.Writer, v string) {
	if strings.IndexAny(v, "\r\n") < 0 {
		w.WriteString(v)
		return
	}
	w.WriteString(strings.NewReplacer("\r", " ", "\n", " ").Replace(v))
}
