// Package controllers runs the control plane's reconcilers. Each lives in
// its own sub-package; this file is the manager that builds them over one
// clientset and one set of shared informers, starts the informers once,
// and runs them all until the context ends.
//
// A controller package exports New(Config) (*Controller, error), which
// asks Informers for what it watches and adds its handlers, and
// (*Controller).Run(ctx) error, which waits for its caches and works
// until ctx ends.
package controllers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/attachdetach"
	"bonsai.dev/bonsai/controllers/clusterroleaggregation"
	"bonsai.dev/bonsai/controllers/cronjob"
	"bonsai.dev/bonsai/controllers/csrapproving"
	"bonsai.dev/bonsai/controllers/csrsigning"
	"bonsai.dev/bonsai/controllers/daemonset"
	"bonsai.dev/bonsai/controllers/deployment"
	"bonsai.dev/bonsai/controllers/disruption"
	"bonsai.dev/bonsai/controllers/endpoints"
	"bonsai.dev/bonsai/controllers/endpointslice"
	"bonsai.dev/bonsai/controllers/endpointslicemirroring"
	"bonsai.dev/bonsai/controllers/ephemeral"
	"bonsai.dev/bonsai/controllers/garbagecollector"
	"bonsai.dev/bonsai/controllers/job"
	"bonsai.dev/bonsai/controllers/localpath"
	"bonsai.dev/bonsai/controllers/namespace"
	"bonsai.dev/bonsai/controllers/podautoscaler"
	"bonsai.dev/bonsai/controllers/pvbinder"
	"bonsai.dev/bonsai/controllers/replicaset"
	"bonsai.dev/bonsai/controllers/replication"
	"bonsai.dev/bonsai/controllers/resourceclaim"
	"bonsai.dev/bonsai/controllers/resourcequota"
	"bonsai.dev/bonsai/controllers/serviceaccount"
	"bonsai.dev/bonsai/controllers/statefulset"
	"bonsai.dev/bonsai/controllers/ttlafterfinished"
	"bonsai.dev/bonsai/controllers/volumeprotection"
)

// Deps is what every controller is built from.
type Deps struct {
	Client    *client.Clientset
	Informers *client.Informers
	// RESTConfig is for the few controllers that need a client the
	// clientset lacks (the garbage collector's metadata client).
	RESTConfig *rest.Config
	Logger     *slog.Logger
	// RootCA is the PEM of the CA that signs the API server's serving
	// certificate, which the root-ca-cert-publisher puts in every
	// namespace for pods to verify the API server with.
	RootCA []byte
	// DataDir is bonsai's data dir: the local-path provisioner keeps
	// its volumes under DataDir/storage.
	DataDir string
	// MaxEndpointsPerSlice is --max-endpoints-per-slice (0: the default,
	// 100).
	MaxEndpointsPerSlice int
	// HPA holds the --horizontal-pod-autoscaler-* settings (zero:
	// upstream's defaults).
	HPA HPAOptions
	// CA signs the certificates of approved CertificateSigningRequests;
	// nil: the csrsigning controller does not run.
	CA csrsigning.Signer
}

// HPAOptions are kube-controller-manager's --horizontal-pod-autoscaler-*
// settings; zero values are upstream's defaults.
type HPAOptions struct {
	SyncPeriod, DownscaleStabilization, CPUInitializationPeriod, InitialReadinessDelay time.Duration
	// Tolerance: nil is 0.1.
	Tolerance *float64
}

type runner interface {
	Run(ctx context.Context) error
}

