package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync/atomic"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/kubelet"
	"bonsai.dev/bonsai/kubelet/cri"
)

// localStats is the metrics API's source for this host's node: its
// kubelet's last sample, read in-process (no HTTPS round trip to
// itself). Other nodes' figures the API server reads from their kubelet
// API.
type localStats struct {
	node    string
	sampler atomic.Pointer[kubelet.StatsSampler]
}

func (l *localStats) set(s *kubelet.StatsSampler) { l.sampler.Store(s) }

func (l *localStats) Summary(_ context.Context, node string) (*statsapi.Summary, error) {
	s := l.sampler.Load()
	if node != l.node || s == nil {
		return nil, fmt.Errorf("no figures for node %q", node)
	}
	return s.Summary(), nil
}

// kubeletCerts issues (or reuses) the API server's kubelet-client
// certificate and this host's kubelet serving certificate, valid for the
// names and addresses the API server's own certificate has plus the node
// name: the API server dials the node's InternalIP.
func kubeletCerts(cfg *serverConfig, ca *pki.Authority, sans pki.SANs) (*pki.KubeletCerts, error) {
	ks := pki.SANs{DNSNames: append(slices.Clone(sans.DNSNames), cfg.NodeName), IPs: sans.IPs}
	return pki.EnsureKubelet(filepath.Join(cfg.DataDir, "tls"), ca, ks)
}

// kubeletClientTLS is how the API server calls kubelets: as
// pki.KubeletClientUser, trusting only kubelet certificates of the CA.
func kubeletClientTLS(certs *pki.KubeletCerts, ca *pki.Authority) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{certs.Client}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
}

// startKubeletAPI serves this host's kubelet API on ln until ctx ends,
// with the node's figures sampled for /stats/summary.
// Only the API server's kubelet-client identity and system:masters may
// call it. rt is nil for a node without containers (--runtime=simulated);
// states are the agent's pods.
func startKubeletAPI(ctx context.Context, cfg *serverConfig, ln net.Listener, certs *pki.KubeletCerts, ca *pki.Authority, rt cri.Runtime, states *kubelet.PodStates, imageFS string, local *localStats, log *slog.Logger) *kubelet.StatsSampler {
	// Sampled at least as often as the metrics API scrapes, so that
	// each scrape has a new point.
	interval := min(kubelet.DefaultStatsInterval, cfg.MetricResolution)
	stats := kubelet.NewStatsSampler(kubelet.StatsConfig{NodeName: cfg.NodeName, Runtime: rt, RootDir: cfg.DataDir, ImageFsDir: imageFS,
		Interval: interval, MemoryCapacity: cfg.Eviction.MemoryCapacity, Logger: log})
	local.set(stats)
	go stats.Run(ctx)
	srv := kubelet.NewServer(kubelet.ServerConfig{
		Runtime: rt, Cert: certs.Serving, ClientCAs: ca.Pool(),
		AuthorizedUsers: []string{pki.KubeletClientUser}, Waiting: states.Waiting, Pods: states.Pods, Stats: stats, Logger: log,
	})
	go func() {
		if err := srv.Serve(ctx, ln); err != nil {
			log.Error("kubelet API stopped", "err", err)
		}
	}()
	return stats
}
