// Package pki owns the cluster's certificates: the CA, the API server's
// serving certificate and the admin client certificate, kept as PEM files in
// one directory (<data-dir>/tls), and the admin kubeconfig built from them.
// It creates what is missing, reuses what is still good, and re-issues only
// what no longer fits (a serving certificate whose SANs changed, a leaf near
// expiry). It never replaces an existing CA: every kubeconfig handed out
// trusts it.
package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// File names inside the certificate directory.
const (
	CACertFile      = "ca.crt"
	CAKeyFile       = "ca.key"
	ServingCertFile = "serving.crt"
	ServingKeyFile  = "serving.key"
	AdminCertFile   = "admin.crt"
	AdminKeyFile    = "admin.key"
	// ServiceAccountKeyFile signs service-account tokens. It is no
	// certificate's key: tokens name their issuer, not a CA.
	ServiceAccountKeyFile = "service-account.key"
)

// Admin identity: system:masters is what Kubernetes' default RBAC binds to
// cluster-admin.
const (
	AdminUser  = "system:admin"
	AdminGroup = "system:masters"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// A leaf with less than this left is re-issued at start, so a server
	// restarted now and then never serves an expired certificate.
	renewBefore = 30 * 24 * time.Hour
	// Backdating covers clients whose clocks lag the server's a little.
	backdate = time.Hour
)

// Authority is the cluster CA.
type Authority struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// Pool is a pool holding only the CA, for verifying client certificates.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Cert)
	return p
}

// IssueClient issues a client certificate (ExtKeyUsageClientAuth) for user
// cn in groups, as Kubernetes reads them: CN is the user, O the groups.
func (a *Authority) IssueClient(cn string, groups []string) (certPEM, keyPEM []byte, err error) {
	if cn == "" {
		return nil, nil, errors.New("client certificate: empty common name")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: slices.Clone(groups)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return a.issue(tmpl)
}

// IssueServing issues a serving certificate (ExtKeyUsageServerAuth) for sans.
func (a *Authority) IssueServing(cn string, sans SANs) (certPEM, keyPEM []byte, err error) {
	sans = sans.normalize()
	ips := make([]net.IP, 0, len(sans.IPs))
	for _, ip := range sans.IPs {
		ips = append(ips, net.IP(ip.AsSlice()))
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    sans.DNSNames,
		IPAddresses: ips,
	}
	return a.issue(tmpl)
}

func (a *Authority) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl.SerialNumber, err = serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(leafValidity)
	if tmpl.NotAfter.After(a.Cert.NotAfter) {
		tmpl.NotAfter = a.Cert.NotAfter
	}
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, key.Public(), a.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func newAuthority(name string) (*Authority, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// A timestamp in the name keeps CAs of different clusters apart in
		// a client that trusts several.
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", name, now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &Authority{Cert: cert, CertPEM: certPEM, key: key}, keyPEM, nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// LoadAuthority reads the CA from dir.
func LoadAuthority(dir string) (*Authority, error) {
	return loadAuthority(dir, CACertFile, CAKeyFile)
}

func loadAuthority(dir, certFile, keyFile string) (*Authority, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, certFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, keyFile))
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA in %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA in %s: key is %T, want ECDSA", dir, pair.PrivateKey)
	}
	if !pair.Leaf.IsCA {
		return nil, fmt.Errorf("CA in %s: %s is not a CA certificate", dir, certFile)
	}
	return &Authority{Cert: pair.Leaf, CertPEM: certPEM, key: key}, nil
}

// Certs are the cluster's certificates as Ensure left them.
type Certs struct {
	CA      *Authority
	Serving tls.Certificate
	// AdminCertPEM and AdminKeyPEM go into the admin kubeconfig.
	AdminCertPEM, AdminKeyPEM []byte
	// ServiceAccountKey signs service-account tokens.
	ServiceAccountKey *ecdsa.PrivateKey
	// FrontProxy is what the API server proxies to aggregated API
	// servers with.
	FrontProxy *FrontProxy
	// Issued names the files (re)written by this Ensure, for the log.
	Issued []string
}

