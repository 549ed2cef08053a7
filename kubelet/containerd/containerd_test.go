package containerd

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/testsupport/testenv"
)

const testImage = "bonsai.test/busybox:1"

// startRuntime starts a containerd of the test's own under a temp dir and
// connects a Runtime to it, with the busybox test image imported. Cleanup
// kills every task before containerd stops, so no mount stays behind.
func startRuntime(t *testing.T) (*Runtime, **Daemon, string) {
	t.Helper()
	testenv.Require(t, os.Geteuid() == 0, "containerd tests need root")
	_, err := lookPath("containerd")
	testenv.Require(t, err == nil, "containerd (Debian package containerd): %v", err)
	_, err = lookPath("runc")
	testenv.Require(t, err == nil, "runc (Debian package runc): %v", err)
	img := testenv.BusyboxImage(t, testImage)
	dir, err := os.MkdirTemp("", "bonsai-ctd-")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	d, err := StartDaemon(ctx, filepath.Join(dir, "containerd"), log)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	cfg := Config{Endpoint: d.Socket, Namespace: "k8s.io", StateDir: filepath.Join(dir, "io"), Logger: log}
	r, err := New(ctx, cfg)
	if err != nil {
		d.Stop()
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	daemon := &d
	t.Cleanup(func() {
		cfg.Endpoint = (*daemon).Socket
		cleanupContainers(t, cfg)
		(*daemon).Stop()
		testenv.KillShims(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("removing %s: %v", dir, err)
		}
	})
	t.Cleanup(func() { r.Close() })
	if _, err := r.ImportImages(ctx, bytes.NewReader(img)); err != nil {
		t.Fatal(err)
	}
	return r, daemon, dir
}

// cleanupContainers removes every container through a fresh connection
// (the test's own Runtime may be closed already).
func cleanupContainers(t *testing.T, cfg Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := New(ctx, cfg)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer r.Close()
	cs, _ := r.ListContainers(ctx)
	for _, c := range cs {
		r.StopContainer(ctx, c.ID, 0)
		if err := r.RemoveContainer(ctx, c.ID); err != nil {
			t.Logf("cleanup: remove %s: %v", c.ID, err)
		}
	}
	sbs, _ := r.ListPodSandboxes(ctx)
	for _, sb := range sbs {
		r.RemovePodSandbox(ctx, sb.ID)
	}
}

func waitExited(t *testing.T, r *Runtime, id string) cri.ContainerStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		st, err := r.ContainerStatus(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == cri.ContainerExited {
			return st
		}
		select {
		case <-r.Events():
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("container %s did not exit", id)
	return cri.ContainerStatus{}
}

func runContainer(t *testing.T, r *Runtime, sandbox string, cfg cri.ContainerConfig) string {
	t.Helper()
	ctx := context.Background()
	if cfg.Image == "" {
		cfg.Image = testImage
	}
	id, err := r.CreateContainer(ctx, sandbox, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestContainerLifecycle(t *testing.T) {
	r, _, dir := startRuntime(t)
	ctx := context.Background()
	v, err := r.Version(ctx)
	if err != nil || !strings.HasPrefix(v, "containerd://1.") {
		t.Fatalf("Version = %q, %v", v, err)
	}
	sb, err := r.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: "uid-1", Namespace: "default", Name: "p", Hostname: "p"})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "logs", "c", "0.log")
	id := runContainer(t, r, sb, cri.ContainerConfig{
		Name: "c", Command: []string{"sh", "-c"}, Args: []string{"echo out $GREETING; echo err >&2; exit 3"},
		Env: []string{"GREETING=hello"}, LogPath: logPath, Labels: map[string]string{"pod": "uid-1", cri.LabelPodUID: "uid-1"},
	})
	st := waitExited(t, r, id)
	if st.ExitCode != 3 || st.Reason != "Error" || st.StartedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
		t.Fatalf("status = %+v", st)
	}
	if st.ImageRef == "" || !strings.HasPrefix(st.ImageRef, "sha256:") || st.Labels["pod"] != "uid-1" || st.Name != "c" || st.SandboxID != sb {
		t.Fatalf("status fields = %+v", st)
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			t.Fatalf("log line %q is not in CRI format", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		got = append(got, f[1]+" "+f[2]+" "+f[3])
	}
	want := map[string]bool{"stdout F out hello": true, "stderr F err": true}
	if len(got) != 2 || !want[got[0]] || !want[got[1]] {
		t.Fatalf("log = %q", got)
	}

	// A clean exit is "Completed"; the image's cmd runs when none is given.
	id2 := runContainer(t, r, sb, cri.ContainerConfig{Name: "ok", Args: []string{"true"}, Command: []string{"sh", "-c"}, LogPath: filepath.Join(dir, "logs", "ok.log")})
	if st := waitExited(t, r, id2); st.ExitCode != 0 || st.Reason != "Completed" {
		t.Fatalf("status = %+v", st)
	}

	// A pod's own containers, filtered by containerd: not the other
	// pod's, and a uid that is a prefix of another matches nothing.
	sb2, err := r.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: "uid-12", Namespace: "default", Name: "q", Hostname: "q"})
	if err != nil {
		t.Fatal(err)
	}
	other := runContainer(t, r, sb2, cri.ContainerConfig{Name: "o", Command: []string{"true"}, LogPath: filepath.Join(dir, "logs", "o.log"),
		Labels: map[string]string{cri.LabelPodUID: "uid-12"}})
	for _, c := range []struct {
		uid  string
		want []string
	}{{"uid-12", []string{other}}, {"uid-1", []string{id}}, {"uid", nil}} {
		cs, err := r.PodContainers(ctx, c.uid)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range cs {
			got = append(got, st.ID)
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("PodContainers(%q) = %v, want %v", c.uid, got, c.want)
		}
	}
	all, err := r.ListContainers(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("ListContainers = %d containers, %v; want 3", len(all), err)
	}

	if err := r.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ContainerStatus(ctx, id); err == nil {
		t.Fatal("removed container still has a status")
	}
}

