package podautoscaler

import (
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	hparegistry "bonsai.dev/bonsai/apiserver/registry/autoscaling"
)

// Without a behavior: the highest recommendation of the last 5 minutes
// holds a scale down; the count stays within min and max, and grows at
// most to double (or 4) per sync.
func TestNormalizeWithoutBehavior(t *testing.T) {
	h := newHistory()
	h.recordInitial("k", 5, t0)
	l := limits{min: 1, max: 10, current: 5}
	got, able, limited, isLimited := h.normalize("k", 2, l, 5*time.Minute, t0.Add(time.Minute))
	if got != 5 || able.reason != "ScaleDownStabilized" || limited.reason != "DesiredWithinRange" || isLimited {
		t.Errorf("within the window: %d %v %v %v", got, able, limited, isLimited)
	}
	got, able, _, _ = h.normalize("k", 2, l, 5*time.Minute, t0.Add(6*time.Minute))
	if got != 2 || able.reason != "ReadyForNewScale" {
		t.Errorf("after the window: %d %v", got, able)
	}
	got, _, limited, isLimited = h.normalize("k", 0, limits{min: 1, max: 10, current: 2}, 0, t0.Add(7*time.Minute))
	if got != 1 || limited.reason != "TooFewReplicas" || !isLimited {
		t.Errorf("below min: %d %v", got, limited)
	}
	got, _, limited, _ = h.normalize("k", 30, limits{min: 1, max: 10, current: 2}, 0, t0.Add(8*time.Minute))
	if got != 4 || limited.reason != "ScaleUpLimit" {
		t.Errorf("fast growth: %d %v", got, limited)
	}
	got, _, limited, _ = h.normalize("k", 30, limits{min: 1, max: 10, current: 8}, 0, t0.Add(9*time.Minute))
	if got != 10 || limited.reason != "TooManyReplicas" {
		t.Errorf("above max: %d %v", got, limited)
	}
}

func rules(window int32, policy autoscalingv2.ScalingPolicySelect, policies ...autoscalingv2.HPAScalingPolicy) *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &window, SelectPolicy: &policy, Policies: policies}
}

// With a behavior: the stabilization windows of each direction, and the
// rate policies counted over their periods from the recorded rescales,
// as upstream's behavior tests describe them.
func TestNormalizeWithBehavior(t *testing.T) {
	up := hparegistry.ScaleUpRules()
	down := rules(30, autoscalingv2.MaxChangePolicySelect, autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15})
	b := &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: up, ScaleDown: down}
	h := newHistory()
	h.recordInitial("k", 1, t0)

	// 1 → 3 at once: the default scale-up allows +4 pods or +100 %.
	got, able, limited, _ := h.normalizeWithBehavior("k", 10, limits{1, 3, 1}, up, down, t0.Add(15*time.Second))
	if got != 3 || able.reason != "ReadyForNewScale" || limited.reason != "TooManyReplicas" {
		t.Fatalf("scale up: %d %v %v", got, able, limited)
	}
	h.recordScale("k", b, 1, 3, t0.Add(15*time.Second))

	// Load gone: the 30 s window holds 3 until the high samples age out.
	now := t0.Add(30 * time.Second)
	got, able, _, _ = h.normalizeWithBehavior("k", 1, limits{1, 3, 3}, up, down, now)
	if got != 3 || able.reason != "ScaleDownStabilized" {
		t.Fatalf("within the scale-down window: %d %v", got, able)
	}
	got, able, limited, _ = h.normalizeWithBehavior("k", 1, limits{1, 3, 3}, up, down, now.Add(31*time.Second))
	if got != 1 || able.reason != "ReadyForNewScale" || limited.reason != "DesiredWithinRange" {
		t.Fatalf("after the window: %d %v %v", got, able, limited)
	}

	// Rate policies: 10 % or 1 pod per minute, the smaller change (Min).
	slowDown := rules(0, autoscalingv2.MinChangePolicySelect,
		autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy, Value: 10, PeriodSeconds: 60},
		autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 60})
	slow := &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: up, ScaleDown: slowDown}
	h2 := newHistory()
	got, _, limited, isLimited := h2.normalizeWithBehavior("s", 2, limits{1, 20, 20}, up, slowDown, t0)
	if got != 19 || limited.reason != "ScaleDownLimit" || !isLimited {
		t.Fatalf("slow scale down: %d %v", got, limited)
	}
	h2.recordScale("s", slow, 20, 19, t0)
	// Within the minute the pod already removed counts against the policy.
	if got, _, _, _ = h2.normalizeWithBehavior("s", 2, limits{1, 20, 19}, up, slowDown, t0.Add(30*time.Second)); got != 19 {
		t.Errorf("second step within the period: %d, want 19", got)
	}
	if got, _, _, _ = h2.normalizeWithBehavior("s", 2, limits{1, 20, 19}, up, slowDown, t0.Add(61*time.Second)); got != 18 {
		t.Errorf("step after the period: %d, want 18", got)
	}

	// Disabled: no change in that direction.
	off := rules(0, autoscalingv2.DisabledPolicySelect, autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 15})
	if got, _, _, _ = newHistory().normalizeWithBehavior("d", 9, limits{1, 20, 5}, off, down, t0); got != 5 {
		t.Errorf("scale up disabled: %d, want 5", got)
	}

	// A scale-up window holds the lowest recent recommendation.
	slowUp := rules(60, autoscalingv2.MaxChangePolicySelect, autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PodsScalingPolicy, Value: 100, PeriodSeconds: 15})
	h3 := newHistory()
	h3.recordInitial("u", 2, t0)
	got, able, _, _ = h3.normalizeWithBehavior("u", 8, limits{1, 20, 2}, slowUp, down, t0.Add(10*time.Second))
	if got != 2 || able.reason != "ScaleUpStabilized" {
		t.Errorf("within the scale-up window: %d %v", got, able)
	}
}

// Upstream's scale-up limit: Percent rounds up, Pods adds, Max picks the
// larger; periods count the changes made within them.
func TestScaleLimits(t *testing.T) {
	r := hparegistry.ScaleUpRules()
	if got := scaleUpLimitOf(1, nil, nil, r, t0); got != 5 {
		t.Errorf("from 1: %d, want 5 (4 pods beat 100 %%)", got)
	}
	if got := scaleUpLimitOf(10, nil, nil, r, t0); got != 20 {
		t.Errorf("from 10: %d, want 20", got)
	}
	ups := []scaleEvent{{change: 5, at: t0.Add(-10 * time.Second)}}
	if got := scaleUpLimitOf(10, ups, nil, r, t0); got != 10 {
		t.Errorf("after +5 within the period: %d, want 10 (from 5)", got)
	}
	d := hparegistry.ScaleDownRules()
	if got := scaleDownLimitOf(10, nil, nil, d, t0); got != 0 {
		t.Errorf("scale down from 10: %d, want 0", got)
	}
}
