package scheduler

import (
	"container/heap"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// The scheduling queue is kube-scheduler's three queues: active pods wait
// for the scheduling loop (highest priority first, then oldest); pods that
// failed wait out a back-off (1 s doubling to 10 s); pods that fit nowhere
// wait as unschedulable until a cluster event that could make them fit
// (a node added or changed, a pod deleted) moves them back.

type podLocation int

const (
	inActive podLocation = iota
	inBackoff
	inUnschedulable
	inFlight
)

type queuedPod struct {
	pod       *corev1.Pod
	key       string
	priority  int32
	timestamp time.Time // first queued, for FIFO among equal priorities
	attempts  int
	backoffTo time.Time
	// unschedSince is when it was parked as unschedulable.
	unschedSince time.Time
	where        podLocation
	index        int // in its heap
	// cycle is the scheduling cycle that popped it; an event moving pods
	// during that cycle sends it to back-off rather than unschedulable.
	cycle int64
	// changed or gone while its cycle ran.
	updated, deleted bool
}

type schedulingQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	active  activeHeap
	backoff backoffHeap
	unsched map[string]*queuedPod
	pods    map[string]*queuedPod
	cycle   int64
	// moveCycle is the cycle during which pods were last moved by an event.
	moveCycle      int64
	initialBackoff time.Duration
	maxBackoff     time.Duration
	// maxUnschedulable is how long a pod stays unschedulable with no event
	// before it is retried anyway (Kubernetes: 5 min).
	maxUnschedulable time.Duration
	closed           bool
	now              func() time.Time
}

func newSchedulingQueue(initial, max time.Duration) *schedulingQueue {
	q := &schedulingQueue{
		unsched:          map[string]*queuedPod{},
		pods:             map[string]*queuedPod{},
		initialBackoff:   initial,
		maxBackoff:       max,
		maxUnschedulable: 5 * time.Minute,
		now:              time.Now,
		cycle:            1,
	}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// add queues a new pending pod, or refreshes a queued one: an
// unschedulable pod whose spec or labels changed is worth another try.
func (q *schedulingQueue) add(p *corev1.Pod) { q.update(p, true) }

// update refreshes a queued pod; changed is false when only its status
// moved (this scheduler's own PodScheduled condition, say), which cannot
// make it fit.
func (q *schedulingQueue) update(p *corev1.Pod, changed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := podKey(p)
	if qp := q.pods[key]; qp != nil {
		if qp.pod.UID != p.UID {
			q.removeLocked(qp)
		} else {
			qp.pod = p
			qp.priority = corev1helpers.PodPriority(p)
			switch qp.where {
			case inFlight:
				qp.updated = true
			case inActive:
				heap.Fix(&q.active, qp.index)
			case inUnschedulable:
				if changed {
					delete(q.unsched, key)
					q.toActiveOrBackoffLocked(qp)
				}
			}
			return
		}
	}
	qp := &queuedPod{pod: p, key: key, priority: corev1helpers.PodPriority(p), timestamp: q.now()}
	q.pods[key] = qp
	q.pushActiveLocked(qp)
}

func (q *schedulingQueue) delete(p *corev1.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if qp := q.pods[podKey(p)]; qp != nil && qp.pod.UID == p.UID {
		q.removeLocked(qp)
	}
}

func (q *schedulingQueue) removeLocked(qp *queuedPod) {
	delete(q.pods, qp.key)
	switch qp.where {
	case inActive:
		heap.Remove(&q.active, qp.index)
	case inBackoff:
		heap.Remove(&q.backoff, qp.index)
	case inUnschedulable:
		delete(q.unsched, qp.key)
	case inFlight:
		qp.deleted = true
	}
}

func (q *schedulingQueue) pushActiveLocked(qp *queuedPod) {
	qp.where = inActive
	heap.Push(&q.active, qp)
	q.cond.Signal()
}

func (q *schedulingQueue) toActiveOrBackoffLocked(qp *queuedPod) {
	if qp.backoffTo.After(q.now()) {
		qp.where = inBackoff
		heap.Push(&q.backoff, qp)
		return
	}
	q.pushActiveLocked(qp)
}

// pop waits for the next pod to schedule; nil once the queue is closed.
func (q *schedulingQueue) pop() *queuedPod {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.active.Len() == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return nil
	}
	qp := heap.Pop(&q.active).(*queuedPod)
	qp.where = inFlight
	qp.updated = false
	q.cycle++
	qp.cycle = q.cycle
	return qp
}

