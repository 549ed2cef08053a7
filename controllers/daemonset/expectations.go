package daemonset

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// expectationsTimeout: expectations older than this are forgotten, in case
// a watch event never came (upstream's value).
const expectationsTimeout = 5 * time.Minute

// expectations counts, per DaemonSet, the pod creations and deletions the
// controller made and has not yet seen in its informer. Until they are
// seen its cache is behind its own writes, and acting on it would create
// a second pod for a node; upstream's ControllerExpectations.
type expectations struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	m     map[string]*expected
}

type expected struct {
	adds, dels int
	at         time.Time
}

func newExpectations(c clock.PassiveClock) *expectations {
	return &expectations{clock: c, m: map[string]*expected{}}
}

// expect records adds creations and dels deletions about to be made.
func (e *expectations) expect(key string, adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &expected{adds: adds, dels: dels, at: e.clock.Now()}
}

// observe counts creations and deletions seen (or given up on).
func (e *expectations) observe(key string, adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		x.adds -= adds
		x.dels -= dels
	}
}

// satisfied says whether everything expected for key was seen, or the
// expectation is too old to wait for.
func (e *expectations) satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.m[key]
	return x == nil || (x.adds <= 0 && x.dels <= 0) || e.clock.Since(x.at) > expectationsTimeout
}

func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
