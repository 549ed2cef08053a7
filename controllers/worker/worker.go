// Package worker is the loop the level-triggered controllers share: wait
// for the informers, then hand each key of a rate-limited workqueue to
// the controller's sync, retrying failures with back-off.
package worker

import (
	"context"
	"log/slog"
	"sync"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Run waits until every informer in synced has listed, then runs n
// workers passing q's keys to syncKey until ctx ends; a failed key is
// logged (as kind) and retried later, unless ctx ended. It shuts q down
// and waits for the workers before it returns.
func Run(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], n int, syncKey func(context.Context, string) error, log *slog.Logger, kind string, synced ...cache.InformerSynced) {
	defer q.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { work(ctx, q, syncKey, log, kind) })
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
}

func work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], syncKey func(context.Context, string) error, log *slog.Logger, kind string) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		err := syncKey(ctx, key)
		switch {
		case err == nil:
			q.Forget(key)
		case ctx.Err() == nil:
			log.Info("sync failed, retrying", kind, key, "err", err)
			q.AddRateLimited(key)
		}
		q.Done(key)
	}
}
