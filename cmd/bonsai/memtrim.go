package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"syscall"
	"time"
)

// startupTrimmed is logged once the start-up garbage and the start-up
// pages of the binary went back to the OS, two seconds after start or,
// on a busy server, at its first quiet moment after that. The code paths
// used after that fault their pages back in on first use: the bench waits
// for this line before it times steady-state work.
const startupTrimmed = "start-up memory handed back to the OS"

// The start-up trim waits for start-up to be over and then for the
// server to be quiet. Both halves of it hurt a busy process: handing a
// large heap back to the OS is one madvise per span of free pages
// (hundreds of milliseconds with the heap of 10,000 pods), and every
// page of the binary it pages out that the busy server still runs is
// read back from disk, 4 KB at a time. A server restarted into a backlog
// of work (pending pods, a large cluster's first lists) would pay that
// in the middle of the backlog; an idle edge box trims at 2 s as before.
const (
	startupTrimAfter = 2 * time.Second
	// quietInterval is how long the server must stay under quietCPU.
	quietInterval = 500 * time.Millisecond
	// quietCPU is the share of one core under which the server counts as
	// quiet: a node at rest, or 1,000 simulated nodes renewing leases
	// (about 13 %), but not a scheduling burst or a start-up reconcile.
	quietCPU = 0.25
)

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitQuiet returns true once a whole interval has passed in which the
// process used less than quietCPU of a core by cpu's count, or false
// when ctx ends first.
func waitQuiet(ctx context.Context, cpu func() time.Duration, interval time.Duration) bool {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last, lastAt := cpu(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		now, at := cpu(), time.Now()
		used := float64(now-last) / float64(at.Sub(lastAt))
		if used < quietCPU {
			return true
		}
		last, lastAt = now, at
	}
}

// trimAfterStartup hands the start-up garbage and the start-up pages of
// the binary back to the OS once start-up is over and the server is
// quiet, then keeps trimming the idle heap until ctx ends.
func trimAfterStartup(ctx context.Context, log *slog.Logger) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(startupTrimAfter):
	}
	if !waitQuiet(ctx, processCPU, quietInterval) {
		return
	}
	debug.FreeOSMemory()
	pageOutBinary()
	log.Info(startupTrimmed, "rssMB", selfRSS()>>20)
	newHeapTrimmer().run(ctx)
}

// selfRSS is the process's resident set in bytes, 0 if unknown.
func selfRSS() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// Idle heap trimming. Go collects garbage when the heap has grown by
// GOGC (100 %) over what was live after the last collection (stacks
// counted in), and hands free memory back to the OS only down to about
// that goal. A burst of work (30 pods starting, a Helm install) raises
// the heap goal; afterwards an edge box sits near idle, allocating
// little, and keeps up to twice its live heap for minutes, every page of
// it in RSS. So, like a JVM's periodic collection when idle: when bonsai
// has allocated less than trimQuiet in the last trimPeriod and holds more
// than trimSlack of garbage and free heap, it collects and returns the
// free memory now. A busy server allocates more than that and is left to
// the runtime's own pacing, so trimming adds no work under load; a quiet
// one pays one collection of its live heap (tens of milliseconds) per
// trimSlack it allocates.
const (
	trimPeriod = 5 * time.Second
	trimQuiet  = 4 << 20
	trimSlack  = 8 << 20
)

// heapTrimmer keeps what it needs between checks.
type heapTrimmer struct {
	samples []metrics.Sample
	// allocs is the total allocated at the last check.
	allocs uint64
	// trim does the work; debug.FreeOSMemory outside tests.
	trim func()
}

func newHeapTrimmer() *heapTrimmer {
	t := &heapTrimmer{
		samples: []metrics.Sample{
			{Name: "/gc/heap/allocs:bytes"},
			{Name: "/gc/heap/live:bytes"},
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/memory/classes/heap/free:bytes"},
		},
		trim: debug.FreeOSMemory,
	}
	metrics.Read(t.samples[:1])
	t.allocs = t.samples[0].Value.Uint64()
	return t
}

// check runs once a period and reports whether it trimmed.
func (t *heapTrimmer) check() bool {
	metrics.Read(t.samples)
	allocs := t.samples[0].Value.Uint64()
	live := t.samples[1].Value.Uint64()
	objects := t.samples[2].Value.Uint64()
	free := t.samples[3].Value.Uint64()
	quiet := allocs-t.allocs < trimQuiet
	t.allocs = allocs
	// objects holds the live heap and the garbage made since the last
	// collection; free is heap the runtime keeps but no object uses.
	reclaimable := free
	if objects > live {
		reclaimable += objects - live
	}
	if !quiet || reclaimable < trimSlack {
		return false
	}
	t.trim()
	return true
}

// run checks every trimPeriod until ctx ends.
func (t *heapTrimmer) run(ctx context.Context) {
	tick := time.NewTicker(trimPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.check()
		}
	}
}
