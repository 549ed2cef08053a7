package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"bonsai.dev/bonsai/store"
)

func openBadger(t *testing.T, o store.BadgerOptions) store.Store {
	t.Helper()
	s, err := store.OpenBadger(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBadgerReopenKeepsDataAndRevisions(t *testing.T) {
	dir := t.TempDir()
	s := openBadger(t, store.BadgerOptions{Dir: dir})
	r1 := mustCreate(t, s, "/registry/x/a", "a")
	r2 := mustCreate(t, s, "/registry/x/b", "b")
	del, err := s.Delete(ctx, "/registry/x/b", r2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openBadger(t, store.BadgerOptions{Dir: dir})
	defer s.Close()
	cur, _ := s.CurrentRevision(ctx)
	if cur != del.Revision {
		t.Fatalf("current revision after reopen %d, want %d (the last write, a delete)", cur, del.Revision)
	}
	kv, err := s.Get(ctx, "/registry/x/a")
	if err != nil || kv.Revision != r1 || string(kv.Value) != "a" {
		t.Fatalf("after reopen: %+v %v", kv, err)
	}
	if _, err := s.Get(ctx, "/registry/x/b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted key after reopen: %v", err)
	}
	// The key index is rebuilt: CAS still works on the old revision.
	if _, err := s.Update(ctx, "/registry/x/a", []byte("a2"), r1); err != nil {
		t.Fatalf("update at the pre-restart revision: %v", err)
	}
	if _, err := s.Create(ctx, "/registry/x/a", nil); !errors.Is(err, store.ErrExists) {
		t.Fatalf("create existing after reopen: %v", err)
	}
	// History survives too: a watch from before the restart replays.
	w, err := s.Watch(ctx, "/registry/x/", r1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	got := collect(t, w, 3)
	if got[0].Type != store.Added || got[1].Type != store.Deleted || string(got[1].Value) != "b" || got[2].Type != store.Modified {
		t.Fatalf("replay across restart: %+v", got)
	}
}

func TestBadgerRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := store.OpenBadger(store.BadgerOptions{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "not a bonsai store") {
		t.Fatalf("open of a foreign directory: %v", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error is not one line: %q", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the refused directory was changed: %d entries", len(entries))
	}

	// A badger database that is not bonsai's.
	other := t.TempDir()
	db, err := badger.OpenManaged(badger.DefaultOptions(other).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	wb := db.NewManagedWriteBatch()
	wb.SetEntryAt(badger.NewEntry([]byte("someone-elses"), []byte("data")), 5)
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := dirFiles(t, other)
	if _, err := store.OpenBadger(store.BadgerOptions{Dir: other}); err == nil || !strings.Contains(err.Error(), "not a bonsai store") {
		t.Fatalf("open of another program's badger database: %v", err)
	}
	db, err = badger.OpenManaged(badger.DefaultOptions(other).WithLogger(nil).WithReadOnly(true))
	if err != nil {
		t.Fatalf("the other database no longer opens: %v (files before: %v)", err, before)
	}
	txn := db.NewTransactionAt(10, false)
	if _, err := txn.Get([]byte("someone-elses")); err != nil {
		t.Fatalf("the other database lost its data: %v", err)
	}
	txn.Discard()
	db.Close()
}

func dirFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		out = append(out, p)
		return nil
	})
	return out
}

func TestBadgerRefusesDirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	s := openBadger(t, store.BadgerOptions{Dir: dir})
	defer s.Close()
	mustCreate(t, s, "/registry/x/a", "a")
	_, err := store.OpenBadger(store.BadgerOptions{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "in use by another running process") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second open: %v", err)
	}
	// The first store is unharmed.
	if kv, err := s.Get(ctx, "/registry/x/a"); err != nil || string(kv.Value) != "a" {
		t.Fatalf("first store after refused second open: %+v %v", kv, err)
	}
}

func TestBadgerUnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes anywhere; use a path under a regular file instead.
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, nil, 0o600)
		_, err := store.OpenBadger(store.BadgerOptions{Dir: filepath.Join(f, "db")})
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Fatalf("open under a file: %v", err)
		}
		return
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o500)
	defer os.Chmod(dir, 0o700)
	_, err := store.OpenBadger(store.BadgerOptions{Dir: filepath.Join(dir, "db")})
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("open in an unwritable directory: %v", err)
	}
}

func TestBadgerAutoCompaction(t *testing.T) {
	s := openBadger(t, store.BadgerOptions{
		Dir: t.TempDir(), CompactInterval: 20 * time.Millisecond,
		RetainFor: time.Nanosecond, RetainRevisions: 10,
	})
	defer s.Close()
	first := mustCreate(t, s, "/registry/a/k", "0")
	rev := first
	for i := 1; i <= 50; i++ {
		var err error
		if rev, err = s.Update(ctx, "/registry/a/k", []byte(fmt.Sprint(i)), rev); err != nil {
			t.Fatal(err)
		}
	}
	waitCompacted(t, s, first)
	// The last RetainRevisions revisions stay.
	w, err := s.Watch(ctx, "/registry/a/", rev-10)
	if err != nil {
		t.Fatalf("watch within the retained window: %v", err)
	}
	defer w.Stop()
	// Compactions take revisions too, so the window holds up to 10 events.
	for {
		ev := collect(t, w, 1)[0]
		if ev.Revision <= rev-10 || ev.Type != store.Modified {
			t.Fatalf("unexpected event in the retained window: %+v", ev)
		}
		if ev.Revision == rev {
			break
		}
	}
}

// TestBadgerAutoCompactionNoRevisionFloor: by default only RetainFor
// bounds history, as kube-apiserver's compactor does on etcd, so even a
// store with a few revisions compacts what is older: a paged list's
// continue token expires (the conformance suite's chunking test waits
// for that) however few writes came after it.
func TestBadgerAutoCompactionNoRevisionFloor(t *testing.T) {
	s := openBadger(t, store.BadgerOptions{
		Dir: t.TempDir(), CompactInterval: 20 * time.Millisecond,
		RetainFor: 200 * time.Millisecond,
	})
	defer s.Close()
	first := mustCreate(t, s, "/registry/a/k", "0")
	if _, err := s.Update(ctx, "/registry/a/k", []byte("1"), first); err != nil {
		t.Fatal(err)
	}
	// Younger than RetainFor: kept.
	time.Sleep(50 * time.Millisecond)
	w, err := s.Watch(ctx, "/registry/a/", first)
	if err != nil {
		t.Fatalf("history from %d compacted before RetainFor: %v", first, err)
	}
	w.Stop()
	waitCompacted(t, s, first)
}