func TestExecAndStop(t *testing.T) {
	r, _, dir := startRuntime(t)
	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: "uid-2", Namespace: "default", Name: "p2", Hostname: "p2"})
	if err != nil {
		t.Fatal(err)
	}
	id := runContainer(t, r, sb, cri.ContainerConfig{
		Name: "sleeper", Command: []string{"sh", "-c", "trap 'echo bye; exit 0' TERM; while true; do sleep 0.1; done"},
		Env: []string{"FOO=bar"}, WorkingDir: "/tmp", LogPath: filepath.Join(dir, "s.log"),
	})
	out, _, code, err := r.ExecSync(ctx, id, []string{"sh", "-c", "echo $FOO $(pwd) $(hostname)"}, 10*time.Second)
	if err != nil || code != 0 || strings.TrimSpace(string(out)) != "bar /tmp p2" {
		t.Fatalf("exec = %q, %d, %v", out, code, err)
	}
	_, _, code, err = r.ExecSync(ctx, id, []string{"sh", "-c", "exit 7"}, 10*time.Second)
	if err != nil || code != 7 {
		t.Fatalf("exec exit = %d, %v", code, err)
	}
	// The writable layer's usage, as containerd's snapshotter measures it,
	// grows by what the container writes.
	before, _, err := r.ContainerLayerUsage(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, code, err := r.ExecSync(ctx, id, []string{"dd", "if=/dev/zero", "of=/tmp/f", "bs=1048576", "count=2"}, 10*time.Second); err != nil || code != 0 {
		t.Fatalf("dd: %d %v", code, err)
	}
	after, inodes, err := r.ContainerLayerUsage(ctx, id)
	if err != nil || after < before+2<<20 || inodes == 0 {
		t.Fatalf("layer usage %d bytes (%d inodes) after writing 2 MiB, %d before: %v", after, inodes, before, err)
	}
	// Exec with stdin.
	var stdout bytes.Buffer
	err = r.Exec(ctx, id, []string{"cat"}, strings.NewReader("piped\n"), nopCloser{&stdout}, nopCloser{io.Discard}, false, nil)
	if err != nil || stdout.String() != "piped\n" {
		t.Fatalf("exec cat = %q, %v", stdout.String(), err)
	}
	start := time.Now()
	if err := r.StopContainer(ctx, id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := r.ContainerStatus(ctx, id)
	if err != nil || st.State != cri.ContainerExited || st.ExitCode != 0 {
		t.Fatalf("after stop: %+v, %v", st, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a container that exits on SIGTERM took %v to stop", took)
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func TestOOMKilled(t *testing.T) {
	r, _, dir := startRuntime(t)
	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: "uid-3", Namespace: "default", Name: "p3"})
	if err != nil {
		t.Fatal(err)
	}
	// dd's one 200 MiB block against a 32 MiB limit.
	id := runContainer(t, r, sb, cri.ContainerConfig{
		Name: "hog", Command: []string{"sh", "-c", "exec dd if=/dev/zero of=/dev/null bs=200M count=1"},
		MemoryLimit: 32 << 20, LogPath: filepath.Join(dir, "hog.log"),
	})
	st := waitExited(t, r, id)
	if st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Fatalf("status = %+v, want OOMKilled with 137", st)
	}
}

func TestReattachAfterRestart(t *testing.T) {
	r, daemon, dir := startRuntime(t)
	d := *daemon
	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: "uid-4", Namespace: "default", Name: "p4"})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "tick.log")
	id := runContainer(t, r, sb, cri.ContainerConfig{
		Name: "ticker", Command: []string{"sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"}, LogPath: logPath,
	})
	before, _ := r.ContainerStatus(ctx, id)
	time.Sleep(500 * time.Millisecond)
	// bonsai goes away (and its containerd with it); the container keeps
	// running in its shim.
	r.Close()
	d.Stop()
	d2, err := StartDaemon(ctx, d.Dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	*daemon = d2
	r2, err := New(ctx, Config{Endpoint: d2.Socket, StateDir: filepath.Join(dir, "io")})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	after, err := r2.ContainerStatus(ctx, id)
	if err != nil || after.State != cri.ContainerRunning || !after.StartedAt.Equal(before.StartedAt) {
		t.Fatalf("after restart: %+v, %v (before %+v)", after, err, before)
	}
	size := func() int64 { st, _ := os.Stat(logPath); return st.Size() }
	n := size()
	time.Sleep(time.Second)
	if size() <= n {
		t.Fatal("log stopped growing after re-attaching")
	}
	if err := r2.StopContainer(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	if st, _ := r2.ContainerStatus(ctx, id); st.State != cri.ContainerExited {
		t.Fatalf("after stop: %+v", st)
	}
}

func TestResolveArgs(t *testing.T) {
	for _, tc := range []struct {
		ep, cmd, command, args, want []string
	}{
		{ep: []string{"/ep"}, cmd: []string{"c"}, want: []string{"/ep", "c"}},
		{ep: []string{"/ep"}, cmd: []string{"c"}, command: []string{"x"}, want: []string{"x"}},
		{ep: []string{"/ep"}, cmd: []string{"c"}, args: []string{"a"}, want: []string{"/ep", "a"}},
		{ep: []string{"/ep"}, cmd: []string{"c"}, command: []string{"x"}, args: []string{"a"}, want: []string{"x", "a"}},
		{cmd: []string{"sh"}, want: []string{"sh"}},
	} {
		got := resolveArgs(tc.ep, tc.cmd, tc.command, tc.args)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("resolveArgs(%v,%v,%v,%v) = %v, want %v", tc.ep, tc.cmd, tc.command, tc.args, got, tc.want)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, tc := range []struct {
		have, want string
		ok         bool
	}{
		{"1.6.20~ds1", "1.6", true}, {"v1.7.2", "1.6", true}, {"2.0.0", "1.6", true},
		{"1.5.9", "1.6", false}, {"1.6", "1.6", true}, {"garbage", "1.6", false},
	} {
		if got := versionAtLeast(tc.have, tc.want); got != tc.ok {
			t.Errorf("versionAtLeast(%q, %q) = %v", tc.have, tc.want, got)
		}
	}
}
