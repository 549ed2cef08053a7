package job

import (
	"context"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/controllers/kit"
)

// manage creates and deletes pods so that the Job has as many active as
// it wants: none when suspended, else parallelism, capped by the
// completions left.
func (c *Controller) manage(ctx context.Context, s *jobState, now time.Time) error {
	j := s.job
	if suspended(j) {
		// Suspension is no failure: the finalizers go first so the
		// deleted pods are not counted.
		err := c.deletePods(ctx, j, s.key, s.active, true)
		s.active = nil
		return err
	}
	want := c.wantActive(s)
	// Pods still terminating hold their place when only failed pods are
	// replaced.
	var held int32
	if onlyReplaceFailed(j) {
		held = s.terminating
	}
	excess := c.podsToRemove(s, want)
	if len(excess) > 0 {
		if err := c.deletePods(ctx, j, s.key, excess, true); err != nil {
			return err
		}
		s.active = without(s.active, excess)
	}
	active := int32(len(s.active))
	if active+held >= want {
		return nil
	}
	diff := min(want-active-held, maxPodChangesPerSync)
	var pods []*corev1.Pod
	if isIndexed(j) {
		indexes, wait := c.pendingIndexes(s, int(diff), now)
		if wait > 0 {
			c.queue.AddAfter(s.key, wait)
		}
		for _, ix := range indexes {
			failures, ignored := s.indexHistory(ix)
			pods = append(pods, newPod(j, ix, failures, ignored))
		}
	} else {
		if wait := s.backoff.remaining(now, c.cfg.Backoff, c.cfg.MaxBackoff); wait > 0 {
			c.queue.AddAfter(s.key, wait)
			return nil
		}
		for range diff {
			pods = append(pods, newPod(j, unknownIndex, 0, 0))
		}
	}
	created, err := c.createPods(ctx, j, s.key, pods)
	s.active = append(s.active, pods[:created]...) // counted active from now on, as upstream
	return err
}

// wantActive is how many pods should run now.
func (c *Controller) wantActive(s *jobState) int32 {
	j := s.job
	parallelism := int32(1)
	if j.Spec.Parallelism != nil {
		parallelism = *j.Spec.Parallelism
	}
	if j.Spec.Completions == nil {
		// A work queue: once a pod succeeded, the rest finish their
		// work and no new one starts.
		if s.succeeded > 0 {
			return int32(len(s.active))
		}
		return parallelism
	}
	left := *j.Spec.Completions - s.succeeded
	if isIndexed(j) {
		left -= int32(len(s.failedIndexes))
	}
	return max(min(left, parallelism), 0)
}

// podsToRemove are the active pods to delete: for an Indexed Job those
// of an index already done, failed or out of range and duplicates of an
// index; then, beyond want, the least advanced pods first.
func (c *Controller) podsToRemove(s *jobState, want int32) []*corev1.Pod {
	var remove, keep []*corev1.Pod
	if isIndexed(s.job) {
		seen := map[int]bool{}
		for _, p := range sortedForRemoval(s.active, true) {
			ix := podIndex(p)
			if ix == unknownIndex || ix >= int(*s.job.Spec.Completions) || s.completed[ix] || s.failedIndexes[ix] || seen[ix] {
				remove = append(remove, p)
				continue
			}
			seen[ix] = true
			keep = append(keep, p)
		}
	} else {
		keep = s.active
	}
	if extra := len(keep) - int(want); extra > 0 {
		remove = append(remove, sortedForRemoval(keep, false)[:extra]...)
	}
	return remove
}

// sortedForRemoval orders pods as upstream prefers to delete them:
// unscheduled, then pending, then not ready, then the newest. With
// keepBest reversed, so that the best pod of an index comes first.
func sortedForRemoval(pods []*corev1.Pod, keepBest bool) []*corev1.Pod {
	out := append([]*corev1.Pod(nil), pods...)
	rank := func(p *corev1.Pod) int {
		switch {
		case p.Spec.NodeName == "":
			return 0
		case p.Status.Phase == corev1.PodPending:
			return 1
		case !kit.IsPodReady(p):
			return 2
		}
		return 3
	}
	sort.SliceStable(out, func(a, b int) bool {
		ra, rb := rank(out[a]), rank(out[b])
		if ra != rb {
			return (ra < rb) != keepBest
		}
		newer := out[b].CreationTimestamp.Before(&out[a].CreationTimestamp)
		return newer != keepBest
	})
	return out
}

func without(pods, remove []*corev1.Pod) []*corev1.Pod {
	gone := map[*corev1.Pod]bool{}
	for _, p := range remove {
		gone[p] = true
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if !gone[p] {
			out = append(out, p)
		}
	}
	return out
}

// pendingIndexes are up to n indexes, lowest first, that are neither
// done, failed nor held by a pod; with backoffLimitPerIndex an index
// waits out its own back-off, and wait is when the next one is due.
func (c *Controller) pendingIndexes(s *jobState, n int, now time.Time) (indexes []int, wait time.Duration) {
	j := s.job
	held := map[int]bool{}
	for _, p := range s.pods {
		if terminal(p) {
			continue
		}
		if p.DeletionTimestamp == nil || onlyReplaceFailed(j) {
			held[podIndex(p)] = true
		}
	}
	jobWait := s.backoff.remaining(now, c.cfg.Backoff, c.cfg.MaxBackoff)
	for ix := 0; ix < int(*j.Spec.Completions) && len(indexes) < n; ix++ {
		if s.completed[ix] || s.failedIndexes[ix] || held[ix] {
			continue
		}
		d := jobWait
		if j.Spec.BackoffLimitPerIndex != nil {
			d = s.indexBackoff(ix, now, c.cfg.Backoff, c.cfg.MaxBackoff)
		}
		if d > 0 {
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		indexes = append(indexes, ix)
	}
	return indexes, wait
}

// lastFailed is the most recent failed pod of an index.
func (s *jobState) lastFailed(ix int) *corev1.Pod {
	var last *corev1.Pod
	for _, p := range s.pods {
		if podIndex(p) != ix || !podFailed(p, s.job) {
			continue
		}
		if last == nil || last.CreationTimestamp.Before(&p.CreationTimestamp) ||
			(last.CreationTimestamp.Equal(&p.CreationTimestamp) && annotationInt(p, indexFailureCountKey) > annotationInt(last, indexFailureCountKey)) {
			last = p
		}
	}
	return last
}

// indexHistory is the failures and ignored failures of an index so far,
// for its next pod's annotations.
func (s *jobState) indexHistory(ix int) (failures, ignored int) {
	last := s.lastFailed(ix)
	if last == nil {
		return 0, 0
	}
	failures, ignored = annotationInt(last, indexFailureCountKey), annotationInt(last, indexIgnoredFailureCntKey)
	if judgeFailure(s.job, last).counts() {
		failures++
	} else {
		ignored++
	}
	return failures, ignored
}

// indexBackoff is how long an index still waits after its last failure.
func (s *jobState) indexBackoff(ix int, now time.Time, base, limit time.Duration) time.Duration {
	last := s.lastFailed(ix)
	if last == nil {
		return 0
	}
	failures, _ := s.indexHistory(ix)
	if failures == 0 {
		return 0
	}
	return backoffRecord{failures: failures, lastFailure: finishTime(last, now)}.remaining(now, base, limit)
}
