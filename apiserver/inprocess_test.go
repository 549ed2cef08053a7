package apiserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/apiserver/authn"
)

func TestInProcessMayStream(t *testing.T) {
	for _, c := range []struct {
		method, url string
		header      http.Header
		want        bool
	}{
		{"PUT", "/api/v1/namespaces/a/pods/p/status", nil, false},
		{"POST", "/api/v1/namespaces/a/pods/p/binding", nil, false},
		{"GET", "/api/v1/namespaces/a/pods/p", nil, false},
		{"GET", "/api/v1/pods?limit=500&resourceVersion=0", nil, false},
		{"GET", "/apis/coordination.k8s.io/v1/leases?allowWatchBookmarks=true", nil, false},
		{"GET", "/api/v1/pods?allowWatchBookmarks=true&watch=true", nil, true},
		{"GET", "/api/v1/pods?watch=1", nil, true},
		{"GET", "/api/v1/watch/namespaces/a/pods", nil, true},
		{"GET", "/api/v1/namespaces/a/pods/p/log", nil, true},
		{"GET", "/api/v1/namespaces/a/pods/p/log?follow=true&container=c", nil, true},
		{"GET", "/api/v1/namespaces/a/services/s/proxy/metrics", nil, true},
		{"POST", "/api/v1/namespaces/a/pods/p/exec?command=sh", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}, true},
	} {
		req, err := http.NewRequest(c.method, "http://bonsai.in-process"+c.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.header {
			req.Header[k] = v
		}
		if got := mayStream(req); got != c.want {
			t.Errorf("%s %s: mayStream %v, want %v", c.method, c.url, got, c.want)
		}
	}
}

// TestInProcessAnswer checks a request that is not a stream: answered
// whole once the handler returned, its context ended, a panic an error.
func TestInProcessAnswer(t *testing.T) {
	var done bool
	var reqCtx context.Context
	var user *authn.User
	tr := &inProcessTransport{user: &authn.User{Name: "someone"}, h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqCtx = r.Context()
		user, _ = r.Context().Value(inProcessUserKey{}).(*authn.User)
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "first ")
		w.(http.Flusher).Flush()
		time.Sleep(10 * time.Millisecond)
		io.WriteString(w, "second")
		w.Header().Set("X-After", "ignored") // after the header was sent
		done = true
	})}
	req, _ := http.NewRequest("PUT", "http://bonsai.in-process/api/v1/namespaces/a/pods/p/status", strings.NewReader("{}"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if !done {
		t.Fatal("RoundTrip returned before the handler did")
	}
	if reqCtx.Err() == nil {
		t.Error("the request's context is still live after its answer")
	}
	if user == nil || user.Name != "someone" {
		t.Errorf("handler saw user %v", user)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(body) != "first second" || resp.ContentLength != int64(len(body)) ||
		resp.Header.Get("Content-Type") != "text/plain" || resp.Header.Get("X-After") != "" {
		t.Errorf("answer: %d %q length %d header %v", resp.StatusCode, body, resp.ContentLength, resp.Header)
	}

	req, _ = http.NewRequest("GET", "http://bonsai.in-process/panic", nil)
	if resp, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panicking handler: %v, %v", resp, err)
	}
}
