package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// saveSnapshot writes st's snapshot to a file in dir.
func saveSnapshot(t *testing.T, st store.Store, dir string) (string, store.SnapshotInfo) {
	t.Helper()
	path := filepath.Join(dir, "snap")
	var info store.SnapshotInfo
	err := store.WriteFileDurably(path, 0o600, func(w io.Writer) error {
		var err error
		info, err = st.(store.Snapshotter).Snapshot(ctx, w, "test")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return path, info
}

func listAll(t *testing.T, st store.Store, rev uint64) []store.KeyValue {
	t.Helper()
	res, err := st.List(ctx, "/", store.ListOptions{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	return res.Items
}

// TestBadgerSnapshotRestoreRoundTrip saves a store under concurrent
// writes, restores it into a new directory and finds there exactly the
// keys at the snapshot's revision, each at its own revision; history
// before that revision is gone as after a compaction, and watches from
// it resume.
func TestBadgerSnapshotRestoreRoundTrip(t *testing.T) {
	src := openBadger(t, store.BadgerOptions{Dir: filepath.Join(t.TempDir(), "db"), Expire: []store.ExpiryRule{{Prefix: "/registry/events/", TTL: time.Hour}}})
	defer src.Close()
	big := strings.Repeat("v", 4096) // in badger's value log
	for i := range 300 {
		val := fmt.Sprint("small-", i)
		if i%3 == 0 {
			val = big + fmt.Sprint(i)
		}
		rev := mustCreate(t, src, fmt.Sprintf("/registry/core/configmaps/ns/cm-%03d", i), val)
		if i%5 == 0 {
			if _, err := src.Update(ctx, fmt.Sprintf("/registry/core/configmaps/ns/cm-%03d", i), []byte(val+"-updated"), rev); err != nil {
				t.Fatal(err)
			}
		}
		if i%7 == 0 {
			if _, err := src.Delete(ctx, fmt.Sprintf("/registry/core/configmaps/ns/cm-%03d", i), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustCreate(t, src, "/registry/events/ns/e1", "event")

	// Writers go on while the snapshot is taken: it holds one revision.
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if _, err := src.Create(ctx, fmt.Sprintf("/registry/core/configmaps/live/w%d-%d", w, i), []byte("x")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	path, info := saveSnapshot(t, src, t.TempDir())
	stop.Store(true)
	wg.Wait()

	want := listAll(t, src, info.Revision)
	if int64(len(want)) >= info.Keys || len(want) < 250 {
		t.Fatalf("snapshot holds %d records, the store %d keys at its revision %d", info.Keys, len(want), info.Revision)
	}

	dir := filepath.Join(t.TempDir(), "restored", "db")
	rinfo, err := store.RestoreBadger(dir, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rinfo.Revision != info.Revision || rinfo.Keys != info.Keys || rinfo.SHA256 != info.SHA256 || rinfo.Bytes != info.Bytes {
		t.Fatalf("restore read %+v, save wrote %+v", rinfo, info)
	}
	dst := openBadger(t, store.BadgerOptions{Dir: dir, Expire: []store.ExpiryRule{{Prefix: "/registry/events/", TTL: time.Hour}}})
	defer dst.Close()
	if cur, _ := dst.CurrentRevision(ctx); cur != info.Revision {
		t.Fatalf("restored store at revision %d, snapshot at %d", cur, info.Revision)
	}
	if diff := cmp.Diff(want, listAll(t, dst, 0)); diff != "" {
		t.Fatalf("restored keys differ (-saved +restored):\n%s", diff)
	}

	// History before the snapshot is compacted away.
	if _, err := dst.Watch(ctx, "/registry/", info.Revision-1); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("watch from before the snapshot: %v, want ErrCompacted", err)
	}
	if _, err := dst.List(ctx, "/registry/", store.ListOptions{Revision: info.Revision - 1}); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("list before the snapshot: %v, want ErrCompacted", err)
	}
	// A watch from the snapshot's revision resumes with the next write.
	w, err := dst.Watch(ctx, "/registry/core/configmaps/", info.Revision)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	kv, err := dst.Get(ctx, "/registry/core/configmaps/ns/cm-001")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := dst.Update(ctx, kv.Key, []byte("after"), kv.Revision)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.Events():
		if ev.Type != store.Modified || ev.Key != kv.Key || ev.Revision != rev || rev != info.Revision+1 || string(ev.PrevValue) != string(kv.Value) {
			t.Fatalf("event %v %s at %d (prev %q), want MODIFIED %s at %d", ev.Type, ev.Key, ev.Revision, ev.PrevValue, kv.Key, info.Revision+1)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event after the restore")
	}
}

// TestBadgerRestoreRefuses: a corrupt or truncated snapshot, or a
// directory that holds something, changes nothing.
func TestBadgerRestoreRefuses(t *testing.T) {
	src := openBadger(t, store.BadgerOptions{Dir: filepath.Join(t.TempDir(), "db")})
	for i := range 20 {
		mustCreate(t, src, fmt.Sprintf("/registry/core/configmaps/ns/cm-%d", i), strings.Repeat("v", 100*i))
	}
	path, info := saveSnapshot(t, src, t.TempDir())
	src.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 1
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"flipped byte", flipped, "not a valid bonsai snapshot"},
		{"truncated", data[:len(data)-40], "not a valid bonsai snapshot"},
		{"no checksum", data[:len(data)-1], "not a valid bonsai snapshot"},
		{"trailing bytes", append(append([]byte(nil), data...), 0), "bytes after its checksum"},
		{"not a snapshot", []byte("apiVersion: v1\n"), "not a valid bonsai snapshot"},
		{"empty", nil, "not a valid bonsai snapshot"},
		{"future format", []byte(strings.Replace(string(data), `"format":1`, `"format":9`, 1)), "snapshot format 9"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad")
			if err := os.WriteFile(bad, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			parent := t.TempDir()
			_, err := store.RestoreBadger(filepath.Join(parent, "db"), bad, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v, want %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Fatalf("a refused restore left %v", entries)
			}
		})
	}

	t.Run("non-empty target", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := store.RestoreBadger(dir, path, nil); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("restore over a store: %v", err)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "MANIFEST")); string(got) != "x" {
			t.Fatalf("the target was touched: %q", got)
		}
	})

	hdr, err := store.ReadSnapshotHeader(path)
	if err != nil || hdr != info.SnapshotHeader {
		t.Fatalf("header %+v %v, want %+v", hdr, err, info.SnapshotHeader)
	}
}

// TestEtcdSnapshot: the etcd backend's snapshot is etcd's own database
// file from its snapshot API, at the revision of the writes before it,
// checked against the checksum etcd appends; a damaged copy fails the
// check.
func TestEtcdSnapshot(t *testing.T) {
	e := testenv.EtcdForTest(t)
	st, err := store.OpenEtcd(store.EtcdOptions{Endpoint: e.Endpoint, CompactInterval: -1, DialTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var last uint64
	for i := range 50 {
		last = mustCreate(t, st, fmt.Sprintf("/registry/core/configmaps/ns/cm-%d", i), strings.Repeat("v", 10*i))
	}
	var buf bytes.Buffer
	info, err := st.(store.Snapshotter).Snapshot(ctx, &buf, "test")
	if err != nil {
		t.Fatal(err)
	}
	// etcd before 3.6 sends no header with the snapshot: revision 0,
	// unknown.
	if info.Backend != "etcd" || info.Revision != 0 && info.Revision < last || info.Bytes != int64(buf.Len()) || buf.Len() < 4096 {
		t.Fatalf("snapshot %+v (%d bytes written), want etcd's at revision >= %d", info, buf.Len(), last)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "etcd.db")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if !store.IsEtcdSnapshot(path) {
		t.Error("IsEtcdSnapshot: false for etcd's snapshot")
	}
	if n, err := store.CheckEtcdSnapshot(bytes.NewReader(buf.Bytes()), io.Discard); err != nil || n != int64(buf.Len()) {
		t.Errorf("CheckEtcdSnapshot: %d %v", n, err)
	}
	damaged := append([]byte(nil), buf.Bytes()...)
	damaged[len(damaged)/2] ^= 1
	if _, err := store.CheckEtcdSnapshot(bytes.NewReader(damaged), io.Discard); !errors.Is(err, store.ErrCorruptSnapshot) {
		t.Errorf("CheckEtcdSnapshot of a damaged copy: %v", err)
	}
	if _, err := store.CheckEtcdSnapshot(bytes.NewReader(buf.Bytes()[:buf.Len()-1]), io.Discard); !errors.Is(err, store.ErrCorruptSnapshot) {
		t.Errorf("CheckEtcdSnapshot of a truncated copy: %v", err)
	}
	if _, err := store.ReadSnapshotHeader(path); !errors.Is(err, store.ErrCorruptSnapshot) {
		t.Errorf("ReadSnapshotHeader of an etcd snapshot: %v", err)
	}
}
