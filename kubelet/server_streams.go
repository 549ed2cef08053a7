package kubelet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"

	"bonsai.dev/bonsai/kubelet/cri"
)

// streamCreationTimeout bounds how long a client may take to open the
// streams of a session after the upgrade.
const streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout

// Protocols: SPDY sessions and the older WebSocket channel protocols are
// served by k8s.io/cri-streaming, as by the kubelet. WebSocket v5 (kubectl
// 1.30+ exec, attach and cp) and SPDY tunnelled through WebSocket (kubectl
// 1.31+ port-forward) are served here: kube-apiserver translates those
// for kubelets that lack them, bonsai's kubelet speaks them itself so the
// API server only has to pass the upgraded connection through.
const (
	wsProtocolV5          = remotecommand.StreamProtocolV5Name
	wsProtocolPortForward = portforward.WebsocketsSPDYTunnelingPortForwardV1
)

// serveExec serves /exec/{namespace}/{pod}/[{uid}/]{container}?command=...
func (s *Server) serveExec(w http.ResponseWriter, r *http.Request) {
	s.serveRemoteCommand(w, r, true)
}

// serveAttach serves /attach/{namespace}/{pod}/[{uid}/]{container}.
func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request) {
	s.serveRemoteCommand(w, r, false)
}

func (s *Server) serveRemoteCommand(w http.ResponseWriter, r *http.Request, exec bool) {
	ns, pod, uid, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container")
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()["command"]
	if exec && len(cmd) == 0 {
		http.Error(w, "you must specify at least one command for the container", http.StatusBadRequest)
		return
	}
	if s.cfg.Runtime == nil {
		http.Error(w, errNoRuntime.Error(), http.StatusNotFound)
		return
	}
	c, err := s.runningContainer(r.Context(), ns, pod, uid, container)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	rc := runtimeCommand{rt: s.cfg.Runtime, id: c.ID}
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		run := rc.attach
		if exec {
			run = func(ctx context.Context, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
				return rc.exec(ctx, cmd, in, out, errw, tty, resize)
			}
		}
		serveWebSocketV5(w, r, opts, s.cfg.StreamIdleTimeout, run)
		return
	}
	if exec {
		remotecommand.ServeExec(w, r, rc, pod, uid, container, cmd, opts, s.cfg.StreamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	} else {
		remotecommand.ServeAttach(w, r, rc, pod, uid, container, opts, s.cfg.StreamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	}
}

// runtimeCommand runs exec and attach on one resolved container.
type runtimeCommand struct {
	rt cri.Runtime
	id string
}

func (rc runtimeCommand) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	return rc.exec(ctx, cmd, in, out, errw, tty, resize)
}

func (rc runtimeCommand) exec(ctx context.Context, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return rc.rt.Exec(ctx, rc.id, cmd, in, out, errw, tty, resize)
}

func (rc runtimeCommand) AttachContainer(ctx context.Context, _, _, _ string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return rc.attach(ctx, in, out, errw, tty, resize)
}

func (rc runtimeCommand) attach(ctx context.Context, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return rc.rt.Attach(ctx, rc.id, in, out, errw, tty, resize)
}

// WebSocket channels of the remotecommand protocols.
const (
	chanStdin = iota
	chanStdout
	chanStderr
	chanError
	chanResize
)

