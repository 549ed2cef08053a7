package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// metricsPods is how many pods the metrics suite samples.
const metricsPods = 30

// metricsSuite measures what the kubelet's figures cost (the sampler
// behind /stats/summary, the metrics API and eviction): on a real node
// with 30 pods, bonsai's CPU time and anonymous memory over a window at
// the default housekeeping interval (10 s), then again sampling every
// second, each on a server started with the pods running. The difference
// is the sampler's: per sample, and as a share of a core at the default
// interval. RssAnon is read at the end of each window: sampling ten times
// as often bounds what the sampler's garbage adds; what it keeps is one
// sample (the /stats/summary row's size, in JSON).
func metricsSuite(ctx context.Context, b *bench) ([]Row, error) {
	window := 60 * time.Second
	if b.quick {
		window = 20 * time.Second
	}
	var perSample, share, rssAdded, summaryKB, allocKB, rss10MB *float64
	rows := func() []Row {
		return []Row{
			{Name: fmt.Sprintf("metrics: CPU per sample of a node with %d pods", metricsPods), Unit: "ms", Bonsai: perSample},
			{Name: fmt.Sprintf("metrics: collection CPU with %d pods, every 10 s", metricsPods), Unit: "% of a core", Bonsai: share, Target: atMost(0.5, "% of a core")},
			{Name: fmt.Sprintf("metrics: bytes allocated per sample of %d pods", metricsPods), Unit: "KB", Bonsai: allocKB},
			{Name: fmt.Sprintf("metrics: RssAnon with %d pods, sampling every 10 s", metricsPods), Unit: "MB", Bonsai: rss10MB},
			{Name: "metrics: RssAnon sampling every 1 s minus every 10 s", Unit: "MB", Bonsai: rssAdded, Target: atMost(5, "MB")},
			{Name: fmt.Sprintf("metrics: /stats/summary of %d pods", metricsPods), Unit: "KB", Bonsai: summaryKB},
		}
	}
	if os.Geteuid() != 0 {
		return rows(), errors.New("the metrics suite needs root (network namespaces, containerd)")
	}
	n, err := startRealNode(ctx, b, "metrics", "10.204.0.0/16", "--service-cidr=10.203.0.0/16")
	if err != nil {
		return rows(), err
	}
	defer func() { n.close() }()
	b.logf("metrics: %d pods", metricsPods)
	if _, err := podsToRunning(ctx, n.cs, "metrics", metricsPods, func(name string) *corev1.Pod { return benchPod(name, n.name) }); err != nil {
		return rows(), err
	}
	measure := func(what string) (cpu time.Duration, rss uint64, alloc float64, err error) {
		// Start-up and the pods' first samples are not the steady state.
		if err := sleep(ctx, 20*time.Second); err != nil {
			return 0, 0, 0, err
		}
		pid := strconv.Itoa(n.srv.cmd.Process.Pid)
		t0, err := cpuTicks(pid)
		if err != nil {
			return 0, 0, 0, err
		}
		a0, err := allocatedBytes(ctx, n)
		if err != nil {
			return 0, 0, 0, err
		}
		start := time.Now()
		if err := sleep(ctx, window); err != nil {
			return 0, 0, 0, err
		}
		t1, err := cpuTicks(pid)
		if err != nil {
			return 0, 0, 0, err
		}
		a1, err := allocatedBytes(ctx, n)
		if err != nil {
			return 0, 0, 0, err
		}
		alloc = a1 - a0
		rss, err = anonBytes(n.srv.cmd.Process.Pid)
		// Clock ticks are 10 ms (USER_HZ 100); scaled to the exact window.
		cpu = time.Duration(float64(t1-t0) * 10 * float64(time.Millisecond) * float64(window) / float64(time.Since(start)))
		b.logf("metrics: %s: %v CPU in %v, %.1f MB allocated, RssAnon %.1f MB", what, cpu, window, alloc/1e6, float64(rss)/(1<<20))
		return cpu, rss, alloc, err
	}
	// Both windows on a server started with the pods already running,
	// so that their memory compares (the first start made the pods).
	n.close()
	if err := n.start(ctx, b); err != nil {
		return rows(), err
	}
	cpu10, rss10, alloc10, err := measure("every 10 s")
	if err != nil {
		return rows(), err
	}
	raw, err := n.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.name, "proxy", "stats", "summary").DoRaw(ctx)
	if err != nil {
		return rows(), fmt.Errorf("/stats/summary: %w", err)
	}
	summaryKB = num(float64(len(raw)) / 1e3)
	n.close()
	n.args = append(n.args, "--housekeeping-interval=1s")
	if err := n.start(ctx, b); err != nil {
		return rows(), err
	}
	cpu1, rss1, alloc1, err := measure("every 1 s")
	if err != nil {
		return rows(), err
	}
	extra := window.Seconds() - window.Seconds()/10 // samples more in the window
	per := (cpu1 - cpu10).Seconds() * 1e3 / extra
	perSample = num(per)
	share = num(per / 10e3 * 100)
	allocKB = num((alloc1 - alloc10) / extra / 1e3)
	rss10MB = num(float64(rss10) / (1 << 20))
	rssAdded = num((float64(rss1) - float64(rss10)) / (1 << 20))
	return rows(), deletePods(ctx, n.cs)
}

// allocatedBytes is bonsai's go_memstats_alloc_bytes_total: every byte
// it allocated since it started.
func allocatedBytes(ctx context.Context, n *realNode) (float64, error) {
	raw, err := n.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_alloc_bytes_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, errors.New("/metrics has no go_memstats_alloc_bytes_total")
}
