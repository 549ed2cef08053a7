package servicepods

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/controllers/kit"
)

// TriggerTimes computes the endpoints.kubernetes.io/last-change-trigger-time
// of a Service's endpoints as upstream's TriggerTimeTracker does: the
// earliest time of the changes not yet reflected, where a pod's change is
// the last transition of its Ready condition and the Service's is its
// creation. Each controller has its own, as each writes its own objects.
type TriggerTimes struct {
	mu    sync.Mutex
	state map[string]serviceTriggers // by Service key
}

type serviceTriggers struct {
	pods    map[string]time.Time // by pod name
	service time.Time
}

// NewTriggerTimes is an empty tracker.
func NewTriggerTimes() *TriggerTimes {
	return &TriggerTimes{state: map[string]serviceTriggers{}}
}

// Compute returns the trigger time for the Service's endpoints built from
// pods (zero when no change is new since the last call) and remembers
// what it saw.
func (t *TriggerTimes) Compute(key string, svc *corev1.Service, pods []*corev1.Pod) time.Time {
	t.mu.Lock()
	last := t.state[key]
	t.mu.Unlock()
	next := serviceTriggers{pods: make(map[string]time.Time, len(pods)), service: svc.CreationTimestamp.Time}
	var earliest time.Time
	note := func(at time.Time) {
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	for _, p := range pods {
		at := readyTransition(p)
		if at.IsZero() {
			continue
		}
		next.pods[p.Name] = at
		if at.After(last.pods[p.Name]) {
			note(at)
		}
	}
	if next.service.After(last.service) {
		note(next.service)
	}
	t.mu.Lock()
	t.state[key] = next
	t.mu.Unlock()
	return earliest
}

// Forget drops a deleted Service.
func (t *TriggerTimes) Forget(key string) {
	t.mu.Lock()
	delete(t.state, key)
	t.mu.Unlock()
}

func readyTransition(p *corev1.Pod) time.Time {
	if c := kit.PodReadyCondition(p); c != nil {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}
