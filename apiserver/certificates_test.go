package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// csrPEM is a signed PKCS#10 request for cn in orgs.
func csrPEM(t *testing.T, cn string, orgs ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// certPEM is a self-signed certificate, standing for an issued one.
func certPEM(t *testing.T) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "issued"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newCSR(t *testing.T, name, signer string) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.CertificateSigningRequestSpec{
		Request: csrPEM(t, "app"), SignerName: signer, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
	}}
}

func approved(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequest {
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: "KubectlApprove", Message: "This CSR was approved by kubectl certificate approve."})
	return csr
}

// CertificateSigningRequests as kube-apiserver serves them: the
// requester recorded from the request, approval through /approval with
// approve on the signer, issuance through /status with sign on it, and
// validation with upstream's messages.
func TestCertificateSigningRequests(t *testing.T) {
	e := newRBACEnv(t, "RBAC")
	clusterRole := func(name string, rules ...rbacv1.PolicyRule) {
		t.Helper()
		if _, err := e.admin.RbacV1().ClusterRoles().Create(e.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.RbacV1().ClusterRoleBindings().Create(e.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: strings.SplitN(name, "-", 2)[0]}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	csrs := []string{"certificatesigningrequests"}
	clusterRole("jane-requests", rbacv1.PolicyRule{APIGroups: []string{"certificates.k8s.io"}, Resources: csrs, Verbs: []string{"create", "get", "update"}},
		rbacv1.PolicyRule{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval", "certificatesigningrequests/status"}, Verbs: []string{"update"}})
	clusterRole("bob-approves", rbacv1.PolicyRule{APIGroups: []string{"certificates.k8s.io"}, Resources: csrs, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval", "certificatesigningrequests/status"}, Verbs: []string{"update"}},
		rbacv1.PolicyRule{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/*"}, Verbs: []string{"approve"}},
		rbacv1.PolicyRule{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/app"}, Verbs: []string{"sign"}})
	jane := e2eClient(t, e.s, userNamed("jane")).CertificatesV1().CertificateSigningRequests()
	bob := e2eClient(t, e.s, userNamed("bob")).CertificatesV1().CertificateSigningRequests()

	// The requester is who sent the request, whatever the spec says, and
	// nothing is created approved.
	forged := approved(newCSR(t, "app", "example.com/app"), certificatesv1.CertificateApproved)
	forged.Spec.Username, forged.Spec.Groups = "admin", []string{"system:masters"}
	csr, err := jane.Create(e.ctx, forged, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if csr.Spec.Username != "jane" || len(csr.Spec.Groups) != 1 || csr.Spec.Groups[0] != "system:authenticated" || len(csr.Status.Conditions) != 0 {
		t.Fatalf("created: username %q groups %v conditions %v", csr.Spec.Username, csr.Spec.Groups, csr.Status.Conditions)
	}

	// jane may write /approval but has no approve on the signer.
	_, err = jane.UpdateApproval(e.ctx, "app", approved(csr, certificatesv1.CertificateApproved), metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `certificatesigningrequests.certificates.k8s.io "app" is forbidden: user not permitted to approve requests with signerName "example.com/app"`) {
		t.Fatalf("jane approving: %v", err)
	}
	// Nor may a status write approve.
	_, err = bob.UpdateStatus(e.ctx, approved(csr, certificatesv1.CertificateApproved), metav1.UpdateOptions{})
	wantInvalid(t, "approval through status", err, `status.conditions: Forbidden: updates may not add a condition of type "Approved"`)

	// bob approves with example.com/*; the approval write's certificate
	// is not taken.
	a := approved(csr, certificatesv1.CertificateApproved)
	a.Status.Certificate = certPEM(t)
	got, err := bob.UpdateApproval(e.ctx, "app", a, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].LastUpdateTime.IsZero() || got.Status.Conditions[0].LastTransitionTime.IsZero() || len(got.Status.Certificate) != 0 {
		t.Fatalf("approved: %+v", got.Status)
	}
	_, err = bob.UpdateApproval(e.ctx, "app", approved(got, certificatesv1.CertificateDenied), metav1.UpdateOptions{})
	wantInvalid(t, "approved and denied", err, "Approved and Denied conditions are mutually exclusive")

	// Issuing needs sign on the signer: bob has it, jane has not.
	issued := got.DeepCopy()
	issued.Status.Certificate = certPEM(t)
	_, err = jane.UpdateStatus(e.ctx, issued, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `user not permitted to sign requests with signerName "example.com/app"`) {
		t.Fatalf("jane issuing: %v", err)
	}
	bad := got.DeepCopy()
	bad.Status.Certificate = []byte("not a certificate")
	_, err = bob.UpdateStatus(e.ctx, bad, metav1.UpdateOptions{})
	wantInvalid(t, "garbage certificate", err, `status.certificate: Invalid value: "<certificate data>": must contain at least one CERTIFICATE PEM block`)
	if got, err = bob.UpdateStatus(e.ctx, issued, metav1.UpdateOptions{}); err != nil || len(got.Status.Certificate) == 0 {
		t.Fatalf("bob issuing: %v", err)
	}
	again := got.DeepCopy()
	again.Status.Certificate = certPEM(t)
	_, err = bob.UpdateStatus(e.ctx, again, metav1.UpdateOptions{})
	wantInvalid(t, "certificate replaced", err, "status.certificate: Forbidden: updates may not modify existing certificate content")

	// An update of the request itself keeps its spec and status.
	changed := got.DeepCopy()
	changed.Spec.SignerName, changed.Status.Certificate, changed.Labels = "example.com/other", nil, map[string]string{"team": "a"}
	if got, err = jane.Update(e.ctx, changed, metav1.UpdateOptions{}); err != nil || got.Spec.SignerName != "example.com/app" || len(got.Status.Certificate) == 0 || got.Labels["team"] != "a" {
		t.Fatalf("update: %v %+v", err, got)
	}

	// A request to another domain's signer is not bob's to approve.
	other, err := jane.Create(e.ctx, newCSR(t, "other", "other.com/app"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.UpdateApproval(e.ctx, "other", approved(other, certificatesv1.CertificateApproved), metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `user not permitted to approve requests with signerName "other.com/app"`) {
		t.Fatalf("bob approving other.com: %v", err)
	}

	// No client certificate for the API server in system:masters.
	masters := newCSR(t, "masters", certificatesv1.KubeAPIServerClientSignerName)
	masters.Spec.Request = csrPEM(t, "root", "system:masters")
	_, err = jane.Create(e.ctx, masters, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed") {
		t.Fatalf("system:masters request: %v", err)
	}

	for _, c := range []struct {
		name string
		edit func(*certificatesv1.CertificateSigningRequest)
		want []string
	}{
		{"garbage request", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = []byte("hello") },
			[]string{"spec.request: Invalid value", "PEM block type must be CERTIFICATE REQUEST"}},
		{"signer without path", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example" },
			[]string{`spec.signerName: Invalid value: "example": must be a fully qualified domain and path of the form 'example.com/signer-name'`}},
		{"signer one label", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "example/app" },
			[]string{`spec.signerName: Invalid value: "example": should be a domain with at least two segments separated by dots`}},
		{"legacy signer", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "kubernetes.io/legacy-unknown" },
			[]string{"the legacy signerName is not allowed via this API version"}},
		{"short duration", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = ptr.To(int32(60)) },
			[]string{"spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)"}},
		{"no usages", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = nil }, []string{"spec.usages: Required value"}},
		{"odd usages", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{"client auth", "client auth", "flying"}
		}, []string{`spec.usages[1]: Duplicate value: "client auth"`, `spec.usages[2]: Unsupported value: "flying"`}},
	} {
		x := newCSR(t, "bad", "example.com/app")
		c.edit(x)
		_, err := jane.Create(e.ctx, x, metav1.CreateOptions{})
		wantInvalid(t, c.name, err, c.want...)
	}
}

func TestCertificateSigningRequestTable(t *testing.T) {
	e := newTestEnv(t)
	c := newCSR(t, "node-csr-1", "example.com/app")
	c.Spec.ExpirationSeconds = ptr.To(int32(86400))
	csrs := e.cs.CertificatesV1().CertificateSigningRequests()
	csr := must(csrs.Create(e.ctx, c, metav1.CreateOptions{}))
	requestor := csr.Spec.Username
	if requestor == "" {
		t.Fatal("no requester recorded")
	}
	csr = must(csrs.UpdateApproval(e.ctx, csr.Name, approved(csr, certificatesv1.CertificateApproved), metav1.UpdateOptions{}))
	csr.Status.Certificate = certPEM(t)
	must(csrs.UpdateStatus(e.ctx, csr, metav1.UpdateOptions{}))
	checkTable(t, getTable(t, e, "/apis/certificates.k8s.io/v1/certificatesigningrequests/node-csr-1"),
		[]string{"NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"},
		[]any{"node-csr-1", recent, "example.com/app", requestor, "24h", "Approved,Issued"})
}
