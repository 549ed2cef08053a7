package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync/atomic"
	"time"
)

// KeyPair is one leaf certificate and its key as they are in force now.
// TLS configurations read it through GetCertificate or
// GetClientCertificate on every handshake, so a renewal (which swaps it
// atomically) reaches every new connection at once, with no restart.
type KeyPair struct {
	// Service is the name `bonsai certificate rotate --service` knows it
	// by (k3s's names).
	Service string
	// CertFile and KeyFile are its files in the certificate directory.
	CertFile, KeyFile string

	ca    *Authority
	fits  func(*x509.Certificate) bool
	issue func() ([]byte, []byte, error)
	cur   atomic.Pointer[keyPairState]
	// catchUp renews what the clock has made due before a handshake
	// hands a certificate out; nil for a pair kept in memory only.
	catchUp func()
}

type keyPairState struct {
	cert            tls.Certificate
	certPEM, keyPEM []byte
}

func (c *Certs) newPair(service, certFile, keyFile string, ca *Authority,
	fits func(*x509.Certificate) bool, issue func() ([]byte, []byte, error)) *KeyPair {
	p := &KeyPair{Service: service, CertFile: certFile, KeyFile: keyFile, ca: ca, fits: fits, issue: issue, catchUp: c.catchUp}
	c.pairs = append(c.pairs, p)
	return p
}

func (p *KeyPair) set(cert tls.Certificate, certPEM, keyPEM []byte) {
	p.cur.Store(&keyPairState{cert: cert, certPEM: certPEM, keyPEM: keyPEM})
}

// Current is the certificate in force.
func (p *KeyPair) Current() *tls.Certificate { return &p.cur.Load().cert }

// Leaf is the parsed certificate in force.
func (p *KeyPair) Leaf() *x509.Certificate { return p.cur.Load().cert.Leaf }

// PEM is the certificate and key in force, PEM-encoded.
func (p *KeyPair) PEM() (certPEM, keyPEM []byte) {
	s := p.cur.Load()
	return s.certPEM, s.keyPEM
}

// GetCertificate is tls.Config.GetCertificate for a server that serves
// with this pair.
func (p *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.handOut()
}

// GetClientCertificate is tls.Config.GetClientCertificate for a client
// that authenticates with this pair.
func (p *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return p.handOut()
}

func (p *KeyPair) handOut() (*tls.Certificate, error) {
	if p.catchUp != nil {
		p.catchUp()
	}
	s := p.cur.Load()
	if s == nil {
		return nil, errors.New("no certificate yet")
	}
	return &s.cert, nil
}

// renewReason says why leaf must be re-issued at now, or "" when it
// may stay.
func (p *KeyPair) renewReason(leaf *x509.Certificate, now time.Time) string {
	switch {
	case !bytes.Equal(leaf.RawIssuer, p.ca.Cert.RawSubject) || leaf.CheckSignatureFrom(p.ca.Cert) != nil:
		return "not issued by the CA"
	case !p.fits(leaf):
		return "does not fit"
	case now.Before(leaf.NotBefore):
		return "not yet valid"
	case !now.Before(leaf.NotAfter):
		return "expired"
	case !now.Before(renewAt(leaf)) && leaf.NotAfter.Before(p.ca.Cert.NotAfter):
		// A leaf already cut off at the CA's end would come back the
		// same: it stays until it expires with the CA.
		return "due for renewal"
	}
	return ""
}
