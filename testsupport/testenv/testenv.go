// Package testenv starts the real programs bonsai's tests and benchmarks
// (bin/bonsai-bench) run against, on free loopback ports and temp dirs:
// etcd, Debian's docker-registry, a system bus with systemd-logind (and a
// systemd stand-in that shuts nothing down), and the test admission webhook
// with its certificates. It finds or builds the oldest and newest kubectl,
// finds the official Python client and installs the pinned JavaScript one
// with npm, builds the busybox test image, mounts tmpfs file systems a
// test may fill, floods a running server with node and user clients (the overload test),
// ends the containerd shims and containers a test leaves behind, and
// decides what a missing prerequisite means: a skip on a developer's
// machine, a failure under CI=true. A containerd of a test's own is
// kubelet/containerd/ctdtest's, an in-process cluster
// testsupport/clustertest's. Only tests, the bench and test helpers import
// it; bonsai's own packages must not.
package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"bonsai.dev/bonsai/kubelet/containerd/orphans"
)

// InCI reports whether CI=true is set: prerequisites are then mandatory.
func InCI() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}

// Require fails the test under CI and skips it elsewhere when ok is false.
func Require(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	msg := "missing prerequisite: " + fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatal(msg + " (CI=true: prerequisites are mandatory; `make test` installs them)")
	}
	t.Skip(msg)
}

// LookPath finds a binary on PATH or in the usual sbin directories, which a
// non-root PATH may lack.
func LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH", name)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Etcd is a real etcd server on loopback.
type Etcd struct {
	Endpoint string
	DataDir  string
	cmd      *exec.Cmd
	done     chan struct{}
}

// StartEtcd runs Debian's etcd in dir on free loopback ports with fsync on
// (etcd's default), and waits until it serves. extra are more flags for
// etcd (--quota-backend-bytes ...).
func StartEtcd(dir string, extra ...string) (*Etcd, error) {
	bin, err := LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("etcd (Debian package etcd-server): %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		cport, err1 := FreePort()
		pport, err2 := FreePort()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("free ports: %v %v", err1, err2)
		}
		e, err := startEtcdOn(bin, filepath.Join(dir, fmt.Sprintf("etcd-%d", attempt)), cport, pport, extra)
		if err == nil {
			return e, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startEtcdOn(bin, dir string, cport, pport int, extra []string) (*Etcd, error) {
	client := fmt.Sprintf("http://127.0.0.1:%d", cport)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
	logf, err := os.Create(dir + ".log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{
		"--name", "bonsai-test",
		"--data-dir", dir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bonsai-test=" + peer,
		"--listen-metrics-urls", "",
		"--log-level", "error",
	}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	e := &Etcd{Endpoint: client, DataDir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(e.done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", cport), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return e, nil
		}
		select {
		case <-e.done:
			out, _ := os.ReadFile(dir + ".log")
			return nil, fmt.Errorf("etcd exited at start: %s", tail(out, 800))
		case <-ctx.Done():
			e.Stop()
			return nil, fmt.Errorf("etcd did not listen on %s within 20s", client)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// PID is the etcd process id (for resource accounting in benchmarks).
func (e *Etcd) PID() int { return e.cmd.Process.Pid }

// Stop kills etcd and waits for it.
func (e *Etcd) Stop() {
	e.cmd.Process.Kill()
	<-e.done
}

// EtcdForTest starts etcd for a test (CI: mandatory) and stops it at
// cleanup; extra are more flags for etcd.
func EtcdForTest(t testing.TB, extra ...string) *Etcd {
	t.Helper()
	_, err := LookPath("etcd")
	Require(t, err == nil, "etcd: %v", err)
	e, err := StartEtcd(t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// KillContainerProcesses SIGKILLs every process whose root file system
// lives under dir: the containers of a containerd rooted there. Killing a
// shim leaves its container running, so a test that tears its containerd
// down must end the containers themselves.
func KillContainerProcesses(dir string) int { return orphans.KillContainers(dir) }

// KillShims ends the containerd shims (and the containers they still
// serve) of a containerd that kept its state under dir: a shim outlives
// its containerd until its task is deleted, which a failed or timed-out
// test may never do.
func KillShims(dir string) { orphans.Kill(dir) }
