// Package worker is the loop the level-triggered controllers share: wait
// for the informers, then hand each key of a rate-limited workqueue to
// the controller's sync, retrying failures with back-off.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

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
	for range max(n, 1) {
		wg.Go(func() { work(ctx, q, syncKey, log, kind) })
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
}

// Requeue is what a sync returns when its key must be looked at again
// after After although nothing failed (objects are still going away):
// the key's back-off is reset, and nothing is logged as a failure.
type Requeue struct{ After time.Duration }

func (r *Requeue) Error() string { return fmt.Sprintf("look again in %v", r.After) }

// Quiet marks a failure that is expected to pass (a stale cache, a
// write conflict, a full range): retried with back-off like any other,
// logged at debug level only.
func Quiet(err error) error { return quietError{err} }

type quietError struct{ error }

func (e quietError) Unwrap() error { return e.error }

func work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], syncKey func(context.Context, string) error, log *slog.Logger, kind string) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		err := syncKey(ctx, key)
		var requeue *Requeue
		var quiet quietError
		switch {
		case err == nil:
			q.Forget(key)
		case errors.As(err, &requeue):
			q.Forget(key)
			q.AddAfter(key, requeue.After)
		case ctx.Err() != nil: // stopping: the error is the context's
		case errors.As(err, &quiet):
			log.Debug("sync failed, retrying", kind, key, "err", err)
			q.AddRateLimited(key)
		default:
			log.Info("sync failed, retrying", kind, key, "err", err)
			q.AddRateLimited(key)
		}
		q.Done(key)
	}
}

// ByPrefix is the sync of a queue shared by several kinds of keys, each
// kind marked by a prefix ("claim/", "volume/"): a key goes, without its
// prefix, to the sync of the first prefix it has; one with none of them
// goes whole to fallback.
func ByPrefix(fallback func(context.Context, string) error, prefixed ...Prefixed) func(context.Context, string) error {
	return func(ctx context.Context, key string) error {
		for _, p := range prefixed {
			if rest, ok := strings.CutPrefix(key, p.Prefix); ok {
				return p.Sync(ctx, rest)
			}
		}
		return fallback(ctx, key)
	}
}

// Prefixed is one kind of key of ByPrefix.
type Prefixed struct {
	Prefix string
	Sync   func(context.Context, string) error
}

// Handler is an informer and what it tells of its objects' changes.
type Handler struct {
	Informer cache.SharedIndexInformer
	Handler  cache.ResourceEventHandler
}

// AddHandlers adds each handler to its informer; kind names the
// controller in the error.
func AddHandlers(kind string, hs ...Handler) error {
	for _, h := range hs {
		if _, err := h.Informer.AddEventHandler(h.Handler); err != nil {
			return fmt.Errorf("%s: add event handler: %w", kind, err)
		}
	}
	return nil
}

// Enqueue adds obj's namespace/name key to q; a deleted object's
// tombstone gives its key too.
func Enqueue(q workqueue.TypedInterface[string], obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		q.Add(key)
	}
}

// EnqueueChanges is the handler that enqueues the key of every object
// added, updated or deleted.
func EnqueueChanges(q workqueue.TypedInterface[string]) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { Enqueue(q, obj) },
		UpdateFunc: func(_, cur any) { Enqueue(q, cur) },
		DeleteFunc: func(obj any) { Enqueue(q, obj) },
	}
}
