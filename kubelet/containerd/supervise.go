package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Daemon is a containerd that bonsai started and keeps running: its root,
// state, socket and config live under one directory. Stopping it leaves
// containers running (their shims are separate processes), so the next
// start picks them up again.
type Daemon struct {
	Socket string
	Dir    string
	log    *slog.Logger
	bin    string
	out    io.Writer

	mu      sync.Mutex
	cmd     *exec.Cmd
	stopped bool
	exited  chan struct{}
}

// daemonConfig keeps containerd lean: no CRI plugin (bonsai is the
// kubelet), no metrics or debug listeners.
const daemonConfig = `version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %q

[ttrpc]
  address = %q
`

// StartDaemon runs the containerd binary found on PATH with everything
// under dir, waits until its socket answers, and restarts it if it dies
// until Stop. Its output goes to dir/containerd.log.
func StartDaemon(ctx context.Context, dir string, log *slog.Logger) (*Daemon, error) {
	bin, err := lookPath("containerd")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	d := &Daemon{Socket: filepath.Join(dir, "containerd.sock"), Dir: dir, log: log, bin: bin}
	if len(d.Socket) > 100 {
		return nil, fmt.Errorf("containerd socket path %s is too long for a unix socket; use a shorter --data-dir", d.Socket)
	}
	cfg := fmt.Sprintf(daemonConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"), d.Socket, d.Socket+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	d.out = logf
	if err := d.start(); err != nil {
		return nil, err
	}
	if err := d.waitReady(ctx, 15*time.Second); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH", name)
}

func (d *Daemon) start() error {
	os.Remove(d.Socket)
	cmd := exec.Command(d.bin, "--config", filepath.Join(d.Dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = d.out, d.out
	// Its own process group: a Ctrl-C on bonsai's terminal is bonsai's to
	// handle, and bonsai stops containerd in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	exited := make(chan struct{})
	d.mu.Lock()
	d.cmd, d.exited = cmd, exited
	d.mu.Unlock()
	go func() {
		err := cmd.Wait()
		close(exited)
		d.mu.Lock()
		stopped := d.stopped
		d.mu.Unlock()
		if stopped {
			return
		}
		d.log.Error("containerd exited; restarting it", "err", err, "log", filepath.Join(d.Dir, "containerd.log"))
		time.Sleep(time.Second)
		d.mu.Lock()
		stopped = d.stopped
		d.mu.Unlock()
		if !stopped {
			if err := d.start(); err != nil {
				d.log.Error("restarting containerd", "err", err)
			}
		}
	}()
	return nil
}

func (d *Daemon) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if c, err := net.DialTimeout("unix", d.Socket, time.Second); err == nil {
			c.Close()
			return nil
		}
		d.mu.Lock()
		exited := d.exited
		d.mu.Unlock()
		select {
		case <-exited:
			return fmt.Errorf("containerd exited at start: %s", lastLines(filepath.Join(d.Dir, "containerd.log"), 3))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("containerd did not open its socket within " + timeout.String())
		}
	}
}

// Stop ends containerd (SIGTERM, then SIGKILL after 10 s).
func (d *Daemon) Stop() {
	d.mu.Lock()
	d.stopped = true
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
	if c, ok := d.out.(io.Closer); ok {
		c.Close()
	}
}

// PID is containerd's process id (for measuring its memory).
func (d *Daemon) PID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

func lastLines(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
