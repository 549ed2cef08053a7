package main

import (
	"bytes"
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"time"
)

// startupTrimmed is logged once the start-up garbage and the start-up
// pages of the binary went back to the OS, two seconds after start. The
// code paths used after that fault their pages back in on first use: the
// bench waits for this line before it times steady-state work.
const startupTrimmed = "start-up memory handed back to the OS"

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
