package replicaset

import (
	"sync"
	"time"
)

// expectationsTimeout is how long a controller trusts what it expects to
// see before it syncs anyway: a watch event lost for good (a create that
// failed after the API accepted it, say) must not stall a ReplicaSet
// forever. Upstream's value.
const expectationsTimeout = 5 * time.Minute

// expectations records, per ReplicaSet key, the pod creations and
// deletions the controller has asked for and the informer has not shown
// yet. A ReplicaSet with some outstanding is not managed again, so a
// burst of creates is not repeated while their watch events are on the
// way (upstream's UIDTrackingControllerExpectations).
type expectations struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*expected
}

type expected struct {
	adds int
	// dels are the pods asked to be deleted, by namespace/name: a pod
	// seen deleted twice (an update with deletionTimestamp, then the
	// delete) is counted once.
	dels map[string]bool
	at   time.Time
}

func newExpectations(now func() time.Time) *expectations {
	return &expectations{now: now, m: map[string]*expected{}}
}

// satisfied reports whether key may be managed: nothing is outstanding,
// nothing was ever recorded, or what was is too old to trust.
func (e *expectations) satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return true
	}
	return (x.adds <= 0 && len(x.dels) == 0) || e.now().Sub(x.at) > expectationsTimeout
}

func (e *expectations) expectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &expected{adds: n, dels: map[string]bool{}, at: e.now()}
}

func (e *expectations) expectDeletions(key string, pods []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := &expected{dels: make(map[string]bool, len(pods)), at: e.now()}
	for _, p := range pods {
		x.dels[p] = true
	}
	e.m[key] = x
}

// creationObserved lowers the creations outstanding: a pod was seen, or
// a create failed and will never be.
func (e *expectations) creationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		x.adds--
	}
}

// deletionObserved drops pod from the deletions outstanding.
func (e *expectations) deletionObserved(key, pod string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		delete(x.dels, pod)
	}
}

func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
