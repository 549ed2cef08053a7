package replicaset

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// slowStartBatch doubles its batches and stops after the first batch
// with a failure.
func TestSlowStartBatch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		count, failAt int // calls numbered from 1; 0 never fails
		wantCalls     int
		wantSuccesses int
		wantErr       bool
	}{
		{"all succeed", 10, 0, 10, 10, false},
		{"first fails", 10, 1, 1, 0, true},
		// Batches 1, 2, then 4: calls from the 4th fail; the batch of 4
		// runs out, and no batch follows.
		{"fourth fails", 10, 4, 7, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			ok, err := slowStartBatch(tc.count, 1, func() error {
				if n := int(calls.Add(1)); tc.failAt > 0 && n >= tc.failAt {
					return errors.New("refused")
				}
				return nil
			})
			if int(calls.Load()) != tc.wantCalls || ok != tc.wantSuccesses || (err != nil) != tc.wantErr {
				t.Fatalf("calls %d successes %d err %v; want %d %d err %v", calls.Load(), ok, err, tc.wantCalls, tc.wantSuccesses, tc.wantErr)
			}
		})
	}
}

// podsToDelete prefers, in order: unscheduled, pending, not ready,
// lower deletion cost, doubled up on a node, ready for less time, more
// restarts, newer.
func TestDeletionOrder(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	pod := func(name string, mods ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), CreationTimestamp: at(100 * time.Hour)},
			Spec: corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at(100 * time.Hour)}}}}
		for _, m := range mods {
			m(p)
		}
		return p
	}
	unscheduled := func(p *corev1.Pod) {
		p.Spec.NodeName = ""
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = nil
	}
	pending := func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending; p.Status.Conditions = nil }
	notReady := func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
	cost := func(c string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Annotations = map[string]string{podDeletionCostAnnotation: c} }
	}
	onNode := func(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }
	readyFor := func(d time.Duration) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Status.Conditions[0].LastTransitionTime = at(d) }
	}
	restarts := func(p *corev1.Pod) { p.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: 3}} }
	created := func(d time.Duration) func(*corev1.Pod) { return func(p *corev1.Pod) { p.CreationTimestamp = at(d) } }

	for _, tc := range []struct {
		name     string
		pods     []*corev1.Pod
		related  []*corev1.Pod
		wantName string
	}{
		{"unscheduled first", []*corev1.Pod{pod("a", pending), pod("b", unscheduled)}, nil, "b"},
		{"pending before running", []*corev1.Pod{pod("a"), pod("b", pending)}, nil, "b"},
		{"not ready before ready", []*corev1.Pod{pod("a"), pod("b", notReady)}, nil, "b"},
		{"lower deletion cost", []*corev1.Pod{pod("a", cost("10"), notReady), pod("b", cost("-5"), notReady)}, nil, "b"},
		{"doubled up", []*corev1.Pod{pod("a", onNode("n1")), pod("b", onNode("n2"))},
			[]*corev1.Pod{pod("x", onNode("n2")), pod("y", onNode("n2")), pod("z", onNode("n1"))}, "b"},
		{"ready for less time", []*corev1.Pod{pod("a", readyFor(10*time.Hour)), pod("b", readyFor(time.Minute))}, nil, "b"},
		{"more restarts", []*corev1.Pod{pod("a"), pod("b", restarts)}, nil, "b"},
		{"newer", []*corev1.Pod{pod("a", created(50*time.Hour)), pod("b", created(time.Minute))}, nil, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Either order in: the ranking, not the input, decides.
			for _, pods := range [][]*corev1.Pod{tc.pods, {tc.pods[1], tc.pods[0]}} {
				got := podsToDelete(pods, tc.related, 1, now)
				if diff := cmp.Diff(tc.wantName, got[0].Name); diff != "" {
					t.Fatalf("deleted (-want +got): %s", diff)
				}
			}
		})
	}
}
