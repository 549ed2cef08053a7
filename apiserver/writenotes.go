package apiserver

import (
	"context"
	"strings"

	"bonsai.dev/bonsai/store"
)

// writeNotes tells in-memory caches (namespaces, admission
// configurations) about every write this server makes under their
// prefixes, before the write returns, so the caches are exact for this
// server's own writes while their watches catch up.
type writeNotes struct {
	store.Store
	notes []writeNote
}

// writeNote is one cache's interest: wrote is called with the key and
// revision of each write under prefix.
type writeNote struct {
	prefix string
	wrote  func(key string, rev uint64)
}

func (w writeNotes) note(key string, rev uint64) {
	if rev == 0 {
		return
	}
	for _, n := range w.notes {
		if strings.HasPrefix(key, n.prefix) {
			n.wrote(key, rev)
		}
	}
}

func (w writeNotes) GetUnless(ctx context.Context, key string, have func(rev uint64) bool) (store.KeyValue, error) {
	return store.GetUnless(ctx, w.Store, key, have)
}

func (w writeNotes) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := w.Store.Create(ctx, key, value)
	w.note(key, rev)
	return rev, err
}

func (w writeNotes) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	nrev, err := w.Store.Update(ctx, key, value, rev)
	w.note(key, nrev)
	return nrev, err
}

func (w writeNotes) Replace(ctx context.Context, key string, value []byte, rev uint64, prev []byte) (uint64, error) {
	nrev, err := store.Replace(ctx, w.Store, key, value, rev, prev)
	w.note(key, nrev)
	return nrev, err
}

func (w writeNotes) Delete(ctx context.Context, key string, rev uint64) (store.KeyValue, error) {
	kv, err := w.Store.Delete(ctx, key, rev)
	w.note(key, kv.Revision)
	return kv, err
}
