package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// testExpiry: keys under an ExpiryRule are deleted by the store TTL after
// their last write, never before, as ordinary deletes (a Deleted event
// with the last value, at a revision of its own); a write restarts the
// TTL; a key deleted and created again is not taken by its first
// deadline; keys under no rule stay.
func testExpiry(t *testing.T, b backend) {
	// etcd's shortest lease is 2 s (1.5 s rounded up) with its default
	// election timeout.
	const ttl = 2 * time.Second
	s := b.openWith(t, openOptions{expire: []store.ExpiryRule{{Prefix: "/registry/core/events/", TTL: ttl}}})
	const events = "/registry/core/events/default/"
	kept := "/registry/core/configmaps/default/kept"
	start, err := s.CurrentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, "/registry/", start)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	lastWrite := map[string]time.Time{} // taken before the write
	lastRev := map[string]uint64{}
	lastVal := map[string]string{}
	write := func(key, val string) {
		t.Helper()
		before := time.Now()
		var rev uint64
		var err error
		if r, ok := lastRev[key]; ok {
			rev, err = s.Update(ctx, key, []byte(val), r)
		} else {
			rev, err = s.Create(ctx, key, []byte(val))
		}
		if err != nil {
			t.Fatalf("write %s: %v", key, err)
		}
		lastWrite[key], lastRev[key], lastVal[key] = before, rev, val
	}
	write(events+"a", "a1")
	write(events+"b", "b1")
	write(events+"d", "d1")
	write(kept, "kept")
	time.Sleep(ttl / 2)
	write(events+"b", "b2")
	if _, err := s.Delete(ctx, events+"d", lastRev[events+"d"]); err != nil {
		t.Fatal(err)
	}
	delete(lastRev, events+"d")
	write(events+"d", "d2")

	deleted := map[string]store.Event{}
	seenAt := map[string]time.Time{}
	timeout := time.After(ttl + 20*time.Second)
	for len(deleted) < 3 {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			if ev.Type != store.Deleted || ev.Revision <= lastRev[ev.Key] {
				continue
			}
			if ev.Key == kept {
				t.Fatalf("%s, under no expiry rule, was deleted: %+v", kept, ev)
			}
			deleted[ev.Key], seenAt[ev.Key] = ev, time.Now()
		case <-timeout:
			t.Fatalf("after %v, deleted only %v", ttl+20*time.Second, keysOf(deleted))
		}
	}
	for key, ev := range deleted {
		lived := seenAt[key].Sub(lastWrite[key])
		t.Logf("%s deleted %v after its last write (TTL %v)", key, lived.Round(10*time.Millisecond), ttl)
		if lived < ttl {
			t.Errorf("%s deleted %v after its last write, before its TTL of %v", key, lived, ttl)
		}
		if lived > ttl+8*time.Second {
			t.Errorf("%s deleted %v after its last write: TTL %v", key, lived, ttl)
		}
		if string(ev.Value) != lastVal[key] {
			t.Errorf("%s: Deleted event carries %q, want its last value %q", key, ev.Value, lastVal[key])
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get %s after its expiry: %v, want ErrNotFound", key, err)
		}
		delete(lastRev, key)
	}
	if kv, err := s.Get(ctx, kept); err != nil || string(kv.Value) != "kept" {
		t.Fatalf("%s, under no rule: %+v %v", kept, kv, err)
	}
	// A key created again after its expiry lives its own TTL.
	write(events+"a", "a2")
	if kv, err := s.Get(ctx, events+"a"); err != nil || string(kv.Value) != "a2" {
		t.Fatalf("re-created %sa: %+v %v", events, kv, err)
	}
}

