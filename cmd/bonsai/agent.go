package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/deviceplugin"
	"bonsai.dev/bonsai/deviceplugin/generic"
	"bonsai.dev/bonsai/kubelet"
	"bonsai.dev/bonsai/kubelet/containerd"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/kubelet/dra"
	"bonsai.dev/bonsai/kubelet/pluginregistry"
	"bonsai.dev/bonsai/netplugin"
	"bonsai.dev/bonsai/netplugin/cni"
	"bonsai.dev/bonsai/netplugin/dns"
	"bonsai.dev/bonsai/netplugin/netpol"
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
		Logger: log, Hosts: regs, NoDefaultEndpoint: cfg.NoDefaultRegistry, CDISpecDirs: cfg.CDISpecDirs,
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

// netnsDir is where this host's pods' network namespaces are mounted,
// whichever network makes them.
func netnsDir(cfg *serverConfig) string {
	if cfg.PodBridge != defaultPodBridge {
		return filepath.Join("/run/bonsai", cfg.PodBridge, "netns")
	}
	return "/run/bonsai/netns"
}

// usesCNI resolves --pod-network: auto is cni when the conf dir holds a
// network configuration now.
func usesCNI(cfg *serverConfig) bool {
	switch cfg.PodNetwork {
	case "cni":
		return true
	case "auto":
		return cni.HasConfig(cfg.CNIConfDir)
	}
	return false
}

// cniHost is the CNI host's configuration for this host.
func cniHost(cfg *serverConfig) *cni.Config {
	c := &cni.Config{
		ConfDir: cfg.CNIConfDir, BinDirs: cfg.CNIBinDirs, NetnsDir: netnsDir(cfg),
		CacheDir: filepath.Join(cfg.DataDir, "agent", "cni"),
	}
	// The cluster DNS server listens there (startClusterDNS), on a dummy
	// link of its own since there is no bonsai bridge.
	c.LocalLink, c.LocalAddrs = localLinkName(cfg.PodBridge), []netip.Addr{netip.MustParseAddr(clusterDNS(cfg.ServiceCIDR))}
	return c
}

// localLinkName is the dummy link holding the node's own addresses in CNI
// mode: "<pod-bridge>-dns", within the 15 characters of an interface
// name.
func localLinkName(bridge string) string {
	if len(bridge) > 11 {
		bridge = bridge[:11]
	}
	return bridge + "-dns"
}

