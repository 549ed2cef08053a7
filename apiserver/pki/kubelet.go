package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
)

// Files of the kubelet API's certificates, next to the others.
const (
	KubeletClientCertFile  = "apiserver-kubelet-client.crt"
	KubeletClientKeyFile   = "apiserver-kubelet-client.key"
	KubeletServingCertFile = "kubelet-serving.crt"
	KubeletServingKeyFile  = "kubelet-serving.key"
)

// KubeletClientUser is who the API server is to kubelets (kubeadm's name
// for it). It is in no group: the certificate opens kubelets, not the API.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// KubeletCerts are what the API server and this host's kubelet need to
// talk: the API server's client certificate and the kubelet's serving
// certificate, both from the cluster CA.
type KubeletCerts struct {
	Client, Serving tls.Certificate
	// Issued names the files (re)written, for the log.
	Issued []string
}

// EnsureKubelet makes dir hold the kubelet client and serving
// certificates, reusing those still good; the serving one is for exactly
// sans.
func EnsureKubelet(dir string, ca *Authority, sans SANs) (*KubeletCerts, error) {
	c := &Certs{}
	clientCert, clientKey, err := ensureLeaf(dir, KubeletClientCertFile, KubeletClientKeyFile, ca, c,
		func(leaf *x509.Certificate) bool {
			return hasExtKeyUsage(leaf, x509.ExtKeyUsageClientAuth) &&
				leaf.Subject.CommonName == KubeletClientUser && len(leaf.Subject.Organization) == 0
		},
		func() ([]byte, []byte, error) { return ca.IssueClient(KubeletClientUser, nil) })
	if err != nil {
		return nil, err
	}
	want := sans.normalize()
	servingCert, servingKey, err := ensureLeaf(dir, KubeletServingCertFile, KubeletServingKeyFile, ca, c,
		func(leaf *x509.Certificate) bool {
			return hasExtKeyUsage(leaf, x509.ExtKeyUsageServerAuth) && sansOf(leaf).equal(want)
		},
		func() ([]byte, []byte, error) { return ca.IssueServing("kubelet", want) })
	if err != nil {
		return nil, err
	}
	out := &KubeletCerts{Issued: slices.Clone(c.Issued)}
	if out.Client, err = tls.X509KeyPair(clientCert, clientKey); err != nil {
		return nil, fmt.Errorf("certificates: kubelet client: %w", err)
	}
	if out.Serving, err = tls.X509KeyPair(servingCert, servingKey); err != nil {
		return nil, fmt.Errorf("certificates: kubelet serving: %w", err)
	}
	return out, nil
}
