package apiserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/apiserver/params"
)

// Limits bounds what clients may hold of the server at once, as
// kube-apiserver's flags of the same names do. Zero fields take the
// defaults.
type Limits struct {
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight bound the
	// non-long-running reads and writes of the workload level
	// (--max-requests-inflight 400, --max-mutating-requests-inflight 200).
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int
	// RequestTimeout ends a non-long-running request (--request-timeout,
	// 60 s); a client's ?timeout= may shorten it.
	RequestTimeout time.Duration
	// MinRequestTimeout: a watch without timeoutSeconds ends after a
	// random time between it and twice it (--min-request-timeout, 1800 s),
	// so clients spread their relists over time.
	MinRequestTimeout time.Duration
	// MaxWatchesPerUser caps one user's concurrent watches (1000).
	MaxWatchesPerUser int
}

func (l Limits) withDefaults() Limits {
	if l.MaxRequestsInFlight == 0 {
		l.MaxRequestsInFlight = 400
	}
	if l.MaxMutatingRequestsInFlight == 0 {
		l.MaxMutatingRequestsInFlight = 200
	}
	if l.RequestTimeout == 0 {
		l.RequestTimeout = 60 * time.Second
	}
	if l.MinRequestTimeout == 0 {
		l.MinRequestTimeout = 1800 * time.Second
	}
	if l.MaxWatchesPerUser == 0 {
		l.MaxWatchesPerUser = 1000
	}
	return l
}

// priority levels: a minimal priority and fairness. bonsai's own
// components (in-process) and system:masters are exempt, as
// kube-apiserver's exempt level; nodes (their Lease renewals and status)
// have seats of their own that no user traffic can take; everyone else
// shares the workload seats. The workload level out of seats answers 429
// with Retry-After at once, as --max-requests-inflight. The node level
// queues, as kube-apiserver's node-high level does: nodes renew in
// bursts (after a restart, or when their periods line up), and a 429
// would cost each a second's back-off, a tenth of its Lease period.
type priorityLevel struct {
	name               string
	readonly, mutating chan struct{}
	// queued, when not nil, holds the requests waiting for a seat, at
	// most its capacity; past it, 429.
	queued chan struct{}
}

// nodeQueueWait bounds a node request's wait for a seat: well inside a
// Lease period, so a renewal that cannot get one is refused while there
// is time to retry.
const nodeQueueWait = 5 * time.Second

// acquire takes a seat of seats, queueing if the level queues; false
// when it answered 429 or the request ended first.
func (p *priorityLevel) acquire(w http.ResponseWriter, r *http.Request, seats chan struct{}) bool {
	select {
	case seats <- struct{}{}:
		return true
	default:
	}
	if p.queued != nil {
		select {
		case p.queued <- struct{}{}:
			defer func() { <-p.queued }()
			t := time.NewTimer(nodeQueueWait)
			defer t.Stop()
			select {
			case seats <- struct{}{}:
				return true
			case <-r.Context().Done():
				return false
			case <-t.C:
			}
		default:
		}
	}
	tooManyRequests(w, "Too many requests, please try again later.")
	return false
}

func newPriorityLevel(name string, readonly, mutating int) *priorityLevel {
	return &priorityLevel{name: name, readonly: make(chan struct{}, readonly), mutating: make(chan struct{}, mutating)}
}

type flowControl struct {
	limits         Limits
	node, workload *priorityLevel
	mu             sync.Mutex
	watches        map[string]int
}

func newFlowControl(l Limits) *flowControl {
	l = l.withDefaults()
	// Nodes get a quarter of the workload's seats again, at least 50
	// reads and 25 writes: a node renews one Lease every 10 s.
	nodeRead, nodeWrite := max(50, l.MaxRequestsInFlight/4), max(25, l.MaxMutatingRequestsInFlight/4)
	return &flowControl{
		limits: l,
		node: func() *priorityLevel {
			p := newPriorityLevel("node", nodeRead, nodeWrite)
			p.queued = make(chan struct{}, 4*(nodeRead+nodeWrite))
			return p
		}(),
		workload: newPriorityLevel("workload", l.MaxRequestsInFlight, l.MaxMutatingRequestsInFlight),
		watches:  map[string]int{},
	}
}

// level is the request's priority level; nil is exempt.
func (f *flowControl) level(r *http.Request, u *authn.User) *priorityLevel {
	if _, inProcess := r.Context().Value(inProcessUserKey{}).(*authn.User); inProcess || u == nil {
		return nil
	}
	for _, g := range u.Groups {
		switch g {
		case authn.GroupMasters:
			return nil
		case "system:nodes":
			return f.node
		}
	}
	return f.workload
}

// longRunning requests (watches, exec, attach, port-forward, proxy, logs)
// hold no seat and get no request timeout, as in kube-apiserver; nor does
// a snapshot, whose time grows with the store.
func longRunning(a authz.Attributes) bool {
	return a.Verb == "watch" || a.Verb == "proxy" || (a.ResourceRequest && (connectSubresources[a.Subresource] || a.Subresource == "log" || a.Subresource == "proxy")) ||
		(!a.ResourceRequest && a.Path == snapshotPath)
}