// done drops a pod the scheduler has placed.
func (q *schedulingQueue) done(qp *queuedPod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pods[qp.key] == qp {
		delete(q.pods, qp.key)
	}
}

func (q *schedulingQueue) backoffFor(attempts int) time.Duration {
	d := q.initialBackoff
	for i := 1; i < attempts && d < q.maxBackoff; i++ {
		d *= 2
	}
	return min(d, q.maxBackoff)
}

// requeue puts back a pod whose cycle failed. Unschedulable pods wait for
// an event, unless one came while they were being tried; errors (a failed
// binding) only back off.
func (q *schedulingQueue) requeue(qp *queuedPod, unschedulable bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if qp.deleted || q.pods[qp.key] != qp {
		return
	}
	qp.attempts++
	now := q.now()
	qp.backoffTo = now.Add(q.backoffFor(qp.attempts))
	if unschedulable && !qp.updated && q.moveCycle < qp.cycle {
		qp.where = inUnschedulable
		qp.unschedSince = now
		q.unsched[qp.key] = qp
		return
	}
	qp.where = inBackoff
	heap.Push(&q.backoff, qp)
}

// moveAll sends unschedulable pods back to be tried, after a cluster event
// that may make them fit.
func (q *schedulingQueue) moveAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.moveCycle = q.cycle
	for key, qp := range q.unsched {
		delete(q.unsched, key)
		q.toActiveOrBackoffLocked(qp)
	}
}

// flush moves pods whose back-off is over to active, and pods left
// unschedulable too long back to be tried.
func (q *schedulingQueue) flush() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	for q.backoff.Len() > 0 && !q.backoff[0].backoffTo.After(now) {
		qp := heap.Pop(&q.backoff).(*queuedPod)
		q.pushActiveLocked(qp)
	}
	for key, qp := range q.unsched {
		if now.Sub(qp.unschedSince) >= q.maxUnschedulable {
			delete(q.unsched, key)
			q.toActiveOrBackoffLocked(qp)
		}
	}
}

func (q *schedulingQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// lengths reports the three queues' sizes (tests and logs).
func (q *schedulingQueue) lengths() (active, backoff, unsched int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.active.Len(), q.backoff.Len(), len(q.unsched)
}

type activeHeap []*queuedPod

func (h activeHeap) Len() int { return len(h) }
func (h activeHeap) Less(i, j int) bool {
	if h[i].priority != h[j].priority {
		return h[i].priority > h[j].priority
	}
	return h[i].timestamp.Before(h[j].timestamp)
}
func (h activeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *activeHeap) Push(x any)   { qp := x.(*queuedPod); qp.index = len(*h); *h = append(*h, qp) }
func (h *activeHeap) Pop() any {
	old := *h
	n := len(old) - 1
	qp := old[n]
	old[n] = nil
	*h = old[:n]
	return qp
}

type backoffHeap []*queuedPod

func (h backoffHeap) Len() int           { return len(h) }
func (h backoffHeap) Less(i, j int) bool { return h[i].backoffTo.Before(h[j].backoffTo) }
func (h backoffHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *backoffHeap) Push(x any)        { qp := x.(*queuedPod); qp.index = len(*h); *h = append(*h, qp) }
func (h *backoffHeap) Pop() any {
	old := *h
	n := len(old) - 1
	qp := old[n]
	old[n] = nil
	*h = old[:n]
	return qp
}
