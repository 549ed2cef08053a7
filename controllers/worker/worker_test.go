package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// syncLog records what a sync saw, in order.
type syncLog struct {
	mu   sync.Mutex
	keys []string
	at   []time.Time
}

func (l *syncLog) add(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, key)
	l.at = append(l.at, time.Now())
	return len(l.keys)
}

func (l *syncLog) snapshot() ([]string, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.keys...), append([]time.Time(nil), l.at...)
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// run starts Run on a fast-retrying queue and returns a way to stop it.
func run(t *testing.T, sync func(context.Context, string) error, logs *bytes.Buffer) (workqueue.TypedRateLimitingInterface[string], func()) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	done := make(chan struct{})
	go func() { Run(ctx, q, 2, sync, log, "thing"); close(done) }()
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return q, stop
}

func TestFailuresAreRetriedAndLogged(t *testing.T) {
	var seen syncLog
	var logs bytes.Buffer
	q, stop := run(t, func(_ context.Context, key string) error {
		if seen.add(key) < 3 {
			return errors.New("not yet")
		}
		return nil
	}, &logs)
	q.Add("a")
	waitUntil(t, "three syncs of a", func() bool { k, _ := seen.snapshot(); return len(k) == 3 })
	waitUntil(t, "a forgotten after its success", func() bool { return q.NumRequeues("a") == 0 })
	stop()
	if got := strings.Count(logs.String(), "level=INFO msg=\"sync failed, retrying\" thing=a err=\"not yet\""); got != 2 {
		t.Errorf("%d failure lines, want 2:\n%s", got, logs.String())
	}
}

func TestQuietFailuresLogAtDebug(t *testing.T) {
	var seen syncLog
	var logs bytes.Buffer
	q, stop := run(t, func(_ context.Context, key string) error {
		if seen.add(key) < 2 {
			return Quiet(errors.New("stale cache"))
		}
		return nil
	}, &logs)
	q.Add("b")
	waitUntil(t, "two syncs of b", func() bool { k, _ := seen.snapshot(); return len(k) == 2 })
	stop()
	if !strings.Contains(logs.String(), "level=DEBUG msg=\"sync failed, retrying\" thing=b") || strings.Contains(logs.String(), "level=INFO") {
		t.Errorf("a quiet failure should log at debug only:\n%s", logs.String())
	}
}

func TestRequeueComesBackAfterItsDelay(t *testing.T) {
	var seen syncLog
	var logs bytes.Buffer
	const after = 200 * time.Millisecond
	q, stop := run(t, func(_ context.Context, key string) error {
		if seen.add(key) == 1 {
			return &Requeue{After: after}
		}
		return nil
	}, &logs)
	q.Add("c")
	waitUntil(t, "c synced again", func() bool { k, _ := seen.snapshot(); return len(k) == 2 })
	stop()
	_, at := seen.snapshot()
	if gap := at[1].Sub(at[0]); gap < after {
		t.Errorf("requeued after %v, want at least %v", gap, after)
	}
	if logs.Len() != 0 {
		t.Errorf("a requeue is not a failure, yet logged:\n%s", logs.String())
	}
}

func TestByPrefix(t *testing.T) {
	var got []string
	rec := func(kind string) func(context.Context, string) error {
		return func(_ context.Context, k string) error { got = append(got, kind+":"+k); return nil }
	}
	sync := ByPrefix(rec("other"), Prefixed{Prefix: "claim/", Sync: rec("claim")}, Prefixed{Prefix: "volume/", Sync: rec("volume")})
	for _, k := range []string{"claim/ns/a", "volume/pv-1", "plain"} {
		if err := sync(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"claim:ns/a", "volume:pv-1", "other:plain"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("routed %v, want %v", got, want)
	}
}

// EnqueueChanges queues the key of what was added, updated and deleted,
// a tombstone's included, and nothing for what has no key.
func TestEnqueueChanges(t *testing.T) {
	q := workqueue.NewTyped[string]()
	defer q.ShutDown()
	h := EnqueueChanges(q)
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	}
	h.OnAdd(cm("a"), false)
	h.OnUpdate(cm("a"), cm("b"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/c", Obj: cm("c")})
	h.OnAdd("not an object", false)
	var got []string
	for q.Len() > 0 {
		k, _ := q.Get()
		got = append(got, k)
		q.Done(k)
	}
	if want := []string{"ns/a", "ns/b", "ns/c"}; !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}
}
