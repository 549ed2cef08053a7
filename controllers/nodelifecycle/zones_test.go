package nodelifecycle

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestComputeZoneState(t *testing.T) {
	for _, tc := range []struct {
		ready, notReady int
		want            zoneState
	}{
		{0, 0, stateNormal},
		{1, 0, stateNormal},
		{0, 1, stateFullDisruption}, // the single-node edge box
		{0, 3, stateFullDisruption},
		{1, 2, stateNormal},            // 2/3 ≥ 0.55, but not more than 2 down
		{4, 6, statePartialDisruption}, // 0.6
		{5, 5, stateNormal},            // 0.5
		{9, 11, stateNormal},           // 0.55 exactly is partial? 11/20 = 0.55
		{22, 28, statePartialDisruption},
		{7, 3, stateNormal},
	} {
		want := tc.want
		if tc.ready == 9 {
			want = statePartialDisruption // at least the threshold
		}
		if got := computeZoneState(tc.ready, tc.notReady, 0.55); got != want {
			t.Errorf("%d ready, %d not: %s, want %s", tc.ready, tc.notReady, got, want)
		}
	}
}

func TestZoneRate(t *testing.T) {
	c := Config{}
	c.defaults()
	for _, tc := range []struct {
		state zoneState
		size  int
		want  float64
	}{
		{stateNormal, 3, 0.1},
		{stateNormal, 100, 0.1},
		{stateFullDisruption, 3, 0.1},
		{stateFullDisruption, 100, 0.1},
		{statePartialDisruption, 50, 0}, // at most the large-cluster threshold: stop
		{statePartialDisruption, 51, 0.01},
		{statePartialDisruption, 100, 0.01},
	} {
		if got := c.zoneRate(tc.state, tc.size); got != tc.want {
			t.Errorf("%s in %d nodes: %v, want %v", tc.state, tc.size, got, tc.want)
		}
	}
}

// The limiter lets one node through per 1/rate seconds, burst 1; a zero
// rate never does.
func TestEvictionLimiter(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	l := newEvictionLimiter(0.1, clk)
	var got []int
	for s := 0; s <= 30; s++ {
		for l.limiter.TryAccept() {
			got = append(got, s)
		}
		clk.Step(time.Second)
	}
	if want := []int{0, 10, 20, 30}; !cmp.Equal(got, want) {
		t.Errorf("0.1/s accepted at %v, want %v", got, want)
	}
	l.setRate(0, clk)
	for s := 0; s < 1000; s += 10 {
		if l.limiter.TryAccept() {
			t.Fatalf("rate 0 accepted at %ds", s)
		}
		clk.Step(10 * time.Second)
	}
	l.setRate(0.01, clk)
	got = nil
	for s := 0; s <= 200; s++ {
		if l.limiter.TryAccept() {
			got = append(got, s)
		}
		clk.Step(time.Second)
	}
	if want := []int{0, 100, 200}; !cmp.Equal(got, want) {
		t.Errorf("0.01/s accepted at %v, want %v", got, want)
	}
}

// cluster builds zones of nodes "<zone>-NN", all Ready, and runs a pass.
func (e *env) cluster(zones map[string]int) {
	for z, n := range zones {
		for _, name := range names(z+"-", n) {
			e.addNode(name, z, corev1.ConditionTrue)
		}
	}
	e.step(0)
}

// kill stops heartbeats, then steps to the pass where the nodes are
// Unknown (45 s).
func (e *env) kill(nodes ...string) {
	for _, n := range nodes {
		e.alive[n] = false
	}
	for i := 0; i < 9; i++ {
		e.step(5 * time.Second)
	}
	for _, n := range nodes {
		if s := readyStatus(e.node(n)); s != corev1.ConditionUnknown {
			e.t.Fatalf("node %s Ready %s 45 s after its last heartbeat", n, s)
		}
		if !hasTaint(e.node(n), corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule) {
			e.t.Fatalf("node %s has no unreachable:NoSchedule taint", n)
		}
	}
}

// taintTimeline steps 5 s at a time for d and returns how many nodes
// carry a NoExecute taint after each pass, starting with now.
func (e *env) taintTimeline(d time.Duration) []int {
	out := []int{len(e.noExecuteTainted())}
	for t := time.Duration(0); t < d; t += 5 * time.Second {
		e.step(5 * time.Second)
		out = append(out, len(e.noExecuteTainted()))
	}
	return out
}

// E-01: 3 of 10 nodes die in a healthy zone: NoExecute taints (the
// start of their evictions) at t0, t0+10 s, t0+20 s.
func TestEvictionRateNormalZone(t *testing.T) {
	e := newEnv(t, nil)
	e.cluster(map[string]int{"z": 10})
	e.kill("z-00", "z-01", "z-02")
	if got, want := e.taintTimeline(25*time.Second), []int{1, 1, 2, 2, 3, 3}; !cmp.Equal(got, want) {
		t.Errorf("NoExecute-tainted nodes every 5 s: %v, want %v", got, want)
	}
}

// Z-15: 2 of 3 nodes down is not a partial disruption (not more than
// 2 down): evictions go on at 0.1/s.
func TestTwoOfThreeDownIsNormal(t *testing.T) {
	e := newEnv(t, nil)
	e.cluster(map[string]int{"z": 3})
	e.kill("z-00", "z-01")
	if got, want := e.taintTimeline(10*time.Second), []int{1, 1, 2}; !cmp.Equal(got, want) {
		t.Errorf("NoExecute-tainted nodes every 5 s: %v, want %v", got, want)
	}
}

