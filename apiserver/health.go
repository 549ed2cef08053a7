package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/version"
)

// healthCheck is one named check behind /healthz, /livez and /readyz.
type healthCheck struct {
	name  string
	check func(r *http.Request) error
}

func (s *Server) healthChecks() []healthCheck {
	return []healthCheck{
		{"ping", func(*http.Request) error { return nil }},
		{"store", func(r *http.Request) error {
			ctx, cancel := contextWithTimeout(r, 2*time.Second)
			defer cancel()
			_, err := s.cfg.Store.CurrentRevision(ctx)
			return err
		}},
		// As kube-apiserver's: ready once the stored CRDs are served, so
		// that a client of a custom resource never sees a 404 after a
		// restart.
		{"poststarthook/crd-informer-synced", func(*http.Request) error {
			if !s.crs.synced.Load() {
				return fmt.Errorf("CustomResourceDefinitions not loaded yet")
			}
			return nil
		}},
	}
}

// serveHealth answers like kube-apiserver: "ok", or with ?verbose one
// "[+]name ok" line per check; 500 when a check fails.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	failed := false
	for _, c := range s.healthChecks() {
		if err := c.check(r); err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: reason withheld\n", c.name)
			s.log.Warn("health check failed", "check", c.name, "err", err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	name := strings.TrimPrefix(r.URL.Path, "/")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if failed {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "%s%s check failed\n", b.String(), name)
		return
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		fmt.Fprintf(w, "%s%s check passed\n", b.String(), name)
		return
	}
	w.Write([]byte("ok"))
}

// KubernetesVersion is the Kubernetes release whose API bonsai serves: the
// minor of the k8s.io/api module it is built with (v0.37.2 -> v1.37.2).
func KubernetesVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/api" && strings.HasPrefix(d.Version, "v0.") {
				return "v1." + strings.TrimPrefix(d.Version, "v0.")
			}
		}
	}
	return "v1.37.0"
}

func (s *Server) versionInfo() version.Info {
	kv := KubernetesVersion()
	parts := strings.SplitN(strings.TrimPrefix(kv, "v"), ".", 3)
	gitVersion := kv
	if s.cfg.Version != "" {
		gitVersion += "+bonsai." + strings.TrimPrefix(s.cfg.Version, "v")
	}
	info := version.Info{
		Major:      parts[0],
		Minor:      parts[1],
		GitVersion: gitVersion,
		GitCommit:  "",
		GoVersion:  runtime.Version(),
		Compiler:   runtime.Compiler,
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
	}
	return info
}

func (s *Server) serveVersion(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(s.versionInfo())
}
