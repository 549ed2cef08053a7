package main

import (
	"context"
	"fmt"
	"log/slog"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers"
	"bonsai.dev/bonsai/controllers/nodeipam"
)

// startControllers runs the control plane's controllers in-process, each
// through the whole handler chain like any client. They run with
// --disable-agent too: they act on every node, not on this host's.
// ca is the cluster CA: it signs the API server's serving certificate,
// which every namespace gets for its pods, and the certificates of
// approved CertificateSigningRequests (kubelets' client and serving
// certificates).
//
// The controllers, the node lifecycle controller and the scheduler share
// one set of informers (inf): one watch and one cache of each kind for
// the three, as they would have if they were one process upstream. With
// 10,000 pods each cache costs about 100 MB, and each watch event is
// decoded once per cache.
func startControllers(ctx context.Context, cfg *serverConfig, api *apiserver.Server, ca *pki.Authority, inf *client.Informers, log *slog.Logger) error {
	user := controllerManagerUser
	ipam, err := nodeipam.New(nodeipam.Config{
		RESTConfig:    api.ClientConfig(user),
		ClusterCIDRs:  cfg.ClusterCIDRs,
		NodeMaskSizes: cfg.NodeCIDRMaskSizes,
		Logger:        log,
	})
	if err != nil {
		return err
	}
	go func() {
		if err := ipam.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("node IPAM controller stopped", "err", err)
		}
	}()
	if err := startNodeLifecycle(ctx, cfg, api.ClientConfig(user), inf, log); err != nil {
		return err
	}
	if err := ensureKubeDNSService(ctx, cfg, api.ClientConfig(user)); err != nil {
		log.Error("kube-dns Service", "err", err)
	}
	// kubectl get cs shows the controller manager Healthy until one of
	// its controllers stops.
	stopped := api.RunningComponent("controller-manager")
	return controllers.Start(ctx, controllers.Options{RESTConfig: api.ClientConfig(user), Logger: log, RootCA: ca.CertPEM, CA: ca, DataDir: cfg.DataDir, MaxEndpointsPerSlice: cfg.MaxEndpointsPerSlice, HPA: cfg.HPA, Informers: inf,
		Stopped: func(name string, err error) { stopped(fmt.Errorf("controller %s stopped: %w", name, err)) }})
}

// controllerManagerUser is who the in-process controllers, and the
// informers they share with the scheduler, act as.
var controllerManagerUser = &authn.User{Name: "system:kube-controller-manager", Groups: []string{authn.GroupAuthenticated}}
