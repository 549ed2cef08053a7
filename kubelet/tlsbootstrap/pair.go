package tlsbootstrap

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/client"
)

// Pair is one certificate of the node (its client or its serving
// certificate), kept in <dir>/<name>-current.pem (certificate and key,
// as the kubelet keeps them) and renewed through a CSR when 70 to 90 %
// of its life has passed, as the kubelet's certificate manager does.
type Pair struct {
	// Path is the PEM file (certificate then key).
	Path string
	// Signer, Usages and Template say what to ask for; Template is
	// called for each request (a serving certificate's addresses may
	// change).
	Signer   string
	Usages   []certificatesv1.KeyUsage
	Template func() *x509.CertificateRequest
	// Lifetime is asked for as spec.expirationSeconds (0: the signer's
	// default).
	Lifetime time.Duration
	// Client makes the requests: the node's own once it has one.
	Client func() (*client.Clientset, error)
	// CA verifies what comes back.
	CA *x509.CertPool
	// Rotated, if set, is called after each new certificate.
	Rotated func()
	Logger  *slog.Logger

	cur atomic.Pointer[tls.Certificate]
}

// Load reads the stored certificate; ok is false when there is none or
// it expired or does not chain to CA.
func (p *Pair) Load(now time.Time) (ok bool) {
	data, err := os.ReadFile(p.Path)
	if err != nil {
		return false
	}
	c, err := tls.X509KeyPair(data, data)
	if err != nil || c.Leaf == nil {
		return false
	}
	if !now.Before(c.Leaf.NotAfter) {
		return false
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: p.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: now}); err != nil {
		return false
	}
	p.cur.Store(&c)
	return true
}

// Current is the certificate in use, nil before the first one.
func (p *Pair) Current() *tls.Certificate { return p.cur.Load() }

// GetCertificate is tls.Config.GetCertificate for a server using p.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.handOut() }

// GetClientCertificate is tls.Config.GetClientCertificate for a client.
func (p *Pair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return p.handOut()
}

func (p *Pair) handOut() (*tls.Certificate, error) {
	c := p.cur.Load()
	if c == nil {
		return nil, errors.New("no certificate yet")
	}
	return c, nil
}

// Renew asks for a new certificate with a new key, waits until it is
// issued, stores it and uses it from then on.
func (p *Pair) Renew(ctx context.Context) error {
	cs, err := p.Client()
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, p.Template(), key)
	if err != nil {
		return err
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: p.Signer, Usages: p.Usages,
		},
	}
	if p.Lifetime > 0 {
		s := int32(p.Lifetime / time.Second)
		csr.Spec.ExpirationSeconds = &s
	}
	csrs := cs.Certificates.CertificateSigningRequests()
	created, err := csrs.Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("certificate request for %s: %w", p.Signer, err)
	}
	// As the kubelet's certificate manager: a request not issued in
	// time is given up and asked again.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	certPEM, err := wait(wctx, cs, created)
	cancel()
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("certificate request %s: the issued certificate does not fit the key: %w", created.Name, err)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: p.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("certificate request %s: the issued certificate does not verify against the cluster CA: %w", created.Name, err)
	}
	if err := writeAtomic(p.Path, append(certPEM, keyPEM...)); err != nil {
		return err
	}
	p.cur.Store(&c)
	if p.Logger != nil {
		p.Logger.Info("new node certificate", "signer", p.Signer, "csr", created.Name, "subject", c.Leaf.Subject.CommonName, "notAfter", c.Leaf.NotAfter)
	}
	if p.Rotated != nil {
		p.Rotated()
	}
	return nil
}

// wait polls the request until it has a certificate, or says why not.
func wait(ctx context.Context, cs *client.Clientset, csr *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		got, err := cs.Certificates.CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err == nil {
			if got.UID != csr.UID {
				return nil, fmt.Errorf("certificate request %s was replaced", csr.Name)
			}
			for _, c := range got.Status.Conditions {
				if (c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed) && c.Status == corev1.ConditionTrue {
					return nil, fmt.Errorf("certificate request %s: %s: %s %s", csr.Name, c.Type, c.Reason, c.Message)
				}
			}
			if len(got.Status.Certificate) > 0 {
				return got.Status.Certificate, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("certificate request %s not issued: %w (is it approved? kubectl get csr)", csr.Name, ctx.Err())
		case <-t.C:
		}
	}
}

// Run renews the certificate whenever its rotation deadline passes,
// retrying failures, until ctx ends.
func (p *Pair) Run(ctx context.Context) {
	backoff := time.Second
	for {
		var d time.Duration
		if c := p.cur.Load(); c != nil {
			d = time.Until(Deadline(c.Leaf))
		}
		if d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if err := p.Renew(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if p.Logger != nil {
				p.Logger.Warn("node certificate not renewed; retrying", "signer", p.Signer, "in", backoff, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = time.Second
	}
}

// Deadline is when a certificate is renewed: at a random point between
// 70 and 90 % of its life, as the kubelet's certificate manager does, so
// that many nodes do not renew at once.
func Deadline(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	n, err := rand.Int(rand.Reader, big.NewInt(1000))
	frac := 0.8
	if err == nil {
		frac = 0.7 + 0.2*float64(n.Int64())/1000
	}
	return c.NotBefore.Add(time.Duration(float64(life) * frac))
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
