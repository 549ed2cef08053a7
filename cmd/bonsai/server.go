package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/apiserver/registry/core"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/kubelet"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/kubelet/pluginregistry"
	"bonsai.dev/bonsai/store"
)

// shutdownTimeout bounds how long in-flight requests may take to finish
// after SIGTERM; it stays well under the usual 30 s a service manager
// waits before SIGKILL.
const shutdownTimeout = 10 * time.Second

// runServer runs until SIGTERM or SIGINT. The start-up order makes every
// early failure leave the disk as it was: a busy port is found before the
// data dir is created, a busy data dir before anything is written in it.
func runServer(ctx context.Context, cfg *serverConfig, stderr io.Writer) error {
	log := newLogger(cfg.LogFormat, cfg.LogLevel, stderr)
	slog.SetDefault(log)
	klog.SetSlogLogger(log)

	if cfg.Cleanup {
		return cleanupHost(cfg, log)
	}

	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()

	ln, err := listen(cfg.BindAddress, cfg.Port)
	if err != nil {
		return err
	}
	defer ln.Close()
	var kubeletLn net.Listener
	if !cfg.DisableAgent {
		if kubeletLn, err = listen(cfg.BindAddress, cfg.KubeletPort); err != nil {
			return fmt.Errorf("--kubelet-port: %w", err)
		}
		defer kubeletLn.Close()
	}
	var ingressLns ingressListeners
	if cfg.Ingress.Enabled {
		if ingressLns, err = listenIngress(cfg.Ingress); err != nil {
			return err
		}
		defer ingressLns.Close()
	}

	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := tightenDataDir(cfg.DataDir, log); err != nil {
		return err
	}
	enc, err := setupEncryption(cfg, log)
	if err != nil {
		return err
	}
	if enc != nil {
		log.Info("encrypting stored objects at rest", "config", enc.Path)
	}

	_, err = os.Stat(filepath.Join(cfg.DataDir, "db", "MANIFEST"))
	hadStore := err == nil
	st, storeDesc, err := openStore(cfg, log)
	if err != nil {
		return err
	}
	storeOpen := true
	defer func() {
		if storeOpen {
			st.Close()
		}
	}()
	if err := snapshotBeforeUpgrade(ctx, cfg, st, hadStore, log); err != nil {
		return err
	}

	sans, err := pki.ServingSANs(cfg.ClusterDomain, cfg.ServiceCIDR, cfg.TLSSANs)
	if err != nil {
		return err
	}
	clk := certClock()
	certs, err := openCerts(cfg, sans, clk)
	if err != nil {
		return err
	}
	if len(certs.Issued) > 0 {
		log.Info("issued certificates", "files", certs.Issued, "dir", certs.Dir())
	}

	serverURL := "https://" + net.JoinHostPort(kubeconfigHost(cfg.BindAddress).String(), strconv.Itoa(cfg.Port))
	kubeconfigs := []string{filepath.Join(cfg.DataDir, "kubeconfig.yaml")}
	if cfg.WriteKubeconfig != "" {
		kubeconfigs = append(kubeconfigs, cfg.WriteKubeconfig)
	}
	adminCert, adminKey := certs.Admin.PEM()
	for _, path := range kubeconfigs {
		if err := pki.WriteKubeconfig(path, serverURL, certs.CA.CertPEM, adminCert, adminKey); err != nil {
			return err
		}
	}
	rewriteKubeconfigsOnRenew(certs, kubeconfigs, serverURL, log)

	x509Authn := authn.NewX509(certs.CA.Pool())
	x509Authn.Now = clk.Now
	authenticators := authn.Union{x509Authn}
	if cfg.Tokens != nil {
		authenticators = append(authenticators, cfg.Tokens)
	}
	if cfg.Admission != nil && len(cfg.Admission.Unused) > 0 {
		log.Warn("--admission-control-config-file configures plugins bonsai does not have; their entries are ignored", "plugins", cfg.Admission.Unused)
	}
	var auditLog *audit.Log
	if cfg.AuditPolicy != nil {
		if auditLog, err = audit.OpenLog(cfg.AuditLogPath, cfg.AuditLogRotation); err != nil {
			return fmt.Errorf("--audit-log-path: %w", err)
		}
		defer auditLog.Close()
	}
	local := &localStats{node: cfg.NodeName}
	api, err := apiserver.New(apiserver.Config{
		Store:             st,
		Authenticator:     authenticators,
		AuthorizationMode: cfg.AuthorizationMode,
		Profiling:         cfg.Profiling,
		AuditPolicy:       cfg.AuditPolicy,
		AuditLog:          auditLog,
		Admission:         cfg.Admission,
		Encryption:        enc,
		ServiceCIDR:       cfg.ServiceCIDR,
		ServiceCIDRs:      cfg.ServiceCIDRs,
		ClusterCIDR:       cfg.ClusterCIDR,
		NodePortRange:     cfg.NodePortRange,
		ClusterDomain:     cfg.ClusterDomain,
		// The kubernetes Service's endpoint: how pods reach this server.
		AdvertiseAddress: advertiseAddress(cfg.BindAddress),
		SecurePort:       cfg.Port,
		KubeletTLS:       kubeletClientTLS(certs, clk),
		KubeletPort:      cfg.KubeletPort,
		// Ports this process serves on the node: a hostPort DNAT rule
		// for one would take its traffic.
		Limits: cfg.Limits,
		ReservedHostPorts: append([]core.ReservedPort{
			{Port: int32(cfg.Port), Protocol: corev1.ProtocolTCP, For: "the API server"},
			{Port: int32(cfg.KubeletPort), Protocol: corev1.ProtocolTCP, For: "the kubelet API"},
			{Port: 53, Protocol: corev1.ProtocolUDP, For: "cluster DNS"},
			{Port: 53, Protocol: corev1.ProtocolTCP, For: "cluster DNS"},
		}, reservedIngressPorts(cfg.Ingress)...),
		// Kept in <data-dir>/tls: tokens outlive restarts.
		ServiceAccountKey: certs.ServiceAccountKey,
		// Aggregated API servers trust the front-proxy CA's client, and
		// read both CAs from extension-apiserver-authentication.
		FrontProxy:    certs.FrontProxy,
		ClientCAPEM:   certs.CA.CertPEM,
		Version:       version,
		MaxObjectSize: cfg.MaxObjectSize,
		// kubectl top: this host's node's figures, in-process.
		MetricsSource:    local,
		MetricResolution: cfg.MetricResolution,
		Logger:           log,
	})
	if err != nil {
		return err
	}

	srv := &http.Server{
		Handler: api.Handler(),
		TLSConfig: &tls.Config{
			// Read on every handshake: a renewed certificate is served
			// at once, with no restart. The CA follows it, for agents
			// that check it against their join token's pin.
			GetCertificate: servingWithCA(certs),
			Time:           clk.Now,
			MinVersion:     tls.VersionTLS12,
			ClientAuth:     tls.VerifyClientCertIfGiven,
			ClientCAs:      certs.CA.Pool(),
		},
		ReadHeaderTimeout: 10 * time.Second, // and the TLS handshake's
		// A keep-alive connection idle this long is closed, as
		// kube-apiserver does, so idle clients cannot pin connections.
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 1 << 20,
		ErrorLog:       stdlog.New(httpErrorLog{log}, "", 0),
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	log.Info("bonsai server is up",
		"version", version,
		"kubernetes", apiserver.KubernetesVersion(),
		"address", "https://"+net.JoinHostPort(cfg.BindAddress.String(), strconv.Itoa(cfg.Port)),
		"kubeconfig", kubeconfigs,
		"store", storeDesc,
		"agent", !cfg.DisableAgent)
	if err := startCertRotation(ctx, cfg, certs, api, log); err != nil {
		return err
	}
	waitSnapshots := startSnapshots(ctx, cfg, st, log)
	stopAgent := func() {}
	inf := client.NewInformers(api.ClientConfig(controllerManagerUser))
	if err := startControllers(ctx, cfg, api, certs.CA, inf, log); err != nil {
		return err
	}
	if err := startScheduler(ctx, cfg, api, inf, log); err != nil {
		return err
	}
	if err := startSimulator(ctx, cfg, api, inf, log); err != nil {
		return err
	}
	if err := startDeploy(ctx, cfg, api, log); err != nil {
		return err
	}
	if err := startHelm(ctx, cfg, api, log); err != nil {
		return err
	}
	if !cfg.DisableAgent {
		// The kubelet API serves the agent's runtime (none for a
		// simulated node: empty logs and nothing to exec into).
		serveKubeletAPI := func(rt cri.Runtime, states *kubelet.PodStates, imageFS string) *kubelet.StatsSampler {
			return startKubeletAPI(ctx, cfg, kubeletLn, certs, clk, rt, states, imageFS, local, log)
		}
		stopAgent = startAgent(ctx, cfg, api, serveKubeletAPI, log)
	}
	waitIngress := func() {}
	if cfg.Ingress.Enabled {
		waitIngress = startIngress(ctx, cfg, api, ingressLns, log)
	}
	// Start-up (certificates, type registration, bootstrap writes) leaves
	// garbage the steady state never needs; hand it back to the OS once
	// the server is quiet rather than whenever the scavenger gets to it.
	go trimAfterStartup(ctx, log)

	var serveErr error
	select {
	case <-ctx.Done():
		// A second signal now kills the process the default way.
		stopSignals()
		log.Info("shutting down", "timeout", shutdownTimeout)
	case serveErr = <-served:
		log.Error("API server stopped serving", "err", serveErr)
	}
	// Watches never finish on their own: end them first so that Shutdown
	// only waits for ordinary requests.
	api.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("in-flight requests did not finish in time; closing their connections", "err", err)
		srv.Close()
	}
	if serveErr == nil {
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}
	if ctx.Err() != nil {
		waitIngress() // it stops with ctx
	}
	stopAgent()
	waitSnapshots()
	storeOpen = false
	if err := st.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	log.Info("stopped")
	return nil
}

