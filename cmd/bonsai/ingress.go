package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/apiserver/registry/core"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/netplugin/ingress"
)

// ingressListeners are the built-in Ingress controller's, bound at
// start with the API's so that a port in use stops bonsai before it
// touches the data dir, with a message naming the flag.
type ingressListeners struct{ http, https net.Listener }

func listenIngress(cfg ingressConfig) (ingressListeners, error) {
	var l ingressListeners
	var err error
	if cfg.HTTPPort != 0 {
		if l.http, err = listen(cfg.BindAddress, cfg.HTTPPort); err != nil {
			return l, fmt.Errorf("--ingress-http-port: %w (--disable-ingress runs no Ingress controller)", err)
		}
	}
	if cfg.HTTPSPort != 0 {
		if l.https, err = listen(cfg.BindAddress, cfg.HTTPSPort); err != nil {
			l.Close()
			return l, fmt.Errorf("--ingress-https-port: %w (--disable-ingress runs no Ingress controller)", err)
		}
	}
	return l, nil
}

func (l ingressListeners) Close() {
	for _, ln := range []net.Listener{l.http, l.https} {
		if ln != nil {
			ln.Close()
		}
	}
}

// reservedIngressPorts keeps hostPorts off the controller's ports.
func reservedIngressPorts(cfg ingressConfig) []core.ReservedPort {
	var out []core.ReservedPort
	if !cfg.Enabled {
		return nil
	}
	for _, p := range []int{cfg.HTTPPort, cfg.HTTPSPort} {
		if p != 0 {
			out = append(out, core.ReservedPort{Port: int32(p), Protocol: corev1.ProtocolTCP, For: "the Ingress controller"})
		}
	}
	return out
}

// startIngress runs the built-in Ingress controller on its listeners;
// wait returns once it has stopped serving (after ctx ends).
func startIngress(ctx context.Context, cfg *serverConfig, api *apiserver.Server, lns ingressListeners, log *slog.Logger) (wait func()) {
	done := make(chan struct{})
	wait = func() { <-done }
	rc := api.ClientConfig(&authn.User{Name: authz.UserIngress, Groups: []string{authn.GroupAuthenticated}})
	inf := client.NewInformers(rc)
	icfg := ingress.Config{
		RESTConfig: rc, Informers: inf, NodeName: cfg.NodeName,
		HTTP: lns.http, HTTPS: lns.https, Logger: log,
		FallbackIPs: []netip.Addr{advertiseAddress(cfg.BindAddress)},
	}
	// Bound to one address, that is the address Ingresses are at.
	if !cfg.Ingress.BindAddress.IsUnspecified() {
		icfg.Addresses = []netip.Addr{cfg.Ingress.BindAddress}
	}
	c, err := ingress.New(icfg)
	if err != nil {
		close(done)
		log.Error("Ingress controller not started", "err", err)
		return wait
	}
	inf.Start(ctx)
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("Ingress controller stopped", "err", err)
		}
	}()
	return wait
}