// Ensure makes dir hold a CA, a serving certificate for exactly sans and an
// admin client certificate, reusing every one that is still good.
func Ensure(dir string, sans SANs) (*Certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	// MkdirAll leaves an existing directory's mode alone; keys live here.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	c := &Certs{}
	ca, err := ensureAuthority(dir, CACertFile, CAKeyFile, "bonsai-ca", c)
	if err != nil {
		return nil, err
	}
	c.CA = ca

	wantSANs := sans.normalize()
	servingCert, servingKey, err := ensureLeaf(dir, ServingCertFile, ServingKeyFile, ca, c,
		func(leaf *x509.Certificate) bool {
			return hasExtKeyUsage(leaf, x509.ExtKeyUsageServerAuth) && sansOf(leaf).equal(wantSANs)
		},
		func() ([]byte, []byte, error) { return ca.IssueServing("bonsai", wantSANs) })
	if err != nil {
		return nil, err
	}
	c.Serving, err = tls.X509KeyPair(servingCert, servingKey)
	if err != nil {
		return nil, fmt.Errorf("certificates: serving: %w", err)
	}

	c.AdminCertPEM, c.AdminKeyPEM, err = ensureLeaf(dir, AdminCertFile, AdminKeyFile, ca, c,
		func(leaf *x509.Certificate) bool {
			return hasExtKeyUsage(leaf, x509.ExtKeyUsageClientAuth) &&
				leaf.Subject.CommonName == AdminUser && slices.Equal(leaf.Subject.Organization, []string{AdminGroup})
		},
		func() ([]byte, []byte, error) { return ca.IssueClient(AdminUser, []string{AdminGroup}) })
	if err != nil {
		return nil, err
	}
	if c.ServiceAccountKey, err = ensureServiceAccountKey(dir, c); err != nil {
		return nil, err
	}
	if c.FrontProxy, err = ensureFrontProxy(dir, c); err != nil {
		return nil, err
	}
	return c, nil
}

// ensureAuthority loads the CA in certFile/keyFile or, when neither
// exists, creates one named name.
func ensureAuthority(dir, certFile, keyFile, name string, c *Certs) (*Authority, error) {
	_, certErr := os.Stat(filepath.Join(dir, certFile))
	_, keyErr := os.Stat(filepath.Join(dir, keyFile))
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := loadAuthority(dir, certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("certificates: %w", err)
		}
		return ca, nil
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
	case certErr != nil && !errors.Is(certErr, os.ErrNotExist):
		return nil, fmt.Errorf("certificates: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, os.ErrNotExist):
		return nil, fmt.Errorf("certificates: %w", keyErr)
	default:
		// Half a CA: replacing it would silently orphan every kubeconfig
		// that trusts the old one, so a person must decide.
		return nil, fmt.Errorf("certificates: %s holds only one of %s and %s; restore the other or remove both to create a new CA", dir, certFile, keyFile)
	}
	ca, keyPEM, err := newAuthority(name)
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	if err := writeFile(filepath.Join(dir, keyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, certFile), ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	c.Issued = append(c.Issued, certFile)
	return ca, nil
}

// ensureLeaf reuses the pair in certFile/keyFile when it parses, matches,
// chains to ca, fits and is not near expiry; otherwise it issues a new one.
func ensureLeaf(dir, certFile, keyFile string, ca *Authority, c *Certs,
	fits func(*x509.Certificate) bool, issue func() ([]byte, []byte, error)) (certPEM, keyPEM []byte, err error) {
	certPath, keyPath := filepath.Join(dir, certFile), filepath.Join(dir, keyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	if certErr == nil && keyErr == nil && leafUsable(certPEM, keyPEM, ca, fits) {
		return certPEM, keyPEM, nil
	}
	for _, e := range []error{certErr, keyErr} {
		if e != nil && !errors.Is(e, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("certificates: %w", e)
		}
	}
	certPEM, keyPEM, err = issue()
	if err != nil {
		return nil, nil, fmt.Errorf("certificates: %w", err)
	}
	// Key first: a crash between the two writes leaves a pair that does not
	// match, which the next start re-issues.
	if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, nil, err
	}
	if err := writeFile(certPath, certPEM, 0o644); err != nil {
		return nil, nil, err
	}
	c.Issued = append(c.Issued, certFile)
	return certPEM, keyPEM, nil
}

func leafUsable(certPEM, keyPEM []byte, ca *Authority, fits func(*x509.Certificate) bool) bool {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false
	}
	leaf := pair.Leaf
	if !bytes.Equal(leaf.RawIssuer, ca.Cert.RawSubject) || leaf.CheckSignatureFrom(ca.Cert) != nil {
		return false
	}
	if time.Until(leaf.NotAfter) < renewBefore {
		return false
	}
	return fits(leaf)
}

func hasExtKeyUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	return slices.Contains(c.ExtKeyUsage, u)
}

// writeFile replaces path atomically, so a crash never leaves half a key.
func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil {
		return fail(err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
