package apiserver

import (
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// handlerPool runs short API requests on long-lived goroutines. net/http
// starts a goroutine per request with a small stack, and a request's
// handler chain (authentication, admission, defaulting, validation,
// encoding) is deep: the stack grew and was copied three or four times
// per request, a tenth of the server's CPU in a burst of creates. A
// worker's stack stays grown between requests, until the garbage
// collector shrinks it while it idles.
type handlerPool struct {
	jobs    chan *poolJob
	workers atomic.Int32
	max     int32
	idle    time.Duration
	log     *slog.Logger
}

type poolJob struct {
	p        *handlerPool
	w        http.ResponseWriter
	r        *http.Request
	next     http.Handler
	done     chan struct{}
	panicked any
}

// pooled says whether a request runs on the pool: a resource request
// that ends with its answer, not a watch, a log, a proxied request or an
// exec, attach or port-forward stream, which would hold a worker for as
// long as they last. (l is the request's metric labels: l[3] the
// resource, l[4] the subresource.)
func pooled(l requestLabelValues, watch bool) bool {
	return !watch && l[3] != "" && l[4] != "log" && l[4] != "proxy" && !connectSubresources[l[4]]
}

var poolJobs = sync.Pool{New: func() any { return &poolJob{done: make(chan struct{}, 1)} }}

func newHandlerPool(max int32, idle time.Duration, log *slog.Logger) *handlerPool {
	return &handlerPool{jobs: make(chan *poolJob), max: max, idle: idle, log: log}
}

// serve runs next for the request on a worker and waits for it; with
// every worker busy and no room for another it runs it right here. A
// panic in the handler is raised again here, where net/http expects it.
func (p *handlerPool) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	j := poolJobs.Get().(*poolJob)
	j.p, j.w, j.r, j.next = p, w, r, next
	select {
	case p.jobs <- j:
	default:
		if p.workers.Add(1) > p.max {
			p.workers.Add(-1)
			j.w, j.r, j.next = nil, nil, nil
			poolJobs.Put(j)
			next.ServeHTTP(w, r)
			return
		}
		go p.work(j)
	}
	<-j.done
	panicked := j.panicked
	j.w, j.r, j.next, j.panicked = nil, nil, nil, nil
	poolJobs.Put(j)
	if panicked != nil {
		panic(panicked)
	}
}

// work runs jobs until none comes for the idle time.
func (p *handlerPool) work(j *poolJob) {
	defer p.workers.Add(-1)
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		j.run()
		t.Reset(p.idle)
		select {
		case j = <-p.jobs:
		case <-t.C:
			return
		}
	}
}

func (j *poolJob) run() {
	defer func() {
		if v := recover(); v != nil {
			j.panicked = v
			if v != http.ErrAbortHandler {
				// The stack is the worker's: say where the panic was.
				j.p.log.Error("panic serving "+j.r.Method+" "+j.r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			}
		}
		j.done <- struct{}{}
	}()
	j.next.ServeHTTP(j.w, j.r)
}
