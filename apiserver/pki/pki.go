// Package pki owns the cluster's certificates: the CA, the API server's
// serving certificate, the admin client certificate, the kubelet API's and
// the front proxy's, kept as PEM files in one directory (<data-dir>/tls),
// and the admin kubeconfig built from them. It creates what is missing,
// reuses what is still good, re-issues what no longer fits (a serving
// certificate whose SANs changed) and renews every leaf online before it
// expires (rotate.go), swapping it under the TLS configurations that read
// it through a KeyPair. It never replaces an existing CA: every kubeconfig
// handed out trusts it. It must not reach the API: what a renewal means to
// the rest of the process (a kubeconfig to rewrite, an event) is its
// caller's.
package pki

import (
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

	"k8s.io/utils/clock"
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
	// Backdating covers clients whose clocks lag the server's a little.
	backdate = time.Hour
	// The CA is backdated further: a box whose clock is set back (a
	// battery-less RTC, a wrong NTP answer corrected) must still be able
	// to issue leaves its clients accept, and a leaf is only as valid as
	// the CA it chains to.
	caBackdate = 7 * 24 * time.Hour
)

// realClock is the clock of a Certs or Authority given none.
var realClock clock.PassiveClock = clock.RealClock{}

// Authority is the cluster CA.
type Authority struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
	// clock dates what the CA issues (realClock when nil).
	clock clock.PassiveClock
}

