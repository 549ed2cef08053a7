package pki

import (
	"crypto/x509"
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

// addKubeletPairs adds what the API server and this host's kubelet need
// to talk: the API server's client certificate and the kubelet's serving
// certificate for exactly sans, both from the cluster CA.
func (c *Certs) addKubeletPairs(sans SANs) {
	ca := c.CA
	// k3s rotates the API server's kubelet client with the API server.
	c.KubeletClient = c.newPair("api-server", KubeletClientCertFile, KubeletClientKeyFile, ca,
		func(leaf *x509.Certificate) bool {
			return hasExtKeyUsage(leaf, x509.ExtKeyUsageClientAuth) &&
				leaf.Subject.CommonName == KubeletClientUser && len(leaf.Subject.Organization) == 0
		},
		func() ([]byte, []byte, error) { return ca.IssueClient(KubeletClientUser, nil) })
	want := sans.normalize()
	c.KubeletServing = c.newPair("kubelet", KubeletServingCertFile, KubeletServingKeyFile, ca,
		func(leaf *x509.Certificate) bool {
			return hasExtKeyUsage(leaf, x509.ExtKeyUsageServerAuth) && sansOf(leaf).equal(want)
		},
		func() ([]byte, []byte, error) { return ca.IssueServing("kubelet", want) })
}
