// Package clustertest starts what an integration test of a controller, a
// network component or the kubelet runs against: the real API server
// in-process over a badger store in a temp dir, the serviceaccount
// controller and, on request, the scheduler, node IPAM, simulated nodes
// and the storage controllers, so that pods a controller creates are
// scheduled and go Running and Ready as on a cluster. Nothing here is a
// fake of a Kubernetes component. A package it starts (the scheduler, the
// simulator, those controllers) cannot use it in its internal tests: that
// would be an import cycle.
package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/localpath"
	"bonsai.dev/bonsai/controllers/nodeipam"
	"bonsai.dev/bonsai/controllers/pvbinder"
	"bonsai.dev/bonsai/controllers/serviceaccount"
	"bonsai.dev/bonsai/controllers/volumeprotection"
	"bonsai.dev/bonsai/kubelet/simulator"
	"bonsai.dev/bonsai/scheduler"
	"bonsai.dev/bonsai/store"
)

// Options choose what runs beside the API server.
type Options struct {
	// Nodes simulated nodes named sim-0 ... are created, with node IPAM,
	// the simulator and the scheduler running: pods are scheduled and go
	// Running and Ready (see kubelet/simulator's annotations to delay or
	// stop that).
	Nodes int
	// Scheduler runs the scheduler (and node IPAM and the simulator)
	// even with no nodes, for tests that add their own.
	Scheduler bool
	// WithoutServiceAccounts leaves out the serviceaccount controller,
	// which otherwise runs as on every cluster: pod admission wants a
	// namespace's default ServiceAccount, and only the system namespaces
	// have one from the start. For that controller's own tests.
	WithoutServiceAccounts bool
	// Storage runs the PV binder, the local-path provisioner (volumes
	// under a temp dir) and the protection controller, so that claims
	// bind, pods using them are scheduled (the scheduler waits for a
	// pod's claims to bind) and deleted claims go once no pod uses them.
	Storage bool
	// Identities makes the server authorize every request as the user
	// of its ConfigFor (RBAC and the Node authorizer, as bonsai server
	// does) instead of as system:admin, for tests of who may do what.
	Identities bool
}

// Env is a running API server and what Options asked for. Everything
// stops when the test ends.
type Env struct {
	T   testing.TB
	Ctx context.Context
	// Server is the API server; Config reaches it as the controller
	// manager (system:kube-controller-manager).
	Server *apiserver.Server
	Config *rest.Config
	// Client is a protobuf clientset on Config.
	Client *client.Clientset
	// Log writes to the test's log.
	Log *slog.Logger
}

// New starts the API server and what opts asks for.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := apiserver.Config{Store: st}
	if opts.Identities {
		// An authenticator that knows no one: in-process clients keep
		// the identity they were given.
		cfg.Authenticator = authn.Union{}
	}
	srv, err := apiserver.New(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Env{T: t, Ctx: ctx, Server: srv, Log: slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	// Stop the components first, then the server, then the store.
	t.Cleanup(func() { srv.Shutdown(); st.Close() })
	t.Cleanup(cancel)
	e.Config = e.ConfigFor(&authn.User{Name: "system:kube-controller-manager", Groups: []string{authn.GroupAuthenticated}})
	if e.Client, err = client.NewClientset(e.Config); err != nil {
		t.Fatal(err)
	}
	if !opts.WithoutServiceAccounts {
		e.startServiceAccounts()
	}
	if opts.Storage {
		e.startStorage()
	}
	if opts.Nodes > 0 || opts.Scheduler {
		e.startNodes()
		if opts.Nodes > 0 {
			if err := simulator.EnsureNodes(ctx, e.Config, opts.Nodes, e.Log); err != nil {
				t.Fatal(err)
			}
			e.WaitNodesReady(opts.Nodes)
		}
	}
	return e
}

// ConfigFor reaches the server as user.
func (e *Env) ConfigFor(user *authn.User) *rest.Config {
	return e.Server.ClientConfig(user)
}

// startNodes runs node IPAM, the simulator (on short lease timings) and
// the scheduler.
func (e *Env) startNodes() {
	t := e.T
	ipam, err := nodeipam.New(nodeipam.Config{RESTConfig: e.Config, ClusterCIDR: netip.MustParsePrefix("10.128.0.0/9"), NodeMaskSize: 24, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simulator.New(simulator.Config{RESTConfig: e.Config, Version: "test", KubeletVersion: apiserver.KubernetesVersion(), Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(scheduler.Config{RESTConfig: e.Config, Options: scheduler.DefaultOptions(), Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]func(context.Context) error{"node IPAM": ipam.Run, "simulator": sim.Run, "scheduler": sched.Run} {
		go func() {
			if err := run(e.Ctx); err != nil && e.Ctx.Err() == nil {
				e.Log.Error(name+" stopped", "err", err)
			}
		}()
	}
}

// Runner is a controller: it works until its context ends.
type Runner interface{ Run(context.Context) error }

// Start builds a controller on informers of its own, starts them and
// runs the controller until the test ends; a Run that fails before then
// fails the test. It returns the informers and the controller.
func Start[C Runner](e *Env, build func(*client.Informers) (C, error)) (*client.Informers, C) {
	e.T.Helper()
	inf := client.NewInformers(e.Config)
	c, err := build(inf)
	if err != nil {
		e.T.Fatal(err)
	}
	inf.Start(e.Ctx)
	go func() {
		if err := c.Run(e.Ctx); err != nil && e.Ctx.Err() == nil {
			e.T.Errorf("%T stopped: %v", c, err)
		}
	}()
	return inf, c
}

// startServiceAccounts runs the serviceaccount controller on its own
// informers.
func (e *Env) startServiceAccounts() {
	Start(e, func(inf *client.Informers) (*serviceaccount.Controller, error) {
		return serviceaccount.New(serviceaccount.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
}

// startStorage runs the storage controllers on their own informers.
func (e *Env) startStorage() {
	inf := client.NewInformers(e.Config)
	binder, err := pvbinder.New(pvbinder.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		e.T.Fatal(err)
	}
	prov, err := localpath.New(localpath.Config{Client: e.Client, Informers: inf, Logger: e.Log, DataDir: e.T.TempDir()})
	if err != nil {
		e.T.Fatal(err)
	}
	prot, err := volumeprotection.New(volumeprotection.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		e.T.Fatal(err)
	}
	inf.Start(e.Ctx)
	for name, run := range map[string]func(context.Context) error{"PV binder": binder.Run, "local-path provisioner": prov.Run, "volume protection": prot.Run} {
		go func() {
			if err := run(e.Ctx); err != nil && e.Ctx.Err() == nil {
				e.Log.Error(name+" stopped", "err", err)
			}
		}()
	}
}

// AddNode creates a simulated node (see simulator.NewNode) after mod
// changes it (labels, taints); mod may be nil. It does not wait for it to
// be Ready.
func (e *Env) AddNode(name string, mod func(*corev1.Node)) {
	e.T.Helper()
	n := simulator.NewNode(name)
	if mod != nil {
		mod(n)
	}
	if _, err := e.Client.Core.Nodes().Create(e.Ctx, n, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

// WaitNodesReady waits until n nodes are Ready.
func (e *Env) WaitNodesReady(n int) {
	e.T.Helper()
	Eventually(e.T, 30*time.Second, func() error {
		list, err := e.Client.Core.Nodes().List(e.Ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, node := range list.Items {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready < n {
			return fmt.Errorf("%d of %d nodes Ready", ready, n)
		}
		return nil
	})
}

// Eventually retries f every 20 ms until it returns nil, and fails the
// test with f's last error after timeout.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testLog sends log lines to the test's log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
