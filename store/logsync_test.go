package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func syncedFids(l *logSyncer) []uint64 {
	var out []uint64
	for _, f := range l.files {
		out = append(out, f.fid)
	}
	return out
}

// A sync reaches the log that was newest at the last sync and every log
// created since, then keeps only the newest: writes acknowledged before a
// rotation may sit in the log badger just swapped out.
func TestLogSyncerCatchesUp(t *testing.T) {
	dir := t.TempDir()
	touch := func(fid int) {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%05d.mem", fid)), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l := newLogSyncer(dir, ".mem", 5)
	defer l.close()
	if err := l.start(); err != nil || len(l.files) != 0 {
		t.Fatalf("empty directory: %v %v", syncedFids(l), err)
	}
	if err := l.sync(); err != nil {
		t.Fatalf("sync with no log: %v", err)
	}
	touch(3)
	touch(4)
	// A file of another kind, or named otherwise, is not a log of this one.
	os.WriteFile(filepath.Join(dir, "000009.vlog"), nil, 0o600)
	os.WriteFile(filepath.Join(dir, "MANIFEST"), nil, 0o600)
	if err := l.sync(); err != nil || !slices.Equal(syncedFids(l), []uint64{4}) {
		t.Fatalf("first log found: %v %v, want [4]", syncedFids(l), err)
	}
	touch(5)
	touch(6)
	l.mu.Lock()
	err := l.catchUp()
	got := syncedFids(l)
	l.mu.Unlock()
	if err != nil || !slices.Equal(got, []uint64{4, 5, 6}) {
		t.Fatalf("after two rotations a sync reaches %v (%v), want [4 5 6]", got, err)
	}
	if err := l.sync(); err != nil || !slices.Equal(syncedFids(l), []uint64{6}) {
		t.Fatalf("after the sync: %v %v, want [6]", syncedFids(l), err)
	}
	// The log badger deleted after flushing its memtable stays open, and
	// syncable, until the next sync lets it go.
	touch(7)
	os.Remove(filepath.Join(dir, "00006.mem"))
	if err := l.sync(); err != nil || !slices.Equal(syncedFids(l), []uint64{7}) {
		t.Fatalf("with the previous log deleted: %v %v", syncedFids(l), err)
	}
}

// The store's syncs follow badger's own rotations of both logs.
func TestStoreSyncsFollowRotations(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenBadger(BadgerOptions{Dir: dir, MemoryMB: 6}) // 1 MB memtables
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*badgerStore)
	newest := func(ext string) uint64 {
		names, _ := filepath.Glob(filepath.Join(dir, "*"+ext))
		var max uint64
		for _, n := range names {
			fid, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(n), ext), 10, 64)
			if err == nil && fid > max {
				max = fid
			}
		}
		return max
	}
	held := func(l *logSyncer) []uint64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return syncedFids(l)
	}
	firstMem, firstVlog := newest(".mem"), newest(".vlog")
	if firstMem == 0 || firstVlog == 0 || !slices.Equal(held(s.wal), []uint64{firstMem}) || !slices.Equal(held(s.vlogs), []uint64{firstVlog}) {
		t.Fatalf("after open the store syncs logs %v and %v; newest are %d and %d", held(s.wal), held(s.vlogs), firstMem, firstVlog)
	}
	// 20 MB of values past one 16 MB value log, and 1.6 MB of small
	// ones, which stay in the tree, past the 1 MB memtables.
	big, small := make([]byte, 5000), make([]byte, 400)
	for i := 0; i < 8000; i++ {
		v := small
		if i%2 == 0 {
			v = big
		}
		rand.Read(v)
		if _, err := st.Create(context.Background(), fmt.Sprintf("/registry/x/k%05d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	if newest(".vlog") == firstVlog || newest(".mem") <= firstMem {
		t.Fatalf("badger did not rotate its logs (%d.mem, %d.vlog): the test proves nothing", newest(".mem"), newest(".vlog"))
	}
	// Every write was synced before it was acknowledged, so the last
	// sync reached the newest logs.
	if got := held(s.wal); !slices.Equal(got, []uint64{newest(".mem")}) {
		t.Errorf("the store syncs write-ahead logs %v, newest is %d", got, newest(".mem"))
	}
	if got := held(s.vlogs); !slices.Equal(got, []uint64{newest(".vlog")}) {
		t.Errorf("the store syncs value logs %v, newest is %d", got, newest(".vlog"))
	}
}