func keysOf(m map[string]store.Event) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testQuota fills a store with 1 MiB values until it refuses one: past
// its quota, creates and updates fail with a SpaceError (ErrQuotaExceeded)
// and change nothing, reads and deletes go on, and once everything is
// deleted writes resume by themselves, without a restart or a call to
// Compact.
func testQuota(t *testing.T, b backend) {
	if testing.Short() {
		t.Skip("writes tens of MB")
	}
	s := b.openWith(t, openOptions{quota: b.quota})
	const prefix = "/registry/core/configmaps/quota/"
	rnd := rand.New(rand.NewSource(1))
	mib := func() []byte {
		v := make([]byte, 1<<20)
		rnd.Read(v) // incompressible
		return v
	}
	var keys []string
	var revs []uint64
	var refused error
	for i := 0; i < int(b.quota>>20)+40; i++ {
		key := fmt.Sprintf("%sk%03d", prefix, i)
		rev, err := s.Create(ctx, key, mib())
		if err != nil {
			refused = err
			break
		}
		keys, revs = append(keys, key), append(revs, rev)
	}
	t.Logf("quota %d MiB: %d values of 1 MiB taken before a refusal", b.quota>>20, len(keys))
	var se *store.SpaceError
	if !errors.Is(refused, store.ErrQuotaExceeded) || !errors.As(refused, &se) || se.Limit != b.quota || !se.Deletes {
		t.Fatalf("create past the quota: %v, want a SpaceError (ErrQuotaExceeded, limit %d)", refused, b.quota)
	}
	for _, want := range []string{"database space exceeded", "--quota-backend-bytes", "Delete objects"} {
		if !strings.Contains(refused.Error(), want) {
			t.Errorf("refusal %q does not say %q", refused, want)
		}
	}
	if len(keys) == 0 {
		t.Fatal("the store refused its first write")
	}

	before, _ := s.CurrentRevision(ctx)
	if _, err := s.Create(ctx, prefix+"more", mib()); !errors.Is(err, store.ErrQuotaExceeded) {
		t.Fatalf("another create: %v, want ErrQuotaExceeded", err)
	}
	if _, err := s.Update(ctx, keys[0], mib(), revs[0]); !errors.Is(err, store.ErrQuotaExceeded) {
		t.Fatalf("update: %v, want ErrQuotaExceeded", err)
	}
	if _, err := s.Get(ctx, prefix+"more"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused create left %s: %v", prefix+"more", err)
	}
	if kv, err := s.Get(ctx, keys[0]); err != nil || kv.Revision != revs[0] {
		t.Fatalf("after a refused update: %+v %v, want revision %d", kv.Revision, err, revs[0])
	}
	if cur, _ := s.CurrentRevision(ctx); cur != before {
		t.Fatalf("refused writes moved the revision from %d to %d", before, cur)
	}
	list, err := s.List(ctx, prefix, store.ListOptions{})
	if err != nil || len(list.Items) != len(keys) {
		t.Fatalf("list over the quota: %d items, %v; want %d", len(list.Items), err, len(keys))
	}

	deletedAt := time.Now()
	for i, k := range keys {
		if _, err := s.Delete(ctx, k, revs[i]); err != nil {
			t.Fatalf("delete over the quota: %v", err)
		}
	}
	// The space comes back: at least half as many values as first fit
	// fit again, each as soon as the store has room for it.
	var resumed time.Duration
	for i := 0; i < max(len(keys)/2, 1); {
		key := fmt.Sprintf("%sagain%03d", prefix, i)
		value := mib()
		_, err := s.Create(ctx, key, value)
		if errors.Is(err, store.ErrQuotaExceeded) {
			if time.Since(deletedAt) > 90*time.Second {
				t.Fatalf("90 s after every value was deleted, %d of %d values fit again: %v", i, len(keys)/2, err)
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("create after the deletes: %v", err)
		}
		if i == 0 {
			resumed = time.Since(deletedAt)
		}
		if kv, err := s.Get(ctx, key); err != nil || !bytes.Equal(kv.Value, value) {
			t.Fatalf("get %s: %v", key, err)
		}
		i++
	}
	t.Logf("after the deletes, writes resumed within %v; %d values fit again within %v",
		resumed.Round(100*time.Millisecond), max(len(keys)/2, 1), time.Since(deletedAt).Round(100*time.Millisecond))
}

// TestEtcdOwnQuota: past etcd's own quota (its --quota-backend-bytes) etcd
// raises its NOSPACE alarm; the store answers a SpaceError
// (ErrQuotaExceeded) that carries etcd's message and says what to do,
// and reads and deletes go on.
func TestEtcdOwnQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("writes MBs to etcd")
	}
	e := testenv.EtcdForTest(t, "--quota-backend-bytes", strconv.Itoa(4<<20))
	s, err := store.OpenEtcd(store.EtcdOptions{Endpoint: e.Endpoint, CompactInterval: -1, DialTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const prefix = "/registry/core/configmaps/full/"
	value := bytes.Repeat([]byte("x"), 1<<20)
	var keys []string
	var refused error
	for i := 0; i < 40; i++ {
		key := fmt.Sprintf("%sk%02d", prefix, i)
		if _, err := s.Create(ctx, key, value); err != nil {
			refused = err
			break
		}
		keys = append(keys, key)
	}
	t.Logf("etcd with a 4 MiB quota took %d values of 1 MiB; then: %v", len(keys), refused)
	var se *store.SpaceError
	if !errors.Is(refused, store.ErrQuotaExceeded) || !errors.As(refused, &se) {
		t.Fatalf("create past etcd's quota: %v, want a SpaceError (ErrQuotaExceeded)", refused)
	}
	for _, want := range []string{"etcdserver: mvcc: database space exceeded", "etcdctl alarm disarm", "defrag"} {
		if !strings.Contains(refused.Error(), want) {
			t.Errorf("refusal %q does not say %q", refused, want)
		}
	}
	if len(keys) == 0 {
		t.Fatal("etcd refused the first write")
	}
	if _, err := s.Get(ctx, keys[0]); err != nil {
		t.Fatalf("get under the alarm: %v", err)
	}
	if l, err := s.List(ctx, prefix, store.ListOptions{}); err != nil || len(l.Items) != len(keys) {
		t.Fatalf("list under the alarm: %d items, %v", len(l.Items), err)
	}
	if _, err := s.Delete(ctx, keys[0], 0); err != nil {
		t.Fatalf("delete under the alarm: %v", err)
	}
}
