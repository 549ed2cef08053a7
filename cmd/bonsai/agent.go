package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"bonsai.dev/bonsai/kubelet/containerd"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/netplugin"
)

// connectRuntime reaches containerd at --container-runtime-endpoint or,
// when that socket is absent and containerd is installed, starts one of
// bonsai's own under <data-dir>/containerd. stop closes the connection and
// stops a containerd bonsai started; containers keep running either way.
func connectRuntime(ctx context.Context, cfg *serverConfig, log *slog.Logger) (cri.Runtime, func(), error) {
	endpoint := cfg.RuntimeEndpoint
	var daemon *containerd.Daemon
	if _, err := os.Stat(endpoint); errors.Is(err, os.ErrNotExist) {
		d, derr := containerd.StartDaemon(ctx, filepath.Join(cfg.DataDir, "containerd"), log)
		if derr != nil {
			return nil, nil, fmt.Errorf("container runtime: %s does not exist and bonsai could not start containerd itself: %v (install the Debian packages containerd and runc, or use --runtime=simulated or --disable-agent)", endpoint, derr)
		}
		daemon, endpoint = d, d.Socket
		log.Info("started containerd as a child of bonsai", "socket", d.Socket, "pid", d.PID(), "log", filepath.Join(d.Dir, "containerd.log"))
	}
	regs, err := containerd.LoadRegistries(filepath.Join(cfg.DataDir, "registries.yaml"))
	if err != nil {
		if daemon != nil {
			daemon.Stop()
		}
		return nil, nil, err
	}
	rt, err := containerd.New(ctx, containerd.Config{
		Endpoint: endpoint, Namespace: "k8s.io", StateDir: filepath.Join(cfg.DataDir, "agent", "io"),
		Logger: log, Hosts: regs,
	})
	if err != nil {
		if daemon != nil {
			daemon.Stop()
		}
		return nil, nil, err
	}
	importImages(ctx, rt, filepath.Join(cfg.DataDir, "images"), log)
	stop := func() {
		rt.Close()
		if daemon != nil {
			daemon.Stop()
		}
	}
	return rt, stop, nil
}

// podNetwork is the built-in pod network's configuration for this host.
func podNetwork(cfg *serverConfig) *netplugin.Config {
	netns := "/run/bonsai/netns"
	if cfg.PodBridge != defaultPodBridge {
		netns = filepath.Join("/run/bonsai", cfg.PodBridge, "netns")
	}
	return &netplugin.Config{
		DataDir: filepath.Join(cfg.DataDir, "agent", "net"), NetnsDir: netns,
		Bridge: cfg.PodBridge, Table: cfg.PodBridge, ClusterCIDR: cfg.ClusterCIDR,
	}
}

// clusterDNS is the cluster DNS service's address: the tenth of the
// service range (10.43.0.10 by default).
func clusterDNS(cidr netip.Prefix) string {
	a := cidr.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a.String()
}
