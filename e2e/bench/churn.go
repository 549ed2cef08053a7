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
// dir no bigger in the second half of the run than in the first. The size
// that counts is the allocated one; badger's files are sparse.
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

	var first, second int64
	for _, s := range samples {
		if s.at <= d/2 {
			first = max(first, s.allocated)
		} else {
			second = max(second, s.allocated)
		}
	}
	fmt.Printf("churn: %s updates (%s/s); max allocated: first half %s MB, second half %s MB",
		fmtNum(float64(updates.Load())), fmtNum(float64(updates.Load())/time.Since(start).Seconds()),
		fmtNum(mb(first)), fmtNum(mb(second)))
	if first > 0 {
		// History is kept for 5 minutes, so a run much shorter than about
		// 15 minutes can still be filling that window in its second half.
		ratio := float64(second) / float64(first)
		verdict := "ok (not growing)"
		if ratio > 1.1 {
			verdict = "MISS (still growing)"
		}
		fmt.Printf(", ratio %s: %s", fmtNum(ratio), verdict)
	}
	fmt.Println()
	return nil
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
