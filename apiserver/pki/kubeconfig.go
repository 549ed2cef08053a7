package pki

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigName names the cluster, user and context in kubeconfigs bonsai
// writes, so that merging one into ~/.kube/config does not clobber another
// cluster's "default".
const KubeconfigName = "bonsai"

// Kubeconfig renders a kubeconfig for server that trusts caPEM and
// authenticates with the client certificate certPEM/keyPEM, all embedded so
// the file works wherever it is copied.
func Kubeconfig(server string, caPEM, certPEM, keyPEM []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[KubeconfigName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[KubeconfigName] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[KubeconfigName] = &clientcmdapi.Context{Cluster: KubeconfigName, AuthInfo: KubeconfigName}
	cfg.CurrentContext = KubeconfigName
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig: %w", err)
	}
	return out, nil
}

// WriteKubeconfig writes a kubeconfig (see Kubeconfig) to path with mode
// 0600: it holds a private key.
func WriteKubeconfig(path, server string, caPEM, certPEM, keyPEM []byte) error {
	data, err := Kubeconfig(server, caPEM, certPEM, keyPEM)
	if err != nil {
		return err
	}
	return writeFile(path, data, 0o600)
}
