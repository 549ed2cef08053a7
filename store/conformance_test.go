package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"bonsai.dev/bonsai/apiserver/encryption"
	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// backend opens a fresh, empty store. maxWatchLag > 0 sets how far a watcher
// may fall behind before it is ended; openWith takes more options.
type backend struct {
	name     string
	open     func(t *testing.T, maxWatchLag int) store.Store
	openWith func(t *testing.T, o openOptions) store.Store
	// quota is a quota small enough for a test to fill with 1 MiB
	// values and large enough for the backend's empty store.
	quota int64
}

// openOptions are the options every backend takes.
type openOptions struct {
	maxWatchLag int
	expire      []store.ExpiryRule
	quota       int64
}

func backends() []backend {
	bs := []backend{
		{name: "badger", quota: 40 << 20, openWith: openTestBadger},
		// The API server's encryption at rest over badger, every value
		// under /registry/<group>/<resource>/ encrypted: what the server
		// stores through must keep every promise of a store.
		{name: "badger-encrypted", quota: 40 << 20, openWith: func(t *testing.T, o openOptions) store.Store {
			cfg, err := encryption.Parse([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: ['*.*']\n  providers: [{aesgcm: {keys: [{name: k, secret: MDEyMzQ1Njc4OWFiY2RlZg==}]}}]\n"))
			if err != nil {
				t.Fatal(err)
			}
			return encryption.NewStore(openTestBadger(t, o), cfg)
		}},
		{name: "etcd", quota: 8 << 20, openWith: func(t *testing.T, o openOptions) store.Store {
			e := testenv.EtcdForTest(t)
			s, err := store.OpenEtcd(store.EtcdOptions{Endpoint: e.Endpoint, MaxWatchLag: o.maxWatchLag, CompactInterval: -1, DialTimeout: 30 * time.Second,
				Expire: o.expire, QuotaBytes: o.quota})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	}
	for i := range bs {
		openWith := bs[i].openWith
		bs[i].open = func(t *testing.T, lag int) store.Store { return openWith(t, openOptions{maxWatchLag: lag}) }
	}
	return bs
}

func openTestBadger(t *testing.T, o openOptions) store.Store {
	// A tiny ring sends most watchers through the on-disk log.
	bo := store.BadgerOptions{Dir: t.TempDir(), WatchRing: 16, Expire: o.expire, QuotaBytes: o.quota}
	if o.maxWatchLag > 0 {
		bo.MaxWatchLag = uint64(o.maxWatchLag)
	}
	if o.quota > 0 {
		// 1 MB memtables: an empty store of about 22 MB (most
		// of it the value log allocated ahead).
		bo.MemoryMB = 6
	}
	s, err := store.OpenBadger(bo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs one suite against every backend.
func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open func(t *testing.T, lag int) store.Store)
	}{
		{"CRUD", testCRUD},
		{"InvalidInput", testInvalidInput},
		{"ValueTooLarge", testValueTooLarge},
		{"PagedListConsistentUnderWriters", testPagedList},
		{"ListAtRevision", testListAtRevision},
		{"WatchOrderAndContent", testWatchOrder},
		{"WatchResume", testWatchResume},
		{"WatchFromNow", testWatchFromNow},
		{"Compacted", testCompacted},
		{"ManyWatchers", testManyWatchers},
		{"SlowWatcher", testSlowWatcher},
		{"WatchProgress", testWatchProgress},
	}
	// Tests that need a backend's other options.
	withOptions := []struct {
		name string
		fn   func(t *testing.T, b backend)
	}{
		{"Expiry", testExpiry},
		{"Quota", testQuota},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, b.open) })
			}
			for _, tc := range withOptions {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
			}
		})
	}
}

var ctx = context.Background()

func mustCreate(t *testing.T, s store.Store, key, val string) uint64 {
	t.Helper()
	rev, err := s.Create(ctx, key, []byte(val))
	if err != nil {
		t.Fatalf("create %s: %v", key, err)
	}
	return rev
}

