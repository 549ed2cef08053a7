package tlsbootstrap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/apiserver/pki"
)

func TestParseJoinToken(t *testing.T) {
	pin := strings.Repeat("0f", 32)
	for _, c := range []struct {
		in, token, err string
	}{
		{in: "K10" + pin + "::abcdef.0123456789abcdef", token: "abcdef.0123456789abcdef"},
		{in: " K10" + pin + "::abcdef.0123456789abcdef\n", token: "abcdef.0123456789abcdef"},
		{in: "abcdef.0123456789abcdef", err: "the token has no CA hash"},
		{in: "K10" + pin[:62] + "::abcdef.0123456789abcdef", err: "not 64 hex digits"},
		{in: "K10" + pin[:63] + "x::abcdef.0123456789abcdef", err: "not 64 hex digits"},
		{in: "K10" + pin + "::ABCDEF.0123456789abcdef", err: "bootstrap token is not"},
		{in: "K10" + pin + "::abcdef.0123456789abcdef::x", err: "bootstrap token is not"},
		{in: "K10" + pin + "::server:password", err: "bootstrap token is not"},
		{in: "", err: "not a join token"},
		{in: "K11" + pin + "::abcdef.0123456789abcdef", err: "not a join token"},
	} {
		h, tok, err := ParseJoinToken(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error with %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || tok != c.token || h[0] != 0x0f || h[31] != 0x0f {
			t.Errorf("%q: %x %q %v", c.in, h, tok, err)
		}
	}
}

// serve runs a TLS server on loopback presenting chain.
func serve(t *testing.T, chain tls.Certificate) string {
	t.Helper()
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the discovery sent a request: %s %s", r.Method, r.URL)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{chain}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s.URL
}

func cluster(t *testing.T) *pki.Certs {
	t.Helper()
	c, err := pki.Ensure(t.TempDir(), pki.SANs{IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The CA is found in the handshake and accepted only when it is the
// pinned one and signs the certificate the server proves it holds; a
// server that shows the pinned CA (it is public) with a certificate of
// another CA, or no CA at all, is refused.
func TestDiscoverCA(t *testing.T) {
	ctx := context.Background()
	good, other := cluster(t), cluster(t)
	withCA := func(c *pki.Certs, ca *x509.Certificate) tls.Certificate {
		cc := *c.Serving.Current()
		cc.Certificate = append(cc.Certificate[:1:1], ca.Raw)
		return cc
	}
	pin := CAHash(good.CA.Cert)

	got, err := DiscoverCA(ctx, serve(t, withCA(good, good.CA.Cert)), pin)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(got); b == nil || string(b.Bytes) != string(good.CA.Cert.Raw) {
		t.Errorf("discovered %q, want the cluster CA", got)
	}
	for name, chain := range map[string]tls.Certificate{
		"other cluster":              withCA(other, other.CA.Cert),
		"pinned CA, other CA's leaf": withCA(other, good.CA.Cert),
		"no CA in the chain":         *good.Serving.Current(),
	} {
		_, err := DiscoverCA(ctx, serve(t, chain), pin)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if name != "pinned CA, other CA's leaf" && !errors.Is(err, ErrCAMismatch) {
			t.Errorf("%s: %v, want ErrCAMismatch", name, err)
		}
	}
	// Not a URL the agent can use.
	for _, u := range []string{"http://127.0.0.1:6443", "127.0.0.1:6443", "https://"} {
		if _, err := DiscoverCA(ctx, u, pin); err == nil || !strings.Contains(err.Error(), "want https://HOST:PORT") {
			t.Errorf("%q: %v", u, err)
		}
	}
	// Nobody there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := DiscoverCA(ctx, "https://"+addr, pin); err == nil {
		t.Error("nobody listening: no error")
	}
}

// An agent started before its server waits for it; a wrong server is
// refused at once.
func TestDiscoverWaitsForServer(t *testing.T) {
	good := cluster(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	chain := *good.Serving.Current()
	chain.Certificate = append(chain.Certificate[:1:1], good.CA.Cert.Raw)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		l, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{chain}})
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { l.Close() })
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := discoverWhenUp(ctx, Config{Server: "https://" + addr}, CAHash(good.CA.Cert))
	if err != nil || len(got) == 0 {
		t.Fatalf("after the server came up: %v", err)
	}
	other := cluster(t)
	start := time.Now()
	if _, err := discoverWhenUp(ctx, Config{Server: "https://" + addr}, CAHash(other.CA.Cert)); !errors.Is(err, ErrCAMismatch) || time.Since(start) > 5*time.Second {
		t.Errorf("wrong pin: %v after %v, want ErrCAMismatch at once", err, time.Since(start))
	}
}
