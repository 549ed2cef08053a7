package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// Exec implements cri.Runtime: cmd runs as a new process of the
// container's task, with the container's user, env and working dir.
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	code, err := r.exec(ctx, id, cmd, in, out, errw, tty, resize)
	if err != nil {
		return err
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

func (r *Runtime) exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.Writer, tty bool, resize <-chan remotecommand.TerminalSize) (int, error) {
	nctx := r.nsctx(ctx)
	if len(cmd) == 0 {
		return 0, errors.New("exec: no command given")
	}
	// The shim refuses an exec without a terminal whose stdout or stderr
	// has no pipe: give it one that discards.
	if out == nil {
		out = io.Discard
	}
	if errw == nil && !tty {
		errw = io.Discard
	}
	c, err := r.client.LoadContainer(nctx, id)
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	task, err := c.Task(nctx, nil)
	if err != nil {
		return 0, fmt.Errorf("exec: container is not running: %w", err)
	}
	spec, err := c.Spec(nctx)
	if err != nil {
		return 0, err
	}
	ps := *spec.Process
	ps.Args, ps.Terminal = cmd, tty
	// The shim holds the stdin FIFO open itself, so the end of the
	// caller's input must be passed on with CloseIO.
	var stdinDone chan struct{}
	if in != nil {
		stdinDone = make(chan struct{})
		in = &eofReader{r: in, done: stdinDone}
	}
	opts := []cio.Opt{cio.WithStreams(in, out, errw), cio.WithFIFODir(r.cfg.StateDir)}
	if tty {
		opts = append(opts, cio.WithTerminal)
	}
	execID := "exec-" + newID()[:16]
	// The process must outlive a cancelled request only long enough to be
	// killed, so use a context that is not the request's.
	bg := r.nsctx(context.Background())
	proc, err := task.Exec(bg, execID, &ps, cio.NewCreator(opts...))
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	defer proc.Delete(bg, containerd.WithProcessKill)
	statusC, err := proc.Wait(bg)
	if err != nil {
		return 0, err
	}
	if err := proc.Start(bg); err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	if in == nil {
		proc.CloseIO(bg, containerd.WithStdinCloser)
	} else {
		go func() {
			select {
			case <-stdinDone:
				proc.CloseIO(bg, containerd.WithStdinCloser)
			case <-ctx.Done():
			}
		}()
	}
	if tty && resize != nil {
		go func() {
			for size := range resize {
				proc.Resize(bg, uint32(size.Width), uint32(size.Height))
			}
		}()
	}
	select {
	case st := <-statusC:
		proc.IO().Wait()
		code, _, err := st.Result()
		return int(code), err
	case <-ctx.Done():
		proc.Kill(bg, unix.SIGKILL)
		<-statusC
		return 0, ctx.Err()
	}
}

// ExecSync implements cri.Runtime.
func (r *Runtime) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, int, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var stdout, stderr bytes.Buffer
	code, err := r.exec(ctx, id, cmd, nil, &syncWriter{w: &stdout}, &syncWriter{w: &stderr}, false, nil)
	return stdout.Bytes(), stderr.Bytes(), code, err
}

// eofReader closes done once its reader is exhausted.
type eofReader struct {
	r    io.Reader
	done chan struct{}
	once sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(func() { close(e.done) })
	}
	return n, err
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Attach implements cri.Runtime: the caller sees the container's output
// from now on and, if the container has stdin, feeds it.
func (r *Runtime) Attach(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	r.mu.Lock()
	cio := r.ios[id]
	r.mu.Unlock()
	if cio == nil {
		return fmt.Errorf("attach: container %s is not running", id)
	}
	tap := &logTap{}
	if out != nil {
		tap.stdout = out
	}
	if errw != nil {
		tap.stderr = errw
	}
	cio.log.addTap(tap)
	defer cio.log.removeTap(tap)
	if in != nil && cio.dio.Stdin != nil {
		go io.Copy(cio.dio.Stdin, in)
	}
	if tty && resize != nil {
		nctx := r.nsctx(context.Background())
		if c, err := r.client.LoadContainer(nctx, id); err == nil {
			if task, err := c.Task(nctx, nil); err == nil {
				go func() {
					for size := range resize {
						task.Resize(nctx, uint32(size.Width), uint32(size.Height))
					}
				}()
			}
		}
	}
	select {
	case <-ctx.Done():
	case <-cio.done:
	}
	return nil
}

// PortForward implements cri.Runtime: it connects to port on the pod's
// loopback, inside the pod's network namespace.
func (r *Runtime) PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	sb, err := r.sandbox(r.nsctx(ctx), sandboxID)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	var conn net.Conn
	if sb.NetnsPath == "" {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp4", addr)
	} else {
		conn, err = dialInNetns(ctx, sb.NetnsPath, addr)
	}
	if err != nil {
		return fmt.Errorf("port-forward to pod %s/%s port %d: %w", sb.Namespace, sb.Name, port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(conn, stream); conn.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// dialInNetns opens a TCP connection from inside a network namespace: the
// socket is created while the OS thread is in the namespace and stays in
// it after the thread switches back.
func dialInNetns(ctx context.Context, netnsPath, addr string) (net.Conn, error) {
	target, err := os.Open(netnsPath)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter pod network namespace: %w", err)}
			return
		}
		c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp4", addr)
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			// Only a thread back in the host namespace may serve other
			// goroutines; otherwise it stays locked and dies with this one.
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	res := <-ch
	return res.c, res.err
}
