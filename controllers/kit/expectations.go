package kit

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ExpectationsTimeout is how long a controller waits for the writes it
// expects before it acts anyway: a watch event lost for good (a create
// that failed after the API accepted it, say) must not stall an owner
// for ever. Upstream's value.
const ExpectationsTimeout = 5 * time.Minute

// Expectations record, per owner key, the writes a controller made (or is
// about to make) that its informer has not shown yet. While some are
// outstanding the cache is behind the controller's own writes, and acting
// on it would repeat a burst of creates or deletes: upstream's
// ControllerExpectations and UIDTrackingControllerExpectations in one.
//
// Writes are expected by number (Expect, lowered by Lower) where any
// event of the kind counts, or by name (ExpectNames and Add, dropped by
// Observed and ObservedIf) where one object must count once: a pod seen
// deleted twice (the update with its deletionTimestamp, then the delete)
// is one deletion.
type Expectations struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	m     map[string]*expected
}

type expected struct {
	adds, dels int
	names      map[string]bool
	// at is when the last write was recorded; the timeout runs from it.
	at time.Time
}

// NewExpectations are empty expectations timed by c.
func NewExpectations(c clock.PassiveClock) *Expectations {
	return &Expectations{clock: c, m: map[string]*expected{}}
}

// Expect replaces what key waits for with adds creations and dels
// deletions, counted.
func (e *Expectations) Expect(key string, adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &expected{adds: adds, dels: dels, names: map[string]bool{}, at: e.clock.Now()}
}

// ExpectNames replaces what key waits for with the named writes.
func (e *Expectations) ExpectNames(key string, names ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := &expected{names: make(map[string]bool, len(names)), at: e.clock.Now()}
	for _, n := range names {
		x.names[n] = true
	}
	e.m[key] = x
}

// Add adds one named write to what key waits for, keeping the rest, and
// restarts the timeout: for a controller that records each write once it
// is made.
func (e *Expectations) Add(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.m[key]
	if x == nil {
		x = &expected{names: map[string]bool{}}
		e.m[key] = x
	}
	x.names[name] = true
	x.at = e.clock.Now()
}

// Lower counts adds creations and dels deletions as seen, or as given up
// on (a write that failed will never be seen).
func (e *Expectations) Lower(key string, adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		x.adds -= adds
		x.dels -= dels
	}
}

// Observed drops a named write: seen, or given up on.
func (e *Expectations) Observed(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		delete(x.names, name)
	}
}

// ObservedIf drops the named writes seen says are done: for a controller
// that reads them off its list of objects rather than off events.
func (e *Expectations) ObservedIf(key string, seen func(name string) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		for n := range x.names {
			if seen(n) {
				delete(x.names, n)
			}
		}
	}
}

// Pending says whether the named write is still recorded for key.
func (e *Expectations) Pending(key, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.m[key]
	return x != nil && x.names[name]
}

// Satisfied says whether key may be acted on: nothing is outstanding,
// nothing was recorded, or what was is too old to wait for. What is
// satisfied is dropped, so nothing expired is Pending afterwards.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.m[key]
	if x == nil {
		return true
	}
	if (x.adds <= 0 && x.dels <= 0 && len(x.names) == 0) || e.clock.Since(x.at) > ExpectationsTimeout {
		delete(e.m, key)
		return true
	}
	return false
}

// Forget drops what key waits for: its owner is gone.
func (e *Expectations) Forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
