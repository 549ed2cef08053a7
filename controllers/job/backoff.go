package job

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// backoffRecord is a Job's pod failures since its last success, which
// set how long to wait before the next pod.
type backoffRecord struct {
	failures    int
	lastFailure time.Time
}

// delay is base doubled per failure after the first, capped at max.
func delay(failures int, base, limit time.Duration) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := base
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// remaining is how long the back-off still runs at now.
func (r backoffRecord) remaining(now time.Time, base, limit time.Duration) time.Duration {
	if r.failures == 0 {
		return 0
	}
	return max(r.lastFailure.Add(delay(r.failures, base, limit)).Sub(now), 0)
}

// next is the record after the pods just counted: a success starts the
// count again from the failures that came after it.
func (r backoffRecord) next(succeeded, failed []*corev1.Pod, now time.Time) backoffRecord {
	var lastSuccess time.Time
	for _, p := range succeeded {
		if t := finishTime(p, now); t.After(lastSuccess) {
			lastSuccess = t
		}
	}
	if len(succeeded) > 0 {
		r = backoffRecord{}
	}
	for _, p := range failed {
		t := finishTime(p, now)
		if t.Before(lastSuccess) {
			continue
		}
		r.failures++
		if t.After(r.lastFailure) {
			r.lastFailure = t
		}
	}
	return r
}

// finishTime is when a pod's last container ended, else when it was
// deleted, else now (a pod failed without container statuses).
func finishTime(p *corev1.Pod, now time.Time) time.Time {
	var t time.Time
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if term := cs.State.Terminated; term != nil && term.FinishedAt.Time.After(t) {
				t = term.FinishedAt.Time
			}
		}
	}
	if t.IsZero() && p.DeletionTimestamp != nil {
		t = p.DeletionTimestamp.Time
	}
	if t.IsZero() || t.After(now) {
		return now
	}
	return t
}

func (c *Controller) backoffOf(key string) backoffRecord {
	c.backoffMu.Lock()
	defer c.backoffMu.Unlock()
	return c.backoff[key]
}

func (c *Controller) setBackoff(key string, r backoffRecord) {
	c.backoffMu.Lock()
	defer c.backoffMu.Unlock()
	if r.failures == 0 {
		delete(c.backoff, key)
		return
	}
	c.backoff[key] = r
}
