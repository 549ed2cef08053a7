package store

import (
	"context"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// logReader reads committed events with revisions in (after, upTo] from
// durable history, at most limit of them, in revision order.
type logReader func(after, upTo uint64, limit int) ([]Event, error)

// watchHub fans the single stream of committed events out to many watchers.
// The committer publishes each batch once into a ring of recent events; every
// watcher reads the ring through its own cursor in its own goroutine. Nothing
// a watcher does can block the committer or another watcher, and a watcher
// that stops reading holds no memory beyond its channel buffer. A watcher
// that starts in the past, or lags out of the ring, reads durable history
// until it catches up; one more than maxLag revisions behind is ended with
// ErrWatcherTooSlow so its client re-lists.
//
// A caught-up watcher sleeps until an event of its topic (the resource
// prefix of its keys, see topicOf) is published: a write wakes the
// watchers of its resource, not every watcher of the server.
type watchHub struct {
	mu       sync.Mutex
	ring     []Event // circular, len == cap
	head     int     // index of the oldest event in ring
	n        int     // events in ring
	floorRev uint64  // events at or below floorRev are not in the ring
	lastRev  uint64  // every event up to lastRev is published
	waits    map[string]*wakeup
	closed   bool

	readLog     logReader
	maxLag      uint64
	chanBuffer  int
	compactedFn func() uint64
}

// wakeup is what the sleeping watchers of one topic wait on. The first
// publish with an event of the topic closes ch and records that event's
// revision in first: every watcher that went to sleep on it knows that
// nothing of its topic lies between its cursor and first.
type wakeup struct {
	ch    chan struct{}
	first uint64 // under watchHub.mu; 0 while ch is open
}

// topicOf is the key or prefix up to its fourth '/': for object keys the
// resource prefix, /registry/<group>/<resource>/. A key can only match a
// prefix of the same topic. Prefixes shorter than that (and keys without a
// topic) belong to the broad topic "", woken by every event.
func topicOf(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			if n++; n == 4 {
				return s[:i+1]
			}
		}
	}
	return ""
}

func newWatchHub(ringSize int, startRev uint64, maxLag uint64, readLog logReader, compacted func() uint64) *watchHub {
	if ringSize < 1 {
		ringSize = 1
	}
	return &watchHub{
		ring:        make([]Event, ringSize),
		floorRev:    startRev,
		lastRev:     startRev,
		waits:       map[string]*wakeup{},
		readLog:     readLog,
		maxLag:      maxLag,
		chanBuffer:  100,
		compactedFn: compacted,
	}
}

// publish appends events (in revision order, all above lastRev) and marks
// everything up to rev as published.
func (h *watchHub) publish(events []Event, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range events {
		if h.n == len(h.ring) {
			h.floorRev = h.ring[h.head].Revision
			h.ring[h.head] = Event{}
			h.head = (h.head + 1) % len(h.ring)
			h.n--
		}
		h.ring[(h.head+h.n)%len(h.ring)] = ev
		h.n++
		if len(h.waits) > 0 {
			h.wake(topicOf(ev.Key), ev.Revision)
			h.wake("", ev.Revision)
		}
	}
	if rev > h.lastRev {
		h.lastRev = rev
	}
}

// wake wakes the sleepers of topic, if any, at the event at rev.
func (h *watchHub) wake(topic string, rev uint64) {
	if w, ok := h.waits[topic]; ok {
		w.first = rev
		close(w.ch)
		delete(h.waits, topic)
	}
}

func (h *watchHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		for t, w := range h.waits {
			close(w.ch)
			delete(h.waits, t)
		}
	}
}

func (h *watchHub) current() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastRev
}

// ringRead is what one read of the ring found for a watcher.
type ringRead struct {
	evs    []Event // matching events, in order
	upTo   uint64  // the ring was read up to here: the next cursor
	last   uint64  // everything up to last is published
	inRing bool    // false when events above the cursor have left the ring
	wait   *wakeup // set when nothing matched: sleep on it
	closed bool
}

