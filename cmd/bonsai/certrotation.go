package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/client"
)

// testClockEnv names a file holding a Go duration (for example 8760h or
// -24h) by which the certificates' clock runs ahead of the real one. It
// is for tests only: they move a running server years ahead to see its
// certificates renewed. The file is read at every look at the clock.
const testClockEnv = "BONSAI_TEST_CLOCK_OFFSET_FILE"

// certClock is the clock certificates are issued, renewed and checked
// by: the real one, unless a test moves it.
func certClock() clock.PassiveClock {
	if path := os.Getenv(testClockEnv); path != "" {
		return offsetClock{path: path}
	}
	return clock.RealClock{}
}

// offsetClock is the real clock moved by the duration in a file.
type offsetClock struct{ path string }

func (c offsetClock) Now() time.Time {
	now := time.Now()
	data, err := os.ReadFile(c.path)
	if err != nil {
		return now
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(data)))
	if err != nil {
		return now
	}
	return now.Add(d)
}

func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// openCerts loads or issues the server's certificates: the API server's,
// the admin's, the front proxy's, and the kubelet API's, valid for the
// names and addresses the API server's certificate has plus the node
// name (the API server dials the node's InternalIP).
func openCerts(cfg *serverConfig, sans pki.SANs, clk clock.PassiveClock) (*pki.Certs, error) {
	ks := pki.SANs{DNSNames: append(slices.Clone(sans.DNSNames), cfg.NodeName), IPs: sans.IPs}
	return pki.Open(pki.Options{Dir: filepath.Join(cfg.DataDir, "tls"), SANs: sans, KubeletSANs: &ks, Clock: clk})
}

// rewriteKubeconfigsOnRenew keeps the admin kubeconfigs on disk holding
// the admin certificate in force: when it is renewed, each is replaced
// atomically before the renewing handshake goes on, so a client that
// reads the file while it connects finds the new certificate.
func rewriteKubeconfigsOnRenew(certs *pki.Certs, paths []string, serverURL string, log *slog.Logger) {
	certs.OnRenew(func(renewed []*pki.KeyPair) {
		names := make([]string, 0, len(renewed))
		for _, p := range renewed {
			names = append(names, p.CertFile)
		}
		log.Info("renewed certificates", "files", names, "dir", certs.Dir())
		if !slices.Contains(renewed, certs.Admin) {
			return
		}
		certPEM, keyPEM := certs.Admin.PEM()
		for _, path := range paths {
			if err := pki.WriteKubeconfig(path, serverURL, certs.CA.CertPEM, certPEM, keyPEM); err != nil {
				log.Error("admin kubeconfig not rewritten with the renewed certificate", "path", path, "err", err)
			}
		}
	})
}

// certMonitorUser records the certificate events.
var certMonitorUser = &authn.User{Name: "system:bonsai-cert-monitor", Groups: []string{"system:masters", authn.GroupAuthenticated}}

// certEventEvery is how often one certificate near its end is reported
// again while it stays there.
const certEventEvery = 24 * time.Hour

// startCertRotation renews the certificates as they fall due until ctx
// ends, and reports one near its end (a leaf that could not be renewed,
// a CA in its last year) as a Warning event on the Node, with k3s's
// reasons, and in the bonsai_certificate_expiration_timestamp_seconds
// gauge.
func startCertRotation(ctx context.Context, cfg *serverConfig, certs *pki.Certs, api *apiserver.Server, log *slog.Logger) error {
	if err := api.MetricsRegisterer().Register(certs.Collector()); err != nil {
		return fmt.Errorf("certificate metrics: %w", err)
	}
	// The API server's calls to kubelets and to aggregated API servers
	// use a renewed client certificate at once, not when their
	// kept-alive connections end.
	certs.OnRenew(func(renewed []*pki.KeyPair) {
		if slices.Contains(renewed, certs.KubeletClient) {
			api.CloseKubeletConnections()
		}
		if certs.FrontProxy != nil && slices.Contains(renewed, certs.FrontProxy.Client) {
			api.CloseAggregatedConnections()
		}
	})
	cs, err := kubernetes.NewForConfig(api.ClientConfig(certMonitorUser))
	if err != nil {
		return err
	}
	recorder := client.NewRecorder(ctx, cs.CoreV1().RESTClient(), "bonsai-cert-monitor")
	// As the kubelet refers to its Node in events.
	node := &corev1.ObjectReference{Kind: "Node", Name: cfg.NodeName, UID: types.UID(cfg.NodeName)}
	var mu sync.Mutex
	var lastFailure error
	reported := map[string]time.Time{} // by file and NotAfter
	go certs.Run(ctx, pki.RunOptions{
		Interval: pki.DefaultCheckInterval,
		Failed: func(err error) {
			mu.Lock()
			lastFailure = err
			mu.Unlock()
			log.Error("certificates not renewed; retrying", "err", err)
		},
		Expiring: func(list []pki.Expiring) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range list {
				key := e.File + "@" + e.NotAfter.UTC().Format(time.RFC3339)
				if at, ok := reported[key]; ok && time.Since(at) < certEventEvery {
					continue
				}
				reported[key] = time.Now()
				if e.CA {
					recorder.Eventf(node, corev1.EventTypeWarning, "CACertificateExpirationWarning",
						"Certificate Authority certificate %s (%s) expires at %s; CAs are not renewed: plan a new one", e.File, e.Subject, e.NotAfter.UTC().Format(time.RFC3339))
					log.Warn("CA certificate expires within a year", "file", e.File, "notAfter", e.NotAfter)
					continue
				}
				msg := fmt.Sprintf("certificate %s (%s) expires at %s and was not renewed", e.File, e.Subject, e.NotAfter.UTC().Format(time.RFC3339))
				switch {
				case e.WithCA:
					msg = fmt.Sprintf("certificate %s (%s) expires at %s with its CA, which is not renewed", e.File, e.Subject, e.NotAfter.UTC().Format(time.RFC3339))
				case lastFailure != nil:
					msg += ": " + lastFailure.Error()
				}
				recorder.Event(node, corev1.EventTypeWarning, "CertificateExpirationWarning", msg)
				log.Warn("certificate expires within 30 days", "file", e.File, "notAfter", e.NotAfter)
			}
		},
	})
	return nil
}

// kubeletClientTLS is how the API server calls kubelets: as
// pki.KubeletClientUser, trusting only kubelet certificates of the CA,
// with the client certificate in force at each handshake.
func kubeletClientTLS(certs *pki.Certs, clk clock.PassiveClock) *tls.Config {
	return &tls.Config{GetClientCertificate: certs.KubeletClient.GetClientCertificate, RootCAs: certs.CA.Pool(), Time: clk.Now, MinVersion: tls.VersionTLS12}
}
