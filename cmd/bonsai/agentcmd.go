package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/kubelet"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/kubelet/tlsbootstrap"
)

// agentFlags are what `bonsai agent` has beyond the node flags it shares
// with `bonsai server`.
type agentFlags struct {
	server, token string
}

func newAgentCmd(stderr io.Writer) *cobra.Command {
	o := &serverOptions{}
	a := &agentFlags{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a node that joins a bonsai server",
		Long: "Joins the server at --server with the join token of `bonsai token create`: checks the server's CA against the token's hash, " +
			"gets the node's client certificate through a CertificateSigningRequest (kubelet TLS bootstrap) and its kubelet serving certificate the same way, " +
			"renews both before they expire, and runs the node's parts (kubelet, pod network, service proxy, cluster DNS, device plugins) against the server. " +
			"The node flags are those of `bonsai server`; its control-plane flags are ignored.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyConfigFile(cmd.Flags(), o.configFile, cmd.Flags().Changed("config")); err != nil {
				return err
			}
			if a.server == "" {
				return errors.New("--server is required: the server's https://HOST:6443")
			}
			if !strings.HasPrefix(a.server, "https://") {
				return fmt.Errorf("--server %q: want https://HOST:PORT", a.server)
			}
			if a.token == "" {
				a.token = os.Getenv("BONSAI_TOKEN")
			}
			if a.token != "" {
				if _, _, err := tlsbootstrap.ParseJoinToken(a.token); err != nil {
					return fmt.Errorf("--token: %w", err)
				}
			}
			cfg, err := o.validate()
			if err != nil {
				return err
			}
			return runAgent(cmd.Context(), cfg, a, stderr)
		},
	}
	o.addFlags(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&a.server, "server", "", "the bonsai server to join, https://HOST:PORT")
	f.StringVar(&a.token, "token", "", "join token from `bonsai token create` (or $BONSAI_TOKEN); not needed once the node has its certificates")
	return cmd
}

// runAgent runs the node until SIGTERM or SIGINT.
func runAgent(ctx context.Context, cfg *serverConfig, a *agentFlags, stderr io.Writer) error {
	log := newLogger(cfg.LogFormat, cfg.LogLevel, stderr)
	slog.SetDefault(log)
	klog.SetSlogLogger(log)
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()

	kubeletLn, err := listen(cfg.BindAddress, cfg.KubeletPort)
	if err != nil {
		return fmt.Errorf("--kubelet-port: %w", err)
	}
	defer kubeletLn.Close()
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Close()

	addr := advertiseAddress(cfg.BindAddress)
	node, err := tlsbootstrap.Join(ctx, tlsbootstrap.Config{
		Server: a.server, Token: a.token, NodeName: cfg.NodeName, Dir: filepath.Join(cfg.DataDir, "agent", "pki"), Logger: log,
		// What the kubelet reports as the Node's addresses: the
		// approver checks the request against them.
		ServingAddresses: func() ([]net.IP, []string) { return []net.IP{net.IP(addr.AsSlice())}, []string{cfg.NodeName} },
	})
	if err != nil {
		return err
	}
	log.Info("joined", "server", a.server, "node", cfg.NodeName)
	go node.Run(ctx)

	api := &remoteAPI{rc: node.RESTConfig, reg: prometheus.NewRegistry()}
	serveKubeletAPI := func(rt cri.Runtime, states *kubelet.PodStates, imageFS string) *kubelet.StatsSampler {
		interval := min(cfg.HousekeepingInterval, cfg.MetricResolution)
		stats := kubelet.NewStatsSampler(kubelet.StatsConfig{NodeName: cfg.NodeName, Pods: states.StatsPods, Runtime: rt, RootDir: cfg.DataDir, ImageFsDir: imageFS,
			Interval: interval, VolumeStatsInterval: cfg.VolumeStatsPeriod, MemoryCapacity: cfg.Eviction.MemoryCapacity, Logger: log})
		go stats.Run(ctx)
		srv := kubelet.NewServer(kubelet.ServerConfig{
			Runtime: rt, GetCertificate: node.Serving.GetCertificate, Now: time.Now, ClientCAs: node.CA,
			AuthorizedUsers: []string{pki.KubeletClientUser}, Waiting: states.Waiting, Pods: states.Pods, Stats: stats, Logger: log,
		})
		go func() {
			if err := srv.Serve(ctx, kubeletLn); err != nil {
				log.Error("kubelet API stopped", "err", err)
			}
		}()
		return stats
	}
	stopAgent := startAgent(ctx, cfg, api, serveKubeletAPI, log)
	// As the server: the start-up garbage goes back to the OS.
	go trimAfterStartup(ctx, log)
	<-ctx.Done()
	stopSignals()
	log.Info("shutting down")
	stopAgent()
	log.Info("stopped")
	return nil
}

// remoteAPI is an agent's way to the API server: every part of the node
// acts as the node (system:node:<name>), whose rights the Node
// authorizer limits to what the node runs.
type remoteAPI struct {
	rc  *rest.Config
	reg *prometheus.Registry
}

func (r *remoteAPI) ClientConfig(*authn.User) *rest.Config    { return rest.CopyConfig(r.rc) }
func (r *remoteAPI) MetricsRegisterer() prometheus.Registerer { return r.reg }
func (r *remoteAPI) RegisterMetrics(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := r.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