// readRing appends to buf up to limit events under prefix above after.
func (h *watchHub) readRing(after uint64, prefix, topic string, buf []Event, limit int) ringRead {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := ringRead{last: h.lastRev, closed: h.closed, evs: buf}
	if after < h.floorRev {
		return r
	}
	r.inRing, r.upTo = true, h.lastRev
	i := sort.Search(h.n, func(i int) bool {
		return h.ring[(h.head+i)%len(h.ring)].Revision > after
	})
	for ; i < h.n; i++ {
		ev := &h.ring[(h.head+i)%len(h.ring)]
		if !strings.HasPrefix(ev.Key, prefix) {
			continue
		}
		if len(r.evs) == limit {
			// More to come: read on from the last one taken.
			r.upTo = r.evs[len(r.evs)-1].Revision
			return r
		}
		r.evs = append(r.evs, *ev)
	}
	if len(r.evs) == 0 && !h.closed {
		w, ok := h.waits[topic]
		if !ok {
			w = &wakeup{ch: make(chan struct{})}
			h.waits[topic] = w
		}
		r.wait = w
	}
	return r
}

// sleeperProgress is how far a watcher sleeping on w has in effect seen:
// everything published, as long as nothing of its topic has come since.
func (h *watchHub) sleeperProgress(w *wakeup) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.first == 0 {
		return h.lastRev
	}
	return 0
}

type hubWatcher struct {
	hub      *watchHub
	out      chan Event
	err      error
	cancel   context.CancelFunc
	done     chan struct{}
	progress atomic.Uint64
	sleeping atomic.Pointer[wakeup]
}

func (w *hubWatcher) Progress() uint64 {
	p := w.progress.Load()
	if s := w.sleeping.Load(); s != nil {
		p = max(p, w.hub.sleeperProgress(s))
	}
	return p
}

func (w *hubWatcher) Events() <-chan Event { return w.out }
func (w *hubWatcher) Err() error {
	<-w.done
	return w.err
}
func (w *hubWatcher) Stop() {
	w.cancel()
	<-w.done
}

// watch starts a watcher of prefix from after (already resolved: never 0
// meaning "now"; the caller checked compaction).
func (h *watchHub) watch(ctx context.Context, prefix string, after uint64) *hubWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &hubWatcher{hub: h, out: make(chan Event, h.chanBuffer), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(w.out)
		w.err = h.run(ctx, w, prefix, after)
	}()
	return w
}

const watchReadBatch = 256

func (h *watchHub) run(ctx context.Context, w *hubWatcher, prefix string, cursor uint64) error {
	w.progress.Store(cursor)
	send := func(evs []Event) error {
		for _, ev := range evs {
			if !strings.HasPrefix(ev.Key, prefix) {
				continue
			}
			select {
			case w.out <- ev:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	topic := topicOf(prefix)
	var buf []Event
	// live turns true once the watcher has caught up with the ring; before
	// that it is replaying history it asked for, which is not lagging.
	live := false
	for {
		r := h.readRing(cursor, prefix, topic, buf[:0], watchReadBatch)
		buf = r.evs
		if !r.inRing {
			// Behind the ring: read durable history.
			if live && h.maxLag > 0 && r.last-cursor > h.maxLag {
				return ErrWatcherTooSlow
			}
			if cursor < h.compactedFn() {
				return ErrCompacted
			}
			evs, err := h.readLog(cursor, r.last, watchReadBatch)
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				// Nothing under history up to last: jump there.
				cursor = r.last
				w.progress.Store(cursor)
				continue
			}
			if err := send(evs); err != nil {
				return nilIfCancelled(err)
			}
			cursor = evs[len(evs)-1].Revision
			w.progress.Store(cursor)
			continue
		}
		live = true
		if len(r.evs) > 0 {
			if err := send(r.evs); err != nil {
				return nilIfCancelled(err)
			}
			clear(r.evs) // hold no values while waiting
			cursor = r.upTo
			w.progress.Store(cursor)
			continue
		}
		if r.closed {
			return ErrClosed
		}
		// Caught up: nothing under prefix in the ring up to last.
		cursor = r.upTo
		w.progress.Store(cursor)
		w.sleeping.Store(r.wait)
		select {
		case <-r.wait.ch:
		case <-ctx.Done():
			return nil
		}
		w.sleeping.Store(nil)
		// Nothing of the topic came before first: events of other
		// topics that left the ring meanwhile are no lag of this one.
		if first := r.wait.first; first > cursor+1 {
			cursor = first - 1
			w.progress.Store(cursor)
		}
	}
}

func nilIfCancelled(err error) error {
	if err == context.Canceled || err == context.DeadlineExceeded {
		return nil
	}
	return err
}
