package apiserver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/store"
)

// configCache keeps one kind of admission configuration (webhook
// configurations, policies, bindings) compiled in memory, as
// kube-apiserver's admission plugins keep informers: a request never reads
// the configurations from the store.
//
// A store watch marks the compiled set stale; so does every write through
// this server, at once (admissionConfigWrites), so a request right after
// `kubectl apply` of a webhook sees it. A stale set is rebuilt from one
// list on the next request that needs it.
type configCache[T any] struct {
	s       *Server
	res     *resource
	compile func(objs []runtime.Object) T

	mu    sync.Mutex
	built atomic.Pointer[compiled[T]]
	// floor is the highest revision known to change the set.
	floor atomic.Uint64
}

type compiled[T any] struct {
	rev uint64
	val T
}

func newConfigCache[T any](s *Server, r schema.GroupVersionResource, compile func([]runtime.Object) T) *configCache[T] {
	c := &configCache[T]{s: s, res: s.reg.byGVR[r], compile: compile}
	c.floor.Store(1)
	return c
}

// get returns the compiled set, rebuilding it if a change is known.
func (c *configCache[T]) get(ctx context.Context) (T, error) {
	if b := c.built.Load(); b != nil && b.rev >= c.floor.Load() {
		return b.val, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.built.Load(); b != nil && b.rev >= c.floor.Load() {
		return b.val, nil
	}
	l, err := c.s.cfg.Store.List(ctx, c.prefix(), store.ListOptions{})
	if err != nil {
		var zero T
		return zero, err
	}
	objs := make([]runtime.Object, 0, len(l.Items))
	for _, kv := range l.Items {
		obj, err := decodeStored(c.res, kv)
		if err != nil {
			c.s.log.Warn("admission configuration not decodable; skipped", "key", kv.Key, "err", err)
			continue
		}
		objs = append(objs, obj)
	}
	val := c.compile(objs)
	c.built.Store(&compiled[T]{rev: l.Revision, val: val})
	return val, nil
}

// changed records that the set changed at rev.
func (c *configCache[T]) changed(rev uint64) {
	for {
		cur := c.floor.Load()
		if rev <= cur || c.floor.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// run watches the configurations until ctx ends, marking the set stale on
// every change (writes by another server sharing an etcd store).
func (c *configCache[T]) run(ctx context.Context) {
	prefix := c.prefix()
	for ctx.Err() == nil {
		rev, err := c.s.cfg.Store.CurrentRevision(ctx)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		c.changed(rev)
		w, err := c.s.cfg.Store.Watch(ctx, prefix, rev)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.Events() {
			c.changed(ev.Revision)
		}
		w.Stop()
	}
}

// admissionConfigNotes let this server's writes of admission
// configurations reach their caches at once.
func (s *Server) admissionConfigNotes() []writeNote {
	var notes []writeNote
	for _, c := range []interface {
		prefix() string
		changed(uint64)
	}{s.webhooks.mutating, s.webhooks.validating, s.policies.policies, s.policies.bindings} {
		notes = append(notes, writeNote{prefix: c.prefix(), wrote: func(_ string, rev uint64) { c.changed(rev) }})
	}
	return notes
}

// runAdmissionCaches watches the admission configurations until ctx ends.
func (s *Server) runAdmissionCaches(ctx context.Context) {
	go s.webhooks.mutating.run(ctx)
	go s.webhooks.validating.run(ctx)
	go s.policies.policies.run(ctx)
	s.policies.bindings.run(ctx)
}

func (c *configCache[T]) prefix() string { return c.res.prefix("") }