func testCRUD(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	r1 := mustCreate(t, s, "/registry/core/configmaps/default/a", "v1")
	kv, err := s.Get(ctx, "/registry/core/configmaps/default/a")
	if err != nil || string(kv.Value) != "v1" || kv.Revision != r1 {
		t.Fatalf("get after create: %+v %v, want v1 at %d", kv, err, r1)
	}
	if cur, _ := s.CurrentRevision(ctx); cur != r1 {
		t.Fatalf("current revision %d, want %d", cur, r1)
	}
	if _, err := s.Create(ctx, "/registry/core/configmaps/default/a", []byte("x")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("create existing: %v, want ErrExists", err)
	}
	r2, err := s.Update(ctx, "/registry/core/configmaps/default/a", []byte("v2"), r1)
	if err != nil || r2 <= r1 {
		t.Fatalf("update: rev %d err %v (previous %d)", r2, err, r1)
	}
	if _, err := s.Update(ctx, "/registry/core/configmaps/default/a", []byte("v3"), r1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	if _, err := store.Replace(ctx, s, "/registry/core/configmaps/default/a", []byte("v3"), r1, []byte("v1")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale replace: %v, want ErrConflict", err)
	}
	if _, err := store.Replace(ctx, s, "/registry/core/configmaps/default/missing", []byte("v"), 1, []byte("v")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("replace missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Update(ctx, "/registry/core/configmaps/default/missing", []byte("v"), 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Delete(ctx, "/registry/core/configmaps/default/a", r1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale delete: %v, want ErrConflict", err)
	}
	if kv, _ := s.Get(ctx, "/registry/core/configmaps/default/a"); string(kv.Value) != "v2" {
		t.Fatalf("a failed write changed the value to %q", kv.Value)
	}
	del, err := s.Delete(ctx, "/registry/core/configmaps/default/a", r2)
	if err != nil || string(del.Value) != "v2" || del.Revision <= r2 {
		t.Fatalf("delete: %+v %v", del, err)
	}
	if _, err := s.Get(ctx, "/registry/core/configmaps/default/a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get deleted: %v, want ErrNotFound", err)
	}
	if _, err := s.Delete(ctx, "/registry/core/configmaps/default/a", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete missing: %v, want ErrNotFound", err)
	}
	// Unconditional delete, and re-creation after delete.
	r3 := mustCreate(t, s, "/registry/core/configmaps/default/a", "again")
	if r3 <= del.Revision {
		t.Fatalf("revision went backwards: %d after %d", r3, del.Revision)
	}
	if _, err := s.Delete(ctx, "/registry/core/configmaps/default/a", 0); err != nil {
		t.Fatalf("unconditional delete: %v", err)
	}
}

func testInvalidInput(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	for _, k := range []string{"", "nope", "/a//b", "/a/../b", "/a/\x00", "/a/"} {
		if _, err := s.Create(ctx, k, nil); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("create %q: %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Get(ctx, k); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("get %q: %v, want ErrInvalidKey", k, err)
		}
	}
	if _, err := s.List(ctx, "/registry/core/pods", store.ListOptions{}); !errors.Is(err, store.ErrInvalidKey) {
		t.Errorf("list without trailing slash: %v, want ErrInvalidKey", err)
	}
	for _, tok := range []string{"garbage", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIuLi8uLi94In0"} {
		if _, err := s.List(ctx, "/registry/core/pods/", store.ListOptions{Continue: tok}); !errors.Is(err, store.ErrInvalidContinue) {
			t.Errorf("list with continue %q: %v, want ErrInvalidContinue", tok, err)
		}
	}
	cur, _ := s.CurrentRevision(ctx)
	if _, err := s.List(ctx, "/registry/", store.ListOptions{Revision: cur + 1000}); !errors.Is(err, store.ErrFutureRevision) {
		t.Errorf("list at a future revision: %v, want ErrFutureRevision", err)
	}
	if _, err := s.Watch(ctx, "/registry/", cur+1000); !errors.Is(err, store.ErrFutureRevision) {
		t.Errorf("watch from a future revision: %v, want ErrFutureRevision", err)
	}
}