// kubeconfigHost is the address the admin kubeconfig points at: loopback
// when the server listens on every address or on loopback, so that the
// file keeps working when the host's addresses change.
func kubeconfigHost(bind netip.Addr) netip.Addr {
	switch {
	case bind.IsUnspecified(), bind == netip.MustParseAddr("127.0.0.1"):
		return netip.MustParseAddr("127.0.0.1")
	default:
		return bind
	}
}

// listen binds before anything else so that a port in use stops the start
// before the data dir is touched.
func listen(addr netip.Addr, port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
	switch {
	case err == nil:
		return ln, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("port %d on %s is already in use", port, addr)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, fmt.Errorf("--bind-address %s is not an address of this host", addr)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("port %d on %s: permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)", port, addr)
	default:
		return nil, fmt.Errorf("listen on port %d on %s: %v", port, addr, err)
	}
}

// lockDataDir creates the data dir if needed and takes an exclusive flock
// on it for the life of the process, so two bonsais never share one, even
// with an etcd datastore where the store's own lock does not apply. The
// lock is on the directory itself: refusing adds no file.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s cannot be created: %v", dir, pathErrReason(err))
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %v", dir, pathErrReason(err))
	}
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("data dir %s is not a directory", dir)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another bonsai", dir)
		}
		return nil, fmt.Errorf("data dir %s: lock: %v", dir, err)
	}
	// Permission bits say little for root or on a read-only mount; only a
	// real write does.
	probe, err := os.CreateTemp(dir, ".bonsai-write-check-*")
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s is not writable: %v", dir, pathErrReason(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	return f, nil
}

