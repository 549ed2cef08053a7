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

// cpuProfile, when -profiles is set, starts a CPU profile of p for d and,
// over the same window, an allocation profile (what the garbage collector's
// share of that CPU is made of), and returns a function that waits for
// both and saves them named after what was measured; without -profiles
// both are no-ops.
func (p *bonsaiProc) cpuProfile(what string, d time.Duration) (wait func()) {
	if profilesDir == "" {
		return func() {}
	}
	n := profileSeq.Add(1)
	secs := max(1, int(d.Round(time.Second)/time.Second))
	var done []chan struct{}
	for _, q := range []struct{ path, kind string }{
		{fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), "cpu"},
		{fmt.Sprintf("/debug/pprof/allocs?seconds=%d", secs), "allocs"},
	} {
		file := filepath.Join(profilesDir, fmt.Sprintf("%02d-pid%d-%s-%s.pb.gz", n, p.cmd.Process.Pid, q.kind, what))
		ch := make(chan struct{})
		done = append(done, ch)
		go func() {
			defer close(ch)
			if err := p.fetchProfile(q.path, file); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s profile %s: %v\n", q.kind, file, err)
				return
			}
			fmt.Fprintf(os.Stderr, "bench: %s profile saved as %s\n", q.kind, file)
		}()
	}
	return func() {
		for _, ch := range done {
			<-ch
		}
	}
}

// fetchProfile saves what path of p's debug handlers answers into file.
func (p *bonsaiProc) fetchProfile(path, file string) error {
	cfg, hc, err := p.profileClient()
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(cfg.Host + path)
	if err != nil {
		return err
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
	return err
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
