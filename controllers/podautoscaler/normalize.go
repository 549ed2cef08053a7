package podautoscaler

import (
	"math"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
)

// history is what the controller remembers of each autoscaler between
// syncs, as upstream's does (in memory: a restart forgets it): its
// recent recommendations, for the stabilization windows, and its recent
// scale changes, for the rate policies.
type history struct {
	mu              sync.Mutex
	recommendations map[string][]timedRecommendation
	scaleUps        map[string][]scaleEvent
	scaleDowns      map[string][]scaleEvent
}

type timedRecommendation struct {
	replicas int32
	at       time.Time
}

type scaleEvent struct {
	change   int32
	at       time.Time
	outdated bool
}

func newHistory() *history {
	return &history{recommendations: map[string][]timedRecommendation{}, scaleUps: map[string][]scaleEvent{}, scaleDowns: map[string][]scaleEvent{}}
}

func (h *history) forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.recommendations, key)
	delete(h.scaleUps, key)
	delete(h.scaleDowns, key)
}

// recordInitial remembers the current count as the first recommendation
// of an autoscaler seen for the first time, so a restart does not
// scale down at once.
func (h *history) recordInitial(key string, current int32, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.recommendations[key] == nil {
		h.recommendations[key] = []timedRecommendation{{current, now}}
	}
}

// record keeps rec, in the place of the oldest sample older than every
// window if there is one.
func (h *history) record(key string, rec int32, now time.Time, oldIndex int, foundOld bool) {
	if foundOld {
		h.recommendations[key][oldIndex] = timedRecommendation{rec, now}
	} else {
		h.recommendations[key] = append(h.recommendations[key], timedRecommendation{rec, now})
	}
}

// limits is what bounds a recommendation.
type limits struct {
	min, max, current int32
}

// condition is a reason and message for a condition of the autoscaler.
type condition struct{ reason, message string }

var (
	readyForNewScale = condition{"ReadyForNewScale", "recommended size matches current size"}
	scaleDownStable  = condition{"ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"}
	scaleUpStable    = condition{"ScaleUpStabilized", "recent recommendations were lower than current one, applying the lowest recent recommendation"}
	withinRange      = condition{"DesiredWithinRange", "the desired count is within the acceptable range"}
	tooFew           = condition{"TooFewReplicas", "the desired replica count is less than the minimum replica count"}
	tooMany          = condition{"TooManyReplicas", "the desired replica count is more than the maximum replica count"}
	scaleUpLimit     = condition{"ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"}
	scaleDownLimit   = condition{"ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate"}
)

// normalize is upstream's normalizeDesiredReplicas, for autoscalers
// without a behavior: the highest recommendation of the downscale
// window, then the min/max bounds and the old rate limit (at most
// double, or 4, per sync). It returns the count, the AbleToScale
// condition and the ScalingLimited one, limited or not.
func (h *history) normalize(key string, desired int32, l limits, downscaleWindow time.Duration, now time.Time) (int32, condition, condition, bool) {
	h.mu.Lock()
	stabilized := desired
	foundOld, oldIndex := false, 0
	cutoff := now.Add(-downscaleWindow)
	for i, rec := range h.recommendations[key] {
		if rec.at.Before(cutoff) {
			foundOld, oldIndex = true, i
		} else if rec.replicas > stabilized {
			stabilized = rec.replicas
		}
	}
	h.record(key, desired, now, oldIndex, foundOld)
	h.mu.Unlock()

	able := readyForNewScale
	if stabilized != desired {
		able = scaleDownStable
	}
	maxAllowed, limitCond := l.max, tooMany
	if up := int32(math.Max(2*float64(l.current), 4)); l.max > up {
		maxAllowed, limitCond = up, scaleUpLimit
	}
	switch {
	case stabilized < l.min:
		return l.min, able, tooFew, true
	case stabilized > maxAllowed:
		return maxAllowed, able, limitCond, true
	}
	return stabilized, able, withinRange, false
}

