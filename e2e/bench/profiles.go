package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// profilesDir, when set (-profiles), is where every RSS reading of a
// bonsai server also leaves that server's heap and goroutine profiles and
// its /proc smaps, so a memory figure can be explained.
var (
	profilesDir string
	profileSeq  atomic.Int32
)

// saveProfiles writes the profiles of p under profilesDir, named by a
// sequence number; errors are reported, not fatal: the figure stands.
func (p *bonsaiProc) saveProfiles() {
	if profilesDir == "" {
		return
	}
	n := profileSeq.Add(1)
	prefix := filepath.Join(profilesDir, fmt.Sprintf("%02d-pid%d", n, p.cmd.Process.Pid))
	fail := func(err error) { fmt.Fprintf(os.Stderr, "bench: profiles %s: %v\n", prefix, err) }
	if err := os.MkdirAll(profilesDir, 0o755); err != nil {
		fail(err)
		return
	}
	save := func(name string, b []byte) {
		if err := os.WriteFile(prefix+"-"+name, b, 0o644); err != nil {
			fail(err)
		}
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/smaps"); err == nil {
		save("smaps.txt", b)
	} else {
		fail(err)
	}
	// A hook for what the profiles cannot show (page maps, say): run
	// with the server's pid and the files' prefix, before the profiles
	// below touch the binary's symbol tables.
	if hook := os.Getenv("BONSAI_BENCH_PROFILE_HOOK"); hook != "" {
		cmd := exec.Command(hook, strconv.Itoa(p.cmd.Process.Pid), prefix)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fail(err)
		}
	}
	cfg, hc, err := p.profileClient()
	if err != nil {
		fail(err)
		return
	}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range []struct{ path, file string }{
		{"/debug/pprof/heap", "heap.pb.gz"},
		{"/debug/pprof/goroutine", "goroutine.pb.gz"},
		{"/debug/pprof/goroutine?debug=1", "goroutine.txt"},
		// The text form ends with the runtime's MemStats.
		{"/debug/pprof/heap?debug=1", "heap.txt"},
		{"/metrics", "metrics.txt"},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+q.path, nil)
		if err != nil {
			fail(err)
			return
		}
		resp, err := hc.Do(req)
		if err != nil {
			fail(err)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", q.path, resp.Status)
		}
		if err != nil {
			fail(err)
			continue
		}
		save(q.file, b)
	}
	fmt.Fprintf(os.Stderr, "bench: profiles saved as %s-*\n", prefix)
}

// cpuProfile, when -profiles is set, starts a CPU profile of p for d and
// returns a function that waits for it and saves it named after what was
// measured; without -profiles both are no-ops.
func (p *bonsaiProc) cpuProfile(what string, d time.Duration) (wait func()) {
	if profilesDir == "" {
		return func() {}
	}
	n := profileSeq.Add(1)
	file := filepath.Join(profilesDir, fmt.Sprintf("%02d-pid%d-cpu-%s.pb.gz", n, p.cmd.Process.Pid, what))
	done := make(chan struct{})
	go func() {
		defer close(done)
		fail := func(err error) { fmt.Fprintf(os.Stderr, "bench: cpu profile %s: %v\n", file, err) }
		cfg, hc, err := p.profileClient()
		if err != nil {
			fail(err)
			return
		}
		defer hc.CloseIdleConnections()
		secs := max(1, int(d.Round(time.Second)/time.Second))
		resp, err := hc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", cfg.Host, secs))
		if err != nil {
			fail(err)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s", resp.Status)
		}
		if err == nil {
			err = os.MkdirAll(profilesDir, 0o755)
		}
		if err == nil {
			err = os.WriteFile(file, b, 0o644)
		}
		if err != nil {
			fail(err)
			return
		}
		fmt.Fprintf(os.Stderr, "bench: cpu profile saved as %s\n", file)
	}()
	return func() { <-done }
}

// profileClient is an admin client of the server's /debug/pprof and
// /metrics.
func (p *bonsaiProc) profileClient() (*rest.Config, *http.Client, error) {
	cfg, err := p.restConfig("bench-profiles")
	if err != nil {
		return nil, nil, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	return cfg, hc, err
}