// waitCompacted waits until a watch of /registry/a/ from rev is refused
// as compacted.
func waitCompacted(t *testing.T, s store.Store, rev uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Watch(ctx, "/registry/a/", rev)
		if errors.Is(err, store.ErrCompacted) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("history from %d not compacted within 10s (watch: %v)", rev, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBadgerAutoCompactionWaitsForABatch: a compaction is a synced write
// of its own, so a store that gains a few revisions a minute (an idle
// node's Lease renewals) must not compact them away one minute at a time;
// it compacts once a tenth of RetainRevisions can go.
func TestBadgerAutoCompactionWaitsForABatch(t *testing.T) {
	s := openBadger(t, store.BadgerOptions{
		Dir: t.TempDir(), CompactInterval: 10 * time.Millisecond,
		RetainFor: time.Nanosecond, RetainRevisions: 100,
	})
	defer s.Close()
	first := mustCreate(t, s, "/registry/a/k", "0")
	rev := first
	update := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			var err error
			if rev, err = s.Update(ctx, "/registry/a/k", []byte(fmt.Sprint(i)), rev); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 105 revisions past the first: 5 could go, fewer than the batch of 10.
	update(105)
	time.Sleep(300 * time.Millisecond) // 30 compaction intervals
	if cur, err := s.CurrentRevision(ctx); err != nil || cur != rev {
		t.Fatalf("current revision %d (%v) after 30 idle compaction intervals, want %d: a compaction wrote for fewer than a batch", cur, err, rev)
	}
	w, err := s.Watch(ctx, "/registry/a/", first)
	if err != nil {
		t.Fatalf("history from %d compacted before a batch was due: %v", first, err)
	}
	w.Stop()
	// Ten more: the batch is due.
	update(10)
	waitCompacted(t, s, first)
}

// TestBadgerDiskUseBounded churns updates over the same keys; with history
// compacted and old versions discarded the data dir must stay far below the
// bytes written.
func TestBadgerDiskUseBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~100 MB")
	}
	dir := t.TempDir()
	// The value log's garbage is found by the tree's compactions, which
	// follow memtable flushes: the smallest memory budget (1 MB memtables)
	// gets this short run through several of them. make churn shows the
	// bound with the default budget.
	s := openBadger(t, store.BadgerOptions{
		Dir: dir, CompactInterval: 100 * time.Millisecond, GCInterval: 200 * time.Millisecond,
		RetainFor: time.Nanosecond, RetainRevisions: 2000, MemoryMB: 6,
	})
	defer s.Close()
	const keys, rounds, size = 500, 200, 1024
	val := make([]byte, size)
	revs := make([]uint64, keys)
	var written int64
	var peakAfterWarmup int64
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		for w := 0; w < 50; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				v := make([]byte, size)
				for k := w; k < keys; k += 50 {
					rand.Read(v[:64]) // incompressible head, so size counts
					copy(v[64:], val[64:])
					key := fmt.Sprintf("/registry/churn/k%04d", k)
					var err error
					if revs[k] == 0 {
						revs[k], err = s.Create(ctx, key, v)
					} else {
						revs[k], err = s.Update(ctx, key, v, revs[k])
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		written += keys * size
		if r >= rounds/2 {
			if sz := dirSize(t, dir); sz > peakAfterWarmup {
				peakAfterWarmup = sz
			}
		}
	}
	t.Logf("wrote %d MB of updates; data dir peak in the second half %.1f MB", written>>20, float64(peakAfterWarmup)/(1<<20))
	// The newest value log and the memtables' logs are allocated ahead
	// (16 + 1.5 + 1 MB, and 2 MB for each of up to three memtables
	// here), whatever was written; with some slack, well under what a
	// store that kept its history would hold (more than written).
	const allocatedAhead = 32 << 20
	bound := written/3 + allocatedAhead
	if peakAfterWarmup <= bound {
		return
	}
	// On a loaded machine (the rest of the suite on two cores) the
	// background compaction and value-log GC may trail the writers for a
	// moment; kept history would not go away at all.
	deadline := time.Now().Add(15 * time.Second)
	for sz := dirSize(t, dir); sz > bound; sz = dirSize(t, dir) {
		if time.Now().After(deadline) {
			t.Fatalf("data dir reached %d bytes after %d bytes of updates to %d keys, and is %d bytes 15 s later: history is not discarded", peakAfterWarmup, written, keys, sz)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the peak was over a third of what was written; the data dir came back under it once the writers stopped")
}

// dirSize is what the store's files hold on disk, its space reserve
// (a ballast, not data) left out.
func dirSize(t *testing.T, dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != "SPACE-RESERVE" {
			// Allocated blocks, not apparent size: badger preallocates
			// sparse files.
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n
}

// TestBadgerWatchProgressPassesOtherWrites: a watcher of a quiet prefix
// still progresses with the store, so its bookmarks stay recent; both for
// prefixes shorter than a resource's and for a resource's, whose watchers
// sleep through other resources' writes.
func TestBadgerWatchProgressPassesOtherWrites(t *testing.T) {
	for _, c := range []struct{ quiet, busy string }{
		{"/registry/quiet/", "/registry/busy/k%d"},
		{"/registry/core/quiet/", "/registry/core/busy/ns/k%d"},
		{"/registry/core/quiet/ns/", "/registry/core/quiet/other/k%d"},
	} {
		t.Run(c.quiet, func(t *testing.T) { testProgressPassesOtherWrites(t, c.quiet, c.busy) })
	}
}

func testProgressPassesOtherWrites(t *testing.T, quiet, busy string) {
	s := openBadger(t, store.BadgerOptions{Dir: t.TempDir()})
	defer s.Close()
	w, err := s.Watch(ctx, quiet, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var r uint64
	for i := 0; i < 50; i++ {
		r = mustCreate(t, s, fmt.Sprintf(busy, i), "x")
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Progress() < r {
		if time.Now().After(deadline) {
			t.Fatalf("progress %d, writes elsewhere reached %d", w.Progress(), r)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case ev := <-w.Events():
		t.Fatalf("event from another prefix: %+v", ev)
	default:
	}
}

// TestBadgerQuietWatcherOutlivesTheRing: a watcher of one resource sleeps
// while other resources' writes push the ring past its cursor; that is no
// lag: it neither ends as too slow nor misses its resource's next events.
func TestBadgerQuietWatcherOutlivesTheRing(t *testing.T) {
	s := openBadger(t, store.BadgerOptions{Dir: t.TempDir(), WatchRing: 4, MaxWatchLag: 5})
	defer s.Close()
	w, err := s.Watch(ctx, "/registry/core/configmaps/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first := mustCreate(t, s, "/registry/core/configmaps/ns/a", "1")
	for i := 0; i < 40; i++ {
		mustCreate(t, s, fmt.Sprintf("/registry/core/secrets/ns/s%d", i), "x")
	}
	second := mustCreate(t, s, "/registry/core/configmaps/ns/b", "2")
	for _, want := range []uint64{first, second} {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			if ev.Revision != want {
				t.Fatalf("event at %d, want %d: %+v", ev.Revision, want, ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event at %d", want)
		}
	}
}

// TestBadgerUndoesWritesWhoseValuesWereLost: after a power loss the
// write-ahead log (keys, log records) can be on disk while the value log's
// tail is not. The store must not serve those writes with values it cannot
// read: they were never acknowledged, so it undoes them, and everything
// before them stays.
func TestBadgerUndoesWritesWhoseValuesWereLost(t *testing.T) {
	dir := t.TempDir()
	big := func(c byte) []byte { return bytes.Repeat([]byte{c}, 1024) }
	s := openBadger(t, store.BadgerOptions{Dir: dir})
	ra1 := mustCreate(t, s, "/registry/x/a", string(big('A')))
	rb := mustCreate(t, s, "/registry/x/b", string(big('B')))
	if _, err := s.Update(ctx, "/registry/x/a", big('C'), ra1); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "/registry/x/c", "small, kept in the tree")
	rd := mustCreate(t, s, "/registry/x/d", string(big('D')))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Lose the value log from the middle of a's update on: the power
	// failed after the write-ahead log was written and before the value
	// log was.
	vlogs, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if len(vlogs) == 0 {
		t.Fatal("no value log: values of 1 KB are expected in it")
	}
	last := vlogs[len(vlogs)-1]
	data, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	cut := bytes.Index(data, big('C'))
	if cut < 0 {
		t.Fatalf("a's update is not in %s", last)
	}
	if err := os.Truncate(last, int64(cut)); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s = openBadger(t, store.BadgerOptions{Dir: dir, Logger: logger})
	if !strings.Contains(logs.String(), "undone") || !strings.Contains(logs.String(), "writes=3") {
		t.Errorf("the undo is not logged as 3 writes: %q", logs.String())
	}
	cur, _ := s.CurrentRevision(ctx)
	if cur <= rd {
		t.Fatalf("revision after the undo %d, want above the last one before it (%d)", cur, rd)
	}
	kv, err := s.Get(ctx, "/registry/x/a")
	if err != nil || !bytes.Equal(kv.Value, big('A')) || kv.Revision != cur {
		t.Fatalf("a after the undo: %q at %d (%v), want its first value at %d", kv.Value[:min(8, len(kv.Value))], kv.Revision, err, cur)
	}
	if kv, err := s.Get(ctx, "/registry/x/b"); err != nil || kv.Revision != rb || !bytes.Equal(kv.Value, big('B')) {
		t.Fatalf("b, written before the loss: %d %v", kv.Revision, err)
	}
	for _, k := range []string{"/registry/x/c", "/registry/x/d"} {
		if _, err := s.Get(ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s, created after the loss: %v, want not found", k, err)
		}
	}
	// A watcher resuming from before the loss sees none of the undone
	// writes (it never saw them happen) and then the next write.
	w, err := s.Watch(ctx, "/registry/x/", rb)
	if err != nil {
		t.Fatal(err)
	}
	re := mustCreate(t, s, "/registry/x/e", "e")
	if got := collect(t, w, 1); got[0].Key != "/registry/x/e" || got[0].Revision != re {
		t.Fatalf("watch from before the loss: %+v", got)
	}
	w.Stop()
	if _, err := s.Create(ctx, "/registry/x/d", big('E')); err != nil {
		t.Fatalf("create of an undone key: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The undo is done once.
	logs.Reset()
	s = openBadger(t, store.BadgerOptions{Dir: dir, Logger: logger})
	defer s.Close()
	if strings.Contains(logs.String(), "undone") {
		t.Fatalf("second open undid again: %q", logs.String())
	}
	if kv, err := s.Get(ctx, "/registry/x/d"); err != nil || !bytes.Equal(kv.Value, big('E')) {
		t.Fatalf("d after reopen: %v", err)
	}
}

// TestBadgerLogsAreAdvisedRandom: every mapped write-ahead and value log
// carries MADV_RANDOM ("rr" in smaps), those badger creates while running
// included, so syncs write what was appended rather than whole read-ahead
// folios.
func TestBadgerLogsAreAdvisedRandom(t *testing.T) {
	dir := t.TempDir()
	s := openBadger(t, store.BadgerOptions{Dir: dir})
	defer s.Close()
	initial := logMappings(t, dir)
	if len(initial) < 2 {
		t.Fatalf("log mappings after open: %v, want a write-ahead log and a value log", initial)
	}
	// Values under the value-log threshold fill the memtable (1 MB at
	// the default budget), so badger rotates it and maps new write-ahead
	// logs.
	v := make([]byte, 400)
	for i := 0; i < 8000; i++ {
		rand.Read(v)
		if _, err := s.Create(ctx, fmt.Sprintf("/registry/x/k%05d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		now := logMappings(t, dir)
		fresh, unadvised := 0, []string{}
		for p, advised := range now {
			if _, ok := initial[p]; !ok {
				fresh++
			}
			if !advised {
				unadvised = append(unadvised, p)
			}
		}
		if fresh > 0 && len(unadvised) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log mappings %v (at open: %v): %d new, not advised random: %v", now, initial, fresh, unadvised)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logMappings reads /proc/self/smaps for the mappings of dir's *.mem and
// *.vlog files: path -> whether it is advised random ("rr").
func logMappings(t *testing.T, dir string) map[string]bool {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	current := ""
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.Index(line, dir+"/"); i >= 0 {
			current = ""
			if p := line[i:]; strings.HasSuffix(p, ".mem") || strings.HasSuffix(p, ".vlog") {
				current = p
			}
			continue
		}
		if current != "" && strings.HasPrefix(line, "VmFlags:") {
			out[current] = strings.Contains(line+" ", " rr ")
			current = ""
		}
	}
	return out
}

// TestBadgerGetUnless checks the read that leaves out a value the caller
// holds: have sees the key's current revision; the value is read, small
// (in the tree) or large (in the value log), exactly when have says no.
func TestBadgerGetUnless(t *testing.T) {
	st := openBadger(t, store.BadgerOptions{Dir: t.TempDir()})
	ctx := context.Background()
	if _, err := store.GetUnless(ctx, st, "/registry/x/a", func(uint64) bool { t.Error("have called for a missing key"); return true }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	for _, size := range []int{10, 5000} {
		key := fmt.Sprintf("/registry/x/v%d", size)
		val := bytes.Repeat([]byte{'v'}, size)
		rev, err := st.Create(ctx, key, val)
		if err != nil {
			t.Fatal(err)
		}
		var saw uint64
		kv, err := store.GetUnless(ctx, st, key, func(r uint64) bool { saw = r; return true })
		if err != nil || saw != rev || kv.Revision != rev || kv.Value != nil || kv.Key != key {
			t.Errorf("%d bytes, held: %+v %v, have saw %d, want revision %d and no value", size, kv, err, saw, rev)
		}
		kv, err = store.GetUnless(ctx, st, key, func(r uint64) bool { return false })
		if err != nil || kv.Revision != rev || !bytes.Equal(kv.Value, val) {
			t.Errorf("%d bytes, not held: revision %d, %d bytes, %v", size, kv.Revision, len(kv.Value), err)
		}
		if kv, err = store.GetUnless(ctx, st, key, nil); err != nil || !bytes.Equal(kv.Value, val) {
			t.Errorf("%d bytes, no have: %d bytes, %v", size, len(kv.Value), err)
		}
	}
}

// TestBadgerGetUnlessFollowsWrites checks the read that takes a key's
// revision from the index against writes in flight: every read sees at
// least the revision acknowledged before it began, never one the store
// has not made durable, and a deleted key is gone at once.
func TestBadgerGetUnlessFollowsWrites(t *testing.T) {
	st := openBadger(t, store.BadgerOptions{Dir: t.TempDir()})
	ctx := context.Background()
	const key = "/registry/x/busy"
	rev, err := st.Create(ctx, key, []byte("0"))
	if err != nil {
		t.Fatal(err)
	}
	var acked atomic.Uint64
	acked.Store(rev)
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				writerDone <- nil
				return
			default:
			}
			r, err := st.Update(ctx, key, []byte(strconv.Itoa(i)), acked.Load())
			if err != nil {
				writerDone <- err
				return
			}
			acked.Store(r)
		}
	}()
	for i := 0; i < 2000; i++ {
		before := acked.Load()
		kv, err := store.GetUnless(ctx, st, key, func(uint64) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		current, err := st.CurrentRevision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if kv.Revision < before || kv.Revision > current || kv.Value != nil {
			t.Fatalf("read %d: revision %d with %d bytes; acknowledged before it %d, committed after it %d", i, kv.Revision, len(kv.Value), before, current)
		}
	}
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	if _, err := st.Delete(ctx, key, acked.Load()); err != nil {
		t.Fatal(err)
	}
	if kv, err := store.GetUnless(ctx, st, key, func(uint64) bool { t.Error("have called for a deleted key"); return true }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted key: %+v, %v", kv, err)
	}
}

// Reads that race Close end with ErrClosed or succeed; none may reach
// badger after it closed (it dereferences a closed memtable and the
// process dies). The API server's background loops can still be reading
// when a server shuts down.
func TestBadgerReadsRacingClose(t *testing.T) {
	for round := 0; round < 20; round++ {
		st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := st.Create(ctx, "/registry/x/a", []byte("v")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		start := make(chan struct{})
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func(list bool) {
				defer wg.Done()
				<-start
				for {
					var err error
					if list {
						_, err = st.List(ctx, "/registry/x/", store.ListOptions{})
					} else {
						_, err = st.Get(ctx, "/registry/x/a")
					}
					if err != nil {
						if !errors.Is(err, store.ErrClosed) {
							errs <- err
						}
						return
					}
				}
			}(i%2 == 0)
		}
		close(start)
		time.Sleep(time.Millisecond)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: a read racing Close: %v", round, err)
		}
	}
}
