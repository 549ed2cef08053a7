package metricsapi

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// CPU is the rate between the last two points; the same point again
// changes nothing, and a counter that went back (a restarted container)
// has no rate until the next point.
func TestSeriesRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		cpuNs, memory uint64
		at            time.Duration
		wantOK        bool
		wantNanoCores uint64
		wantMemory    uint64
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"two points", []step{{1e9, 10, 0, false, 0, 0}, {3e9, 20, 10 * time.Second, true, 2e8, 20}}},
		{"same sample again", []step{{1e9, 10, 0, false, 0, 0}, {3e9, 20, 10 * time.Second, true, 2e8, 20}, {3e9, 20, 10 * time.Second, true, 2e8, 20}}},
		{"older sample", []step{{1e9, 10, 0, false, 0, 0}, {3e9, 20, 10 * time.Second, true, 2e8, 20}, {2e9, 5, 5 * time.Second, true, 2e8, 20}}},
		{"three points", []step{{1e9, 10, 0, false, 0, 0}, {3e9, 20, 10 * time.Second, true, 2e8, 20}, {3.5e9, 30, 15 * time.Second, true, 1e8, 30}}},
		{"counter reset", []step{{5e9, 10, 0, false, 0, 0}, {1e9, 20, 10 * time.Second, false, 0, 0}, {2e9, 30, 20 * time.Second, true, 1e8, 30}}},
		{"idle", []step{{1e9, 10, 0, false, 0, 0}, {1e9, 10, 15 * time.Second, true, 0, 10}}},
	} {
		var s series
		for i, st := range tc.steps {
			s.add(point{cpuNs: st.cpuNs, memory: st.memory, at: t0.Add(st.at)})
			cpu, mem, ok := s.usage()
			if ok != st.wantOK || cpu != st.wantNanoCores || mem != st.wantMemory {
				t.Errorf("%s, step %d: usage %d %d %v, want %d %d %v", tc.name, i, cpu, mem, ok, st.wantNanoCores, st.wantMemory, st.wantOK)
			}
		}
	}
	var none *series
	if _, _, ok := none.usage(); ok {
		t.Error("no series has a usage")
	}
}

func TestSimulatedUsage(t *testing.T) {
	for _, tc := range []struct {
		requests    corev1.ResourceList
		cpu, memory uint64
	}{
		{nil, 1e6, 4 << 20},
		{corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}, 1e8, 4 << 20},
		{corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}, 1e9, 1 << 30},
	} {
		cpu, mem := simulatedUsage(corev1.Container{Resources: corev1.ResourceRequirements{Requests: tc.requests}})
		if cpu != tc.cpu || mem != tc.memory {
			t.Errorf("requests %v: %d nanocores %d bytes, want %d %d", tc.requests, cpu, mem, tc.cpu, tc.memory)
		}
	}
}
