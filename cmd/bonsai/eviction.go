package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"bonsai.dev/bonsai/kubelet/eviction"
)

// evictionOptions are the kubelet's node-pressure eviction and node
// allocatable flags, with its names and defaults.
type evictionOptions struct {
	hard, soft, softGrace, minReclaim string
	transition                        time.Duration
	maxPodGrace                       int64
	systemReserved, kubeReserved      string
	// memoryCapacity stands in for the host's memory (hidden: tests and
	// sandboxes only).
	memoryCapacity string
}

// evictionConfig is evictionOptions checked.
type evictionConfig struct {
	Policy                       eviction.Config
	SystemReserved, KubeReserved corev1.ResourceList
	MemoryCapacity               int64
}

const defaultEvictionHard = "memory.available<100Mi,nodefs.available<10%,imagefs.available<15%,nodefs.inodesFree<5%"

func (o *evictionOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.hard, "eviction-hard", defaultEvictionHard, "hard eviction thresholds (signal<quantity or signal<percent, comma separated; signals memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available): when one is met, pods are evicted at once; giving any replaces all the defaults, 0% or 100% turns one off")
	fs.StringVar(&o.soft, "eviction-soft", "", "soft eviction thresholds, as --eviction-hard: pods are evicted once one stays met for its --eviction-soft-grace-period (default none)")
	fs.StringVar(&o.softGrace, "eviction-soft-grace-period", "", "grace period of each soft threshold, signal=duration, comma separated (for example memory.available=1m30s)")
	fs.StringVar(&o.minReclaim, "eviction-minimum-reclaim", "", "what eviction frees beyond a threshold before it lets go, signal=quantity or signal=percent, comma separated (default none)")
	fs.DurationVar(&o.transition, "eviction-pressure-transition-period", eviction.DefaultPressureTransitionPeriod, "how long a pressure condition stays True after its threshold was last met")
	fs.Int64Var(&o.maxPodGrace, "eviction-max-pod-grace-period", 0, "most seconds of grace a pod evicted for a soft threshold gets (at most its own); negative: its own")
	fs.StringVar(&o.systemReserved, "system-reserved", "", "resources kept for the operating system, left out of the node's allocatable: resource=quantity, comma separated (cpu, memory, ephemeral-storage, pid; default none)")
	fs.StringVar(&o.kubeReserved, "kube-reserved", "", "resources kept for bonsai itself, left out of the node's allocatable, as --system-reserved (default none)")
	fs.StringVar(&o.memoryCapacity, "node-memory-capacity", "", "memory the node reports and evicts against instead of the host's, its pods' usage counted against it (for tests and sandboxes)")
	fs.MarkHidden("node-memory-capacity")
}

func (o *evictionOptions) validate() (evictionConfig, error) {
	var c evictionConfig
	maps := make([]map[string]string, 4)
	for i, f := range []struct{ flag, val, sep string }{
		{"eviction-hard", o.hard, "<"}, {"eviction-soft", o.soft, "<"},
		{"eviction-soft-grace-period", o.softGrace, "="}, {"eviction-minimum-reclaim", o.minReclaim, "="},
	} {
		m, err := eviction.ParseMap(f.val, f.sep)
		if err != nil {
			return c, fmt.Errorf("invalid argument %q for \"--%s\" flag: %v", f.val, f.flag, err)
		}
		maps[i] = m
	}
	// Each flag alone first, so the error names the one at fault.
	if _, err := eviction.Parse(maps[0], nil, nil, nil); err != nil {
		return c, fmt.Errorf("--eviction-hard: %v", err)
	}
	if _, err := eviction.Parse(nil, nil, nil, maps[3]); err != nil {
		return c, fmt.Errorf("--eviction-minimum-reclaim: %v", err)
	}
	ts, err := eviction.Parse(maps[0], maps[1], maps[2], maps[3])
	if err != nil {
		return c, fmt.Errorf("--eviction-soft, --eviction-soft-grace-period: %v", err)
	}
	if o.transition < 0 {
		return c, fmt.Errorf("--eviction-pressure-transition-period %v: must not be negative", o.transition)
	}
	c.Policy = eviction.Config{Thresholds: ts, PressureTransitionPeriod: o.transition, MaxPodGracePeriod: time.Duration(o.maxPodGrace) * time.Second}
	if c.SystemReserved, err = reservedList("system-reserved", o.systemReserved); err != nil {
		return c, err
	}
	if c.KubeReserved, err = reservedList("kube-reserved", o.kubeReserved); err != nil {
		return c, err
	}
	if o.memoryCapacity != "" {
		q, err := resource.ParseQuantity(o.memoryCapacity)
		if err != nil || q.Sign() <= 0 {
			return c, fmt.Errorf("--node-memory-capacity %q: must be a positive quantity", o.memoryCapacity)
		}
		c.MemoryCapacity = q.Value()
	}
	return c, nil
}

// reservedList reads --system-reserved or --kube-reserved with the
// kubelet's rules and messages.
func reservedList(flag, s string) (corev1.ResourceList, error) {
	m, err := eviction.ParseMap(s, "=")
	if err != nil {
		return nil, fmt.Errorf("invalid argument %q for \"--%s\" flag: %v", s, flag, err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	out := corev1.ResourceList{}
	for k, v := range m {
		switch corev1.ResourceName(k) {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, "pid":
		default:
			return nil, fmt.Errorf("--%s: cannot reserve %q resource", flag, k)
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("--%s: %s: %v", flag, k, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("--%s: resource quantity for %q cannot be negative: %v", flag, k, v)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}
