package kubelet

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestShutdownGroups(t *testing.T) {
	s := time.Second
	// 30 s with 10 s for critical pods: regular pods get the first 20 s,
	// critical pods the last 10 s.
	g, err := ShutdownGroups(30*s, 10*s, nil)
	if err != nil || !slices.Equal(g, []ShutdownGroup{{0, 20 * s}, {systemCriticalPriority, 10 * s}}) {
		t.Fatalf("30s/10s: %v, %v", g, err)
	}
	if g, err := ShutdownGroups(30*s, 0, nil); err != nil || !slices.Equal(g, []ShutdownGroup{{0, 30 * s}, {systemCriticalPriority, 0}}) {
		t.Fatalf("30s/0: %v, %v", g, err)
	}
	if g, err := ShutdownGroups(0, 0, nil); err != nil || g != nil {
		t.Fatalf("off: %v, %v", g, err)
	}
	// By priority, sorted lowest first.
	by := []ShutdownGroup{{100000, 10 * s}, {0, 60 * s}, {10000, 180 * s}, {1000, 120 * s}}
	g, err = ShutdownGroups(0, 0, by)
	if err != nil || !slices.Equal(g, []ShutdownGroup{{0, 60 * s}, {1000, 120 * s}, {10000, 180 * s}, {100000, 10 * s}}) {
		t.Fatalf("by priority: %v, %v", g, err)
	}
	if shutdownTotal(g) != 370*s {
		t.Fatalf("total %v", shutdownTotal(g))
	}
	for _, c := range []struct {
		grace, critical time.Duration
		by              []ShutdownGroup
		want            string
	}{
		{10 * s, 10 * s, nil, "must be less than shutdownGracePeriod"},
		{10 * s, 20 * s, nil, "must be less than shutdownGracePeriod"},
		{0, 5 * s, nil, "needs a shutdownGracePeriod"},
		{-s, 0, nil, "must not be negative"},
		{10 * s, 0, by, "cannot be set together"},
		{0, 0, []ShutdownGroup{{5, s}, {5, 2 * s}}, "listed twice"},
		{0, 0, []ShutdownGroup{{5, -s}}, "negative period"},
	} {
		if _, err := ShutdownGroups(c.grace, c.critical, c.by); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ShutdownGroups(%v, %v, %v) = %v, want %q", c.grace, c.critical, c.by, err, c.want)
		}
	}
}

func TestShutdownGroupOf(t *testing.T) {
	s := time.Second
	// The reference's ranges: >= 100000 → 10 s, 10000-99999 → 180 s,
	// 1000-9999 → 120 s, the rest → 60 s.
	g, _ := ShutdownGroups(0, 0, []ShutdownGroup{{100000, 10 * s}, {10000, 180 * s}, {1000, 120 * s}, {0, 60 * s}})
	for prio, want := range map[int32]time.Duration{
		2000001000: 10 * s, 100000: 10 * s, 99999: 180 * s, 10000: 180 * s, 9999: 120 * s, 1000: 120 * s, 999: 60 * s, 0: 60 * s, -5: 60 * s,
	} {
		if got := g[groupOf(g, prio)].Period; got != want {
			t.Errorf("priority %d: %v, want %v", prio, got, want)
		}
	}
	// Not every class needs an entry: 10000 and 1000 share 1000's range.
	g, _ = ShutdownGroups(0, 0, []ShutdownGroup{{100000, 300 * s}, {1000, 120 * s}, {0, 60 * s}})
	if a, b := groupOf(g, 10000), groupOf(g, 1000); a != b || g[a].Period != 120*s {
		t.Errorf("10000 in group %d, 1000 in group %d", a, b)
	}
	// Two phases: system-node-critical (2000001000) and
	// system-cluster-critical (2000000000) are critical, the rest regular.
	g, _ = ShutdownGroups(30*s, 10*s, nil)
	if groupOf(g, 2000001000) != 1 || groupOf(g, 2000000000) != 1 || groupOf(g, 1999999999) != 0 || groupOf(g, 0) != 0 {
		t.Error("critical pods are not in the last phase")
	}
}
