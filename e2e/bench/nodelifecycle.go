package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/controllers/nodelifecycle"
)

// nodeLifecycleSuite measures what the node lifecycle controller costs on
// a steady cluster: `bonsai server --simulated-nodes N` serves the API,
// and a second controller runs in this process (over TLS, as a remote
// kube-controller-manager would), so its CPU (informers decoding N/10
// Lease updates a second, a monitor pass over every node each 5 s) is this
// process's own, apart from the server's.
func nodeLifecycleSuite(ctx context.Context, b *bench) ([]Row, error) {
	n := simCounts[0]
	settle, window := 15*time.Second, 30*time.Second
	if b.quick {
		settle, window = 10*time.Second, 15*time.Second
	}
	var cpuPct *float64
	rows := func() []Row {
		var per *float64
		if cpuPct != nil {
			per = num(*cpuPct * 1000 / float64(n))
		}
		return []Row{{
			Name: fmt.Sprintf("node lifecycle controller CPU per 1,000 nodes (steady, %s nodes, 5 s period)", fmtNum(float64(n))),
			Unit: "% of a core", Bonsai: per,
		}}
	}
	srv, stop, err := startSuiteServer(ctx, b, "nlc", "--cluster-cidr", simClusterCIDR, "--simulated-nodes", strconv.Itoa(n))
	if err != nil {
		return rows(), err
	}
	defer stop()
	cfg, err := srv.restConfig("bonsai-bench-nodelifecycle")
	if err != nil {
		return rows(), err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return rows(), err
	}
	if _, err := waitSimReady(ctx, cs, n, 5*time.Minute); err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, srv.logTail())
	}
	c, err := nodelifecycle.New(nodelifecycle.Config{RESTConfig: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return rows(), err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	defer func() { cancel(); <-done }()
	b.logf("nodelifecycle: controller on %s simulated nodes; settling %v, measuring %v", fmtNum(float64(n)), settle, window)
	if err := sleep(ctx, settle); err != nil {
		return rows(), err
	}
	t0, cpu0 := time.Now(), selfCPU()
	if err := sleep(ctx, window); err != nil {
		return rows(), err
	}
	secs := time.Since(t0).Seconds()
	cpuPct = num((selfCPU() - cpu0).Seconds() / secs * 100)
	return rows(), nil
}

// selfCPU is this process's user plus system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
