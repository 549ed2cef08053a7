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

	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/cronjob"
	"bonsai.dev/bonsai/controllers/garbagecollector"
	"bonsai.dev/bonsai/controllers/job"
	"bonsai.dev/bonsai/controllers/namespace"
	"bonsai.dev/bonsai/controllers/ttlafterfinished"
)

// Deps is what every controller is built from.
type Deps struct {
	Client    *client.Clientset
	Informers *client.Informers
	// RESTConfig is for the few controllers that need a client the
	// clientset lacks (the garbage collector's metadata client).
	RESTConfig *rest.Config
	Logger     *slog.Logger
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
	{"garbagecollector", func(d Deps) (runner, error) {
		return garbagecollector.New(garbagecollector.Config{RESTConfig: d.RESTConfig, Client: d.Client, Logger: d.Logger})
	}},
	{"namespace", func(d Deps) (runner, error) {
		return namespace.New(namespace.Config{RESTConfig: d.RESTConfig, Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"job", func(d Deps) (runner, error) {
		return job.New(job.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"cronjob", func(d Deps) (runner, error) {
		return cronjob.New(cronjob.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
	{"ttl-after-finished", func(d Deps) (runner, error) {
		return ttlafterfinished.New(ttlafterfinished.Config{Client: d.Client, Informers: d.Informers, Logger: d.Logger})
	}},
}

// Start builds every controller and runs them until ctx ends. An error
// building one stops the start: it means a bad configuration.
func Start(ctx context.Context, rc *rest.Config, log *slog.Logger) error {
	cs, err := client.NewClientset(rc)
	if err != nil {
		return err
	}
	d := Deps{Client: cs, Informers: client.NewInformers(rc), RESTConfig: rc, Logger: log}
	runners := make(map[string]runner, len(all))
	for _, c := range all {
		r, err := c.new(Deps{Client: d.Client, Informers: d.Informers, RESTConfig: rc, Logger: log.With("controller", c.name)})
		if err != nil {
			return fmt.Errorf("%s controller: %w", c.name, err)
		}
		runners[c.name] = r
	}
	d.Informers.Start(ctx)
	for name, r := range runners {
		go func() {
			if err := r.Run(ctx); err != nil && ctx.Err() == nil {
				log.Error("controller stopped", "controller", name, "err", err)
			}
		}()
	}
	return nil
}
