package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"bonsai.dev/bonsai/store"
)

// churnSample is the data dir's size at one moment of the churn.
type churnSample struct {
	at        time.Duration
	allocated int64
	apparent  int64
	updates   int64
}

// runChurn is the long test of the store's garbage collection: the same
// keys updated for a long time with default options must leave the data
// dir bounded by the history it keeps (churnVerdict). The size that
// counts is the allocated one; badger's files are sparse.
func runChurn(ctx context.Context, b *bench, d time.Duration, writers int) error {
	p := storeParamsFor(false)
	dir := filepath.Join(b.dir, "churn")
	st, err := store.OpenBadger(store.BadgerOptions{Dir: dir})
	if err != nil {
		return err
	}
	b.onCleanup(func() { st.Close() })
	const prefix = "/registry/bench/churn/"
	revs, err := load(ctx, st, prefix, p.updateKeys, p.valueSize, p.loadWriters)
	if err != nil {
		return err
	}
	fmt.Printf("churn: %d writers updating %d keys of %d B for %s in %s (default store options)\n",
		writers, p.updateKeys, p.valueSize, d, dir)

	var updates atomic.Int64
	start := time.Now()
	deadline := start.Add(d)
	done := make(chan error, 1)
	go func() {
		done <- parallel(writers, func(w int) error {
			vm := newValueMaker(uint64(300 + w))
			var mine []int
			for i := w; i < p.updateKeys; i += writers {
				mine = append(mine, i)
			}
			for j := 0; time.Now().Before(deadline); j++ {
				if err := ctx.Err(); err != nil {
					return err
				}
				i := mine[j%len(mine)]
				rev, err := st.Update(ctx, fmt.Sprintf("%sk%06d", prefix, i), vm.make(p.valueSize), revs[i])
				if err != nil {
					return err
				}
				revs[i] = rev
				updates.Add(1)
			}
			return nil
		})
	}()

	every := min(30*time.Second, d)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var samples []churnSample
	sample := func() error {
		alloc, app, err := dirSize(dir)
		if err != nil {
			return err
		}
		s := churnSample{at: time.Since(start).Round(time.Second), allocated: alloc, apparent: app, updates: updates.Load()}
		samples = append(samples, s)
		fmt.Printf("%8s  allocated %9s MB  apparent %9s MB  updates %s\n",
			s.at, fmtNum(mb(s.allocated)), fmtNum(mb(s.apparent)), fmtNum(float64(s.updates)))
		return nil
	}
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
			running = false
		case <-tick.C:
			if err := sample(); err != nil {
				return err
			}
		}
	}
	if err := sample(); err != nil {
		return err
	}

	fmt.Printf("churn: %s updates (%s/s)\n", fmtNum(float64(updates.Load())), fmtNum(float64(updates.Load())/time.Since(start).Seconds()))
	fmt.Println(churnVerdict(samples, retainFor))
	return nil
}

// retainFor is the store's default history window.
const retainFor = 5 * time.Minute

// churnVerdict judges whether the data dir is bounded. The store keeps
// every version for retainFor, so the size follows the number of updates
// in the last window, not the run time: with a varying update rate a raw
// size can grow while nothing leaks. What must stay flat is the size per
// version in the window, once the first window has filled and a
// compaction has passed (retainFor + 1 minute).
func churnVerdict(samples []churnSample, window time.Duration) string {
	var ratios []float64
	for _, s := range samples {
		if s.at < window+time.Minute {
			continue
		}
		// Updates at s.at - window, from the nearest earlier sample.
		var before int64
		for _, e := range samples {
			if e.at <= s.at-window {
				before = e.updates
			}
		}
		if inWindow := s.updates - before; inWindow > 0 {
			ratios = append(ratios, float64(s.allocated)/float64(inWindow))
		}
	}
	if len(ratios) < 2 {
		return fmt.Sprintf("churn: run longer than %s to judge growth (history is kept %s)", window+2*time.Minute, window)
	}
	lo, hi := ratios[0], ratios[0]
	for _, r := range ratios {
		lo, hi = min(lo, r), max(hi, r)
	}
	verdict := "ok (bounded by the history window)"
	if hi > 1.5*lo {
		verdict = "MISS (growing beyond the history window)"
	}
	return fmt.Sprintf("churn: allocated bytes per version in the %s window: %s to %s KB: %s",
		window, fmtNum(lo/1024), fmtNum(hi/1024), verdict)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
