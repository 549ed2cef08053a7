package pki

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestOpenKubelet(t *testing.T) {
	dir := t.TempDir()
	if _, err := Ensure(dir, testSANs()); err != nil {
		t.Fatal(err)
	}
	ks := testSANs("node-a")
	certs, err := Open(Options{Dir: dir, SANs: testSANs(), KubeletSANs: &ks})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(certs.Issued, []string{KubeletClientCertFile, KubeletServingCertFile}) {
		t.Fatalf("issued %v", certs.Issued)
	}
	client, serving := certs.KubeletClient.Leaf(), certs.KubeletServing.Leaf()
	if client.Subject.CommonName != KubeletClientUser || len(client.Subject.Organization) != 0 {
		t.Errorf("client subject %v", client.Subject)
	}
	for _, c := range []struct {
		cert  *x509.Certificate
		usage x509.ExtKeyUsage
	}{{client, x509.ExtKeyUsageClientAuth}, {serving, x509.ExtKeyUsageServerAuth}} {
		if _, err := c.cert.Verify(x509.VerifyOptions{Roots: certs.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s does not chain to the CA: %v", c.cert.Subject.CommonName, err)
		}
	}
	if err := serving.VerifyHostname("node-a"); err != nil {
		t.Error(err)
	}
	if err := serving.VerifyHostname("127.0.0.1"); err != nil {
		t.Error(err)
	}

	// A restart reuses both; new SANs re-issue the serving one only.
	before, _ := os.ReadFile(filepath.Join(dir, KubeletClientCertFile))
	again, err := Open(Options{Dir: dir, SANs: testSANs(), KubeletSANs: &ks})
	if err != nil || len(again.Issued) != 0 {
		t.Fatalf("second start issued %v, %v", again.Issued, err)
	}
	ks = testSANs("node-a", "192.0.2.9")
	moved, err := Open(Options{Dir: dir, SANs: testSANs(), KubeletSANs: &ks})
	if err != nil || !slices.Equal(moved.Issued, []string{KubeletServingCertFile}) {
		t.Fatalf("new address issued %v, %v", moved.Issued, err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, KubeletClientCertFile))
	if !bytes.Equal(before, after) {
		t.Error("client certificate re-issued")
	}
	if err := moved.KubeletServing.Leaf().VerifyHostname("192.0.2.9"); err != nil {
		t.Error(err)
	}
}
