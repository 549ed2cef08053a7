package apiserver

import (
	"net/http"
	"strings"
	"testing"
)

func TestProfiling(t *testing.T) {
	const tokens = "admin-token,admin,1,system:masters\njane-token,jane,2\n"
	on, _ := newAuthServerWith(t, tokens, Config{Profiling: true})
	rec := serveAs(on, "GET", "/debug/pprof/", "admin-token", "", nil)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "goroutine") {
		t.Errorf("index as cluster-admin: %d %.200s", rec.Code, rec.Body)
	}
	rec = serveAs(on, "GET", "/debug/pprof/goroutine?debug=1", "admin-token", "", nil)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "goroutine profile: total") {
		t.Errorf("goroutine profile: %d %.200s", rec.Code, rec.Body)
	}
	rec = serveAs(on, "GET", "/debug/pprof/cmdline", "admin-token", "", nil)
	if rec.Code != http.StatusOK || rec.Body.Len() == 0 {
		t.Errorf("cmdline: %d %q", rec.Code, rec.Body)
	}
	// Only cluster-admin has the path in the default roles.
	rec = serveAs(on, "GET", "/debug/pprof/heap", "jane-token", "", nil)
	if st := statusOf(t, rec); rec.Code != http.StatusForbidden || st.Message != `forbidden: User "jane" cannot get path "/debug/pprof/heap"` {
		t.Errorf("heap as jane: %d %q", rec.Code, st.Message)
	}

	off, _ := newAuthServerWith(t, tokens, Config{})
	if rec := serveAs(off, "GET", "/debug/pprof/", "admin-token", "", nil); rec.Code != http.StatusNotFound {
		t.Errorf("--profiling=false: %d, want 404", rec.Code)
	}
}
