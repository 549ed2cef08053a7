package store

import (
	"context"
	"testing"
	"time"
)

// TestHubWakesOnlyTheWrittenTopic: a write wakes the sleeping watchers of
// its resource and of short prefixes, and leaves the others asleep.
func TestHubWakesOnlyTheWrittenTopic(t *testing.T) {
	h := newWatchHub(16, 1, 0, func(after, upTo uint64, limit int) ([]Event, error) { return nil, nil }, func() uint64 { return 0 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefixes := []string{"/registry/core/configmaps/", "/registry/core/configmaps/ns/", "/registry/core/secrets/", "/registry/"}
	watchers := map[string]*hubWatcher{}
	for _, p := range prefixes {
		watchers[p] = h.watch(ctx, p, 1)
	}
	asleep := func(p string) *wakeup {
		deadline := time.Now().Add(5 * time.Second)
		for {
			if w := watchers[p].sleeping.Load(); w != nil {
				return w
			}
			if time.Now().After(deadline) {
				t.Fatalf("watcher of %s never slept", p)
			}
			time.Sleep(time.Millisecond)
		}
	}
	sleeps := map[string]*wakeup{}
	for _, p := range prefixes {
		sleeps[p] = asleep(p)
	}
	h.publish([]Event{{Type: Added, Key: "/registry/core/configmaps/ns/a", Revision: 2}}, 2)
	for p, woken := range map[string]bool{
		"/registry/core/configmaps/":    true,
		"/registry/core/configmaps/ns/": true,
		"/registry/core/secrets/":       false,
		"/registry/":                    true,
	} {
		select {
		case <-sleeps[p].ch:
			if !woken {
				t.Errorf("watcher of %s woken by a ConfigMap", p)
			}
		default:
			if woken {
				t.Errorf("watcher of %s still asleep", p)
			}
		}
	}
	for _, p := range []string{"/registry/core/configmaps/", "/registry/core/configmaps/ns/", "/registry/"} {
		select {
		case ev := <-watchers[p].Events():
			if ev.Revision != 2 {
				t.Errorf("%s: %+v", p, ev)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: no event", p)
		}
	}
	// The sleeping Secret watcher has in effect seen revision 2.
	if p := watchers["/registry/core/secrets/"].Progress(); p != 2 {
		t.Errorf("progress of the Secret watcher %d, want 2", p)
	}
	h.close()
	for p, w := range watchers {
		if err := w.Err(); err != ErrClosed {
			t.Errorf("%s: %v after close, want ErrClosed", p, err)
		}
	}
}

func TestTopicOf(t *testing.T) {
	for in, want := range map[string]string{
		"/registry/core/configmaps/ns/a": "/registry/core/configmaps/",
		"/registry/core/configmaps/":     "/registry/core/configmaps/",
		"/registry/apps/deployments":     "",
		"/registry/":                     "",
		"/":                              "",
	} {
		if got := topicOf(in); got != want {
			t.Errorf("topicOf(%q) = %q, want %q", in, got, want)
		}
	}
}