// testValueTooLarge: a value over the limit is refused with a typed error
// before anything is written, on create, update and replace; one well
// under it is taken.
func testValueTooLarge(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	const key = "/registry/core/configmaps/default/big"
	over := bytes.Repeat([]byte("x"), store.DefaultMaxValueBytes+1)
	// Encrypted, the value the store refuses is the ciphertext, a few
	// dozen bytes longer.
	_, encrypted := s.(*encryption.Store)
	tooLarge := func(op string, err error) {
		t.Helper()
		var e *store.ValueTooLargeError
		if !errors.Is(err, store.ErrValueTooLarge) || !errors.As(err, &e) || e.Limit != store.DefaultMaxValueBytes ||
			(!encrypted && e.Size != len(over)) || (encrypted && (e.Size <= len(over) || e.Size > len(over)+100)) {
			t.Errorf("%s of %d bytes: %v, want a ValueTooLargeError with limit %d", op, len(over), err, store.DefaultMaxValueBytes)
		}
	}
	before, _ := s.CurrentRevision(ctx)
	_, err := s.Create(ctx, key, over)
	tooLarge("create", err)
	if _, err := s.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after a refused create: %v, want ErrNotFound", err)
	}
	if cur, _ := s.CurrentRevision(ctx); cur != before {
		t.Fatalf("a refused create moved the revision from %d to %d", before, cur)
	}
	under := bytes.Repeat([]byte("y"), 1<<20)
	rev, err := s.Create(ctx, key, under)
	if err != nil {
		t.Fatalf("create of 1 MiB: %v", err)
	}
	_, err = s.Update(ctx, key, over, rev)
	tooLarge("update", err)
	_, err = store.Replace(ctx, s, key, over, rev, under)
	tooLarge("replace", err)
	if kv, err := s.Get(ctx, key); err != nil || kv.Revision != rev || !bytes.Equal(kv.Value, under) {
		t.Fatalf("after refused updates: revision %d (want %d), %d bytes, %v", kv.Revision, rev, len(kv.Value), err)
	}
	// At the limit a backend may still refuse (etcd's limit counts the
	// key and the request), but only as too large.
	if _, err := s.Update(ctx, key, over[:store.DefaultMaxValueBytes], rev); err != nil && !errors.Is(err, store.ErrValueTooLarge) {
		t.Fatalf("update at the limit: %v, want success or ErrValueTooLarge", err)
	}
}

