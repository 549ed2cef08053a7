package authn

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// X509 authenticates client certificates signed by a CA in Roots, as
// kube-apiserver's --client-ca-file does: CN is the user, each O a group.
type X509 struct {
	Roots *x509.CertPool
	// Now is the clock certificates are checked against (time.Now when
	// nil).
	Now func() time.Time

	mu sync.Mutex
	// verified holds chains that verified against Roots, each until the
	// first of its certificates expires: a connection sends the same
	// chain with every request, and checking its signatures again is the
	// most expensive step of a small request.
	verified map[[sha256.Size]byte]verifiedChain
}

type verifiedChain struct{ notBefore, notAfter time.Time }

// maxVerified bounds the cache; past it, it starts again empty.
const maxVerified = 4096

// NewX509 authenticates client certificates issued by roots.
func NewX509(roots *x509.CertPool) *X509 { return &X509{Roots: roots} }

// AuthenticateRequest verifies the peer certificate again although the TLS
// handshake already did: a listener configured without client CAs, or an
// in-process caller that fills r.TLS, must not be able to skip the check.
func (a *X509) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	chain := r.TLS.PeerCertificates
	leaf := chain[0]
	now := time.Now()
	if a.Now != nil {
		now = a.Now()
	}
	if err := a.verify(chain, now); err != nil {
		return nil, false, fmt.Errorf("client certificate %q: %w", leaf.Subject.CommonName, err)
	}
	if leaf.Subject.CommonName == "" {
		return nil, false, errors.New("client certificate has no common name")
	}
	return &User{
		Name:   leaf.Subject.CommonName,
		Groups: withAuthenticated(leaf.Subject.Organization),
	}, true, nil
}

func (a *X509) verify(chain []*x509.Certificate, now time.Time) error {
	h := sha256.New()
	for _, c := range chain {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(c.Raw)))
		h.Write(n[:])
		h.Write(c.Raw)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	a.mu.Lock()
	v, ok := a.verified[key]
	a.mu.Unlock()
	if ok && !now.Before(v.notBefore) && !now.After(v.notAfter) {
		return nil
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	chains, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         a.Roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return err
	}
	// The leaf and the intermediates it was sent with stay valid together
	// while every certificate of the chain that verified is.
	v = verifiedChain{notBefore: chain[0].NotBefore, notAfter: chain[0].NotAfter}
	for _, c := range chains[0] {
		if c.NotBefore.After(v.notBefore) {
			v.notBefore = c.NotBefore
		}
		if c.NotAfter.Before(v.notAfter) {
			v.notAfter = c.NotAfter
		}
	}
	a.mu.Lock()
	if a.verified == nil || len(a.verified) >= maxVerified {
		a.verified = make(map[[sha256.Size]byte]verifiedChain)
	}
	a.verified[key] = v
	a.mu.Unlock()
	return nil
}

func withAuthenticated(groups []string) []string {
	out := slices.Clone(groups)
	if !slices.Contains(out, GroupAuthenticated) {
		out = append(out, GroupAuthenticated)
	}
	return out
}

// Union asks each authenticator in turn. Invalid credentials anywhere
// reject the request even when others are valid: a client sending a bad
// token together with a good certificate is misconfigured, and accepting
// it would hide that.
type Union []Authenticator

// AuthenticateRequest returns the first authenticator's user that
// recognised the request.
func (u Union) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	var found *User
	for _, a := range u {
		user, ok, err := a.AuthenticateRequest(r)
		if err != nil {
			return nil, false, err
		}
		if ok && found == nil {
			found = user
		}
	}
	return found, found != nil, nil
}
