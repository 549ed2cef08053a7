package scheduler

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeClock is the queue's clock, moved by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func queuedTestPod(name string, prio int32) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}, Spec: corev1.PodSpec{Priority: &prio}}
}

func newTestQueue() (*schedulingQueue, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	q := newSchedulingQueue(time.Second, 10*time.Second)
	q.now = clk.now
	return q, clk
}

func TestQueueOrder(t *testing.T) {
	q, clk := newTestQueue()
	for _, p := range []struct {
		name string
		prio int32
	}{{"low-old", 0}, {"high", 100}, {"low-new", 0}} {
		q.add(queuedTestPod(p.name, p.prio))
		clk.t = clk.t.Add(time.Millisecond)
	}
	var got []string
	for range 3 {
		got = append(got, q.pop().pod.Name)
	}
	want := []string{"high", "low-old", "low-new"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("popped %v, want %v", got, want)
		}
	}
}

func TestQueueBackoffDoublesToTen(t *testing.T) {
	q, _ := newTestQueue()
	var got []time.Duration
	for a := 1; a <= 6; a++ {
		got = append(got, q.backoffFor(a))
	}
	want := []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("back-offs %v, want %v", got, want)
		}
	}
}

func TestQueueUnschedulableWaitsForEvent(t *testing.T) {
	q, clk := newTestQueue()
	q.add(queuedTestPod("p", 0))
	qp := q.pop()
	q.requeue(qp, true)
	if a, b, u := q.lengths(); a != 0 || b != 0 || u != 1 {
		t.Fatalf("after failure: active %d backoff %d unschedulable %d, want 0 0 1", a, b, u)
	}
	// Time alone (short of 5 minutes) does not retry it.
	clk.t = clk.t.Add(time.Minute)
	q.flush()
	if a, _, u := q.lengths(); a != 0 || u != 1 {
		t.Fatalf("retried without an event")
	}
	// An event does, at once once its back-off is over.
	q.moveAll()
	if a, _, u := q.lengths(); a != 1 || u != 0 {
		t.Fatalf("after event: active %d unschedulable %d, want 1 0", a, u)
	}
	// Failing again within back-off and then an event: back-off first.
	qp = q.pop()
	q.requeue(qp, true)
	q.moveAll()
	if a, b, _ := q.lengths(); a != 0 || b != 1 {
		t.Fatalf("event during back-off: active %d backoff %d, want 0 1", a, b)
	}
	clk.t = clk.t.Add(2 * time.Second)
	q.flush()
	if a, b, _ := q.lengths(); a != 1 || b != 0 {
		t.Fatalf("after back-off: active %d backoff %d, want 1 0", a, b)
	}
	// Five minutes with no event: tried anyway.
	qp = q.pop()
	q.requeue(qp, true)
	clk.t = clk.t.Add(5 * time.Minute)
	q.flush()
	if a, _, _ := q.lengths(); a != 1 {
		t.Fatalf("not retried after 5 minutes unschedulable")
	}
}

// An event while a pod is being tried may be the one it needed: it goes
// to back-off, not to wait for another event.
func TestQueueEventDuringCycle(t *testing.T) {
	q, _ := newTestQueue()
	q.add(queuedTestPod("p", 0))
	qp := q.pop()
	q.moveAll()
	q.requeue(qp, true)
	if _, b, u := q.lengths(); b != 1 || u != 0 {
		t.Fatalf("backoff %d unschedulable %d, want 1 0", b, u)
	}
}

func TestQueueDeleteAndUpdate(t *testing.T) {
	q, _ := newTestQueue()
	p := queuedTestPod("p", 0)
	q.add(p)
	qp := q.pop()
	q.requeue(qp, true)
	// An update to an unschedulable pod retries it.
	q.add(p.DeepCopy())
	if a, b, u := q.lengths(); a+b != 1 || u != 0 {
		t.Fatalf("update did not move the pod: active %d backoff %d unschedulable %d", a, b, u)
	}
	q.delete(p)
	if a, b, u := q.lengths(); a+b+u != 0 {
		t.Fatalf("deleted pod still queued")
	}
	// A pod deleted while in flight is not requeued.
	q.add(p)
	qp = q.pop()
	q.delete(p)
	q.requeue(qp, true)
	if a, b, u := q.lengths(); a+b+u != 0 {
		t.Fatalf("pod deleted in flight was requeued")
	}
}

// A status-only update (the scheduler's own PodScheduled condition) does
// not retry an unschedulable pod; a spec or label change does.
func TestQueueStatusUpdateDoesNotRetry(t *testing.T) {
	q, _ := newTestQueue()
	p := queuedTestPod("p", 0)
	q.add(p)
	q.requeue(q.pop(), true)
	q.update(p.DeepCopy(), false)
	if a, b, u := q.lengths(); a+b != 0 || u != 1 {
		t.Fatalf("status update moved the pod: active %d backoff %d unschedulable %d", a, b, u)
	}
	q.update(p.DeepCopy(), true)
	if _, _, u := q.lengths(); u != 0 {
		t.Fatalf("spec update left the pod unschedulable")
	}
}