// all lists the controllers the manager runs, by the name --controllers
// would use in kube-controller-manager.
var all = []struct {
	name string
	new  func(Deps) (runner, error)
}{
	{"replicaset", func(d Deps) (runner, error) {
		return replicaset.New(replicaset.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"replicationcontroller", func(d Deps) (runner, error) {
		return replication.New(replication.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"deployment", func(d Deps) (runner, error) {
		return deployment.New(deployment.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"daemonset", func(d Deps) (runner, error) {
		return daemonset.New(daemonset.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"persistentvolume-binder", func(d Deps) (runner, error) {
		return pvbinder.New(pvbinder.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"local-path-provisioner", func(d Deps) (runner, error) {
		return localpath.New(localpath.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger, DataDir: d.DataDir})
	}},
	{"disruption", func(d Deps) (runner, error) {
		return disruption.New(disruption.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"resourcequota", func(d Deps) (runner, error) {
		return resourcequota.New(resourcequota.Config{Client: d.Client, Informers: d.Informers, RESTConfig: d.RESTConfig, Logger: d.Logger})
	}},
	{"ephemeral-volume", func(d Deps) (runner, error) {
		return ephemeral.New(ephemeral.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"resourceclaim", func(d Deps) (runner, error) {
		return resourceclaim.New(resourceclaim.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"attachdetach", func(d Deps) (runner, error) {
		return attachdetach.New(attachdetach.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"pvc-protection", func(d Deps) (runner, error) {
		return volumeprotection.New(volumeprotection.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"endpoint", func(d Deps) (runner, error) {
		return endpoints.New(endpoints.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"endpointslice", func(d Deps) (runner, error) {
		return endpointslice.New(endpointslice.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger, MaxEndpointsPerSlice: d.MaxEndpointsPerSlice})
	}},
	{"endpointslicemirroring", func(d Deps) (runner, error) {
		return endpointslicemirroring.New(endpointslicemirroring.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"garbagecollector", func(d Deps) (runner, error) {
		return garbagecollector.New(garbagecollector.Config{RESTConfig: d.RESTConfig, Client: d.Client, Logger: d.Logger})
	}},
	{"namespace", func(d Deps) (runner, error) {
		return namespace.New(namespace.Config{RESTConfig: d.RESTConfig, Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"root-ca-cert-publisher", func(d Deps) (runner, error) {
		return serviceaccount.NewRootCAPublisher(serviceaccount.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger, RootCA: d.RootCA})
	}},
	{"serviceaccount", func(d Deps) (runner, error) {
		return serviceaccount.New(serviceaccount.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"statefulset", func(d Deps) (runner, error) {
		return statefulset.New(statefulset.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"job", func(d Deps) (runner, error) {
		return job.New(job.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"cronjob", func(d Deps) (runner, error) {
		return cronjob.New(cronjob.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"clusterrole-aggregation", func(d Deps) (runner, error) {
		return clusterroleaggregation.New(clusterroleaggregation.Config{RESTConfig: d.RESTConfig, Informers: d.Informers, Logger: d.Logger})
	}},
	{"horizontalpodautoscaling", func(d Deps) (runner, error) {
		return podautoscaler.New(podautoscaler.Config{Client: d.Client, Informers: d.Informers, RESTConfig: d.RESTConfig, Logger: d.Logger,
			SyncPeriod: d.HPA.SyncPeriod, DownscaleStabilization: d.HPA.DownscaleStabilization, Tolerance: d.HPA.Tolerance,
			CPUInitializationPeriod: d.HPA.CPUInitializationPeriod, InitialReadinessDelay: d.HPA.InitialReadinessDelay})
	}},
	{"csrapproving", func(d Deps) (runner, error) {
		return csrapproving.New(csrapproving.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"csrsigning", func(d Deps) (runner, error) {
		if d.CA == nil {
			return nil, nil
		}
		return csrsigning.New(csrsigning.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger, CA: d.CA})
	}},
	{"ttl-after-finished", func(d Deps) (runner, error) {
		return ttlafterfinished.New(ttlafterfinished.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
}

// Options are what the manager passes on to the controllers.
type Options struct {
	// RESTConfig reaches the API server as the controller manager.
	RESTConfig *rest.Config
	Logger     *slog.Logger
	// RootCA, DataDir and MaxEndpointsPerSlice: see Deps.
	RootCA               []byte
	DataDir              string
	MaxEndpointsPerSlice int
	HPA                  HPAOptions
	CA                   csrsigning.Signer
	// Informers, when set, are shared with other components of the
	// process (made with RESTConfig's identity); Start starts them.
	Informers *client.Informers
	// Stopped, if set, learns of a controller that stopped with an
	// error while ctx still ran.
	Stopped func(controller string, err error)
}

// Start builds every controller and runs them until ctx ends. An error
// building one stops the start: it means a bad configuration.
func Start(ctx context.Context, o Options) error {
	rc, log := o.RESTConfig, o.Logger
	cs, err := client.NewClientset(rc)
	if err != nil {
		return err
	}
	inf := o.Informers
	if inf == nil {
		inf = client.NewInformers(rc)
	}
	d := Deps{Client: cs, Informers: inf, RESTConfig: rc, Logger: log, RootCA: o.RootCA, DataDir: o.DataDir, MaxEndpointsPerSlice: o.MaxEndpointsPerSlice, HPA: o.HPA, CA: o.CA}
	runners := make(map[string]runner, len(all))
	for _, c := range all {
		dc := d
		dc.Logger = log.With("controller", c.name)
		r, err := c.new(dc)
		if err != nil {
			return fmt.Errorf("%s controller: %w", c.name, err)
		}
		if r == nil {
			continue // not configured
		}
		runners[c.name] = r
	}
	d.Informers.Start(ctx)
	for name, r := range runners {
		go func() {
			if err := r.Run(ctx); err != nil && ctx.Err() == nil {
				log.Error("controller stopped", "controller", name, "err", err)
				if o.Stopped != nil {
					o.Stopped(name, err)
				}
			}
		}()
	}
	return nil
}
