package main

import (
	"context"
	"fmt"
	"log/slog"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/scheduler"
)

// validateScheduler reads --scheduler-config now, so a bad file stops the
// server before it starts rather than leaving pods pending.
func (o *serverOptions) validateScheduler(c *serverConfig) error {
	c.DisableScheduler = o.disableScheduler
	if o.schedulerConfig == "" {
		return nil // zero Options: the scheduler's defaults
	}
	opts, err := scheduler.LoadOptions(o.schedulerConfig)
	if err != nil {
		return fmt.Errorf("--scheduler-config: %w", err)
	}
	c.Scheduler = opts
	return nil
}

// startScheduler runs default-scheduler in-process, through the whole
// handler chain like any client. It runs with --disable-agent too: it
// places pods on every node, not on this host's.
func startScheduler(ctx context.Context, cfg *serverConfig, api *apiserver.Server, inf *client.Informers, log *slog.Logger) error {
	if cfg.DisableScheduler {
		return nil
	}
	user := &authn.User{Name: "system:kube-scheduler", Groups: []string{authn.GroupAuthenticated}}
	s, err := scheduler.New(scheduler.Config{
		RESTConfig: api.ClientConfig(user),
		Options:    cfg.Scheduler,
		Logger:     log,
		Informers:  inf,
	})
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while starting: the shared informers it
			// joins are gone already. Not an error.
			return nil
		}
		return err
	}
	stopped := api.RunningComponent("scheduler")
	go func() {
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("scheduler stopped", "err", err)
			stopped(err)
		}
	}()
	return nil
}