// podNetwork is the built-in pod network's configuration for this host.
func podNetwork(cfg *serverConfig) *netplugin.Config {
	c := &netplugin.Config{
		DataDir: filepath.Join(cfg.DataDir, "agent", "net"), NetnsDir: netnsDir(cfg),
		Bridge: cfg.PodBridge, Table: cfg.PodBridge, ClusterCIDR: cfg.ClusterCIDR, ClusterCIDRs: cfg.ClusterCIDRs,
	}
	// The cluster DNS server listens there (startClusterDNS): the first
	// service CIDR's, of the family of a cluster CIDR.
	a := netip.MustParseAddr(clusterDNS(cfg.ServiceCIDR))
	for _, p := range cfg.ClusterCIDRs {
		if p.Addr().Is4() == a.Is4() {
			c.LocalAddrs = []netip.Addr{a}
		}
	}
	return c
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
// keep working across a restart. The proxy programs the IPv4 family
// only: on a dual-stack cluster with IPv4 first it serves the IPv4
// cluster IPs, and on one whose primary family is IPv6 it does not run.
func startServiceProxy(ctx context.Context, cfg *serverConfig, api nodeAPI, log *slog.Logger) {
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
	nodeIP := advertiseAddress(cfg.BindAddress)
	px, err := proxy.New(proxy.Config{
		Client: cs, Informers: inf, NodeName: cfg.NodeName,
		NodeIPs:     []netip.Addr{nodeIP},
		ClusterCIDR: cfg.ClusterCIDR, ServiceCIDR: cfg.ServiceCIDR,
		NodePortAddresses: nodePortPrefixes(cfg, nodeIP, log),
		Bridge:            cfg.PodBridge, Logger: log, Metrics: api.MetricsRegisterer(),
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

// nodePortPrefixes is --nodeport-addresses for the IPv4 proxy: the node's
// address with "primary", else the IPv4 CIDRs (kube-proxy ignores those
// of the other family too); nil serves NodePorts on every local address.
func nodePortPrefixes(cfg *serverConfig, nodeIP netip.Addr, log *slog.Logger) []netip.Prefix {
	if cfg.NodePortPrimary {
		return []netip.Prefix{netip.PrefixFrom(nodeIP, nodeIP.BitLen())}
	}
	var out []netip.Prefix
	for _, p := range cfg.NodePortAddresses {
		if p.Addr().Is4() {
			out = append(out, p)
		}
	}
	if len(out) == 0 && len(cfg.NodePortAddresses) > 0 {
		log.Warn("--nodeport-addresses has no IPv4 CIDR: NodePorts are served on every local address", "nodeport-addresses", cfg.NodePortAddresses)
	}
	return out
}

// startNetworkPolicy enforces NetworkPolicies for this host's node's
// pods (the tables "<pod-bridge>-netpol", families ip and bridge), and
// returns what wraps the pod network so that each sandbox is policed
// before its containers run; nil when the enforcer cannot start, which
// the log says. On the built-in network it knows every pod's bridge
// port; with CNI plugins it finds, in each pod's namespace, where the
// pod meets the node, and polices those on a Linux bridge (the first
// one a pod is on) or on a routed veth, logging any other as not
// policed. Like the service proxy it leaves its tables in place when
// bonsai stops, so policies hold across a restart.
func startNetworkPolicy(ctx context.Context, cfg *serverConfig, api nodeAPI, withCNI bool, log *slog.Logger) func(netplugin.PodNetwork) netplugin.PodNetwork {
	if !cfg.ClusterCIDR.Addr().Is4() {
		log.Warn("network policies are NOT enforced: bonsai enforces them for IPv4 pods only", "cluster-cidr", cfg.ClusterCIDR)
		return nil
	}
	inf := client.NewInformers(api.ClientConfig(&authn.User{Name: authz.UserNetpol, Groups: []string{authn.GroupAuthenticated}}))
	bridge := cfg.PodBridge
	pc := netpol.Config{Informers: inf, NodeName: cfg.NodeName, Bridge: bridge, Table: netpol.TableName(bridge), Logger: log}
	if withCNI {
		pc.Bridge, pc.NetnsDir = "", netnsDir(cfg)
	} else {
		pc.PortName = func(uid string) string { return netplugin.VethName(bridge, uid) }
	}
	e, err := netpol.New(pc)
	if err != nil {
		log.Error("network policies are NOT enforced: the enforcer did not start", "err", err)
		return nil
	}
	inf.Start(ctx)
	go func() {
		if err := e.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("network policy enforcer stopped", "err", err)
		}
	}()
	if withCNI {
		log.Info("network policies: enforced for CNI pods on a Linux bridge or a routed veth of this host; any other pod is logged as NOT policed",
			"tables", "ip and bridge "+pc.Table)
	} else {
		log.Info("network policies: enforced on the built-in pod network", "tables", "ip and bridge "+pc.Table)
	}
	return e.Guard
}

// startClusterDNS serves cluster DNS on this node at the cluster DNS
// address, port 53, which the pod network puts on its bridge: pods reach
// it through their gateway, and the kube-dns Service (see
// ensureKubeDNSService) tells the service proxy to leave it alone. The
// address appears once the node has its pod CIDR and the network is up,
// so binding is retried until then.
func startClusterDNS(ctx context.Context, cfg *serverConfig, api nodeAPI, log *slog.Logger) {
	addr := netip.AddrPortFrom(netip.MustParseAddr(clusterDNS(cfg.ServiceCIDR)), 53)
	if !slices.ContainsFunc(cfg.ClusterCIDRs, func(p netip.Prefix) bool { return p.Addr().Is4() == addr.Addr().Is4() }) {
		log.Warn("cluster DNS not started: its address is of no cluster CIDR's family", "service-cidr", cfg.ServiceCIDR, "cluster-cidr", cfg.ClusterCIDRs)
		return
	}
	inf := client.NewInformers(api.ClientConfig(&authn.User{Name: authz.UserDNS, Groups: []string{authn.GroupAuthenticated}}))
	srv, err := dns.New(dns.Config{Informers: inf, Address: addr.String(), ClusterDomain: cfg.ClusterDomain, Logger: log.With("component", "dns")})
	if err != nil {
		log.Error("cluster DNS not started", "err", err)
		return
	}
	inf.Start(ctx)
	go func() {
		for {
			_, err := srv.Listen()
			if err == nil {
				break
			}
			if !errors.Is(err, syscall.EADDRNOTAVAIL) {
				log.Error("cluster DNS not started", "address", addr, "err", err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		log.Info("serving cluster DNS", "address", addr, "domain", cfg.ClusterDomain)
		if err := srv.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("cluster DNS stopped", "err", err)
		}
	}()
}

// ensureKubeDNSService creates kube-system/kube-dns at the cluster DNS
// address, for tools that look for it, whether or not this server runs
// a node.
func ensureKubeDNSService(ctx context.Context, cfg *serverConfig, rc *rest.Config) error {
	cs, err := client.NewClientset(rc)
	if err != nil {
		return err
	}
	return dns.EnsureService(ctx, cs.Core, netip.MustParseAddr(clusterDNS(cfg.ServiceCIDR)))
}

// startDevices runs the node's device manager on --kubelet-root-dir, its
// metrics in the API server's /metrics, and the built-in generic device
// plugin when devices.yaml configures it. A device manager that cannot
// start (the directory is not writable) leaves the node without devices,
// not without pods.
func startDevices(ctx context.Context, cfg *serverConfig, api nodeAPI, log *slog.Logger) *deviceplugin.Manager {
	dm := deviceplugin.New(deviceplugin.Config{RootDir: cfg.KubeletRootDir, Logger: log})
	if err := dm.Start(ctx); err != nil {
		log.Error("device plugins are not available on this node", "err", err)
		return nil
	}
	if err := api.RegisterMetrics(dm.Collectors()...); err != nil {
		log.Warn("device plugin metrics not served", "err", err)
	}
	if cfg.Devices != nil {
		generic.Run(ctx, cfg.Devices, dm.Dir(), log)
		if cfg.Devices.HasDRA() {
			startGenericDRA(ctx, cfg, api, log)
		}
	}
	return dm
}

// startGenericDRA serves the generic device plugin's `dra: true`
// resources as the DRA driver generic.bonsai.dev, through the same plugin
// registry as other drivers, its CDI specs in the last --cdi-spec-dir.
func startGenericDRA(ctx context.Context, cfg *serverConfig, api nodeAPI, log *slog.Logger) {
	rc, err := client.REST(api.ClientConfig(nodeUser(cfg)), "/apis", resourcev1.SchemeGroupVersion)
	if err != nil {
		log.Error("the generic DRA driver is not available", "err", err)
		return
	}
	cdiDir := containerd.DefaultCDISpecDirs[len(containerd.DefaultCDISpecDirs)-1]
	if n := len(cfg.CDISpecDirs); n > 0 {
		cdiDir = cfg.CDISpecDirs[n-1]
	}
	generic.RunDRA(ctx, cfg.Devices, generic.DRAConfig{
		NodeName: cfg.NodeName, RegistryDir: filepath.Join(cfg.KubeletRootDir, dra.RegistryDirName),
		PluginDir: filepath.Join(cfg.KubeletRootDir, "plugins", generic.DRADriverName), CDIDir: cdiDir, Resource: rc,
	}, log)
}

// nodeUser is this host's node identity.
func nodeUser(cfg *serverConfig) *authn.User {
	return &authn.User{Name: "system:node:" + cfg.NodeName, Groups: []string{"system:nodes", authn.GroupAuthenticated}}
}

// startDRA runs the node side of dynamic resource allocation on
// --kubelet-root-dir: DRA drivers register in <dir>/plugins_registry and
// prepare the claims of this node's pods; what is prepared is kept in
// <dir>/dra_manager_state across restarts. A manager that cannot start
// leaves pods with claims waiting, not the node without pods.
func startDRA(ctx context.Context, cfg *serverConfig, rc *rest.Config, reg *pluginregistry.Registry, log *slog.Logger) *dra.Manager {
	get, err := kubelet.ClaimGetter(rc)
	if err != nil {
		log.Error("DRA drivers are not available on this node", "err", err)
		return nil
	}
	m := dra.New(dra.Config{RootDir: cfg.KubeletRootDir, GetClaim: get, Registry: reg, Logger: log})
	if err := m.Start(ctx); err != nil {
		log.Error("DRA drivers are not available on this node", "err", err)
		return nil
	}
	return m
}
