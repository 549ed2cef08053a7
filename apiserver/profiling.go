package apiserver

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// serveProfiling serves Go's profiles as kube-apiserver does with
// --profiling: the index, cmdline, profile (CPU), symbol, trace and every
// named profile (heap, goroutine, allocs, block, mutex, threadcreate).
func serveProfiling(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, "/debug/pprof/") {
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}