func (a *Authority) now() time.Time {
	if a.clock == nil {
		return realClock.Now()
	}
	return a.clock.Now()
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
	now := a.now()
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

func newAuthority(name string, clk clock.PassiveClock) (*Authority, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	now := clk.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// A timestamp in the name keeps CAs of different clusters apart in
		// a client that trusts several.
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", name, now.Unix())},
		NotBefore:             now.Add(-caBackdate),
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
	return &Authority{Cert: cert, CertPEM: certPEM, key: key, clock: clk}, keyPEM, nil
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

// Certs are the cluster's certificates. Open loads or issues them; Run
// keeps the leaves fresh.
type Certs struct {
	CA *Authority
	// Serving is the API server's serving certificate, Admin the client
	// certificate of the admin kubeconfig.
	Serving, Admin *KeyPair
	// KubeletClient is who the API server is to kubelets, KubeletServing
	// this host's kubelet API; both nil without Options.KubeletSANs.
	KubeletClient, KubeletServing *KeyPair
	// ServiceAccountKey signs service-account tokens.
	ServiceAccountKey *ecdsa.PrivateKey
	// FrontProxy is what the API server proxies to aggregated API
	// servers with.
	FrontProxy *FrontProxy
	// Issued names the files (re)written by Open, for the log.
	Issued []string

	dir   string
	clock clock.PassiveClock
	pairs []*KeyPair
	// rotation is rotate.go's state.
	rotation rotation
}

// Options say where the certificates live and what they are for.
type Options struct {
	// Dir holds the PEM files (<data-dir>/tls).
	Dir string
	// SANs are the API server's names and addresses.
	SANs SANs
	// KubeletSANs, when set, are this host's kubelet API's: Open then
	// also keeps the kubelet serving and kubelet-client certificates.
	KubeletSANs *SANs
	// Clock dates what is issued and decides when to renew (the real
	// clock when nil; tests move it).
	Clock clock.PassiveClock
}

// Ensure is Open for the API server's certificates alone.
func Ensure(dir string, sans SANs) (*Certs, error) {
	return Open(Options{Dir: dir, SANs: sans})
}

// Open makes dir hold a CA, a serving certificate for exactly the SANs,
// an admin client certificate, the front proxy's CA and client and, when
// asked, the kubelet API's certificates, reusing every one that is still
// good. A leaf that expired or is not yet valid (the clock jumped while
// the box was off) is re-issued here, before anything serves with it.
func Open(o Options) (*Certs, error) {
	dir := o.Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	// MkdirAll leaves an existing directory's mode alone; keys live here.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	c := &Certs{dir: dir, clock: o.Clock}
	c.rotation.renewed = make(chan struct{}, 1)
	if c.clock == nil {
		c.clock = realClock
	}
	ca, err := c.ensureAuthority(CACertFile, CAKeyFile, "bonsai-ca")
	if err != nil {
		return nil, err
	}
	c.CA = ca

	wantSANs := o.SANs.normalize()
	c.Serving = c.newPair("api-server", ServingCertFile, ServingKeyFile, ca,
		func(leaf *x509.Certificate) bool {
			return hasExtKeyUsage(leaf, x509.ExtKeyUsageServerAuth) && sansOf(leaf).equal(wantSANs)
		},
		func() ([]byte, []byte, error) { return ca.IssueServing("bonsai", wantSANs) })
	c.Admin = c.newPair("admin", AdminCertFile, AdminKeyFile, ca,
		func(leaf *x509.Certificate) bool {
			return hasExtKeyUsage(leaf, x509.ExtKeyUsageClientAuth) &&
				leaf.Subject.CommonName == AdminUser && slices.Equal(leaf.Subject.Organization, []string{AdminGroup})
		},
		func() ([]byte, []byte, error) { return ca.IssueClient(AdminUser, []string{AdminGroup}) })
	if o.KubeletSANs != nil {
		c.addKubeletPairs(*o.KubeletSANs)
	}
	if err := c.loadNew(); err != nil {
		return nil, err
	}
	if c.ServiceAccountKey, err = ensureServiceAccountKey(dir, c); err != nil {
		return nil, err
	}
	if c.FrontProxy, err = c.ensureFrontProxy(); err != nil {
		return nil, err
	}
	if err := c.loadNew(); err != nil {
		return nil, err
	}
	c.updateDue()
	return c, nil
}

// Pairs are the leaves Open keeps, in the order they were made.
func (c *Certs) Pairs() []*KeyPair { return slices.Clone(c.pairs) }

// Dir is the certificate directory.
func (c *Certs) Dir() string { return c.dir }

// ensureAuthority loads the CA in certFile/keyFile or, when neither
// exists, creates one named name. A CA that expired, or whose time has
// not come (the clock is behind), stops the start: replacing it would
// orphan every kubeconfig handed out, so a person must decide.
func (c *Certs) ensureAuthority(certFile, keyFile, name string) (*Authority, error) {
	dir := c.dir
	_, certErr := os.Stat(filepath.Join(dir, certFile))
	_, keyErr := os.Stat(filepath.Join(dir, keyFile))
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := loadAuthority(dir, certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("certificates: %w", err)
		}
		ca.clock = c.clock
		now := c.clock.Now()
		if now.After(ca.Cert.NotAfter) {
			return nil, fmt.Errorf("certificates: the CA %s expired at %s (now %s); if the clock is right, move %s and %s away to create a new CA, then hand out the new admin kubeconfig",
				filepath.Join(dir, certFile), ca.Cert.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), certFile, keyFile)
		}
		if now.Before(ca.Cert.NotBefore) {
			return nil, fmt.Errorf("certificates: the CA %s is not valid before %s and the clock says %s; set the clock right",
				filepath.Join(dir, certFile), ca.Cert.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
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
	ca, keyPEM, err := newAuthority(name, c.clock)
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

// loadNew loads the pairs added since the last call.
func (c *Certs) loadNew() error {
	for _, p := range c.pairs {
		if p.cur.Load() != nil {
			continue
		}
		if err := c.load(p); err != nil {
			return err
		}
	}
	return nil
}

// load reuses the pair on disk when it is still good at the clock's
// now, and otherwise issues a new one.
func (c *Certs) load(p *KeyPair) error {
	certPEM, certErr := os.ReadFile(filepath.Join(c.dir, p.CertFile))
	keyPEM, keyErr := os.ReadFile(filepath.Join(c.dir, p.KeyFile))
	for _, e := range []error{certErr, keyErr} {
		if e != nil && !errors.Is(e, os.ErrNotExist) {
			return fmt.Errorf("certificates: %w", e)
		}
	}
	if certErr == nil && keyErr == nil {
		if pair, err := tls.X509KeyPair(certPEM, keyPEM); err == nil && p.renewReason(pair.Leaf, c.clock.Now()) == "" {
			p.set(pair, certPEM, keyPEM)
			return nil
		}
	}
	if err := c.reissue(p); err != nil {
		return err
	}
	c.Issued = append(c.Issued, p.CertFile)
	return nil
}

// reissue issues p anew, writes it and puts it in force.
func (c *Certs) reissue(p *KeyPair) error {
	certPEM, keyPEM, err := p.issue()
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("certificates: %s: %w", p.CertFile, err)
	}
	// Key first: a crash between the two writes leaves a pair that does not
	// match, which the next start re-issues.
	if err := writeFile(filepath.Join(c.dir, p.KeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.dir, p.CertFile), certPEM, 0o644); err != nil {
		return err
	}
	p.set(pair, certPEM, keyPEM)
	return nil
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

// Sign issues a certificate for the public key pub of a request the
// caller checked: tmpl carries its subject, SANs and usages. It is valid
// from now-backdate for validity, cut off at the CA's own end, and is
// returned as PEM. The certificates.k8s.io signers use it.
func (a *Authority) Sign(tmpl *x509.Certificate, pub any, validity, backdate time.Duration) ([]byte, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("sign certificate for %q: validity %v must be positive", tmpl.Subject.CommonName, validity)
	}
	t := *tmpl
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := a.now()
	t.SerialNumber = serial
	t.NotBefore, t.NotAfter = now.Add(-backdate), now.Add(validity)
	if t.NotAfter.After(a.Cert.NotAfter) {
		t.NotAfter = a.Cert.NotAfter
	}
	t.BasicConstraintsValid, t.IsCA = true, false
	der, err := x509.CreateCertificate(rand.Reader, &t, a.Cert, pub, a.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
