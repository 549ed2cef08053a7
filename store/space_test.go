package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestBadgerDiskFull runs the store on a 96 MB tmpfs that it shares with
// what a node's kubelet keeps on the same disk (container logs and image
// layers, here files of the test's). The store takes some writes; then
// the other files take the rest, to the last byte. On the full disk: writes fail at once with a clear error (no
// panic, no hang, no SIGBUS from badger's mappings), reads go on, every
// acknowledged write is there, also after the store is closed and opened
// again on the full disk, and nothing is corrupted. Once the other files
// go, writes succeed again without a restart.
func TestBadgerDiskFull(t *testing.T) {
	mnt := testenv.Tmpfs(t, 96<<20)
	dir := filepath.Join(mnt, "db")
	logs := filepath.Join(mnt, "pods", "default_web_0123", "web")
	images := filepath.Join(mnt, "images")
	for _, d := range []string{logs, images} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A quota far above the disk: the disk is what fills.
	opts := store.BadgerOptions{Dir: dir, MemoryMB: 6, QuotaBytes: 1 << 30}
	s, err := store.OpenBadger(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()

	acked := map[string][]byte{}
	var ackedMu sync.Mutex
	value := func(key string, size int) []byte {
		return bytes.Repeat([]byte(key[len(key)-4:]), size/4)
	}
	// Some 25 MB of values, in the tree and in the value log, from eight
	// writers.
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 130; i++ {
				key := fmt.Sprintf("/registry/core/configmaps/default/w%d-%05d", w, i)
				v := value(key, 256+(i%4)*16<<10)
				if _, err := s.Create(ctx, key, v); err != nil {
					t.Errorf("write %s: %v", key, err)
					return
				}
				ackedMu.Lock()
				acked[key] = v
				ackedMu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("the store took %d writes; %s free", len(acked), free(t, mnt))

	// The kubelet's side takes the rest: a container log, an image layer.
	logged := testenv.FillDisk(t, filepath.Join(logs, "0.log"), 10<<20)
	layers := testenv.FillDisk(t, filepath.Join(images, "sha256-layer"), 0)
	t.Logf("then logs took %d and image layers %d bytes; %s free", logged, layers, free(t, mnt))

	fullDisk := func(what string, err error) {
		t.Helper()
		var se *store.SpaceError
		if !errors.Is(err, store.ErrDiskFull) || !errors.As(err, &se) {
			t.Fatalf("%s on a full disk: %v, want a SpaceError (ErrDiskFull)", what, err)
		}
		for _, want := range []string{"no space left on device", dir, "Free space"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", what, err, want)
			}
		}
	}
	some := anyKey(acked)
	before, _ := s.CurrentRevision(ctx)
	start := time.Now()
	_, err = s.Create(ctx, "/registry/core/configmaps/default/new", []byte("x"))
	fullDisk("create", err)
	kv, _ := s.Get(ctx, some)
	_, err = s.Update(ctx, some, []byte("y"), kv.Revision)
	fullDisk("update", err)
	_, err = s.Delete(ctx, some, 0)
	fullDisk("delete", err)
	if took := time.Since(start); took > time.Second {
		t.Errorf("three refusals took %v", took)
	}
	if cur, _ := s.CurrentRevision(ctx); cur != before {
		t.Errorf("refused writes moved the revision from %d to %d", before, cur)
	}
	checkAcked(t, s, acked)

	// Closed and opened again on the full disk: the memtable's flush and
	// badger's new logs take the space reserve the store kept.
	if err := s.Close(); err != nil {
		t.Fatalf("close on a full disk: %v", err)
	}
	if s, err = store.OpenBadger(opts); err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	checkAcked(t, s, acked)
	_, err = s.Create(ctx, "/registry/core/configmaps/default/new", []byte("x"))
	fullDisk("create after reopening", err)

	// The kubelet's files go (log rotation, image GC): writes resume
	// without a restart.
	os.Remove(filepath.Join(images, "sha256-layer"))
	os.Remove(filepath.Join(logs, "0.log"))
	freed := time.Now()
	for {
		_, err := s.Create(ctx, "/registry/core/configmaps/default/new", []byte("x"))
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrDiskFull) {
			t.Fatalf("create once the disk has room: %v", err)
		}
		if time.Since(freed) > 10*time.Second {
			t.Fatalf("writes still refused 10 s after the disk got room: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("writes resumed %v after the disk got room", time.Since(freed).Round(10*time.Millisecond))
	acked["/registry/core/configmaps/default/new"] = []byte("x")
	for i := 0; i < 100; i++ {
		key := fmt.Sprintf("/registry/core/configmaps/default/after-%03d", i)
		v := value(key, 4096)
		if _, err := s.Create(ctx, key, v); err != nil {
			t.Fatalf("write %d after the disk got room: %v", i, err)
		}
		acked[key] = v
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = store.OpenBadger(opts); err != nil {
		t.Fatal(err)
	}
	checkAcked(t, s, acked)
}

func free(t *testing.T, dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%.1f MB", float64(st.Bavail)*float64(st.Bsize)/(1<<20))
}

func anyKey(m map[string][]byte) string {
	for k := range m {
		return k
	}
	return ""
}

// checkAcked reads every acknowledged write back, one by one and in a
// list.
func checkAcked(t *testing.T, s store.Store, acked map[string][]byte) {
	t.Helper()
	for k, v := range acked {
		kv, err := s.Get(ctx, k)
		if err != nil || !bytes.Equal(kv.Value, v) {
			t.Fatalf("acknowledged %s: %d bytes, %v; want %d bytes", k, len(kv.Value), err, len(v))
		}
	}
	l, err := s.List(ctx, "/registry/core/configmaps/default/", store.ListOptions{})
	if err != nil || len(l.Items) != len(acked) {
		t.Fatalf("list: %d items, %v; want %d", len(l.Items), err, len(acked))
	}
}

// TestBadgerUndoesFailedWrites: writes whose sync fails (here a fault
// that says ENOSPC) are refused, as is every write after them until the
// store has undone them; once syncs work again the store undoes them by
// itself and takes writes, without a restart. What failed is not there,
// no watcher saw it, and what was acknowledged is, also after a reopen.
func TestBadgerUndoesFailedWrites(t *testing.T) {
	dir := t.TempDir()
	s := openBadger(t, store.BadgerOptions{Dir: dir})
	const p = "/registry/core/configmaps/default/"
	ra := mustCreate(t, s, p+"a", "a1")
	rb := mustCreate(t, s, p+"b", "b1")
	big := bytes.Repeat([]byte("v"), 4096) // value log
	rbig, err := s.Create(ctx, p+"big", big)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, p, rbig)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	store.SetSyncFault(s, func() error { return syscall.ENOSPC })
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i, f := range []func() error{
		func() error { _, err := s.Update(ctx, p+"a", []byte("a2"), ra); return err },
		func() error { _, err := s.Create(ctx, p+"c", []byte("c1")); return err },
		func() error { _, err := s.Delete(ctx, p+"b", rb); return err },
		func() error { _, err := s.Update(ctx, p+"big", bytes.Repeat([]byte("w"), 4096), rbig); return err },
	} {
		wg.Add(1)
		go func(i int, f func() error) {
			defer wg.Done()
			errs[i] = f()
		}(i, f)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, store.ErrDiskFull) {
			t.Fatalf("write %d with failing syncs: %v, want ErrDiskFull", i, err)
		}
	}
	// Until the failed writes are undone, writes are refused; reads go on.
	if _, err := s.Create(ctx, p+"d", []byte("d1")); !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("write while the undo cannot sync: %v, want ErrDiskFull", err)
	}
	if kv, err := s.Get(ctx, p+"a"); err != nil || string(kv.Value) != "a1" {
		t.Fatalf("read while failed: %+v %v", kv, err)
	}

	store.SetSyncFault(s, nil)
	start := time.Now()
	var rd uint64
	for {
		rd, err = s.Create(ctx, p+"d", []byte("d1"))
		if err == nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("writes still refused 10 s after syncs work again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("writes resumed %v after syncs worked again", time.Since(start).Round(10*time.Millisecond))

	check := func(s store.Store) {
		t.Helper()
		for k, want := range map[string]string{"a": "a1", "b": "b1", "big": string(big), "d": "d1"} {
			if kv, err := s.Get(ctx, p+k); err != nil || string(kv.Value) != want {
				t.Fatalf("%s: %d bytes %v, want %d bytes", k, len(kv.Value), err, len(want))
			}
		}
		if _, err := s.Get(ctx, p+"c"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the failed create of c: %v, want ErrNotFound", err)
		}
	}
	check(s)
	if ev := collect(t, w, 1)[0]; ev.Type != store.Added || ev.Key != p+"d" || ev.Revision != rd {
		t.Fatalf("the watcher's first event after the failure: %+v, want d's creation at %d", ev, rd)
	}
	s.Close()
	s = openBadger(t, store.BadgerOptions{Dir: dir})
	defer s.Close()
	check(s)
}

// TestBadgerExpiryAcrossRestart: a key whose deadline passed while the
// store was closed is deleted, with its Deleted event, soon after the
// store opens again.
func TestBadgerExpiryAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	opts := store.BadgerOptions{Dir: dir, Expire: []store.ExpiryRule{{Prefix: "/registry/core/events/", TTL: time.Second}}, ExpiryInterval: 50 * time.Millisecond}
	s := openBadger(t, opts)
	const key = "/registry/core/events/default/e"
	rev := mustCreate(t, s, key, "e1")
	s.Close()
	time.Sleep(1200 * time.Millisecond)
	opened := time.Now()
	s = openBadger(t, opts)
	defer s.Close()
	w, err := s.Watch(ctx, "/registry/core/events/", rev)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := collect(t, w, 1)[0]
	if ev.Type != store.Deleted || ev.Key != key || string(ev.Value) != "e1" {
		t.Fatalf("event after reopening: %+v, want the deletion of %s", ev, key)
	}
	t.Logf("deleted %v after the store opened", time.Since(opened).Round(10*time.Millisecond))
	if _, err := s.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get: %v", err)
	}
}

// TestBadgerDiskFilledWhileWriting: another process fills the disk at
// memory speed while eight writers write, so that the disk runs out
// between a write's admission and badger's handling of it, or while
// badger starts a new memtable, value log or table. Writes must either
// be acknowledged or refused with ErrDiskFull; the process must not
// fault (before the store checked the disk again just before handing a
// batch to badger, the first round died of SIGBUS in a new memtable's
// header); every acknowledged write must be there after a reopen.
func TestBadgerDiskFilledWhileWriting(t *testing.T) {
	for round := 0; round < 4; round++ {
		mnt := testenv.Tmpfs(t, 256<<20)
		opts := store.BadgerOptions{Dir: filepath.Join(mnt, "db"), MemoryMB: 6, QuotaBytes: 1 << 30}
		s, err := store.OpenBadger(opts)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		acked := map[string][]byte{}
		refused := 0
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("/registry/core/configmaps/default/w%d-%06d", w, i)
					v := bytes.Repeat([]byte{byte(i)}, 64+(i%8)*512)
					_, err := s.Create(ctx, key, v)
					mu.Lock()
					switch {
					case err == nil:
						acked[key] = v
					case errors.Is(err, store.ErrDiskFull):
						refused++
					default:
						t.Errorf("write: %v", err)
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(time.Millisecond)
					}
				}
			}(w)
		}
		time.Sleep(time.Duration(20+round*40) * time.Millisecond)
		testenv.FillDisk(t, filepath.Join(mnt, "filler"), 0)
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()
		if err := s.Close(); err != nil {
			t.Fatalf("close on the full disk: %v", err)
		}
		os.Remove(filepath.Join(mnt, "filler"))
		if s, err = store.OpenBadger(opts); err != nil {
			t.Fatal(err)
		}
		checkAcked(t, s, acked)
		s.Close()
		t.Logf("round %d: %d writes acknowledged, %d refused", round, len(acked), refused)
	}
}