// testPagedList pages through a prefix with a small limit while writers
// create, update and delete under it: every page must come from the first
// page's revision, and the pages together must equal the whole list at that
// revision.
func testPagedList(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	const n = 60
	for i := 0; i < n; i++ {
		mustCreate(t, s, fmt.Sprintf("/registry/core/pods/ns/p%03d", i), "0")
	}
	mustCreate(t, s, "/registry/core/pods/other/x", "0") // outside the prefix
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("/registry/core/pods/ns/p%03d", (i*7+w)%n)
				kv, err := s.Get(ctx, k)
				if err == nil {
					if i%5 == 0 {
						s.Delete(ctx, k, kv.Revision)
					} else {
						s.Update(ctx, k, []byte(fmt.Sprint(i)), kv.Revision)
					}
				} else {
					s.Create(ctx, k, []byte("new"))
				}
				s.Create(ctx, fmt.Sprintf("/registry/core/pods/ns/w%d-%05d", w, i), []byte("x"))
			}
		}(w)
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(20 * time.Millisecond)
	for round := 0; round < 3; round++ {
		var got []store.KeyValue
		page, err := s.List(ctx, "/registry/core/pods/ns/", store.ListOptions{Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		rev := page.Revision
		pages := 1
		for {
			got = append(got, page.Items...)
			if page.Revision != rev {
				t.Fatalf("page %d read at %d, first page at %d", pages, page.Revision, rev)
			}
			if page.Continue == "" {
				if page.RemainingCount != 0 {
					t.Fatalf("last page has remainingCount %d", page.RemainingCount)
				}
				break
			}
			if page.RemainingCount <= 0 {
				t.Fatalf("page %d has a continue token but remainingCount %d", pages, page.RemainingCount)
			}
			time.Sleep(2 * time.Millisecond) // let writers move on
			if page, err = s.List(ctx, "/registry/core/pods/ns/", store.ListOptions{Limit: 7, Continue: page.Continue}); err != nil {
				t.Fatal(err)
			}
			pages++
		}
		whole, err := s.List(ctx, "/registry/core/pods/ns/", store.ListOptions{Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(whole.Items, got); diff != "" {
			t.Fatalf("paged list differs from the whole list at %d (-whole +paged):\n%s", rev, diff)
		}
		if pages < 3 {
			t.Fatalf("only %d pages of 7 for %d items", pages, len(got))
		}
		for i, kv := range got {
			if kv.Revision > rev {
				t.Fatalf("item %s at %d newer than list revision %d", kv.Key, kv.Revision, rev)
			}
			if i > 0 && got[i-1].Key >= kv.Key {
				t.Fatalf("keys out of order: %s then %s", got[i-1].Key, kv.Key)
			}
		}
	}
}

func testListAtRevision(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	r1 := mustCreate(t, s, "/registry/x/a", "1")
	r2, _ := s.Update(ctx, "/registry/x/a", []byte("2"), r1)
	mustCreate(t, s, "/registry/x/b", "b")
	old, err := s.List(ctx, "/registry/x/", store.ListOptions{Revision: r1})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.KeyValue{{Key: "/registry/x/a", Value: []byte("1"), Revision: r1}}
	if diff := cmp.Diff(want, old.Items); diff != "" || old.Revision != r1 {
		t.Fatalf("list at %d (rev %d): %s", r1, old.Revision, diff)
	}
	now, _ := s.List(ctx, "/registry/x/", store.ListOptions{})
	if len(now.Items) != 2 || now.Items[0].Revision != r2 {
		t.Fatalf("list now: %+v", now.Items)
	}
}

// writeMix does a fixed sequence of creates, updates and deletes under
// prefix and returns the events it should produce.
func writeMix(t *testing.T, s store.Store, prefix string, n int) []store.Event {
	t.Helper()
	var want []store.Event
	vals := map[string][]byte{}
	revs := map[string]uint64{}
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%sk%02d", prefix, i%7)
		v := []byte(fmt.Sprintf("v%d", i))
		switch {
		case revs[k] == 0:
			r := mustCreate(t, s, k, string(v))
			want = append(want, store.Event{Type: store.Added, Key: k, Value: v, Revision: r})
			revs[k], vals[k] = r, v
		case i%3 == 0:
			kv, err := s.Delete(ctx, k, revs[k])
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, store.Event{Type: store.Deleted, Key: k, Value: vals[k], PrevValue: vals[k], Revision: kv.Revision})
			delete(revs, k)
			delete(vals, k)
		default:
			// Every other update hands the store the value it
			// replaces: the event must carry it all the same.
			var r uint64
			var err error
			if i%2 == 0 {
				r, err = store.Replace(ctx, s, k, v, revs[k], vals[k])
			} else {
				r, err = s.Update(ctx, k, v, revs[k])
			}
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, store.Event{Type: store.Modified, Key: k, Value: v, PrevValue: vals[k], Revision: r})
			revs[k], vals[k] = r, v
		}
	}
	return want
}

