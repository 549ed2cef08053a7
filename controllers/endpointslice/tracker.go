package endpointslice

import (
	"strconv"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Tracker remembers, per Service, the resourceVersion of each slice a
// controller wrote and the slices it deleted, as upstream's
// EndpointSliceTracker does with generations. A sync whose informer
// cache has not yet seen the controller's own last writes must wait:
// acting on it would create duplicate slices or undo an update. The
// mirroring controller uses one too.
//
// resourceVersions are compared as numbers: bonsai's are the store's
// revisions, which only grow.
type Tracker struct {
	mu sync.Mutex
	m  map[string]map[string]written // Service key → slice name
}

type written struct {
	rv      uint64
	deleted bool
}

// NewTracker is an empty tracker.
func NewTracker() *Tracker { return &Tracker{m: map[string]map[string]written{}} }

func rvOf(s *discoveryv1.EndpointSlice) uint64 {
	n, _ := strconv.ParseUint(s.ResourceVersion, 10, 64)
	return n
}

// Wrote records a slice as the API server returned it from a create or
// update.
func (t *Tracker) Wrote(key string, s *discoveryv1.EndpointSlice) {
	t.set(key, s.Name, written{rv: rvOf(s)})
}

// Deleted records a slice the controller deleted.
func (t *Tracker) Deleted(key, name string) { t.set(key, name, written{deleted: true}) }

func (t *Tracker) set(key, name string, w written) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[key] == nil {
		t.m[key] = map[string]written{}
	}
	t.m[key][name] = w
}

// Stale says whether cached (the Service's slices in the informer cache)
// misses a write the controller made: a slice it wrote that is absent or
// older, or one it deleted that is still there.
func (t *Tracker) Stale(key string, cached []*discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	want := t.m[key]
	if len(want) == 0 {
		return false
	}
	byName := make(map[string]*discoveryv1.EndpointSlice, len(cached))
	for _, s := range cached {
		byName[s.Name] = s
	}
	for name, w := range want {
		s, ok := byName[name]
		if w.deleted {
			if ok {
				return true
			}
		} else if !ok || rvOf(s) < w.rv {
			return true
		}
	}
	return false
}

// ShouldSync says whether an informer event about s is news to the
// controller: a slice it did not write, or a later version of one it did.
func (t *Tracker) ShouldSync(key string, s *discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.m[key][s.Name]
	return !ok || w.deleted || rvOf(s) > w.rv
}

// HandleDeletion forgets a deleted slice and says whether the controller
// expected that deletion (false: someone else deleted it, resync).
func (t *Tracker) HandleDeletion(key, name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.m[key][name]
	delete(t.m[key], name)
	if len(t.m[key]) == 0 {
		delete(t.m, key)
	}
	return ok && w.deleted
}

// Forget drops a Service.
func (t *Tracker) Forget(key string) {
	t.mu.Lock()
	delete(t.m, key)
	t.mu.Unlock()
}