// Each zone has its own bucket: a node down in each of two zones is
// tainted in the same pass.
func TestRatePerZone(t *testing.T) {
	e := newEnv(t, nil)
	e.cluster(map[string]int{"a": 3, "b": 3})
	e.kill("a-00", "b-00")
	if got := e.noExecuteTainted(); !cmp.Equal(got, []string{"a-00", "b-00"}) {
		t.Errorf("NoExecute-tainted: %v", got)
	}
}

// E-04: 6 of 10 nodes down (0.6 ≥ 0.55) in a cluster of at most 50
// nodes: no evictions at all.
func TestPartialDisruptionSmallCluster(t *testing.T) {
	e := newEnv(t, nil)
	e.cluster(map[string]int{"z": 10})
	e.kill(names("z-", 6)...)
	if got := e.taintTimeline(2 * time.Minute); got[len(got)-1] != 0 {
		t.Errorf("NoExecute-tainted nodes every 5 s: %v, want none", got)
	}
	if s := e.c.zones[zoneOf(e.node("z-00"))]; s != statePartialDisruption {
		t.Errorf("zone state %s", s)
	}
}

// E-05, Z-14: a partially disrupted zone of a 51-node cluster (29 down,
// 0.57) evicts at 0.01/s; the same in a 50-node cluster (28 down, 0.56)
// evicts nothing.
func TestPartialDisruptionLargeCluster(t *testing.T) {
	for _, tc := range []struct {
		nodes, down int
		want        []int // tainted nodes at 0, 50, 100 s
	}{
		{51, 29, []int{1, 1, 2}},
		{50, 28, []int{0, 0, 0}},
	} {
		t.Run(fmt.Sprint(tc.nodes), func(t *testing.T) {
			e := newEnv(t, nil)
			e.cluster(map[string]int{"z": tc.nodes})
			e.kill(names("z-", tc.down)...)
			got := []int{len(e.noExecuteTainted())}
			for i := 0; i < 2; i++ {
				for j := 0; j < 10; j++ {
					e.step(5 * time.Second)
				}
				got = append(got, len(e.noExecuteTainted()))
			}
			if !cmp.Equal(got, tc.want) {
				t.Errorf("NoExecute-tainted nodes at 0, 50, 100 s: %v, want %v", got, tc.want)
			}
		})
	}
}

// E-07: a zone with every node down, while another zone is healthy,
// evicts at the normal rate.
func TestFullDisruptionOneZone(t *testing.T) {
	e := newEnv(t, nil)
	e.cluster(map[string]int{"a": 2, "b": 3})
	e.kill("a-00", "a-01")
	if s := e.c.zones[zoneOf(e.node("a-00"))]; s != stateFullDisruption {
		t.Errorf("zone a: %s", s)
	}
	if got, want := e.taintTimeline(10*time.Second), []int{1, 1, 2}; !cmp.Equal(got, want) {
		t.Errorf("NoExecute-tainted nodes every 5 s: %v, want %v", got, want)
	}
}

// E-08: a single-node edge box whose heartbeats stall: Unknown and
// unreachable:NoSchedule, but no NoExecute taint and its pods stay.
func TestSingleNodeNeverEvicts(t *testing.T) {
	e := newEnv(t, nil)
	e.addNode("edge", "", corev1.ConditionTrue)
	e.step(0)
	e.addPod("app", "edge")
	e.kill("edge")
	if got := e.taintTimeline(10 * time.Minute); got[len(got)-1] != 0 {
		t.Errorf("NoExecute taints on the only node: %v", got)
	}
	e.waitPod("app", "False")
	e.stillPod("app", "False")
	if got, want := e.taints("edge"), []string{"node.kubernetes.io/unreachable:NoSchedule"}; !cmp.Equal(got, want) {
		t.Errorf("taints %v, want %v", got, want)
	}
}

// E-08, E-09: every zone fully down takes the NoExecute taints off and
// evicts nothing; once a node is back, the others are tainted again at
// 0.1/s.
func TestAllZonesFullDisruption(t *testing.T) {
	e := newEnv(t, nil)
	e.cluster(map[string]int{"a": 3})
	e.kill("a-00")
	if got := e.noExecuteTainted(); !cmp.Equal(got, []string{"a-00"}) {
		t.Fatalf("NoExecute-tainted: %v", got)
	}
	e.addPod("app", "a-01")
	e.kill("a-01", "a-02")
	if got := e.noExecuteTainted(); len(got) != 0 {
		t.Errorf("NoExecute taints with every zone down: %v", got)
	}
	if !e.c.allDisrupted {
		t.Error("not in all-zones-down mode")
	}
	e.waitPod("app", "False")
	e.clock.Step(10 * time.Minute)
	e.stillPod("app", "False")

	// a-02 comes back: a-00 and a-01 are tainted again, 10 s apart.
	e.alive["a-02"] = true
	e.postStatus("a-02", corev1.ConditionTrue)
	if got, want := e.taintTimeline(15*time.Second), []int{0, 1, 1, 2}; !cmp.Equal(got, want) {
		t.Errorf("NoExecute-tainted nodes every 5 s after recovery: %v, want %v", got, want)
	}
	if got := e.noExecuteTainted(); !cmp.Equal(got, []string{"a-00", "a-01"}) {
		t.Errorf("NoExecute-tainted: %v", got)
	}
	e.clock.Step(300 * time.Second)
	e.waitPodDue("app", "terminating")
}