func collect(t *testing.T, w store.Watcher, n int) []store.Event {
	t.Helper()
	var got []store.Event
	timeout := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended after %d of %d events: %v", len(got), n, w.Err())
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("timed out after %d of %d events", len(got), n)
		}
	}
	return got
}

func expectQuiet(t *testing.T, w store.Watcher) {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if ok {
			t.Fatalf("unexpected event %+v", ev)
		}
	case <-time.After(100 * time.Millisecond):
	}
}

func testWatchOrder(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	w, err := s.Watch(ctx, "/registry/a/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	mustCreate(t, s, "/registry/b/outside", "x")
	want := writeMix(t, s, "/registry/a/", 40)
	mustCreate(t, s, "/registry/ab/not-under-a", "x")
	got := collect(t, w, len(want))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	expectQuiet(t, w)

	// Concurrent writers: revisions still arrive strictly increasing.
	w2, err := s.Watch(ctx, "/registry/c/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				s.Create(ctx, fmt.Sprintf("/registry/c/%d-%d", g, i), []byte("x"))
			}
		}(g)
	}
	wg.Wait()
	evs := collect(t, w2, 200)
	for i := 1; i < len(evs); i++ {
		if evs[i].Revision <= evs[i-1].Revision {
			t.Fatalf("event %d at %d after %d", i, evs[i].Revision, evs[i-1].Revision)
		}
	}
}

func testWatchResume(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	writeMix(t, s, "/registry/r/before-", 10)
	from, _ := s.CurrentRevision(ctx)
	want := writeMix(t, s, "/registry/r/", 30)
	// Resume from every point: exactly the events strictly after it.
	for _, i := range []int{0, 1, 15, len(want) - 1} {
		start := from
		if i > 0 {
			start = want[i-1].Revision
		}
		w, err := s.Watch(ctx, "/registry/r/", start)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, w, len(want)-i)
		if diff := cmp.Diff(want[i:], got); diff != "" {
			t.Fatalf("resume from %d (-want +got):\n%s", start, diff)
		}
		expectQuiet(t, w)
		w.Stop()
		if err := w.Err(); err != nil {
			t.Fatalf("stopped watch: %v", err)
		}
	}
	// Resuming then receiving live events, with no gap or duplicate.
	w, err := s.Watch(ctx, "/registry/r/", from)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	more := writeMix(t, s, "/registry/r/x", 10)
	got := collect(t, w, len(want)+len(more))
	if diff := cmp.Diff(append(append([]store.Event{}, want...), more...), got); diff != "" {
		t.Fatalf("replay then live (-want +got):\n%s", diff)
	}
}

func testWatchFromNow(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	writeMix(t, s, "/registry/n/", 10)
	w, err := s.Watch(ctx, "/registry/n/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expectQuiet(t, w)
	r := mustCreate(t, s, "/registry/n/new", "x")
	got := collect(t, w, 1)
	if got[0].Revision != r || got[0].Type != store.Added {
		t.Fatalf("got %+v, want ADDED at %d", got[0], r)
	}
}

func testCompacted(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	for i := 0; i < 20; i++ {
		mustCreate(t, s, fmt.Sprintf("/registry/c/k%02d", i), "x")
	}
	page, err := s.List(ctx, "/registry/c/", store.ListOptions{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	old := page.Revision
	for i := 0; i < 5; i++ {
		mustCreate(t, s, fmt.Sprintf("/registry/c/z%02d", i), "x")
	}
	cur, _ := s.CurrentRevision(ctx)
	if err := s.Compact(ctx, cur-1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, "/registry/c/", store.ListOptions{Limit: 5, Continue: page.Continue}); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("continue at compacted %d: %v, want ErrCompacted", old, err)
	}
	if _, err := s.List(ctx, "/registry/c/", store.ListOptions{Revision: old}); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("list at compacted %d: %v, want ErrCompacted", old, err)
	}
	if _, err := s.Watch(ctx, "/registry/c/", old); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("watch from compacted %d: %v, want ErrCompacted", old, err)
	}
	// The compacted revision itself and everything after stay readable.
	w, err := s.Watch(ctx, "/registry/c/", cur-1)
	if err != nil {
		t.Fatalf("watch from the compacted revision: %v", err)
	}
	defer w.Stop()
	if got := collect(t, w, 1); got[0].Revision != cur {
		t.Fatalf("got %+v, want the event at %d", got[0], cur)
	}
	if l, err := s.List(ctx, "/registry/c/", store.ListOptions{}); err != nil || len(l.Items) != 25 {
		t.Fatalf("list after compaction: %d items, %v", len(l.Items), err)
	}
	if err := s.Compact(ctx, cur-1); err != nil {
		t.Fatalf("compacting again to the same revision: %v", err)
	}
}