// normalizeWithBehavior is upstream's normalizeDesiredReplicasWithBehaviors:
// the recommendation held between the lowest of the scale-up window and
// the highest of the scale-down window, then the rate policies and the
// min/max bounds.
func (h *history) normalizeWithBehavior(key string, desired int32, l limits, up, down *autoscalingv2.HPAScalingRules, now time.Time) (int32, condition, condition, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	upRec, downRec := desired, desired
	upCutoff := now.Add(-time.Duration(*up.StabilizationWindowSeconds) * time.Second)
	downCutoff := now.Add(-time.Duration(*down.StabilizationWindowSeconds) * time.Second)
	foundOld, oldIndex := false, 0
	for i, rec := range h.recommendations[key] {
		if rec.at.After(upCutoff) {
			upRec = min(rec.replicas, upRec)
		}
		if rec.at.After(downCutoff) {
			downRec = max(rec.replicas, downRec)
		}
		if rec.at.Before(upCutoff) && rec.at.Before(downCutoff) {
			foundOld, oldIndex = true, i
		}
	}
	stabilized := l.current
	if stabilized < upRec {
		stabilized = upRec
	}
	if stabilized > downRec {
		stabilized = downRec
	}
	h.record(key, desired, now, oldIndex, foundOld)

	able := readyForNewScale
	if stabilized != desired {
		able = scaleUpStable
		if desired < l.current {
			able = scaleDownStable
		}
	}
	switch {
	case stabilized > l.current:
		limit := scaleUpLimitOf(l.current, h.scaleUps[key], h.scaleDowns[key], up, now)
		limit = max(limit, l.current) // no further up until old events leave the periods
		maxAllowed, cond := l.max, tooMany
		if maxAllowed > limit {
			maxAllowed, cond = limit, scaleUpLimit
		}
		if stabilized > maxAllowed {
			return maxAllowed, able, cond, true
		}
	case stabilized < l.current:
		limit := scaleDownLimitOf(l.current, h.scaleUps[key], h.scaleDowns[key], down, now)
		limit = min(limit, l.current)
		minAllowed, cond := l.min, tooFew
		if minAllowed < limit {
			minAllowed, cond = limit, scaleDownLimit
		}
		if stabilized < minAllowed {
			return minAllowed, able, cond, true
		}
	}
	return stabilized, able, withinRange, false
}

// changeInPeriod sums the changes of events within the last period.
func changeInPeriod(periodSeconds int32, events []scaleEvent, now time.Time) int32 {
	cutoff := now.Add(-time.Duration(periodSeconds) * time.Second)
	var n int32
	for _, e := range events {
		if e.at.After(cutoff) {
			n += e.change
		}
	}
	return n
}

// scaleUpLimitOf is the most replicas the policies allow now: each
// policy's allowance from the count at the start of its period, the
// highest of them (Max) or the lowest (Min).
func scaleUpLimitOf(current int32, ups, downs []scaleEvent, rules *autoscalingv2.HPAScalingRules, now time.Time) int32 {
	if *rules.SelectPolicy == autoscalingv2.DisabledPolicySelect {
		return current
	}
	pick, result := maxOf, int32(math.MinInt32)
	if *rules.SelectPolicy == autoscalingv2.MinChangePolicySelect {
		pick, result = minOf, math.MaxInt32
	}
	for _, p := range rules.Policies {
		start := current - changeInPeriod(p.PeriodSeconds, ups, now) + changeInPeriod(p.PeriodSeconds, downs, now)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start + p.Value
		case autoscalingv2.PercentScalingPolicy:
			// Rounded up, or a small target might never grow.
			proposed = int32(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		}
		result = pick(result, proposed)
	}
	return result
}

// scaleDownLimitOf is the fewest replicas the policies allow now; for
// scaling down the biggest change (Max) is the lowest count.
func scaleDownLimitOf(current int32, ups, downs []scaleEvent, rules *autoscalingv2.HPAScalingRules, now time.Time) int32 {
	if *rules.SelectPolicy == autoscalingv2.DisabledPolicySelect {
		return current
	}
	pick, result := minOf, int32(math.MaxInt32)
	if *rules.SelectPolicy == autoscalingv2.MinChangePolicySelect {
		pick, result = maxOf, math.MinInt32
	}
	for _, p := range rules.Policies {
		start := current - changeInPeriod(p.PeriodSeconds, ups, now) + changeInPeriod(p.PeriodSeconds, downs, now)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start - p.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(float64(start) * (1 - float64(p.Value)/100))
		}
		result = pick(result, proposed)
	}
	return result
}

// recordScale remembers a rescale for the rate policies of an
// autoscaler with a behavior, reusing an event older than its longest
// period.
func (h *history) recordScale(key string, b *autoscalingv2.HorizontalPodAutoscalerBehavior, from, to int32, now time.Time) {
	if b == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	events, rules, change := h.scaleUps, b.ScaleUp, to-from
	if to < from {
		events, rules, change = h.scaleDowns, b.ScaleDown, from-to
	}
	var longest int32
	for _, p := range rules.Policies {
		longest = max(longest, p.PeriodSeconds)
	}
	cutoff := now.Add(-time.Duration(longest) * time.Second)
	list := events[key]
	for i := range list {
		if list[i].at.Before(cutoff) {
			list[i].outdated = true
		}
	}
	e := scaleEvent{change: change, at: now}
	for i := range list {
		if list[i].outdated {
			list[i] = e
			return
		}
	}
	events[key] = append(list, e)
}

func minOf(a, b int32) int32 { return min(a, b) }
func maxOf(a, b int32) int32 { return max(a, b) }
