package authn

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// X509 authenticates client certificates signed by a CA in Roots, as
// kube-apiserver's --client-ca-file does: CN is the user, each O a group.
type X509 struct {
	Roots *x509.CertPool
}

// NewX509 authenticates client certificates issued by roots.
func NewX509(roots *x509.CertPool) *X509 { return &X509{Roots: roots} }

// AuthenticateRequest verifies the peer certificate again although the TLS
// handshake already did: a listener configured without client CAs, or an
// in-process caller that fills r.TLS, must not be able to skip the check.
func (a *X509) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         a.Roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
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