func testManyWatchers(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	const watchers, writes = 120, 200
	ws := make([]store.Watcher, watchers)
	for i := range ws {
		w, err := s.Watch(ctx, "/registry/m/", 0)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
		defer w.Stop()
	}
	var want []uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < writes/8; i++ {
				r := mustCreate(t, s, fmt.Sprintf("/registry/m/%d-%d", g, i), "x")
				mu.Lock()
				want = append(want, r)
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	var bad atomic.Int32
	var rg sync.WaitGroup
	for _, w := range ws {
		rg.Add(1)
		go func(w store.Watcher) {
			defer rg.Done()
			var got []uint64
			for _, ev := range collect(t, w, writes) {
				got = append(got, ev.Revision)
			}
			if !cmp.Equal(want, got) {
				bad.Add(1)
			}
		}(w)
	}
	rg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d of %d watchers saw other revisions than the %d written", bad.Load(), watchers, writes)
	}
}

// testSlowWatcher: a watcher that stops reading must not slow writers or
// other watchers, and must end with ErrWatcherTooSlow rather than silently
// missing events.
func testSlowWatcher(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 50)
	slow, err := s.Watch(ctx, "/registry/s/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Stop()
	fast, err := s.Watch(ctx, "/registry/s/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Stop()
	const n = 600
	done := make(chan []store.Event)
	go func() { done <- collect(t, fast, n) }()
	for i := 0; i < n; i++ {
		mustCreate(t, s, fmt.Sprintf("/registry/s/k%04d", i), "x")
	}
	if got := <-done; len(got) != n {
		t.Fatalf("fast watcher got %d of %d", len(got), n)
	}
	// Now the slow one drains: it must end with ErrWatcherTooSlow, having
	// delivered an in-order prefix of the events.
	var got []store.Event
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-slow.Events():
			if ok {
				got = append(got, ev)
				continue
			}
		case <-timeout:
			t.Fatalf("slow watcher still open after %d events", len(got))
		}
		break
	}
	if !errors.Is(slow.Err(), store.ErrWatcherTooSlow) {
		t.Fatalf("slow watcher ended with %v after %d events, want ErrWatcherTooSlow", slow.Err(), len(got))
	}
	if len(got) >= n {
		t.Fatalf("slow watcher got all %d events yet was ended", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Revision <= got[i-1].Revision {
			t.Fatalf("slow watcher events out of order at %d", i)
		}
	}
}

// testWatchProgress: progress covers every delivered event and never
// claims a revision the store has not reached.
func testWatchProgress(t *testing.T, open func(*testing.T, int) store.Store) {
	s := open(t, 0)
	w, err := s.Watch(ctx, "/registry/quiet/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	mustCreate(t, s, "/registry/busy/x", "x")
	r := mustCreate(t, s, "/registry/quiet/y", "y")
	if got := collect(t, w, 1); got[0].Revision != r {
		t.Fatalf("event %+v, want revision %d", got[0], r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Progress() < r && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cur, _ := s.CurrentRevision(ctx)
	if p := w.Progress(); p < r || p > cur {
		t.Fatalf("progress %d after delivering %d (current %d)", p, r, cur)
	}
}
