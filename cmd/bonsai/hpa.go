package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"bonsai.dev/bonsai/controllers"
	"bonsai.dev/bonsai/controllers/podautoscaler"
)

// hpaOptions are the horizontal pod autoscaler's flags, with
// kube-controller-manager's names and defaults.
type hpaOptions struct {
	syncPeriod, downscaleStabilization  time.Duration
	cpuInitialization, initialReadiness time.Duration
	tolerance                           float64
}

func (o *hpaOptions) addFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.syncPeriod, "horizontal-pod-autoscaler-sync-period", podautoscaler.DefaultSyncPeriod, "how often the horizontal pod autoscaler looks at each HorizontalPodAutoscaler")
	fs.DurationVar(&o.downscaleStabilization, "horizontal-pod-autoscaler-downscale-stabilization", podautoscaler.DefaultDownscaleStabilization, "scale-down stabilization window of HorizontalPodAutoscalers that set none: the highest recommendation within it wins")
	fs.DurationVar(&o.cpuInitialization, "horizontal-pod-autoscaler-cpu-initialization-period", podautoscaler.DefaultCPUInitializationPeriod, "how long after a pod starts its CPU figure counts only once taken over a whole window since it became ready")
	fs.DurationVar(&o.initialReadiness, "horizontal-pod-autoscaler-initial-readiness-delay", podautoscaler.DefaultInitialReadinessDelay, "how long after a pod starts a change of its readiness counts as its first")
	fs.Float64Var(&o.tolerance, "horizontal-pod-autoscaler-tolerance", podautoscaler.DefaultTolerance, "how far from 1 the ratio of a metric to its target may be with no rescale")
}

func (o *hpaOptions) validate() (controllers.HPAOptions, error) {
	tol := o.tolerance
	c := controllers.HPAOptions{SyncPeriod: o.syncPeriod, DownscaleStabilization: o.downscaleStabilization,
		CPUInitializationPeriod: o.cpuInitialization, InitialReadinessDelay: o.initialReadiness, Tolerance: &tol}
	switch {
	case o.syncPeriod <= 0:
		return c, fmt.Errorf("--horizontal-pod-autoscaler-sync-period %v: must be positive", o.syncPeriod)
	case o.downscaleStabilization < 0:
		return c, fmt.Errorf("--horizontal-pod-autoscaler-downscale-stabilization %v: must not be negative", o.downscaleStabilization)
	case o.cpuInitialization < 0:
		return c, fmt.Errorf("--horizontal-pod-autoscaler-cpu-initialization-period %v: must not be negative", o.cpuInitialization)
	case o.initialReadiness < 0:
		return c, fmt.Errorf("--horizontal-pod-autoscaler-initial-readiness-delay %v: must not be negative", o.initialReadiness)
	case !(o.tolerance >= 0):
		return c, fmt.Errorf("--horizontal-pod-autoscaler-tolerance %v: must not be negative", o.tolerance)
	}
	return c, nil
}
