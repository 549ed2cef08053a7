package csrsigning

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/apiserver/registry/certificates"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

func request(t *testing.T, cn string, orgs, dns, ips []string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

type signCase struct {
	name, signer string
	cn           string
	orgs         []string
	dns, ips     []string
	usages       []certificatesv1.KeyUsage
	expiration   int32
	approve      bool
	// want: "signed", "failed" or "" (left alone).
	want     string
	validity time.Duration
	extUsage x509.ExtKeyUsage
}

// Approved requests of the three signers get a certificate from the CA
// that says what was asked for, for as long as asked within the bounds;
// approved requests the signer's rules refuse get Failed; pending ones
// and other signers' are left alone. An admin approves, as any approver
// would, so the signer's own rules are what stops a bad request.
func TestSignsApprovedRequests(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true, Identities: true})
	certs, err := pki.Ensure(t.TempDir(), pki.SANs{DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.NewClientset(e.ConfigFor(&authn.User{Name: "system:admin", Groups: []string{"system:masters", authn.GroupAuthenticated}}))
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{certificates.NodesGroup}
	clientU := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	serving := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	cases := []signCase{
		{name: "kubelet-client", signer: certificatesv1.KubeAPIServerClientKubeletSignerName, cn: "system:node:n1", orgs: nodes, usages: clientU,
			approve: true, want: "signed", validity: DefaultDuration, extUsage: x509.ExtKeyUsageClientAuth},
		{name: "kubelet-client-1h", signer: certificatesv1.KubeAPIServerClientKubeletSignerName, cn: "system:node:n1", orgs: nodes, usages: clientU,
			expiration: 3600, approve: true, want: "signed", validity: time.Hour, extUsage: x509.ExtKeyUsageClientAuth},
		{name: "kubelet-client-short", signer: certificatesv1.KubeAPIServerClientKubeletSignerName, cn: "system:node:n1", orgs: nodes, usages: clientU,
			expiration: 600, approve: true, want: "signed", validity: 10 * time.Minute, extUsage: x509.ExtKeyUsageClientAuth},
		{name: "kubelet-serving", signer: certificatesv1.KubeletServingSignerName, cn: "system:node:n1", orgs: nodes, dns: []string{"n1"}, ips: []string{"10.0.0.1"},
			usages: serving, approve: true, want: "signed", validity: DefaultDuration, extUsage: x509.ExtKeyUsageServerAuth},
		{name: "apiserver-client", signer: certificatesv1.KubeAPIServerClientSignerName, cn: "jane", orgs: []string{"dev"}, usages: clientU,
			approve: true, want: "signed", validity: DefaultDuration, extUsage: x509.ExtKeyUsageClientAuth},
		// Approved, but not what the signer issues.
		{name: "kubelet-client-serving-usage", signer: certificatesv1.KubeAPIServerClientKubeletSignerName, cn: "system:node:n1", orgs: nodes,
			usages: append([]certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}, clientU...), approve: true, want: "failed"},
		{name: "kubelet-client-not-node", signer: certificatesv1.KubeAPIServerClientKubeletSignerName, cn: "jane", orgs: nodes, usages: clientU, approve: true, want: "failed"},
		{name: "kubelet-serving-no-san", signer: certificatesv1.KubeletServingSignerName, cn: "system:node:n1", orgs: nodes, usages: serving, approve: true, want: "failed"},
		{name: "apiserver-client-server-auth", signer: certificatesv1.KubeAPIServerClientSignerName, cn: "jane", usages: serving, approve: true, want: "failed"},
		// Not this signer's business.
		{name: "pending", signer: certificatesv1.KubeAPIServerClientKubeletSignerName, cn: "system:node:n1", orgs: nodes, usages: clientU},
		{name: "other-signer", signer: "example.com/signer", cn: "x", usages: clientU, approve: true},
	}
	for _, c := range cases {
		csr := &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec:       certificatesv1.CertificateSigningRequestSpec{Request: request(t, c.cn, c.orgs, c.dns, c.ips), SignerName: c.signer, Usages: c.usages},
		}
		if c.expiration > 0 {
			csr.Spec.ExpirationSeconds = &c.expiration
		}
		created, err := admin.Certificates.CertificateSigningRequests().Create(e.Ctx, csr, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !c.approve {
			continue
		}
		created.Status.Conditions = append(created.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "AdminApproved"})
		if _, err := admin.Certificates.CertificateSigningRequests().UpdateApproval(e.Ctx, c.name, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s: approve: %v", c.name, err)
		}
	}
	start := time.Now()
	clustertest.Start(e, func(inf *client.Informers) (*Controller, error) {
		return New(Config{Client: e.Client, Informers: inf, Logger: e.Log, CA: certs.CA})
	})
	get := func(name string) *certificatesv1.CertificateSigningRequest {
		csr, err := e.Client.Certificates.CertificateSigningRequests().Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return csr
	}
	clustertest.Eventually(t, 10*time.Second, func() error {
		for _, c := range cases {
			csr := get(c.name)
			switch {
			case c.want == "signed" && len(csr.Status.Certificate) == 0:
				return fmt.Errorf("%s: no certificate yet", c.name)
			case c.want == "failed" && !strings.Contains(certificates.Condition(csr), "Failed"):
				return fmt.Errorf("%s: %s, want Failed", c.name, certificates.Condition(csr))
			}
		}
		return nil
	})
	for _, c := range cases {
		csr := get(c.name)
		switch c.want {
		case "":
			if len(csr.Status.Certificate) > 0 || strings.Contains(certificates.Condition(csr), "Failed") {
				t.Errorf("%s: signed or failed, want it left alone", c.name)
			}
		case "failed":
			if len(csr.Status.Certificate) > 0 {
				t.Errorf("%s: has a certificate, want none", c.name)
			}
			if r := csr.Status.Conditions[len(csr.Status.Conditions)-1].Reason; r != "SignerValidationFailure" {
				t.Errorf("%s: reason %q, want SignerValidationFailure", c.name, r)
			}
		case "signed":
			block, _ := pem.Decode(csr.Status.Certificate)
			if block == nil {
				t.Fatalf("%s: certificate is not PEM", c.name)
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: certs.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{c.extUsage}, CurrentTime: time.Now()}); err != nil {
				t.Errorf("%s: does not verify against the CA for %v: %v", c.name, c.extUsage, err)
			}
			if cert.Subject.CommonName != c.cn || !slices.Equal(cert.Subject.Organization, c.orgs) || !slices.Equal(cert.DNSNames, c.dns) || len(cert.IPAddresses) != len(c.ips) {
				t.Errorf("%s: subject %v SANs %v %v, want %s %v %v %v", c.name, cert.Subject, cert.DNSNames, cert.IPAddresses, c.cn, c.orgs, c.dns, c.ips)
			}
			if len(cert.ExtKeyUsage) != 1 || cert.IsCA {
				t.Errorf("%s: ext key usages %v, CA %v: want only %v", c.name, cert.ExtKeyUsage, cert.IsCA, c.extUsage)
			}
			end := start.Add(c.validity)
			if cert.NotAfter.Before(end.Add(-time.Minute)) || cert.NotAfter.After(end.Add(time.Minute)) {
				t.Errorf("%s: NotAfter %v, want about %v", c.name, cert.NotAfter, end)
			}
		}
	}
}

// Who may write a certificate: the controller acts as the controller
// manager, which RBAC allows to sign for exactly these signers; a node
// cannot sign its own request.
func TestNodeCannotSign(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true, Identities: true})
	node := &authn.User{Name: "system:node:n1", Groups: []string{certificates.NodesGroup, authn.GroupAuthenticated}}
	cs, err := client.NewClientset(e.ConfigFor(node))
	if err != nil {
		t.Fatal(err)
	}
	csr, err := cs.Certificates.CertificateSigningRequests().Create(e.Ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "self"},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: request(t, "system:node:n1", []string{certificates.NodesGroup}, nil, nil),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Self"}}
	if _, err := cs.Certificates.CertificateSigningRequests().UpdateApproval(e.Ctx, "self", csr, metav1.UpdateOptions{}); err == nil {
		t.Error("a node approved its own request")
	}
	csr.Status.Conditions = nil
	csr.Status.Certificate = []byte("x")
	if _, err := cs.Certificates.CertificateSigningRequests().UpdateStatus(e.Ctx, csr, metav1.UpdateOptions{}); err == nil {
		t.Error("a node wrote its own certificate")
	}
}
