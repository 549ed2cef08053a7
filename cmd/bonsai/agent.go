package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/kubelet/containerd"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/netplugin"
	"bonsai.dev/bonsai/netplugin/proxy"
)

// connectRuntime reaches containerd at --container-runtime-endpoint or,
// when that socket is absent and containerd is installed, starts one of
// bonsai's own under <data-dir>/containerd. stop closes the connection and
// stops a containerd bonsai started; containers keep running either way.
//
// imageFS is where that containerd keeps its images (its root).
func connectRuntime(ctx context.Context, cfg *serverConfig, log *slog.Logger) (rt cri.Runtime, stop func(), imageFS string, err error) {
	endpoint := cfg.RuntimeEndpoint
	imageFS = "/var/lib/containerd"
	var daemon *containerd.Daemon
	if _, err := os.Stat(endpoint); errors.Is(err, os.ErrNotExist) {
		d, derr := containerd.StartDaemon(ctx, filepath.Join(cfg.DataDir, "containerd"), log)
		if derr != nil {
			return nil, nil, "", fmt.Errorf("container runtime: %s does not exist and bonsai could not start containerd itself: %v (install the Debian packages containerd and runc, or use --runtime=simulated or --disable-agent)", endpoint, derr)
		}
		daemon, endpoint, imageFS = d, d.Socket, filepath.Join(d.Dir, "root")
		log.Info("started containerd as a child of bonsai", "socket", d.Socket, "pid", d.PID(), "log", filepath.Join(d.Dir, "containerd.log"))
	}
	regs, err := containerd.LoadRegistries(filepath.Join(cfg.DataDir, "registries.yaml"))
	if err != nil {
		if daemon != nil {
			daemon.Stop()
		}
		return nil, nil, "", err
	}
	crt, err := containerd.New(ctx, containerd.Config{
		Endpoint: endpoint, Namespace: "k8s.io", StateDir: filepath.Join(cfg.DataDir, "agent", "io"),
		Logger: log, Hosts: regs,
	})
	if err != nil {
		if daemon != nil {
			daemon.Stop()
		}
		return nil, nil, "", err
	}
	importImages(ctx, crt, filepath.Join(cfg.DataDir, "images"), log)
	stop = func() {
		crt.Close()
		if daemon != nil {
			daemon.Stop()
		}
	}
	return crt, stop, imageFS, nil
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

// startServiceProxy runs the nftables service proxy of this host's node
// (the table "<pod-bridge>-svc"): Services' cluster IPs, node ports,
// external IPs and load-balancer addresses reach their endpoints. Like
// kube-proxy it leaves its table in place when bonsai stops, so Services
// keep working across a restart. The built-in pod network is IPv4 only,
// and so is the proxy.
func startServiceProxy(ctx context.Context, cfg *serverConfig, api *apiserver.Server, log *slog.Logger) {
	if !cfg.ClusterCIDR.Addr().Is4() || !cfg.ServiceCIDR.Addr().Is4() {
		log.Warn("service proxy not started: it serves IPv4 clusters only", "cluster-cidr", cfg.ClusterCIDR, "service-cidr", cfg.ServiceCIDR)
		return
	}
	rc := api.ClientConfig(&authn.User{Name: "system:kube-proxy", Groups: []string{authn.GroupAuthenticated}})
	cs, err := client.NewClientset(rc)
	if err != nil {
		log.Error("service proxy not started", "err", err)
		return
	}
	inf := client.NewInformers(rc)
	px, err := proxy.New(proxy.Config{
		Client: cs, Informers: inf, NodeName: cfg.NodeName,
		NodeIPs:     []netip.Addr{advertiseAddress(cfg.BindAddress)},
		ClusterCIDR: cfg.ClusterCIDR, ServiceCIDR: cfg.ServiceCIDR,
		Bridge: cfg.PodBridge, Logger: log,
	})
	if err != nil {
		log.Error("service proxy not started", "err", err)
		return
	}
	inf.Start(ctx)
	go func() {
		if err := px.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("service proxy stopped", "err", err)
		}
	}()
}
