package podautoscaler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// testPod is a Running pod that started long ago and has been ready
// since, requesting req milli-CPU.
func testPod(name string, req int64, mod ...func(*corev1.Pod)) *corev1.Pod {
	start := metav1.NewTime(t0.Add(-time.Hour))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(req, resource.DecimalSI)},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: start},
		}},
	}
	for _, m := range mod {
		m(p)
	}
	return p
}

func usage(values map[string]int64) podMetrics {
	out := podMetrics{}
	for n, v := range values {
		out[n] = podMetric{Timestamp: t0.Add(-5 * time.Second), Window: 15 * time.Second, Value: v}
	}
	return out
}

var defaultCalc = replicaCalc{tolerances: tolerances{0.1, 0.1}, readiness: readiness{5 * time.Minute, 30 * time.Second}, now: t0}

// The replica count follows upstream's calculator: ceil(ready pods ×
// utilization / target) outside the 10 % tolerance; missing pods count
// as using their whole request on a scale down and nothing on a scale
// up; unready pods count as nothing on a scale up; a guess that turns
// the direction keeps the count.
func TestUtilizationReplicas(t *testing.T) {
	young := func(p *corev1.Pod) {
		start := metav1.NewTime(t0.Add(-time.Minute))
		p.Status.StartTime = &start
		p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-10 * time.Second)) // ready for less than a window
	}
	for _, tc := range []struct {
		name     string
		current  int32
		target   int32
		pods     []*corev1.Pod
		metrics  map[string]int64
		want     int32
		wantUtil int32
		wantErr  string
	}{
		{name: "within tolerance", current: 2, target: 50, pods: []*corev1.Pod{testPod("a", 100), testPod("b", 100)},
			metrics: map[string]int64{"a": 52, "b": 56}, want: 2, wantUtil: 54},
		{name: "scale up", current: 1, target: 50, pods: []*corev1.Pod{testPod("a", 100)},
			metrics: map[string]int64{"a": 200}, want: 4, wantUtil: 200},
		{name: "scale down", current: 3, target: 50, pods: []*corev1.Pod{testPod("a", 100), testPod("b", 100), testPod("c", 100)},
			metrics: map[string]int64{"a": 10, "b": 10, "c": 10}, want: 1, wantUtil: 10},
		{name: "missing pod counts as its request on a scale down", current: 3, target: 50, pods: []*corev1.Pod{testPod("a", 100), testPod("b", 100), testPod("c", 100)},
			metrics: map[string]int64{"a": 0, "b": 0}, want: 2, wantUtil: 0},
		{name: "missing pod counts as nothing on a scale up", current: 2, target: 50, pods: []*corev1.Pod{testPod("a", 100), testPod("b", 100)},
			metrics: map[string]int64{"a": 200}, want: 4, wantUtil: 200},
		{name: "young pod without a window since ready is unready, counts as nothing on a scale up", current: 2, target: 50,
			pods: []*corev1.Pod{testPod("a", 100), testPod("b", 100, young)}, metrics: map[string]int64{"a": 150, "b": 300}, want: 3, wantUtil: 150},
		{name: "unready pod ignored on a scale down", current: 2, target: 50,
			pods: []*corev1.Pod{testPod("a", 100), testPod("b", 100, young)}, metrics: map[string]int64{"a": 10, "b": 300}, want: 1, wantUtil: 10},
		{name: "pending pods are unready", current: 2, target: 50,
			pods:    []*corev1.Pod{testPod("a", 100), testPod("b", 100, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })},
			metrics: map[string]int64{"a": 60}, want: 2, wantUtil: 60},
		{name: "failed and deleted pods are ignored", current: 3, target: 50,
			pods: []*corev1.Pod{testPod("a", 100), testPod("b", 100, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
				testPod("c", 100, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} })},
			metrics: map[string]int64{"a": 100, "b": 100, "c": 100}, want: 2, wantUtil: 100},
		{name: "guess turns the direction: no change", current: 2, target: 50, pods: []*corev1.Pod{testPod("a", 100), testPod("b", 100)},
			metrics: map[string]int64{"a": 40}, want: 2, wantUtil: 40},
		{name: "no request", current: 1, target: 50, pods: []*corev1.Pod{testPod("a", 100, func(p *corev1.Pod) { p.Spec.Containers[0].Resources = corev1.ResourceRequirements{} })},
			metrics: map[string]int64{"a": 10}, wantErr: "missing request for cpu in container main of Pod a"},
		{name: "no figures of ready pods", current: 1, target: 50, pods: []*corev1.Pod{testPod("a", 100, young)},
			metrics: map[string]int64{"a": 10}, wantErr: "did not receive metrics for targeted pods (pods might be unready)"},
		{name: "no pods", current: 1, target: 50, wantErr: "no pods returned by selector while calculating replica count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, util, _, err := defaultCalc.utilizationReplicas(tc.current, tc.target, corev1.ResourceCPU, "", tc.pods, usage(tc.metrics))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || util != tc.wantUtil {
				t.Errorf("replicas %d utilization %d err %v, want %d %d", got, util, err, tc.want, tc.wantUtil)
			}
		})
	}
}

func TestAverageReplicas(t *testing.T) {
	pods := []*corev1.Pod{testPod("a", 100), testPod("b", 100)}
	got, mean, err := defaultCalc.averageReplicas(2, 100, corev1.ResourceCPU, pods, usage(map[string]int64{"a": 300, "b": 100}))
	if err != nil || got != 4 || mean != 200 {
		t.Errorf("average: %d %d %v, want 4 200", got, mean, err)
	}
	got, _, _ = defaultCalc.averageReplicas(2, 100, corev1.ResourceCPU, pods, usage(map[string]int64{"a": 105, "b": 100}))
	if got != 2 {
		t.Errorf("within tolerance: %d, want 2", got)
	}
}

// A behavior's own tolerance replaces the controller's, per direction.
func TestTolerances(t *testing.T) {
	tol := tolerances{scaleDown: 0.1, scaleUp: 0.5}
	for ratio, want := range map[float64]bool{0.85: false, 0.95: true, 1.4: true, 1.6: false} {
		if got := tol.within(ratio); got != want {
			t.Errorf("within(%v) = %v, want %v", ratio, got, want)
		}
	}
}

func Example_groupPods() {
	ready, unready, missing, ignored := groupPods([]*corev1.Pod{testPod("a", 100), testPod("b", 100)}, usage(map[string]int64{"a": 1}), corev1.ResourceCPU, defaultCalc.readiness, t0)
	fmt.Println(ready, len(unready), len(missing), len(ignored))
	// Output: 1 0 1 0
}
