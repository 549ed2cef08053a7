package apiserver

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHandlerPool: requests run on reused workers, at most max of them;
// beyond that they run on the caller's goroutine; a handler's panic
// reaches the caller as it was; idle workers go away.
func TestHandlerPool(t *testing.T) {
	p := newHandlerPool(2, 100*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	release := make(chan struct{})
	var mu sync.Mutex
	running := 0
	blocking := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		running++
		mu.Unlock()
		<-release
		w.WriteHeader(http.StatusAccepted)
	})
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := httptest.NewRecorder()
			p.serve(blocking, rec, httptest.NewRequest("GET", "/", nil))
			codes[i] = rec.Code
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := running
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 requests running: a full pool must run the rest itself", n)
		}
		time.Sleep(time.Millisecond)
	}
	if w := p.workers.Load(); w != 2 {
		t.Fatalf("%d workers, want the max of 2", w)
	}
	close(release)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusAccepted {
			t.Errorf("request %d: %d", i, c)
		}
	}
	// Sequential requests reuse a worker.
	for i := 0; i < 10; i++ {
		p.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	if w := p.workers.Load(); w > 2 {
		t.Fatalf("%d workers after sequential requests", w)
	}
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
			}
		}()
		p.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }), httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		t.Fatal("no panic")
	}()
	deadline = time.Now().Add(5 * time.Second)
	for p.workers.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers still there", p.workers.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPooledRequests: requests that end with their answer go to the pool;
// streams that can last (watches, logs, proxies, exec) and non-resource
// paths do not.
func TestPooledRequests(t *testing.T) {
	s, _ := newTestServer(t)
	for path, want := range map[string]bool{
		"POST /api/v1/namespaces/default/configmaps":             true,
		"GET /api/v1/namespaces/default/pods/p":                  true,
		"PUT /api/v1/namespaces/default/pods/p/status":           true,
		"GET /api/v1/namespaces/default/configmaps?watch=1":      false,
		"GET /api/v1/watch/namespaces/default/configmaps":        false,
		"GET /api/v1/namespaces/default/pods/p/log?follow=true":  false,
		"POST /api/v1/namespaces/default/pods/p/exec?command=sh": false,
		"POST /api/v1/namespaces/default/pods/p/portforward":     false,
		"GET /api/v1/namespaces/default/pods/p/proxy/":           false,
		"GET /healthz":             false,
		"GET /debug/pprof/profile": false,
	} {
		method, target, _ := strings.Cut(path, " ")
		l, watch := s.labelRequest(httptest.NewRequest(method, target, nil))
		if got := pooled(l, watch); got != want {
			t.Errorf("%s: pooled %v, want %v (labels %v)", path, got, want, l)
		}
	}
}
