package main

import (
	"bonsai.dev/bonsai/client"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/controllers/nodelifecycle"
)

// nodeLifecycleOptions are the node lifecycle controller's and pod GC's
// flags, with kube-controller-manager's names and defaults.
type nodeLifecycleOptions struct {
	monitorPeriod, gracePeriod        time.Duration
	evictionRate, secondaryRate       float64
	unhealthyZoneThreshold            float64
	largeClusterSize, terminatedPodGC int
}

// nodeLifecycleConfig is nodeLifecycleOptions checked.
type nodeLifecycleConfig struct {
	MonitorPeriod, GracePeriod        time.Duration
	EvictionRate, SecondaryRate       float64
	UnhealthyZoneThreshold            float64
	LargeClusterSize, TerminatedPodGC int
}

func (o *nodeLifecycleOptions) addFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.monitorPeriod, "node-monitor-period", nodelifecycle.DefaultNodeMonitorPeriod, "how often the node controller checks every node's Lease and status")
	fs.DurationVar(&o.gracePeriod, "node-monitor-grace-period", nodelifecycle.DefaultNodeMonitorGracePeriod, "how long a node may go without a heartbeat before its conditions become Unknown and it is tainted unreachable")
	fs.Float64Var(&o.evictionRate, "node-eviction-rate", nodelifecycle.DefaultNodeEvictionRate, "nodes per second per zone whose pods are evicted (NoExecute-tainted) when they fail")
	fs.Float64Var(&o.secondaryRate, "secondary-node-eviction-rate", nodelifecycle.DefaultSecondaryNodeEvictionRate, "--node-eviction-rate of a partially disrupted zone in a cluster of more than --large-cluster-size-threshold nodes (smaller clusters evict nothing there)")
	fs.Float64Var(&o.unhealthyZoneThreshold, "unhealthy-zone-threshold", nodelifecycle.DefaultUnhealthyZoneThreshold, "fraction of a zone's nodes not Ready (with more than 2 of them) that makes it partially disrupted")
	fs.IntVar(&o.largeClusterSize, "large-cluster-size-threshold", nodelifecycle.DefaultLargeClusterSizeThreshold, "clusters of more nodes than this evict at --secondary-node-eviction-rate in a partially disrupted zone")
	fs.IntVar(&o.terminatedPodGC, "terminated-pod-gc-threshold", nodelifecycle.DefaultTerminatedPodGCThreshold, "terminated pods kept before the oldest are deleted (0 or less: never)")
}

func (o *nodeLifecycleOptions) validate() (nodeLifecycleConfig, error) {
	c := nodeLifecycleConfig{
		MonitorPeriod: o.monitorPeriod, GracePeriod: o.gracePeriod,
		EvictionRate: o.evictionRate, SecondaryRate: o.secondaryRate,
		UnhealthyZoneThreshold: o.unhealthyZoneThreshold,
		LargeClusterSize:       o.largeClusterSize, TerminatedPodGC: o.terminatedPodGC,
	}
	switch {
	case o.monitorPeriod <= 0:
		return c, fmt.Errorf("--node-monitor-period %v: must be positive", o.monitorPeriod)
	case o.gracePeriod <= 0:
		return c, fmt.Errorf("--node-monitor-grace-period %v: must be positive", o.gracePeriod)
	case o.gracePeriod < o.monitorPeriod:
		return c, fmt.Errorf("--node-monitor-grace-period %v: must not be shorter than --node-monitor-period %v", o.gracePeriod, o.monitorPeriod)
	case !(o.evictionRate > 0):
		return c, fmt.Errorf("--node-eviction-rate %v: must be positive", o.evictionRate)
	case !(o.secondaryRate >= 0):
		return c, fmt.Errorf("--secondary-node-eviction-rate %v: must not be negative", o.secondaryRate)
	case !(o.unhealthyZoneThreshold > 0 && o.unhealthyZoneThreshold <= 1):
		return c, fmt.Errorf("--unhealthy-zone-threshold %v: must be more than 0 and at most 1", o.unhealthyZoneThreshold)
	case o.largeClusterSize < 0:
		return c, fmt.Errorf("--large-cluster-size-threshold %d: must not be negative", o.largeClusterSize)
	}
	return c, nil
}

// startNodeLifecycle runs the node lifecycle controller and pod GC.
func startNodeLifecycle(ctx context.Context, cfg *serverConfig, rc *rest.Config, inf *client.Informers, log *slog.Logger) error {
	nl := cfg.NodeLifecycle
	secondary := nl.SecondaryRate
	if secondary == 0 {
		secondary = -1 // the controller reads 0 as "default"
	}
	c, err := nodelifecycle.New(nodelifecycle.Config{
		RESTConfig: rc, NodeMonitorPeriod: nl.MonitorPeriod, NodeMonitorGracePeriod: nl.GracePeriod,
		NodeEvictionRate: nl.EvictionRate, SecondaryNodeEvictionRate: secondary,
		UnhealthyZoneThreshold: nl.UnhealthyZoneThreshold, LargeClusterSizeThreshold: nl.LargeClusterSize,
		TerminatedPodGCThreshold: nl.TerminatedPodGC, Logger: log, Informers: inf,
	})
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while starting: the shared informers it
			// joins are gone already. Not an error.
			return nil
		}
		return err
	}
	go func() {
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("node lifecycle controller stopped", "err", err)
		}
	}()
	return nil
}