func pathErrReason(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func openStore(cfg *serverConfig, log *slog.Logger) (store.Store, string, error) {
	expire := []store.ExpiryRule{apiserver.EventExpiry(cfg.EventTTL)}
	if cfg.Etcd.Endpoint != "" {
		opts := cfg.Etcd
		opts.Logger = log
		opts.Expire = expire
		st, err := store.OpenEtcd(opts)
		return st, "etcd " + cfg.Etcd.Endpoint, err
	}
	dir := filepath.Join(cfg.DataDir, "db")
	st, err := store.OpenBadger(store.BadgerOptions{Dir: dir, Logger: log, MaxValueBytes: cfg.MaxObjectSize, QuotaBytes: cfg.QuotaBytes, Expire: expire})
	return st, "badger " + dir, err
}

// httpErrorLog sends net/http's own messages to the log. Handshake failures
// from scanners and half-configured clients are noise, kept for debug;
// anything else (a handler panic) is an error.
type httpErrorLog struct{ log *slog.Logger }

func (h httpErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		h.log.Debug(msg)
	} else {
		h.log.Error(msg)
	}
	return len(p), nil
}

func newLogger(format string, level slog.Level, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// nodeAPI is how a node's parts reach the API server: in-process as
// their own identities in `bonsai server`, over HTTPS as the node in
// `bonsai agent` (remoteAPI).
type nodeAPI interface {
	// ClientConfig reaches the API server as user, or as the node
	// when the node has no other identity.
	ClientConfig(user *authn.User) *rest.Config
	MetricsRegisterer() prometheus.Registerer
	RegisterMetrics(cs ...prometheus.Collector) error
}

// startAgent runs this host's node agent in-process, as its own node
// identity through the whole handler chain.
// The returned stop ends what the agent started outside the process
// (its runtime connection, a containerd of its own); pods keep running.
func startAgent(ctx context.Context, cfg *serverConfig, api nodeAPI, serveKubeletAPI func(cri.Runtime, *kubelet.PodStates, string) *kubelet.StatsSampler, log *slog.Logger) func() {
	stop := func() {}
	selfLabels, privileged := splitNodeLabels(cfg.NodeLabels)
	if s, ok := api.(*apiserver.Server); ok {
		// The server's own node: labels NodeRestriction keeps from
		// kubelets, set as the API server.
		privileged[controlPlaneLabel] = ""
		go labelNode(ctx, s, cfg.NodeName, privileged, log)
	} else if len(privileged) > 0 {
		log.Warn("--node-label: an agent may not set these labels on its own Node (NodeRestriction); set them with kubectl label", "labels", privileged)
	}
	kcfg := kubelet.Config{
		NodeName: cfg.NodeName, Labels: selfLabels, Taints: cfg.NodeTaints,
		MaxPods: cfg.MaxPods, Address: advertiseAddress(cfg.BindAddress), DataDir: cfg.DataDir, Port: int32(cfg.KubeletPort),
		RuntimeVersion: "simulated://" + version, KubeletVersion: apiserver.KubernetesVersion(),
		Simulated: cfg.Runtime == "simulated", Logger: log, ShutdownGroups: cfg.ShutdownGroups,
		Eviction: &cfg.Eviction.Policy, SystemReserved: cfg.Eviction.SystemReserved, KubeReserved: cfg.Eviction.KubeReserved,
		MemoryCapacity: cfg.Eviction.MemoryCapacity,
	}
	if cfg.Runtime != "containerd" && cfg.Devices != nil {
		log.Warn("devices.yaml is ignored: device plugins need --runtime=containerd", "runtime", cfg.Runtime)
	}
	if cfg.Runtime == "containerd" {
		rt, stopRuntime, imageFS, err := connectRuntime(ctx, cfg, log)
		if err != nil {
			log.Error("the node is not registered: its container runtime is unavailable", "node", cfg.NodeName, "err", err)
			return stop
		}
		v, err := rt.Version(ctx)
		if err != nil {
			stopRuntime()
			log.Error("the node is not registered: its container runtime is unavailable", "node", cfg.NodeName, "err", err)
			return stop
		}
		stop = stopRuntime
		kcfg.Runtime, kcfg.RuntimeVersion = rt, v
		if usesCNI(cfg) {
			kcfg.CNI = cniHost(cfg)
			log.Info("pod network: CNI plugins", "pod-network", cfg.PodNetwork, "cni-conf-dir", cfg.CNIConfDir, "cni-bin-dir", cfg.CNIBinDirs)
			kcfg.WrapNetwork = startNetworkPolicy(ctx, cfg, api, true, log)
		} else {
			kcfg.Network = podNetwork(cfg)
			log.Info("pod network: built-in", "pod-network", cfg.PodNetwork, "bridge", cfg.PodBridge)
			kcfg.WrapNetwork = startNetworkPolicy(ctx, cfg, api, false, log)
		}
		startServiceProxy(ctx, cfg, api, log)
		startClusterDNS(ctx, cfg, api, log)
		kcfg.RootDir = filepath.Join(cfg.DataDir, "agent")
		kcfg.ClusterDNS, kcfg.ClusterDomain = clusterDNS(cfg.ServiceCIDR), cfg.ClusterDomain
		kcfg.ImageFS = imageFS
		kcfg.PodManifestPath = cfg.PodManifestPath
		if kcfg.PodManifestPath == "" {
			kcfg.PodManifestPath = filepath.Join(cfg.DataDir, "pod-manifests")
		}
		kcfg.Devices = startDevices(ctx, cfg, api, log)
		reg := pluginregistry.New(filepath.Join(cfg.KubeletRootDir, pluginregistry.DirName), log)
		kcfg.DRA = startDRA(ctx, cfg, api.ClientConfig(nodeUser(cfg)), reg, log)
		kcfg.CSI = startCSI(ctx, cfg, api.ClientConfig(nodeUser(cfg)), reg, filepath.Join(kcfg.RootDir, "pods"), log)
		if err := reg.Start(ctx); err != nil {
			log.Error("plugin registry: DRA and CSI drivers cannot register on this node", "err", err)
		}
		kcfg.SeccompDir = filepath.Join(cfg.KubeletRootDir, "seccomp")
		kcfg.PodMaxPids = cfg.PodMaxPids
	}
	kcfg.States = &kubelet.PodStates{}
	kcfg.Stats = serveKubeletAPI(kcfg.Runtime, kcfg.States, kcfg.ImageFS)
	kcfg.Metrics = api.MetricsRegisterer()
	user := &authn.User{Name: "system:node:" + cfg.NodeName, Groups: []string{"system:nodes", authn.GroupAuthenticated}}
	client, err := kubelet.NewClient(api.ClientConfig(user))
	if err != nil {
		log.Error("node agent", "err", err)
		return stop
	}
	kcfg.Client = client
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := kubelet.Run(ctx, kcfg); err != nil {
			log.Error("node agent stopped", "err", err)
		}
	}()
	return func() {
		<-done
		stop()
	}
}

// servingWithCA serves the API server's certificate followed by the CA,
// so that `bonsai agent` can find the CA in the handshake and check it
// against the join token's pin before it trusts it.
func servingWithCA(certs *pki.Certs) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	var last atomic.Pointer[[2]*tls.Certificate] // served, with CA
	return func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := certs.Serving.GetCertificate(h)
		if err != nil {
			return nil, err
		}
		if l := last.Load(); l != nil && l[0] == c {
			return l[1], nil
		}
		withCA := *c
		withCA.Certificate = append(slices.Clip(c.Certificate), certs.CA.Cert.Raw)
		last.Store(&[2]*tls.Certificate{c, &withCA})
		return &withCA, nil
	}
}
