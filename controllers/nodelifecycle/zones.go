package nodelifecycle

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// zoneState is how disrupted a zone is, as kube-controller-manager counts
// it.
type zoneState string

const (
	stateInitial           zoneState = "Initial"
	stateNormal            zoneState = "Normal"
	stateFullDisruption    zoneState = "FullDisruption"
	statePartialDisruption zoneState = "PartialDisruption"
)

// zoneOf is a node's zone: its topology.kubernetes.io/zone label (with
// the region, as upstream keys it). Nodes without one form one zone.
func zoneOf(n *corev1.Node) string {
	region, zone := n.Labels[corev1.LabelTopologyRegion], n.Labels[corev1.LabelTopologyZone]
	if region == "" && zone == "" {
		return ""
	}
	return region + ":\x00:" + zone
}

// computeZoneState: every node not ready (and at least one) is a full
// disruption; more than 2 not ready and at least threshold of them is a
// partial one (the "more than 2" keeps a 1-3 node edge cluster from
// stopping evictions when one or two of its nodes die).
func computeZoneState(ready, notReady int, threshold float64) zoneState {
	switch {
	case ready == 0 && notReady > 0:
		return stateFullDisruption
	case notReady > 2 && float64(notReady)/float64(ready+notReady) >= threshold:
		return statePartialDisruption
	default:
		return stateNormal
	}
}

// zoneRate is the NoExecute tainting rate (nodes per second) of a zone in
// state s in a cluster of size nodes.
func (c *Config) zoneRate(s zoneState, size int) float64 {
	switch s {
	case statePartialDisruption:
		if size > c.LargeClusterSizeThreshold {
			return c.SecondaryNodeEvictionRate
		}
		return 0
	default:
		return c.NodeEvictionRate
	}
}

// evictionLimiter is one zone's token bucket for NoExecute taints, burst
// 1 as upstream's: at 0.1/s no two nodes of a zone are tainted within
// 10 s of each other.
type evictionLimiter struct {
	rate    float64
	limiter flowcontrol.RateLimiter
}

func newEvictionLimiter(rate float64, clk clock.Clock) *evictionLimiter {
	l := &evictionLimiter{rate: rate}
	if rate <= 0 {
		l.limiter = flowcontrol.NewFakeNeverRateLimiter()
	} else {
		// flowcontrol takes a float32: 0.01 would become 0.0099999998
		// and let the second node through at 101 s, not 100 s.
		qps := float32(rate)
		if float64(qps) < rate {
			qps = math.Nextafter32(qps, math.MaxFloat32)
		}
		l.limiter = flowcontrol.NewTokenBucketRateLimiterWithClock(qps, 1, clk)
	}
	return l
}

// setRate swaps the bucket when the rate changes; a new bucket starts
// full, as upstream's SwapLimiter does.
func (l *evictionLimiter) setRate(rate float64, clk clock.Clock) {
	if rate == l.rate {
		return
	}
	l.limiter.Stop()
	*l = *newEvictionLimiter(rate, clk)
}
