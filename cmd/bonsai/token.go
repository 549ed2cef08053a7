package main

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/kubelet/tlsbootstrap"
)

// defaultBootstrapGroup is the extra group of tokens made without
// --groups, for the node bootstrap role agents will be bound to.
const defaultBootstrapGroup = authz.GroupDefaultNodeToken

// tokenOptions are the flags of `bonsai token create`.
type tokenOptions struct {
	dataDir, kubeconfig, description string
	ttl                              time.Duration
	groups, usages                   []string
}

func newTokenCmd(stdout io.Writer) *cobra.Command {
	o := &tokenOptions{}
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage bootstrap tokens (bearer tokens agents join with)",
	}
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a bootstrap token and print it as a join token",
		Long: "Creates the Secret bootstrap-token-<id> (type bootstrap.kubernetes.io/token) in kube-system and prints the join token K10<CA hash>::<id>.<secret>, " +
			"where the CA hash is the SHA-256 of the cluster CA's public key (kubeadm's --discovery-token-ca-cert-hash): `bonsai agent --token` checks the server's CA against it. " +
			"The token authenticates as system:bootstrap:<id> in system:bootstrappers and --groups until it expires or its Secret is deleted; " +
			"with the default group it may ask for a node client certificate, which the server approves.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			secret, token, err := o.secret(time.Now())
			if err != nil {
				return err
			}
			path := o.kubeconfig
			if path == "" {
				path = filepath.Join(o.dataDir, "kubeconfig.yaml")
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				return fmt.Errorf("--kubeconfig %s: %v", path, err)
			}
			ca, err := kubeconfigCA(cfg)
			if err != nil {
				return fmt.Errorf("--kubeconfig %s: %v", path, err)
			}
			cs, err := client.NewClientset(cfg)
			if err != nil {
				return err
			}
			if _, err := cs.Core.Secrets(metav1.NamespaceSystem).Create(cmd.Context(), secret, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating the token's Secret: %v", err)
			}
			fmt.Fprintln(stdout, tlsbootstrap.JoinToken(ca, token))
			return nil
		},
	}
	f := create.Flags()
	f.StringVar(&o.dataDir, "data-dir", "/var/lib/bonsai", "bonsai's data directory, whose admin kubeconfig is used")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of a user allowed to create Secrets in kube-system (default <data-dir>/kubeconfig.yaml)")
	f.DurationVar(&o.ttl, "ttl", 24*time.Hour, "how long the token lives; 0: it never expires")
	f.StringVar(&o.description, "description", "", "what the token is for, kept in its Secret")
	f.StringSliceVar(&o.groups, "groups", []string{defaultBootstrapGroup}, "extra groups the token authenticates in; each must start with system:bootstrappers:")
	f.StringSliceVar(&o.usages, "usages", []string{"signing", "authentication"}, "what the token may be used for: signing, authentication")
	cmd.AddCommand(create)
	return cmd
}

// secret builds the token's Secret and the token, checking the flags.
func (o *tokenOptions) secret(now time.Time) (*corev1.Secret, string, error) {
	if o.ttl < 0 {
		return nil, "", fmt.Errorf("--ttl %v: must not be negative", o.ttl)
	}
	for _, g := range o.groups {
		if !strings.HasPrefix(g, authn.GroupBootstrappers+":") {
			return nil, "", fmt.Errorf("--groups: %q must start with %q", g, authn.GroupBootstrappers+":")
		}
	}
	if len(o.usages) == 0 {
		return nil, "", errors.New("--usages: at least one of signing, authentication")
	}
	for _, u := range o.usages {
		if u != "signing" && u != "authentication" {
			return nil, "", fmt.Errorf("--usages: %q is not one of signing, authentication", u)
		}
	}
	id, err := randomToken(6)
	if err != nil {
		return nil, "", err
	}
	sec, err := randomToken(16)
	if err != nil {
		return nil, "", err
	}
	data := map[string]string{authn.BootstrapTokenIDKey: id, authn.BootstrapTokenSecretKey: sec}
	if o.description != "" {
		data[authn.BootstrapTokenDescriptionKey] = o.description
	}
	if o.ttl > 0 {
		data[authn.BootstrapTokenExpirationKey] = now.Add(o.ttl).UTC().Format(time.RFC3339)
	}
	if len(o.groups) > 0 {
		data[authn.BootstrapTokenExtraGroupsKey] = strings.Join(o.groups, ",")
	}
	for _, u := range o.usages {
		data[authn.BootstrapTokenUsagePrefix+u] = "true"
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: authn.BootstrapTokenSecretPrefix + id, Namespace: metav1.NamespaceSystem},
		Type:       authn.BootstrapTokenSecretType,
		StringData: data,
	}, id + "." + sec, nil
}

// randomToken is n characters of [a-z0-9], as bootstrap tokens use.
func randomToken(n int) (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", err
		}
		b[i] = alphabet[k.Int64()]
	}
	return string(b), nil
}

// kubeconfigCA is the CA a kubeconfig trusts: the cluster CA for
// bonsai's admin kubeconfig.
func kubeconfigCA(cfg *rest.Config) (*x509.Certificate, error) {
	data := cfg.TLSClientConfig.CAData
	if len(data) == 0 && cfg.TLSClientConfig.CAFile != "" {
		var err error
		if data, err = os.ReadFile(cfg.TLSClientConfig.CAFile); err != nil {
			return nil, err
		}
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("it names no certificate authority, whose hash the join token carries")
	}
	return x509.ParseCertificate(block.Bytes)
}
