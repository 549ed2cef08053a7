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
type watchHub struct {
	mu       sync.Mutex
	ring     []Event // circular, len == cap
	head     int     // index of the oldest event in ring
	n        int     // events in ring
	floorRev uint64  // events at or below floorRev are not in the ring
	lastRev  uint64  // every event up to lastRev is published
	notify   chan struct{}
	closed   bool

	readLog     logReader
	maxLag      uint64
	chanBuffer  int
	compactedFn func() uint64
}

func newWatchHub(ringSize int, startRev uint64, maxLag uint64, readLog logReader, compacted func() uint64) *watchHub {
	if ringSize < 1 {
		ringSize = 1
	}
	return &watchHub{
		ring:        make([]Event, ringSize),
		floorRev:    startRev,
		lastRev:     startRev,
		notify:      make(chan struct{}),
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
	}
	if rev > h.lastRev {
		h.lastRev = rev
	}
	close(h.notify)
	h.notify = make(chan struct{})
}

func (h *watchHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.notify)
	}
}

func (h *watchHub) current() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastRev
}

// readRing copies up to limit events above after from the ring. inRing is
// false when events above after have already left the ring.
func (h *watchHub) readRing(after uint64, limit int) (evs []Event, last uint64, inRing bool, wait <-chan struct{}, closed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if after < h.floorRev {
		return nil, h.lastRev, false, nil, h.closed
	}
	i := sort.Search(h.n, func(i int) bool {
		return h.ring[(h.head+i)%len(h.ring)].Revision > after
	})
	for ; i < h.n && len(evs) < limit; i++ {
		evs = append(evs, h.ring[(h.head+i)%len(h.ring)])
	}
	return evs, h.lastRev, true, h.notify, h.closed
}

type hubWatcher struct {
	out      chan Event
	err      error
	cancel   context.CancelFunc
	done     chan struct{}
	progress atomic.Uint64
}

func (w *hubWatcher) Progress() uint64 { return w.progress.Load() }

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
	w := &hubWatcher{out: make(chan Event, h.chanBuffer), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(w.out)
		w.err = h.run(ctx, w.out, prefix, after, &w.progress)
	}()
	return w
}

const watchReadBatch = 256

func (h *watchHub) run(ctx context.Context, out chan<- Event, prefix string, cursor uint64, progress *atomic.Uint64) error {
	progress.Store(cursor)
	send := func(evs []Event) error {
		for _, ev := range evs {
			if !strings.HasPrefix(ev.Key, prefix) {
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	// live turns true once the watcher has caught up with the ring; before
	// that it is replaying history it asked for, which is not lagging.
	live := false
	for {
		evs, last, inRing, wait, closed := h.readRing(cursor, watchReadBatch)
		if !inRing {
			// Behind the ring: read durable history.
			if live && h.maxLag > 0 && last-cursor > h.maxLag {
				return ErrWatcherTooSlow
			}
			if cursor < h.compactedFn() {
				return ErrCompacted
			}
			evs, err := h.readLog(cursor, last, watchReadBatch)
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				// Nothing under history up to last: jump there.
				cursor = last
				progress.Store(cursor)
				continue
			}
			if err := send(evs); err != nil {
				return nilIfCancelled(err)
			}
			cursor = evs[len(evs)-1].Revision
			progress.Store(cursor)
			continue
		}
		live = true
		if len(evs) > 0 {
			if err := send(evs); err != nil {
				return nilIfCancelled(err)
			}
			cursor = evs[len(evs)-1].Revision
			progress.Store(cursor)
			continue
		}
		if closed {
			return ErrClosed
		}
		// Caught up: nothing in the ring above cursor up to last.
		cursor = last
		progress.Store(cursor)
		select {
		case <-wait:
		case <-ctx.Done():
			return nil
		}
	}
}

func nilIfCancelled(err error) error {
	if err == context.Canceled || err == context.DeadlineExceeded {
		return nil
	}
	return err
}
