package ingress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"bonsai.dev/bonsai/netplugin/ingress/routing"
)

// certEntry is a TLS Secret parsed, kept while its resourceVersion is.
type certEntry struct {
	resourceVersion string
	cert            *tls.Certificate
	err             error
}

// certificate picks the certificate for a TLS handshake by its server
// name (SNI): a TLS entry's exact host, then its wildcard host, then a
// self-signed certificate of the controller's own (as ingress-nginx's
// "fake" one), so that a client without SNI, or for a host without
// TLS, still gets an answer.
func (c *Controller) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	st := c.state.Load()
	if st != nil && hello.ServerName != "" {
		name := routing.Host(hello.ServerName)
		if cert := st.certs[name]; cert != nil {
			return cert, nil
		}
		if i := strings.IndexByte(name, '.'); i > 0 {
			if cert := st.wildCerts[name[i:]]; cert != nil {
				return cert, nil
			}
		}
	}
	return c.defaultCert, nil
}

// addCerts adds the certificates of ing's TLS entries to st for the
// hosts not already taken by an older Ingress, and returns what is wrong
// with them. An entry without hosts covers the hosts of ing's rules.
func (c *Controller) addCerts(st *state, ing *networkingv1.Ingress, used map[string]bool) []problem {
	var probs []problem
	for _, t := range ing.Spec.TLS {
		if t.SecretName == "" {
			continue
		}
		key := ing.Namespace + "/" + t.SecretName
		used[key] = true
		cert, err := c.certOf(key)
		if err != nil {
			probs = append(probs, problem{"BadTLSSecret", fmt.Sprintf("TLS Secret %s: %v; its hosts get the controller's self-signed certificate", key, err)})
			continue
		}
		hosts := t.Hosts
		if len(hosts) == 0 {
			for _, r := range ing.Spec.Rules {
				if r.Host != "" {
					hosts = append(hosts, r.Host)
				}
			}
		}
		for _, h := range hosts {
			h = strings.ToLower(h)
			m, k := st.certs, h
			if strings.HasPrefix(h, "*.") {
				m, k = st.wildCerts, h[1:]
			}
			if m[k] == nil {
				m[k] = cert
			}
		}
	}
	return probs
}

// certOf parses the TLS Secret key, or says why it cannot serve.
func (c *Controller) certOf(key string) (*tls.Certificate, error) {
	o, ok, _ := c.secrets.GetStore().GetByKey(key)
	if !ok {
		return nil, fmt.Errorf("no Secret of type %s by this name", TLSSecretType)
	}
	s := o.(*corev1.Secret)
	if e, ok := c.certs[key]; ok && e.resourceVersion == s.ResourceVersion {
		return e.cert, e.err
	}
	cert, err := parseTLSSecret(s)
	c.certs[key] = certEntry{resourceVersion: s.ResourceVersion, cert: cert, err: err}
	return cert, err
}

// parseTLSSecret checks a kubernetes.io/tls Secret: tls.crt and tls.key
// present, PEM, a key that matches the certificate.
func parseTLSSecret(s *corev1.Secret) (*tls.Certificate, error) {
	if s.Type != TLSSecretType {
		return nil, fmt.Errorf("type %s, want %s", s.Type, TLSSecretType)
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return nil, fmt.Errorf("%s and %s must both be set", corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("invalid certificate or key: %v", err)
	}
	return &cert, nil
}

// selfSignedCertificate is the controller's own certificate, for
// handshakes no TLS entry covers.
func selfSignedCertificate() (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"bonsai"}, CommonName: "bonsai ingress default certificate"},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"ingress.local"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
