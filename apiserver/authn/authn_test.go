package authn_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
)

const goodTokens = `# comment line
abc123,alice,uid-1

def456,bob,uid-2,"dev,ops"
  ghi789, carol ,,"qa"
nogroups,dave,uid-4,""
`

func TestParseTokenFile(t *testing.T) {
	tf, err := authn.ParseTokenFile(strings.NewReader(goodTokens), "tokens.csv")
	if err != nil {
		t.Fatal(err)
	}
	if tf.Len() != 4 {
		t.Errorf("Len = %d, want 4", tf.Len())
	}
	for _, tc := range []struct {
		header string
		want   *authn.User
		ok     bool
		err    bool
	}{
		{"Bearer abc123", &authn.User{Name: "alice", UID: "uid-1", Groups: []string{"system:authenticated"}}, true, false},
		{"Bearer def456", &authn.User{Name: "bob", UID: "uid-2", Groups: []string{"dev", "ops", "system:authenticated"}}, true, false},
		{"bearer ghi789", &authn.User{Name: "carol", Groups: []string{"qa", "system:authenticated"}}, true, false},
		{"Bearer nogroups", &authn.User{Name: "dave", UID: "uid-4", Groups: []string{"system:authenticated"}}, true, false},
		{"Bearer nope", nil, false, true},
		{"", nil, false, false},
		{"Basic YWxpY2U6cHc=", nil, false, false},
		{"Bearer ", nil, false, false},
	} {
		r := httptest.NewRequest("GET", "/api", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		u, ok, err := tf.AuthenticateRequest(r)
		if ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("%q: ok=%v err=%v, want ok=%v err=%v", tc.header, ok, err, tc.ok, tc.err)
		}
		if diff := cmp.Diff(tc.want, u); diff != "" {
			t.Errorf("%q: user (-want +got):\n%s", tc.header, diff)
		}
	}
}

func TestParseTokenFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"too few fields", "a,b,c\n\nshort,user\n", "tokens.csv line 3:"},
		{"too many fields", "a,b,c,d,e\n", "tokens.csv line 1: want token,user,uid"},
		{"empty token", "# x\n,user,uid\n", "tokens.csv line 2: empty token"},
		{"empty user", "tok,,uid\n", "tokens.csv line 1: empty user name"},
		{"duplicate", "tok,a,1\ntok,b,2\n", "tokens.csv line 2: token already given on line 1"},
		{"bad quote", "tok,a,1\ntok2,b,2,\"g1,g2\n", "tokens.csv line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := authn.ParseTokenFile(strings.NewReader(tc.in), "tokens.csv")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestLoadTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(path, []byte(goodTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := authn.LoadTokenFile(path); err != nil {
		t.Fatal(err)
	}
	if _, err := authn.LoadTokenFile(path + ".missing"); err == nil {
		t.Fatal("missing file loaded")
	}
}

func newCA(t *testing.T) *pki.Authority {
	t.Helper()
	c, err := pki.Ensure(t.TempDir(), pki.SANs{DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	return c.CA
}

func peerRequest(t *testing.T, certPEM, keyPEM []byte) *tls.ConnectionState {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{pair.Leaf}}
}

func TestX509(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	a := authn.NewX509(ca.Pool())

	alice, aliceKey, err := ca.IssueClient("alice", []string{"dev", "system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	forged, forgedKey, err := other.IssueClient("system:admin", []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	serving, servingKey, err := ca.IssueServing("bonsai", pki.SANs{IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		tls  *tls.ConnectionState
		want *authn.User
		ok   bool
		err  bool
	}{
		{"no TLS", nil, nil, false, false},
		{"no certificate", &tls.ConnectionState{}, nil, false, false},
		{"client cert", peerRequest(t, alice, aliceKey), &authn.User{Name: "alice", Groups: []string{"dev", "system:masters", "system:authenticated"}}, true, false},
		{"other CA", peerRequest(t, forged, forgedKey), nil, false, true},
		{"server cert", peerRequest(t, serving, servingKey), nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/api", nil)
			r.TLS = tc.tls
			u, ok, err := a.AuthenticateRequest(r)
			if ok != tc.ok || (err != nil) != tc.err {
				t.Fatalf("ok=%v err=%v, want ok=%v err=%v", ok, err, tc.ok, tc.err)
			}
			if diff := cmp.Diff(tc.want, u); diff != "" {
				t.Errorf("user (-want +got):\n%s", diff)
			}
		})
	}
}

// TestX509RemembersOnlyWhileValid: a chain verified once is not verified
// again on the next request, but it is refused once any certificate in it
// has expired or before it is valid, cached or not.
func TestX509RemembersOnlyWhileValid(t *testing.T) {
	ca := newCA(t)
	certPEM, keyPEM, err := ca.IssueClient("alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	state := peerRequest(t, certPEM, keyPEM)
	leaf := state.PeerCertificates[0]
	a := authn.NewX509(ca.Pool())
	at := func(now time.Time) error {
		a.Now = func() time.Time { return now }
		r := httptest.NewRequest("GET", "/api", nil)
		r.TLS = state
		_, ok, err := a.AuthenticateRequest(r)
		if err == nil && !ok {
			t.Fatal("no error and no user")
		}
		return err
	}
	for i := range 2 {
		if err := at(leaf.NotBefore.Add(time.Minute)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if err := at(leaf.NotAfter.Add(time.Second)); err == nil {
		t.Error("an expired certificate was accepted from the cache")
	}
	if err := at(leaf.NotBefore.Add(-time.Hour)); err == nil {
		t.Error("a certificate not yet valid was accepted from the cache")
	}
	if err := at(leaf.NotBefore.Add(time.Minute)); err != nil {
		t.Errorf("valid again: %v", err)
	}
}

func TestUnion(t *testing.T) {
	ca := newCA(t)
	certPEM, keyPEM, err := ca.IssueClient("system:admin", []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	tf, err := authn.ParseTokenFile(strings.NewReader("tok,alice,1\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	u := authn.Union{authn.NewX509(ca.Pool()), tf}
	for _, tc := range []struct {
		name   string
		cert   bool
		header string
		user   string
		ok     bool
		err    bool
	}{
		{"anonymous", false, "", "", false, false},
		{"cert", true, "", "system:admin", true, false},
		{"token", false, "Bearer tok", "alice", true, false},
		{"cert wins over a valid token", true, "Bearer tok", "system:admin", true, false},
		{"bad token beside a good cert", true, "Bearer wrong", "", false, true},
		{"bad token", false, "Bearer wrong", "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/api", nil)
			if tc.cert {
				r.TLS = peerRequest(t, certPEM, keyPEM)
			}
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			user, ok, err := u.AuthenticateRequest(r)
			if ok != tc.ok || (err != nil) != tc.err {
				t.Fatalf("ok=%v err=%v, want ok=%v err=%v", ok, err, tc.ok, tc.err)
			}
			if ok && user.Name != tc.user {
				t.Errorf("user %q, want %q", user.Name, tc.user)
			}
		})
	}
}