func mutating(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// tooManyRequests is kube-apiserver's answer when a level is full.
func tooManyRequests(w http.ResponseWriter, message string) {
	w.Header().Set("Retry-After", "1")
	writeStatus(w, &metav1.Status{Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests, Message: message,
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1}})
}

// noWatchTimeout says whether a watch leaves its end to the server:
// timeoutSeconds absent or 0, as kube-apiserver reads it. A value that
// does not parse is the watch handler's to answer.
func noWatchTimeout(r *http.Request) bool {
	t, err := params.Int64Ptr(r.URL.Query(), "timeoutSeconds")
	return err == nil && (t == nil || *t == 0)
}

// withFlowControl takes a seat of the request's priority level for a
// non-long-running request, bounds its time, caps a user's watches, and
// gives a watch without timeoutSeconds a random end in
// [MinRequestTimeout, 2*MinRequestTimeout).
func (s *Server) withFlowControl(next http.Handler) http.Handler {
	f := s.flow
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := requestUser(r.Context())
		level := f.level(r, u)
		a := authz.RequestAttributes(r, &authn.User{})
		if longRunning(a) {
			if a.Verb == "watch" && level != nil {
				if !f.startWatch(u.Name) {
					tooManyRequests(w, fmt.Sprintf("too many watches for user %q: the limit is %d", u.Name, f.limits.MaxWatchesPerUser))
					return
				}
				defer f.endWatch(u.Name)
			}
			if a.Verb == "watch" && noWatchTimeout(r) {
				d := f.limits.MinRequestTimeout + rand.N(f.limits.MinRequestTimeout)
				ctx, cancel := context.WithTimeout(r.Context(), d)
				defer cancel()
				r = r.WithContext(ctx)
			}
			next.ServeHTTP(w, r)
			return
		}
		if level != nil {
			seats := level.readonly
			if mutating(r.Method) {
				seats = level.mutating
			}
			if !level.acquire(w, r, seats) {
				return
			}
			defer func() { <-seats }()
		}
		timeout := f.limits.RequestTimeout
		if t := r.URL.Query().Get("timeout"); t != "" {
			d, err := time.ParseDuration(t)
			if err != nil {
				writeError(w, apierrors.NewBadRequest("invalid timeout specified in the request URL - "+err.Error()))
				return
			}
			if d > 0 && d < timeout {
				timeout = d
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		if level == nil {
			// bonsai's own components and system:masters: the deadline
			// reaches every store call and webhook through the context.
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		serveWithTimeout(ctx, w, r.WithContext(ctx), next)
	})
}

// serveWithTimeout answers 504 when ctx ends before next has answered,
// as kube-apiserver's timeout filter: whatever next writes afterwards is
// dropped, and a panic in it still reaches the server.
func serveWithTimeout(ctx context.Context, w http.ResponseWriter, r *http.Request, next http.Handler) {
	tw := &timeoutWriter{w: w, h: http.Header{}}
	done, panicked := make(chan struct{}), make(chan any, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				panicked <- p
			}
			close(done)
		}()
		next.ServeHTTP(tw, r)
	}()
	select {
	case <-done:
		select {
		case p := <-panicked:
			panic(p)
		default:
		}
	case <-ctx.Done():
		tw.mu.Lock()
		defer tw.mu.Unlock()
		tw.timedOut = true
		if !tw.wroteHeader {
			writeError(w, errRequestTimeout)
		}
	}
}

// timeoutWriter passes a handler's answer through until the request
// times out; its header map is its own, copied at WriteHeader, so a
// handler still running cannot touch the 504's.
type timeoutWriter struct {
	w           http.ResponseWriter
	h           http.Header
	mu          sync.Mutex
	wroteHeader bool
	timedOut    bool
}

func (t *timeoutWriter) Header() http.Header { return t.h }

func (t *timeoutWriter) WriteHeader(code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.writeHeaderLocked(code)
}

func (t *timeoutWriter) writeHeaderLocked(code int) {
	if t.timedOut || t.wroteHeader {
		return
	}
	t.wroteHeader = true
	dst := t.w.Header()
	for k, v := range t.h {
		dst[k] = v
	}
	t.w.WriteHeader(code)
}

func (t *timeoutWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timedOut {
		return 0, http.ErrHandlerTimeout
	}
	t.writeHeaderLocked(http.StatusOK)
	return t.w.Write(b)
}

func (t *timeoutWriter) Flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.w.(http.Flusher); ok && !t.timedOut {
		f.Flush()
	}
}

func (t *timeoutWriter) Unwrap() http.ResponseWriter { return t.w }

func (f *flowControl) startWatch(user string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watches[user] >= f.limits.MaxWatchesPerUser {
		return false
	}
	f.watches[user]++
	return true
}

func (f *flowControl) endWatch(user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watches[user]--; f.watches[user] <= 0 {
		delete(f.watches, user)
	}
}

// errRequestTimeout is kube-apiserver's answer to a request that ran out
// of its time: 504 Timeout.
var errRequestTimeout = apierrors.NewTimeoutError(fmt.Sprintf("request did not complete within requested timeout - %v", context.DeadlineExceeded), 0)
