package pki

import (
	"crypto/tls"
	"crypto/x509"
	"slices"
)

// The front-proxy CA is a CA of its own, as kubeadm makes it: aggregated
// API servers trust a client certificate it signed to carry the
// X-Remote-* identity headers, and must not trust a user's certificate
// signed by the cluster CA to do that.
const (
	FrontProxyCACertFile     = "front-proxy-ca.crt"
	FrontProxyCAKeyFile      = "front-proxy-ca.key"
	FrontProxyClientCertFile = "front-proxy-client.crt"
	FrontProxyClientKeyFile  = "front-proxy-client.key"
	// FrontProxyClientName is the client certificate's CN, the one name
	// aggregated servers are told to accept (requestheader-allowed-names).
	FrontProxyClientName = "front-proxy-client"
)

// FrontProxy is the front-proxy CA and the API server's client
// certificate signed by it.
type FrontProxy struct {
	CA     *Authority
	Client *KeyPair
}

// NewFrontProxy makes a front-proxy CA and client certificate in memory,
// for an API server without a certificate directory (tests). It is never
// renewed.
func NewFrontProxy() (*FrontProxy, error) {
	ca, _, err := newAuthority("bonsai-front-proxy-ca", realClock)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.IssueClient(FrontProxyClientName, nil)
	if err != nil {
		return nil, err
	}
	client, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	p := &KeyPair{Service: "auth-proxy", CertFile: FrontProxyClientCertFile, KeyFile: FrontProxyClientKeyFile, ca: ca}
	p.set(client, certPEM, keyPEM)
	return &FrontProxy{CA: ca, Client: p}, nil
}

func (c *Certs) ensureFrontProxy() (*FrontProxy, error) {
	ca, err := c.ensureAuthority(FrontProxyCACertFile, FrontProxyCAKeyFile, "bonsai-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	client := c.newPair("auth-proxy", FrontProxyClientCertFile, FrontProxyClientKeyFile, ca,
		func(leaf *x509.Certificate) bool {
			return hasExtKeyUsage(leaf, x509.ExtKeyUsageClientAuth) && leaf.Subject.CommonName == FrontProxyClientName && len(leaf.Subject.Organization) == 0
		},
		func() ([]byte, []byte, error) { return ca.IssueClient(FrontProxyClientName, nil) })
	return &FrontProxy{CA: ca, Client: client}, nil
}

// AllowedNames are the client certificate names aggregated servers accept.
func (f *FrontProxy) AllowedNames() []string { return slices.Clone([]string{FrontProxyClientName}) }
