package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"
)

var allFiles = []string{CACertFile, CAKeyFile, ServingCertFile, ServingKeyFile, AdminCertFile, AdminKeyFile, ServiceAccountKeyFile, FrontProxyCACertFile, FrontProxyCAKeyFile, FrontProxyClientCertFile, FrontProxyClientKeyFile}

func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, f := range allFiles {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		out[f] = b
	}
	return out
}

func testSANs(extra ...string) SANs {
	s := SANs{
		DNSNames: []string{"localhost", "kubernetes.default.svc.cluster.local"},
		IPs:      []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.43.0.1")},
	}
	for _, e := range extra {
		if ip, err := netip.ParseAddr(e); err == nil {
			s.IPs = append(s.IPs, ip)
		} else {
			s.DNSNames = append(s.DNSNames, e)
		}
	}
	return s
}

func TestServingSANs(t *testing.T) {
	s, err := ServingSANs("corp.example", netip.MustParsePrefix("10.96.0.0/12"), []string{"api.example.com", "192.0.2.7", "API2.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	wantDNS := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.corp.example", strings.ToLower(host), "api.example.com", "api2.example.com"}
	for _, d := range wantDNS {
		if !slices.Contains(s.DNSNames, d) {
			t.Errorf("DNS SAN %q missing from %v", d, s.DNSNames)
		}
	}
	for _, ip := range []string{"127.0.0.1", "::1", "10.96.0.1", "192.0.2.7"} {
		if !slices.Contains(s.IPs, netip.MustParseAddr(ip)) {
			t.Errorf("IP SAN %s missing from %v", ip, s.IPs)
		}
	}
}

func TestFirstServiceIP(t *testing.T) {
	for _, tc := range []struct{ cidr, want string }{
		{"10.43.0.0/16", "10.43.0.1"},
		{"10.96.0.0/12", "10.96.0.1"},
		{"fd00:10:96::/108", "fd00:10:96::1"},
	} {
		got, err := FirstServiceIP(netip.MustParsePrefix(tc.cidr))
		if err != nil || got.String() != tc.want {
			t.Errorf("FirstServiceIP(%s) = %v, %v; want %s", tc.cidr, got, err, tc.want)
		}
	}
}

func TestEnsureCreatesCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	c, err := Ensure(dir, testSANs("api.example.com", "192.0.2.9"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{CACertFile, ServingCertFile, AdminCertFile, ServiceAccountKeyFile, FrontProxyCACertFile, FrontProxyClientCertFile}, c.Issued); diff != "" {
		t.Errorf("issued (-want +got):\n%s", diff)
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", st.Mode().Perm())
	}
	for _, f := range []string{CAKeyFile, ServingKeyFile, AdminKeyFile, ServiceAccountKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, st.Mode().Perm())
		}
	}

	serving := c.Serving.Leaf()
	for _, name := range []string{"localhost", "api.example.com", "kubernetes.default.svc.cluster.local"} {
		if err := serving.VerifyHostname(name); err != nil {
			t.Errorf("serving cert: %v", err)
		}
	}
	for _, ip := range []string{"127.0.0.1", "10.43.0.1", "192.0.2.9"} {
		if err := serving.VerifyHostname(ip); err != nil {
			t.Errorf("serving cert: %v", err)
		}
	}
	if _, err := serving.Verify(x509.VerifyOptions{Roots: c.CA.Pool(), DNSName: "localhost"}); err != nil {
		t.Errorf("serving cert does not chain to the CA: %v", err)
	}
	if serving.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("serving key algorithm %v, want ECDSA", serving.PublicKeyAlgorithm)
	}

	admin, err := tls.X509KeyPair(c.Admin.PEM())
	if err != nil {
		t.Fatal(err)
	}
	if admin.Leaf.Subject.CommonName != "system:admin" || !slices.Equal(admin.Leaf.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin subject %v", admin.Leaf.Subject)
	}
	if _, err := admin.Leaf.Verify(x509.VerifyOptions{Roots: c.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin cert is not a client cert of the CA: %v", err)
	}

	// The front-proxy client chains to its own CA only: a certificate of
	// the cluster CA must not pass for the proxy, nor the reverse.
	fp := c.FrontProxy.Client.Leaf()
	if fp.Subject.CommonName != FrontProxyClientName || len(fp.Subject.Organization) != 0 {
		t.Errorf("front-proxy client subject %v", fp.Subject)
	}
	if _, err := fp.Verify(x509.VerifyOptions{Roots: c.FrontProxy.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("front-proxy client is not a client cert of the front-proxy CA: %v", err)
	}
	if _, err := fp.Verify(x509.VerifyOptions{Roots: c.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("front-proxy client chains to the cluster CA")
	}
	if _, err := admin.Leaf.Verify(x509.VerifyOptions{Roots: c.FrontProxy.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the admin certificate chains to the front-proxy CA")
	}
	if st, err := os.Stat(filepath.Join(dir, FrontProxyCAKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("front-proxy CA key: %v %v", err, st)
	}
}

func TestEnsureReusesOnRestart(t *testing.T) {
	dir := t.TempDir()
	if _, err := Ensure(dir, testSANs("a.example")); err != nil {
		t.Fatal(err)
	}
	before := readAll(t, dir)
	c, err := Ensure(dir, testSANs("a.example"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Issued) != 0 {
		t.Errorf("restart re-issued %v", c.Issued)
	}
	if c.ServiceAccountKey == nil {
		t.Error("restart lost the service-account key")
	}
	after := readAll(t, dir)
	for _, f := range allFiles {
		if !bytes.Equal(before[f], after[f]) {
			t.Errorf("%s changed on restart", f)
		}
	}
}

func TestEnsureNewSANReissuesOnlyServing(t *testing.T) {
	dir := t.TempDir()
	if _, err := Ensure(dir, testSANs("a.example")); err != nil {
		t.Fatal(err)
	}
	before := readAll(t, dir)
	c, err := Ensure(dir, testSANs("a.example", "b.example"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{ServingCertFile}, c.Issued); diff != "" {
		t.Errorf("issued (-want +got):\n%s", diff)
	}
	after := readAll(t, dir)
	for _, f := range allFiles {
		changed := !bytes.Equal(before[f], after[f])
		wantChanged := f == ServingCertFile || f == ServingKeyFile
		if changed != wantChanged {
			t.Errorf("%s changed=%v, want %v", f, changed, wantChanged)
		}
	}
	if err := c.Serving.Leaf().VerifyHostname("b.example"); err != nil {
		t.Error(err)
	}
	if err := c.Serving.Leaf().CheckSignatureFrom(c.CA.Cert); err != nil {
		t.Errorf("new serving cert not from the same CA: %v", err)
	}
}

func TestEnsureReissuesLeafOfAnotherCA(t *testing.T) {
	dir := t.TempDir()
	if _, err := Ensure(dir, testSANs()); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if _, err := Ensure(other, testSANs()); err != nil {
		t.Fatal(err)
	}
	// An admin pair signed by a foreign CA must not be served as ours.
	for _, f := range []string{AdminCertFile, AdminKeyFile} {
		b, _ := os.ReadFile(filepath.Join(other, f))
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Ensure(dir, testSANs())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{AdminCertFile}, c.Issued); diff != "" {
		t.Errorf("issued (-want +got):\n%s", diff)
	}
}

func TestEnsureRefusesHalfACA(t *testing.T) {
	dir := t.TempDir()
	if _, err := Ensure(dir, testSANs()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	_, err := Ensure(dir, testSANs())
	if err == nil || !strings.Contains(err.Error(), CAKeyFile) {
		t.Fatalf("Ensure with a CA cert but no key: %v, want an error naming %s", err, CAKeyFile)
	}
}

func TestIssueClient(t *testing.T) {
	c, err := Ensure(t.TempDir(), testSANs())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := c.CA.IssueClient("system:node:edge-1", []string{"system:nodes"})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if got := pair.Leaf.Subject; got.CommonName != "system:node:edge-1" || !slices.Equal(got.Organization, []string{"system:nodes"}) {
		t.Errorf("subject %v", got)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: c.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Error(err)
	}
	if _, _, err := c.CA.IssueClient("", nil); err == nil {
		t.Error("IssueClient with an empty CN succeeded")
	}
}

func TestWriteKubeconfig(t *testing.T) {
	c, err := Ensure(t.TempDir(), testSANs())
	if err != nil {
		t.Fatal(err)
	}
	adminCert, adminKey := c.Admin.PEM()
	path := filepath.Join(t.TempDir(), "kubeconfig.yaml")
	// An existing file with loose permissions must end up 0600 too.
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteKubeconfig(path, "https://127.0.0.1:6443", c.CA.CertPEM, adminCert, adminKey); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600", st.Mode().Perm())
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://127.0.0.1:6443" {
		t.Errorf("host %q", rc.Host)
	}
	if !bytes.Equal(rc.CAData, c.CA.CertPEM) || !bytes.Equal(rc.CertData, adminCert) || !bytes.Equal(rc.KeyData, adminKey) {
		t.Error("kubeconfig does not embed the CA and admin credentials")
	}
	if b, _ := pem.Decode(rc.CAData); b == nil {
		t.Error("CA data is not PEM")
	}
}