// serveWebSocketV5 runs one exec or attach over the v5.channel.k8s.io
// WebSocket protocol: v4's channels and JSON status, plus the close
// signal that ends the command's stdin (what kubectl cp and exec -i with
// piped input need).
func serveWebSocketV5(w http.ResponseWriter, r *http.Request, opts *remotecommand.Options, idle time.Duration,
	run func(ctx context.Context, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error) {
	channel := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	channels := []wsstream.ChannelType{
		chanStdin:  channel(opts.Stdin, wsstream.ReadChannel),
		chanStdout: channel(opts.Stdout, wsstream.WriteChannel),
		chanStderr: channel(opts.Stderr, wsstream.WriteChannel),
		chanError:  wsstream.WriteChannel,
		chanResize: wsstream.ReadChannel,
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{wsProtocolV5: {Binary: true, Channels: channels}})
	conn.SetIdleTimeout(idle)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return // the handshake answered the client
	}
	defer conn.Close()
	// An empty first message tells the client the session is set up.
	switch {
	case opts.Stdout:
		streams[chanStdout].Write(nil)
	case opts.Stderr:
		streams[chanStderr].Write(nil)
	default:
		streams[chanError].Write(nil)
	}
	var in io.Reader
	var out, errw io.WriteCloser
	if opts.Stdin {
		in = streams[chanStdin]
	}
	if opts.Stdout {
		out = streams[chanStdout]
	}
	if opts.Stderr {
		errw = streams[chanStderr]
	}
	var resize chan remotecommand.TerminalSize
	if opts.TTY {
		resize = make(chan remotecommand.TerminalSize)
		go func() {
			defer close(resize)
			dec := json.NewDecoder(streams[chanResize])
			for {
				var size remotecommand.TerminalSize
				if dec.Decode(&size) != nil {
					return
				}
				select {
				case resize <- size:
				case <-r.Context().Done():
					return
				}
			}
		}()
	}
	err = run(r.Context(), in, out, errw, opts.TTY, resize)
	st := metav1.Status{Status: metav1.StatusSuccess}
	var exitErr utilexec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && exitErr.Exited():
		st = metav1.Status{
			Status: metav1.StatusFailure, Reason: remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", exitErr),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: remotecommand.ExitCodeCauseType, Message: fmt.Sprint(exitErr.ExitStatus())}}},
		}
	default:
		st = metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError, Code: http.StatusInternalServerError,
			Message: fmt.Sprintf("Internal error occurred: error executing command in container: %v", err)}
	}
	b, _ := json.Marshal(st)
	streams[chanError].Write(b)
}

// servePortForward serves /portForward/{namespace}/{pod}[/{uid}].
func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, pod, uid := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid")
	if s.cfg.Runtime == nil {
		http.Error(w, errNoRuntime.Error(), http.StatusNotFound)
		return
	}
	sb, err := s.podSandbox(r.Context(), ns, pod, uid)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	fwd := sandboxForwarder{rt: s.cfg.Runtime, id: sb.ID}
	if wsstream.IsWebSocketRequestWithTunnelingProtocol(r) {
		s.servePortForwardTunnel(w, r, fwd, pod, uid)
		return
	}
	v4, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, fwd, pod, uid, v4, s.cfg.StreamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

type sandboxForwarder struct {
	rt cri.Runtime
	id string
}

func (f sandboxForwarder) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	return f.rt.PortForward(ctx, f.id, port, stream)
}

// servePortForwardTunnel serves kubectl 1.31+'s port-forward: a WebSocket
// whose binary messages carry a SPDY port-forward session. The WebSocket
// is the connection the SPDY server is handed, as if it had been upgraded
// from plain HTTP.
func (s *Server) servePortForwardTunnel(w http.ResponseWriter, r *http.Request, fwd sandboxForwarder, pod, uid string) {
	ws := websocket.Server{
		Handshake: func(cfg *websocket.Config, _ *http.Request) error {
			for _, p := range cfg.Protocol {
				if strings.TrimSpace(p) == wsProtocolPortForward {
					cfg.Protocol = []string{wsProtocolPortForward}
					return nil
				}
			}
			return fmt.Errorf("requested protocol(s) are not supported: %v; supports %v", cfg.Protocol, []string{wsProtocolPortForward})
		},
		Handler: func(conn *websocket.Conn) {
			conn.PayloadType = websocket.BinaryFrame
			inner := r.Clone(r.Context())
			inner.Header = http.Header{}
			inner.Header.Set("Connection", "Upgrade")
			inner.Header.Set("Upgrade", "SPDY/3.1")
			inner.Header.Set("X-Stream-Protocol-Version", portforward.PortForwardV1Name)
			tw := &tunnelResponseWriter{conn: conn, header: http.Header{}}
			portforward.ServePortForward(tw, inner, fwd, pod, uid, nil, s.cfg.StreamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
		},
	}
	ws.ServeHTTP(w, r)
}

// tunnelResponseWriter hands the SPDY upgrader the WebSocket as its
// hijacked connection. The WebSocket handshake already answered the
// client, so the upgrader's own response goes nowhere.
type tunnelResponseWriter struct {
	conn   net.Conn
	header http.Header
}

func (t *tunnelResponseWriter) Header() http.Header         { return t.header }
func (t *tunnelResponseWriter) WriteHeader(int)             {}
func (t *tunnelResponseWriter) Write(p []byte) (int, error) { return len(p), nil }

func (t *tunnelResponseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return t.conn, bufio.NewReadWriter(bufio.NewReader(t.conn), bufio.NewWriter(t.conn)), nil
}
