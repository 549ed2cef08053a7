package main

import (
	"context"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

var sink []byte

// garbage allocates n bytes in 64 KB pieces that nothing keeps.
func garbage(n int) {
	for i := 0; i < n; i += 64 << 10 {
		sink = make([]byte, 64<<10)
	}
	sink = nil
}

func TestHeapTrimmer(t *testing.T) {
	// No collections but the trimmer's own: the garbage stays garbage
	// until it is trimmed.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	debug.FreeOSMemory()

	trims := 0
	tr := newHeapTrimmer()
	tr.trim = func() { trims++; debug.FreeOSMemory() }

	// Busy: every period allocates more than trimQuiet, so however much
	// garbage piles up, the runtime's own pacing is left alone.
	for i := 0; i < 3; i++ {
		garbage(2 * trimSlack)
		if tr.check() {
			t.Fatalf("check %d trimmed while %d MB were allocated since the last", i, 2*trimSlack>>20)
		}
	}
	// Quiet, with 48 MB of garbage held: one trim.
	if !tr.check() || trims != 1 {
		t.Fatalf("quiet with garbage: trims = %d, want 1", trims)
	}
	// Quiet and nothing left to hand back: no more.
	if tr.check() || trims != 1 {
		t.Fatalf("quiet after a trim: trims = %d, want 1", trims)
	}
	// A little garbage, under trimSlack, is not worth a collection.
	garbage(trimSlack / 4)
	tr.check()
	if tr.check() || trims != 1 {
		t.Fatalf("quiet with %d MB of garbage: trims = %d, want 1", trimSlack/4>>20, trims)
	}
}

// TestSelfRSS checks the figure the start-up trim logs against the
// kernel's VmRSS for the same process.
func TestSelfRSS(t *testing.T) {
	got := selfRSS()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var kb uint64
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ = strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	if kb == 0 {
		t.Fatalf("no VmRSS in /proc/self/status:\n%s", raw)
	}
	// The two reads are moments apart: allow a few MB either way.
	if diff := int64(got>>10) - int64(kb); got == 0 || diff > 4<<10 || diff < -4<<10 {
		t.Errorf("selfRSS = %d KB, VmRSS %d KB", got>>10, kb)
	}
}

// TestWaitQuiet feeds waitQuiet a CPU count that rises at a chosen share
// of a core: it must wait through busy intervals and return on the first
// quiet one, and give up when its context ends.
func TestWaitQuiet(t *testing.T) {
	const interval = 20 * time.Millisecond
	// fakeCPU reports CPU time growing at share(call) of a core between
	// calls, by the wall clock.
	fakeCPU := func(share func(call int) float64) (func() time.Duration, *int) {
		var used time.Duration
		calls := 0
		last := time.Now()
		return func() time.Duration {
			now := time.Now()
			used += time.Duration(share(calls) * float64(now.Sub(last)))
			last = now
			calls++
			return used
		}, &calls
	}

	// Busy (1.6 cores, a scheduling burst) for the first four checks,
	// then quiet (0.1 of a core).
	cpu, calls := fakeCPU(func(call int) float64 {
		if call <= 4 {
			return 1.6
		}
		return 0.1
	})
	if !waitQuiet(context.Background(), cpu, interval) {
		t.Fatal("waitQuiet gave up without its context ending")
	}
	if *calls != 6 {
		t.Errorf("returned after %d CPU readings, want 6 (one at start, four busy, one quiet)", *calls)
	}

	// Just over the threshold stays busy until the context ends.
	cpu, _ = fakeCPU(func(int) float64 { return quietCPU * 1.2 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*interval)
	defer cancel()
	if waitQuiet(ctx, cpu, interval) {
		t.Fatalf("waitQuiet returned at %.0f %% of a core; the threshold is %.0f %%", quietCPU*120, quietCPU*100)
	}
}

// TestProcessCPU checks that the CPU count the start-up trim waits on
// moves with the process's own work.
func TestProcessCPU(t *testing.T) {
	before := processCPU()
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
		garbage(1 << 20)
	}
	if used := processCPU() - before; used < 20*time.Millisecond {
		t.Errorf("50 ms of busy work counted as %v of CPU", used)
	}
}
