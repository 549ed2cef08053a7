package tlsbootstrap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/client"
)

// File names in the node's certificate directory.
const (
	CAFile      = "ca.crt"
	ClientFile  = "kubelet-client-current.pem"
	ServingFile = "kubelet-server-current.pem"
)

// Config is what joining needs.
type Config struct {
	// Server is the API server, https://HOST:PORT.
	Server string
	// Token is the join token; it may be empty when the node already
	// has a client certificate from an earlier join.
	Token    string
	NodeName string
	// Dir keeps the CA and the node's certificates.
	Dir string
	// Lifetime is the validity asked for (0: the signer's default).
	Lifetime time.Duration
	// ServingAddresses are the node's addresses and names, for its
	// serving certificate.
	ServingAddresses func() (ips []net.IP, names []string)
	Logger           *slog.Logger
}

// Node is a joined node's identity.
type Node struct {
	CAPEM []byte
	CA    *x509.CertPool
	// Client is system:node:<name>'s client certificate, Serving the
	// kubelet API's.
	Client, Serving *Pair
	// RESTConfig reaches the API server as the node, with whatever
	// client certificate is current.
	RESTConfig *rest.Config
}

// Join makes the node's identity: the CA (pinned by the token, or
// stored by an earlier join) and a client certificate (stored, or asked
// for with the token's bootstrap identity). The serving certificate is
// asked for by Run, once the node has registered its addresses.
func Join(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("node name is empty")
	}
	caPath := filepath.Join(cfg.Dir, CAFile)
	caPEM, err := os.ReadFile(caPath)
	var token string
	if cfg.Token != "" {
		hash, tok, perr := ParseJoinToken(cfg.Token)
		if perr != nil {
			return nil, fmt.Errorf("--token: %w", perr)
		}
		token = tok
		if err == nil {
			// Joined before: the stored CA must be the token's.
			if ca, cerr := parseCert(caPEM); cerr != nil || CAHash(ca) != hash {
				return nil, fmt.Errorf("%s is not the CA the token pins: this node joined another cluster (remove %s to join this one)", caPath, cfg.Dir)
			}
		} else {
			if caPEM, err = discoverWhenUp(ctx, cfg, hash); err != nil {
				return nil, err
			}
			if err := writeAtomic(caPath, caPEM); err != nil {
				return nil, err
			}
		}
	} else if err != nil {
		return nil, errors.New("--token is required to join: this node has no certificates yet")
	}
	ca, err := parseCert(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caPath, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	n := &Node{CAPEM: caPEM, CA: pool}

	tr := utilnet.SetTransportDefaults(&http.Transport{})
	n.Client = &Pair{
		Path: filepath.Join(cfg.Dir, ClientFile), Signer: certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		Template: func() *x509.CertificateRequest {
			return &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + cfg.NodeName, Organization: []string{"system:nodes"}}}
		},
		Lifetime: cfg.Lifetime, CA: pool, Logger: cfg.Logger,
		// Connections made with the old certificate go; new ones
		// present the new one.
		Rotated: tr.CloseIdleConnections,
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, GetClientCertificate: n.Client.GetClientCertificate}
	n.RESTConfig = &rest.Config{Host: cfg.Server, Transport: tr, UserAgent: "bonsai-agent/" + cfg.NodeName}
	nodeClient := func() (*client.Clientset, error) { return client.NewClientset(n.RESTConfig) }

	if !n.Client.Load(time.Now()) || n.Client.Current().Leaf.Subject.CommonName != "system:node:"+cfg.NodeName {
		if token == "" {
			return nil, errors.New("--token is required: this node's client certificate is missing or expired")
		}
		n.Client.Client = func() (*client.Clientset, error) {
			return client.NewClientset(&rest.Config{Host: cfg.Server, BearerToken: token,
				TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}, UserAgent: "bonsai-agent/" + cfg.NodeName})
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := n.Client.Renew(rctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("kubelet TLS bootstrap: %w", err)
		}
	}
	// From now on the node renews its own certificate (selfnodeclient).
	n.Client.Client = nodeClient

	n.Serving = &Pair{
		Path: filepath.Join(cfg.Dir, ServingFile), Signer: certificatesv1.KubeletServingSignerName,
		Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		Template: func() *x509.CertificateRequest {
			r := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + cfg.NodeName, Organization: []string{"system:nodes"}}}
			if cfg.ServingAddresses != nil {
				r.IPAddresses, r.DNSNames = cfg.ServingAddresses()
			}
			return r
		},
		Lifetime: cfg.Lifetime, CA: pool, Logger: cfg.Logger, Client: nodeClient,
	}
	n.Serving.Load(time.Now())
	return n, nil
}

// Run keeps both certificates renewed until ctx ends; the serving one is
// asked for at once when there is none.
func (n *Node) Run(ctx context.Context) {
	go n.Serving.Run(ctx)
	n.Client.Run(ctx)
}

func parseCert(data []byte) (*x509.Certificate, error) { return parsePEM(data) }

// discoverWhenUp is DiscoverCA, retried every second while nothing
// answers at the server's address (an agent started with or before its
// server); any other failure, a CA mismatch first, ends it.
func discoverWhenUp(ctx context.Context, cfg Config, hash [32]byte) ([]byte, error) {
	for logged := false; ; {
		caPEM, err := DiscoverCA(ctx, cfg.Server, hash)
		var op *net.OpError
		if err == nil || !errors.As(err, &op) || op.Op != "dial" {
			return caPEM, err
		}
		if !logged && cfg.Logger != nil {
			cfg.Logger.Info("waiting for the server", "server", cfg.Server, "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("server %s: %w", cfg.Server, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
