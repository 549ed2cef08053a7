package job

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// expectationTimeout is how long a write may stay unseen before the
// controller stops waiting for it (upstream's 5 minutes): a lost watch
// event must not stall a Job for ever.
const expectationTimeout = 5 * time.Minute

// expectations are the pod writes of a Job the informer has not shown
// yet: created pods (by name), deleted pods and pods whose tracking
// finalizer was removed (by UID). While any is pending the Job's pod
// list is stale, so it neither creates nor deletes pods.
type expectations struct {
	clock clock.Clock
	mu    sync.Mutex
	m     map[string]*pending
}

type pending struct {
	created     map[string]bool
	deleted     map[types.UID]bool
	unfinalized map[types.UID]bool
	since       time.Time
}

func newExpectations(c clock.Clock) *expectations {
	return &expectations{clock: c, m: map[string]*pending{}}
}

func (e *expectations) get(key string) *pending {
	p := e.m[key]
	if p == nil {
		p = &pending{created: map[string]bool{}, deleted: map[types.UID]bool{}, unfinalized: map[types.UID]bool{}}
		e.m[key] = p
	}
	p.since = e.clock.Now()
	return p
}

func (e *expectations) created(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(key).created[name] = true
}

func (e *expectations) deleted(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(key).deleted[uid] = true
}

func (e *expectations) unfinalized(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(key).unfinalized[uid] = true
}

// seen records that the informer showed a created pod.
func (e *expectations) seen(key, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.m[key]; p != nil {
		delete(p.created, name)
	}
}

// satisfied drops what pods (the Job's pods as the informer has them)
// shows done and says whether nothing is left.
func (e *expectations) satisfied(key string, pods []*corev1.Pod) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.m[key]
	if p == nil {
		return true
	}
	byName := make(map[string]*corev1.Pod, len(pods))
	byUID := make(map[types.UID]*corev1.Pod, len(pods))
	for _, pod := range pods {
		byName[pod.Name] = pod
		byUID[pod.UID] = pod
	}
	for name := range p.created {
		if byName[name] != nil {
			delete(p.created, name)
		}
	}
	for uid := range p.deleted {
		if pod := byUID[uid]; pod == nil || pod.DeletionTimestamp != nil {
			delete(p.deleted, uid)
		}
	}
	for uid := range p.unfinalized {
		if pod := byUID[uid]; pod == nil || !hasTrackingFinalizer(pod) {
			delete(p.unfinalized, uid)
		}
	}
	if len(p.created)+len(p.deleted)+len(p.unfinalized) == 0 || e.clock.Since(p.since) > expectationTimeout {
		delete(e.m, key)
		return true
	}
	return false
}

// pendingFinalizer says whether uid's finalizer removal is still unseen.
func (e *expectations) pendingFinalizer(key string, uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.m[key]
	return p != nil && p.unfinalized[uid]
}

func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
