package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

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

// startKubeletAPI serves this host's kubelet API on ln until ctx ends,
// with the node's figures sampled for /stats/summary.
// Only the API server's kubelet-client identity and system:masters may
// call it. rt is nil for a node without containers (--runtime=simulated);
// states are the agent's pods.
func startKubeletAPI(ctx context.Context, cfg *serverConfig, ln net.Listener, certs *pki.Certs, clk clock.PassiveClock, rt cri.Runtime, states *kubelet.PodStates, imageFS string, local *localStats, log *slog.Logger) *kubelet.StatsSampler {
	// Sampled at least as often as the metrics API scrapes, so that
	// each scrape has a new point.
	interval := min(cfg.HousekeepingInterval, cfg.MetricResolution)
	stats := kubelet.NewStatsSampler(kubelet.StatsConfig{NodeName: cfg.NodeName, Pods: states.StatsPods, Runtime: rt, RootDir: cfg.DataDir, ImageFsDir: imageFS,
		Interval: interval, VolumeStatsInterval: cfg.VolumeStatsPeriod, MemoryCapacity: cfg.Eviction.MemoryCapacity, Logger: log})
	local.set(stats)
	go stats.Run(ctx)
	srv := kubelet.NewServer(kubelet.ServerConfig{
		Runtime: rt, GetCertificate: certs.KubeletServing.GetCertificate, Now: clk.Now, ClientCAs: certs.CA.Pool(),
		AuthorizedUsers: []string{pki.KubeletClientUser}, Waiting: states.Waiting, Pods: states.Pods, Stats: stats, Logger: log,
	})
	go func() {
		if err := srv.Serve(ctx, ln); err != nil {
			log.Error("kubelet API stopped", "err", err)
		}
	}()
	return stats
}
