package main

import (
	"context"
	"fmt"
	"log/slog"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/kubelet/simulator"
)

// maxSimulatedNodes keeps a typo (an extra zero or three) from filling the
// store and memory: 100,000 is ten times what bonsai is measured with.
const maxSimulatedNodes = 100000

// validateSimulated checks --simulated-nodes: a count, and one every
// simulated node's pod CIDR fits in --cluster-cidr (with this host's node).
func (o *serverOptions) validateSimulated(c *serverConfig) error {
	n := o.simulatedNodes
	if n < 0 || n > maxSimulatedNodes {
		return fmt.Errorf("--simulated-nodes %d: must be between 0 and %d", n, maxSimulatedNodes)
	}
	c.SimulatedNodes = n
	if n == 0 {
		return nil
	}
	// Each node takes a node CIDR of every cluster CIDR (of each family).
	for i, cc := range c.ClusterCIDRs {
		mask := c.NodeCIDRMaskSizes[i]
		hostBits := mask - cc.Bits()
		if hostBits < 20 && n+1 > 1<<hostBits {
			return fmt.Errorf("--simulated-nodes %d: --cluster-cidr %s holds only %d node CIDRs of /%d; use a larger --cluster-cidr (10.128.0.0/9 holds 32,768) or a longer --node-cidr-mask-size",
				n, cc, 1<<hostBits, mask)
		}
	}
	return nil
}

// startSimulator runs the simulator of every node annotated
// bonsai.dev/simulated=true (this host's with --runtime=simulated, those
// of --simulated-nodes, any a user creates), and creates the
// --simulated-nodes ones.
func startSimulator(ctx context.Context, cfg *serverConfig, api *apiserver.Server, inf *client.Informers, log *slog.Logger) error {
	// It acts for every simulated node, as each node's kubelet would;
	// not a system:node:<name> identity, since it is many nodes at once.
	user := &authn.User{Name: authz.UserSimulator, Groups: []string{authn.GroupAuthenticated}}
	restCfg := api.ClientConfig(user)
	sim, err := simulator.New(simulator.Config{
		RESTConfig: restCfg, Version: version, KubeletVersion: apiserver.KubernetesVersion(), Logger: log, Informers: inf,
	})
	if err != nil {
		return err
	}
	go func() {
		if err := sim.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("node simulator stopped", "err", err)
		}
	}()
	if cfg.SimulatedNodes > 0 {
		go func() {
			if err := simulator.EnsureNodes(ctx, restCfg, cfg.SimulatedNodes, log); err != nil && ctx.Err() == nil {
				log.Error("creating simulated nodes", "err", err)
			}
		}()
	}
	return nil
}
