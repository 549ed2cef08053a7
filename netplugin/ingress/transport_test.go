package ingress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rawBackend answers each request "HTTP/1.1 200" with body "ok <n>",
// where n counts its connections, and closes a connection after
// perConn requests without saying so (as an endpoint whose keep-alive
// timeout ran out does).
func rawBackend(t *testing.T, perConn int) (addr string, conns *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; i < perConn; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					body := fmt.Sprintf("ok %d", n)
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				}
			}()
		}
	}()
	return ln.Addr().String(), conns
}

func transportGet(t *testing.T, tr *upstreamTransport, addr string, body string) string {
	t.Helper()
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
	}
	req, _ := http.NewRequest("POST", "http://"+addr+"/", rb)
	var tb *trackedBody
	if req.Body != nil {
		tb = &trackedBody{rc: req.Body}
		req.Body = tb
	}
	resp, err := tr.roundTrip(req.Context(), req, addr, tb)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTransportKeepsConnectionsAlive(t *testing.T) {
	addr, conns := rawBackend(t, 1000)
	tr := newUpstreamTransport(time.Second, 5*time.Second)
	for range 10 {
		if got := transportGet(t, tr, addr, ""); got != "ok 1" {
			t.Fatalf("answer %q", got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 10 requests, want 1", n)
	}
	tr.closeIdle(true)
	if n := len(tr.idle); n != 0 {
		t.Errorf("%d endpoints with idle connections after closeIdle", n)
	}
}

func TestTransportReplacesAClosedConnection(t *testing.T) {
	addr, conns := rawBackend(t, 1)
	tr := newUpstreamTransport(time.Second, 5*time.Second)
	for i := range 3 {
		// The pooled connection is dead by then: the request goes on a
		// new one, body and all.
		if got := transportGet(t, tr, addr, "payload"); got != fmt.Sprintf("ok %d", i+1) {
			t.Fatalf("request %d: %q", i, got)
		}
		time.Sleep(10 * time.Millisecond) // the backend's close arrives
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

func TestTransportResponseHeaderTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(2 * time.Second)
			c.Close()
		}
	}()
	tr := newUpstreamTransport(time.Second, 100*time.Millisecond)
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/", nil)
	start := time.Now()
	_, err = tr.roundTrip(req.Context(), req, ln.Addr().String(), nil)
	var ne net.Error
	if err == nil || !(errorsAs(err, &ne) && ne.Timeout()) || time.Since(start) > time.Second {
		t.Errorf("err %v after %v, want a timeout after 100ms", err, time.Since(start))
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
