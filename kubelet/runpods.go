package kubelet

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"bonsai.dev/bonsai/kubelet/eviction"
	"bonsai.dev/bonsai/netplugin"
	"bonsai.dev/bonsai/netplugin/cni"
)

// runPods waits for the node's pod CIDR, brings up the pod network and
// runs the node's pods until ctx ends.
func (a *Agent) runPods(ctx context.Context) error {
	cfg := a.cfg
	var network netplugin.PodNetwork
	switch {
	case cfg.CNI != nil:
		cc := *cfg.CNI
		if cc.Logger == nil {
			cc.Logger = cfg.Logger
		}
		host, err := cni.New(cc)
		if err != nil {
			return fmt.Errorf("pod network: %w", err)
		}
		network = host
		cfg.Logger.Info("pod network: CNI", "confDir", cc.ConfDir, "binDirs", cc.BinDirs)
	case cfg.Network != nil:
		cidrs, err := a.waitPodCIDRs(ctx)
		if err != nil {
			return err
		}
		nc := *cfg.Network
		nc.PodCIDR, nc.PodCIDRs = cidrs[0], cidrs
		if nc.Logger == nil {
			nc.Logger = cfg.Logger
		}
		builtin, err := netplugin.New(ctx, nc)
		if err != nil {
			return fmt.Errorf("pod network: %w", err)
		}
		network = builtin
		cfg.Logger.Info("pod network up", "bridge", nc.Bridge, "podCIDRs", fmt.Sprint(cidrs))
		go a.syncRoutes(ctx, builtin)
	}
	if network != nil {
		defer network.Close()
		if cfg.WrapNetwork != nil {
			network = cfg.WrapNetwork(network)
		}
		a.setNetwork(network)
		// Say at once whether the node can network pods.
		if err := a.postStatus(ctx, true); err != nil {
			cfg.Logger.Warn("posting node status failed", "node", cfg.NodeName, "err", err)
		}
	}
	st := a.status(cfg.Clock.Now())
	cfg.nodeMemory = st.Capacity.Memory().Value()
	cfg.nodeAllocatable = st.Allocatable
	m := newPodManager(cfg)
	m.net, m.ctx = network, ctx
	if cfg.States != nil {
		cfg.States.m.Store(m)
	}
	if a.shutdown != nil {
		m.shutdown = a.shutdown
		a.shutdown.setPods(m)
	}
	if cfg.Devices != nil {
		cfg.Devices.SetActivePods(m.activePods)
	}
	if uid, ok := a.nodeUID(); ok {
		m.nodeUID = typesUID(uid)
	}
	var gc *imageGC
	if cfg.ImageFS != "" {
		gc = &imageGC{rt: cfg.Runtime, usage: fsUsage(cfg.ImageFS), log: cfg.Logger, now: time.Now}
		go gc.run(ctx)
	}
	if cfg.Stats != nil {
		m.pressure = a.pressureConditions
		metrics, err := newEvictionMetrics(cfg.Metrics)
		if err != nil {
			return fmt.Errorf("eviction metrics: %w", err)
		}
		e := &evictionLoop{a: a, m: m, mgr: eviction.NewManager(*cfg.Eviction), stats: cfg.Stats, gc: gc, interval: DefaultStatsInterval,
			dedicatedImageFs: !sameFileSystem(cfg.Stats.cfg.RootDir, cfg.Stats.cfg.ImageFsDir), metrics: metrics}
		go e.run(ctx)
	}
	if cfg.PodManifestPath != "" {
		(&staticPods{m: m, dir: cfg.PodManifestPath}).start(ctx)
	}
	m.run(ctx)
	return nil
}

// waitPodCIDRs waits until the server allocated the node's pod CIDRs
// (one per family, the primary first), as the kubelet does before it can
// network pods.
func (a *Agent) waitPodCIDRs(ctx context.Context) ([]netip.Prefix, error) {
	logged := false
	for {
		node, err := a.cfg.Client.getNode(ctx, a.cfg.NodeName)
		if err == nil && node.Spec.PodCIDR != "" {
			raw := node.Spec.PodCIDRs
			if len(raw) == 0 {
				raw = []string{node.Spec.PodCIDR}
			}
			var out []netip.Prefix
			for _, s := range raw {
				p, err := netip.ParsePrefix(s)
				if err != nil {
					return nil, fmt.Errorf("node %s has an invalid podCIDR %q: %w", a.cfg.NodeName, s, err)
				}
				out = append(out, p)
			}
			return out, nil
		}
		if !logged {
			a.cfg.Logger.Info("waiting for the node's pod CIDR", "node", a.cfg.NodeName)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
