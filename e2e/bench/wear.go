package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// wearWindow is how long each idle phase of the wear suite is measured;
// the closing figure wants at least 15 minutes (-wear-window).
var wearWindow time.Duration

// wearPods is the pod count of the second idle phase.
const wearPods = 30

type wearResults struct {
	disk0, disk30   *float64 // MB/h the bonsai process wrote (write_bytes)
	store0, store30 *float64 // store writes/h (creates, updates, deletes)
	per0, per30     *float64 // KB on disk per store write
	ctd0, ctd30     *float64 // MB/h containerd wrote, reported apart
}

func wearRows(r *wearResults, window time.Duration) []Row {
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: "wear: " + name, Unit: unit, Bonsai: v, Target: t}
	}
	w := window.Round(time.Second).String()
	return []Row{
		row("idle disk writes, 0 pods ("+w+")", "MB/h", r.disk0, atMost(5, "MB/h")),
		row("idle store writes, 0 pods", "writes/h", r.store0, nil),
		row("disk bytes per idle store write, 0 pods", "KB", r.per0, nil),
		row("idle disk writes, 30 pods ("+w+")", "MB/h", r.disk30, atMost(20, "MB/h")),
		row("idle store writes, 30 pods", "writes/h", r.store30, nil),
		row("disk bytes per idle store write, 30 pods", "KB", r.per30, nil),
		row("containerd idle disk writes, 0 pods (reported apart)", "MB/h", r.ctd0, nil),
		row("containerd idle disk writes, 30 pods (reported apart)", "MB/h", r.ctd30, nil),
	}
}

// wearSuite measures what an idle node writes to its disk: the bonsai
// process' write_bytes (store, value log, compactions, its log) and the
// store's own write count, first with no pods, then with 30 running. On
// flash, bytes written per hour is the figure that wears the card out.
//
// A fresh store is measured: the history compactions that start once
// 10,000 revisions are retained (about 28 hours of Lease renewals) come
// in batches of 1,000 revisions, one synced write every ~2.8 hours, too
// rare to move the figure.
func wearSuite(ctx context.Context, b *bench) ([]Row, error) {
	window := wearWindow
	if window == 0 {
		window = 15 * time.Minute
		if b.quick {
			window = 90 * time.Second
		}
	}
	res := &wearResults{}
	rows := func() []Row { return wearRows(res, window) }
	if os.Geteuid() != 0 {
		return rows(), errors.New("the wear suite needs root (network namespaces, containerd)")
	}
	b.logf("wear: starting bonsai with its own containerd")
	// Ranges of its own: its cluster DNS address (the service range's
	// tenth) is on the host, where a test's node may be running too.
	n, err := startRealNode(ctx, b, "wear", "10.248.0.0/16", "--service-cidr=10.249.0.0/16")
	if err != nil {
		return rows(), err
	}
	defer n.close()
	// Start-up writes (the store's first flushes, the image import, the
	// first status) are not idle: let them settle.
	if err := sleep(ctx, 30*time.Second); err != nil {
		return rows(), err
	}
	if res.disk0, res.store0, res.ctd0, err = idleWrites(ctx, b, n, window, "0 pods"); err != nil {
		return rows(), err
	}
	res.per0 = perWrite(res.disk0, res.store0)
	b.logf("wear: %d pods", wearPods)
	if _, err := podsToRunning(ctx, n.cs, "wear", wearPods, func(name string) *corev1.Pod { return benchPod(name, n.name) }); err != nil {
		return rows(), err
	}
	if err := sleep(ctx, 30*time.Second); err != nil {
		return rows(), err
	}
	if res.disk30, res.store30, res.ctd30, err = idleWrites(ctx, b, n, window, fmt.Sprintf("%d pods", wearPods)); err != nil {
		return rows(), err
	}
	res.per30 = perWrite(res.disk30, res.store30)
	return rows(), deletePods(ctx, n.cs)
}

// perWrite is the KB written to disk per store write: an idle store write
// is a small object, so this is what a synced write costs in pages.
func perWrite(mbPerHour, writesPerHour *float64) *float64 {
	if mbPerHour == nil || writesPerHour == nil || *writesPerHour == 0 {
		return nil
	}
	return num(*mbPerHour * 1e3 / *writesPerHour)
}

// idleWrites measures one idle window: MB/h written by bonsai and by its
// containerd, and the store's writes per hour, logging which resources
// the store writes were to.
func idleWrites(ctx context.Context, b *bench, n *realNode, window time.Duration, what string) (disk, writes, ctd *float64, err error) {
	pid := strconv.Itoa(n.srv.cmd.Process.Pid)
	ctdPID := strconv.Itoa(childNamed(n.srv.cmd.Process.Pid, "containerd"))
	b.logf("wear: %s, measuring %v", what, window)
	w0, err := writeBytes(pid)
	if err != nil {
		return nil, nil, nil, err
	}
	c0, cerr := writeBytes(ctdPID)
	s0, err := storeWrites(ctx, n.cs)
	if err != nil {
		return nil, nil, nil, err
	}
	start := time.Now()
	if err := sleep(ctx, window); err != nil {
		return nil, nil, nil, err
	}
	w1, err := writeBytes(pid)
	if err != nil {
		return nil, nil, nil, err
	}
	c1, cerr1 := writeBytes(ctdPID)
	s1, err := storeWrites(ctx, n.cs)
	if err != nil {
		return nil, nil, nil, err
	}
	hours := time.Since(start).Hours()
	perHour := func(v float64) *float64 { return num(v / hours) }
	disk = perHour(float64(w1-w0) / 1e6)
	if cerr == nil && cerr1 == nil {
		ctd = perHour(float64(c1-c0) / 1e6)
	}
	var total float64
	var parts []string
	for k, v := range s1 {
		if d := v - s0[k]; d > 0 {
			total += d
			parts = append(parts, fmt.Sprintf("%s %.0f/h", k, d/hours))
		}
	}
	sort.Strings(parts)
	b.logf("wear: %s: %.2f MB/h written, store writes: %s", what, *disk, strings.Join(parts, ", "))
	b.note("wear, %s: store writes per hour by operation and resource: %s", what, strings.Join(parts, ", "))
	return disk, perHour(total), ctd, nil
}

// storeWrites reads the store's write counts by operation and resource
// (etcd_request_duration_seconds_count for create, update and delete;
// a no-op update is never sent to the store, so these are real writes).
func storeWrites(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || name != "etcd_request_duration_seconds_count" {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		var op, typ string
		for _, l := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(l, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "operation":
				op = v
			case "type":
				typ = v
			}
		}
		if op != "create" && op != "update" && op != "delete" {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: %s: %w", line, err)
		}
		out[op+" "+typ] += f
	}
	return out, nil
}
