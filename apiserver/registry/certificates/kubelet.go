package certificates

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
)

// What a kubelet's requests must look like, as certificates.k8s.io/v1
// defines the kubernetes.io/kube-apiserver-client-kubelet and
// kubernetes.io/kubelet-serving signers: the subject is the node
// (system:node:<name> in exactly system:nodes), and the usages are
// exactly digital signature and client auth (client) or server auth
// (serving), with key encipherment for RSA keys. The signers refuse
// anything else, and the approver only approves what passes.

const (
	// NodeUserPrefix starts a node's user name.
	NodeUserPrefix = "system:node:"
	// NodesGroup is the group of every node.
	NodesGroup = "system:nodes"
)

// ValidateKubeletClientRequest checks a request for the signer
// kubernetes.io/kube-apiserver-client-kubelet.
func ValidateKubeletClientRequest(req *x509.CertificateRequest, usages []certificatesv1.KeyUsage) error {
	if err := validateNodeSubject(req); err != nil {
		return err
	}
	if len(req.DNSNames) > 0 || len(req.EmailAddresses) > 0 || len(req.IPAddresses) > 0 || len(req.URIs) > 0 {
		return errors.New("DNS, email, IP and URI subjectAltNames are not allowed")
	}
	return exactUsages(usages, certificatesv1.UsageClientAuth)
}

// ValidateKubeletServingRequest checks a request for the signer
// kubernetes.io/kubelet-serving.
func ValidateKubeletServingRequest(req *x509.CertificateRequest, usages []certificatesv1.KeyUsage) error {
	if err := validateNodeSubject(req); err != nil {
		return err
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return errors.New("email and URI subjectAltNames are not allowed")
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return errors.New("DNS or IP subjectAltName is required")
	}
	return exactUsages(usages, certificatesv1.UsageServerAuth)
}

func validateNodeSubject(req *x509.CertificateRequest) error {
	if !slices.Equal(req.Subject.Organization, []string{NodesGroup}) {
		return fmt.Errorf("subject organization is not %s", NodesGroup)
	}
	if !strings.HasPrefix(req.Subject.CommonName, NodeUserPrefix) || len(req.Subject.CommonName) == len(NodeUserPrefix) {
		return fmt.Errorf("subject common name does not begin with %s", NodeUserPrefix)
	}
	return nil
}

// exactUsages accepts {digital signature, auth} or {digital signature,
// key encipherment, auth}, in any order, each once.
func exactUsages(usages []certificatesv1.KeyUsage, auth certificatesv1.KeyUsage) error {
	got := slices.Clone(usages)
	slices.Sort(got)
	for _, want := range [][]certificatesv1.KeyUsage{
		{certificatesv1.UsageDigitalSignature, auth},
		{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, auth},
	} {
		slices.Sort(want)
		if slices.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("usages did not match [%s %s] or [%s %s %s]", certificatesv1.UsageDigitalSignature, auth,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, auth)
}
