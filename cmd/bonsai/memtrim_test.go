package main

import (
	"runtime/debug"
	"testing"
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
