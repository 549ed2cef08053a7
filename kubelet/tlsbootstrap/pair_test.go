package tlsbootstrap

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/csrapproving"
	"bonsai.dev/bonsai/controllers/csrsigning"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// A node renews its client certificate as itself (selfnodeclient): the
// real approver and signer issue a new certificate with a new key, the
// pair serves it at once and keeps it on disk, and a restart loads it.
func TestPairRenews(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true, Identities: true})
	certs, err := pki.Ensure(t.TempDir(), pki.SANs{IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Start(e, func(inf *client.Informers) (*csrapproving.Controller, error) {
		return csrapproving.New(csrapproving.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	clustertest.Start(e, func(inf *client.Informers) (*csrsigning.Controller, error) {
		return csrsigning.New(csrsigning.Config{Client: e.Client, Informers: inf, Logger: e.Log, CA: certs.CA})
	})
	node := &authn.User{Name: "system:node:n1", Groups: []string{"system:nodes", authn.GroupAuthenticated}}
	rotated := 0
	newPair := func() *Pair {
		return &Pair{
			Path: filepath.Join(t.TempDir(), ClientFile), Signer: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			Template: func() *x509.CertificateRequest {
				return &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}}}
			},
			Lifetime: time.Hour, CA: certs.CA.Pool(), Logger: e.Log,
			Client:  func() (*client.Clientset, error) { return client.NewClientset(e.ConfigFor(node)) },
			Rotated: func() { rotated++ },
		}
	}
	p := newPair()
	if p.Load(time.Now()) || p.Current() != nil {
		t.Fatal("loaded a certificate from an empty dir")
	}
	ctx, cancel := context.WithTimeout(e.Ctx, 20*time.Second)
	defer cancel()
	if err := p.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	first := p.Current()
	if err := p.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	second := p.Current()
	if rotated != 2 || first == second || first.Leaf.SerialNumber.Cmp(second.Leaf.SerialNumber) == 0 || first.Leaf.PublicKeyAlgorithm != second.Leaf.PublicKeyAlgorithm {
		t.Fatalf("after two renewals: %d rotations, serials %v %v", rotated, first.Leaf.SerialNumber, second.Leaf.SerialNumber)
	}
	if string(first.Leaf.RawSubjectPublicKeyInfo) == string(second.Leaf.RawSubjectPublicKeyInfo) {
		t.Error("renewal kept the key")
	}
	if life := second.Leaf.NotAfter.Sub(second.Leaf.NotBefore); life < time.Hour || life > time.Hour+10*time.Minute {
		t.Errorf("life %v, want the hour asked for (plus the backdate)", life)
	}
	if got, err := p.GetClientCertificate(nil); err != nil || got != second {
		t.Errorf("GetClientCertificate: %v, not the renewed certificate", err)
	}
	// What a restart finds.
	q := newPair()
	q.Path = p.Path
	if !q.Load(time.Now()) || q.Current().Leaf.SerialNumber.Cmp(second.Leaf.SerialNumber) != 0 {
		t.Error("the renewed certificate was not kept")
	}
	// Expired, or from another CA: not loaded.
	if q.Load(second.Leaf.NotAfter.Add(time.Second)) {
		t.Error("loaded an expired certificate")
	}
	q.CA = x509.NewCertPool()
	if q.Load(time.Now()) {
		t.Error("loaded a certificate of another CA")
	}
	if fi, err := os.Stat(p.Path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v, want mode 0600", fi.Mode(), err)
	}
}

// Renewal falls between 70 and 90 % of the certificate's life.
func TestDeadline(t *testing.T) {
	now := time.Now()
	c := &x509.Certificate{NotBefore: now, NotAfter: now.Add(100 * time.Hour)}
	for range 200 {
		d := Deadline(c).Sub(now)
		if d < 70*time.Hour || d > 90*time.Hour {
			t.Fatalf("deadline at %v of 100h", d)
		}
	}
}
