package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"bonsai.dev/bonsai/apiserver/params"
	"bonsai.dev/bonsai/kubelet/cri"
)

// DefaultPort is the kubelet API's port, as Kubernetes' --port.
const DefaultPort = 10250

// groupMasters is Kubernetes' superuser group, which may call the kubelet
// API as well as the API server's own client identity.
const groupMasters = "system:masters"

// ServerConfig is what the kubelet's HTTPS server needs: the API server
// calls it for kubectl logs, exec, attach and port-forward.
type ServerConfig struct {
	// Runtime runs the node's containers; nil for a node without any
	// (the simulated runtime), whose logs are empty and which has nothing
	// to exec into.
	Runtime cri.Runtime
	// Cert is the serving certificate; ClientCAs verify callers.
	Cert      tls.Certificate
	ClientCAs *x509.CertPool
	// GetCertificate, when set, is asked for the serving certificate on
	// every handshake instead of Cert, so a renewed one is served at
	// once.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Now is the clock client certificates are checked against
	// (time.Now when nil).
	Now func() time.Time
	// AuthorizedUsers may call every endpoint (the API server's
	// kubelet-client identity); so may members of system:masters.
	AuthorizedUsers []string
	// StreamIdleTimeout closes an exec, attach or port-forward session
	// with no traffic for this long (the kubelet's
	// streamingConnectionIdleTimeout, 4 h by default).
	StreamIdleTimeout time.Duration
	// Waiting, when set, says why a container the runtime has no
	// instance of yet waits (PodStates.Waiting): the logs of such a
	// container are refused with the kubelet's message for the reason.
	Waiting func(namespace, pod, container string) (reason string, ok bool)
	// Stats, when set, serves /stats/summary and /metrics/resource.
	Stats *StatsSampler
	// Pods, when set, serves /pods: the pods the node runs.
	Pods   func() []corev1.Pod
	Logger *slog.Logger
}

// Server is the kubelet API: /containerLogs, /exec, /attach,
// /portForward, /healthz, /pods, /stats/summary and /metrics/resource, with the paths and queries of Kubernetes'
// kubelet, so the API server proxies to it as kube-apiserver does.
type Server struct {
	cfg ServerConfig
	mux *http.ServeMux
}

// NewServer builds the kubelet API server.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StreamIdleTimeout <= 0 {
		cfg.StreamIdleTimeout = 4 * time.Hour
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	s.mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.serveLogs)
	if cfg.Pods != nil {
		s.mux.HandleFunc("GET /pods", func(w http.ResponseWriter, r *http.Request) {
			list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: cfg.Pods()}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(&list)
		})
	}
	if cfg.Stats != nil {
		s.mux.HandleFunc("GET /stats/summary", s.serveSummary)
		s.mux.Handle("GET /metrics/resource", resourceMetricsHandler(cfg.Stats))
	}
	for _, m := range []string{"GET", "POST"} {
		s.mux.HandleFunc(m+" /exec/{namespace}/{pod}/{container}", s.serveExec)
		s.mux.HandleFunc(m+" /exec/{namespace}/{pod}/{uid}/{container}", s.serveExec)
		s.mux.HandleFunc(m+" /attach/{namespace}/{pod}/{container}", s.serveAttach)
		s.mux.HandleFunc(m+" /attach/{namespace}/{pod}/{uid}/{container}", s.serveAttach)
		s.mux.HandleFunc(m+" /portForward/{namespace}/{pod}", s.servePortForward)
		s.mux.HandleFunc(m+" /portForward/{namespace}/{pod}/{uid}", s.servePortForward)
	}
	return s
}

// ServeHTTP authorizes the caller by its verified client certificate, then
// serves the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	leaf := r.TLS.VerifiedChains[0][0]
	user, groups := leaf.Subject.CommonName, leaf.Subject.Organization
	// Any cluster identity may ask whether the kubelet is up.
	if r.URL.Path != "/healthz" && !slices.Contains(s.cfg.AuthorizedUsers, user) && !slices.Contains(groups, groupMasters) {
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=proxy)", user, strings.ToLower(r.Method)), http.StatusForbidden)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// TLSConfig is the server's TLS: client certificates are verified when
// given (the handler refuses requests without one), and only HTTP/1.1 is
// offered because SPDY and WebSocket upgrades need it.
func (s *Server) TLSConfig() *tls.Config {
	c := &tls.Config{
		Certificates:   []tls.Certificate{s.cfg.Cert},
		GetCertificate: s.cfg.GetCertificate,
		Time:           s.cfg.Now,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      s.cfg.ClientCAs,
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"http/1.1"},
	}
	if s.cfg.GetCertificate != nil {
		c.Certificates = nil
	}
	return c
}

// debugErrors logs a library's errors at debug level.
type debugErrors struct{ logr.LogSink }

func (d debugErrors) Error(err error, msg string, kv ...any) {
	d.LogSink.Info(1, msg, append(kv, "err", err)...)
}

func (d debugErrors) Enabled(level int) bool { return d.LogSink.Enabled(level) }

// Serve serves HTTPS on ln until ctx ends; open streams are closed then.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		TLSConfig:         s.TLSConfig(),
		ReadHeaderTimeout: 10 * time.Second, // and the TLS handshake's
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelDebug),
		// The streaming libraries log through the request's klog logger;
		// a client hanging up ends every stream with "use of closed
		// network connection", which is news to no one: their errors
		// are debug lines here.
		BaseContext: func(net.Listener) context.Context {
			return klog.NewContext(ctx, logr.New(debugErrors{logr.FromSlogHandler(s.cfg.Logger.Handler()).GetSink()}))
		},
	}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	err := srv.Serve(tls.NewListener(ln, srv.TLSConfig))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// errNoRuntime answers stream requests on a node without containers.
var errNoRuntime = errors.New("this node's runtime runs no containers")

// containersOf lists the instances of one container of a pod, newest
// first, narrowed to the newest pod of that name (a pod deleted and
// created again keeps its name but not its UID).
func (s *Server) containersOf(ctx context.Context, namespace, pod, uid, container string) ([]cri.ContainerStatus, error) {
	all, err := s.cfg.Runtime.ListContainers(ctx)
	if err != nil {
		return nil, err
	}
	var out []cri.ContainerStatus
	for _, c := range all {
		l := c.Labels
		if l[cri.LabelPodNamespace] != namespace || l[cri.LabelPodName] != pod || l[cri.LabelContainerName] != container {
			continue
		}
		if uid != "" && l[cri.LabelPodUID] != uid {
			continue
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, nil
	}
	newest := out[0]
	for _, c := range out[1:] {
		if c.CreatedAt.After(newest.CreatedAt) {
			newest = c
		}
	}
	out = slices.DeleteFunc(out, func(c cri.ContainerStatus) bool {
		return c.Labels[cri.LabelPodUID] != newest.Labels[cri.LabelPodUID]
	})
	// Newest instance first: the highest attempt, then the latest created.
	sort.Slice(out, func(i, j int) bool {
		if out[i].Attempt != out[j].Attempt {
			return out[i].Attempt > out[j].Attempt
		}
		return out[i].CreatedAt.After(out[j].CreatedAt)
	})
	return out, nil
}

// runningContainer is the container exec and attach go to: the running
// instance with the highest attempt.
func (s *Server) runningContainer(ctx context.Context, namespace, pod, uid, container string) (cri.ContainerStatus, error) {
	cs, err := s.containersOf(ctx, namespace, pod, uid, container)
	if err != nil {
		return cri.ContainerStatus{}, err
	}
	for _, c := range cs {
		if c.State == cri.ContainerRunning {
			return c, nil
		}
	}
	return cri.ContainerStatus{}, fmt.Errorf("container not found (%q)", container)
}

// podSandbox is the newest sandbox of a pod, for port-forward.
func (s *Server) podSandbox(ctx context.Context, namespace, pod, uid string) (cri.Sandbox, error) {
	sbs, err := s.cfg.Runtime.ListPodSandboxes(ctx)
	if err != nil {
		return cri.Sandbox{}, err
	}
	var found *cri.Sandbox
	for i, sb := range sbs {
		if sb.Config.Namespace != namespace || sb.Config.Name != pod || (uid != "" && sb.Config.PodUID != uid) {
			continue
		}
		if found == nil || sb.CreatedAt.After(found.CreatedAt) {
			found = &sbs[i]
		}
	}
	if found == nil {
		return cri.Sandbox{}, fmt.Errorf("pod %q does not exist", pod)
	}
	return *found, nil
}

// serveLogs serves GET /containerLogs/{namespace}/{pod}/{container} with
// the query of corev1.PodLogOptions, as the kubelet does.
func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	opts, previous, err := parseLogQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.cfg.Runtime == nil {
		w.Header().Set("Content-Type", "text/plain")
		return
	}
	cs, err := s.containersOf(r.Context(), ns, pod, "", container)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var c cri.ContainerStatus
	switch {
	case previous && len(cs) < 2:
		http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", container, pod), http.StatusBadRequest)
		return
	case previous:
		c = cs[1]
	case len(cs) == 0:
		reason := "ContainerCreating"
		if s.cfg.Waiting != nil {
			if r, ok := s.cfg.Waiting(ns, pod, container); ok && r != "" {
				reason = r
			}
		}
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: %s", container, pod, waitingMessage(reason)), http.StatusBadRequest)
		return
	default:
		c = cs[0]
	}
	if c.LogPath == "" {
		http.Error(w, fmt.Sprintf("container %q in pod %q has no log file", container, pod), http.StatusBadRequest)
		return
	}
	var running func() bool
	if opts.follow {
		rt, id := s.cfg.Runtime, c.ID
		running = func() bool {
			st, err := rt.ContainerStatus(r.Context(), id)
			return err == nil && st.State == cri.ContainerRunning
		}
	}
	fw := &flushWriter{w: w}
	fw.f, _ = w.(http.Flusher)
	w.Header().Set("Content-Type", "text/plain")
	// Opening the file first keeps an error a 400 rather than a cut-off
	// 200; readCRILog opens it again, which is cheap.
	if f, err := os.Open(c.LogPath); err != nil {
		http.Error(w, fmt.Sprintf("failed to read log of container %q in pod %q: %v", container, pod, err), http.StatusBadRequest)
		return
	} else {
		f.Close()
	}
	if err := readCRILog(r.Context(), c.LogPath, opts, fw, running); err != nil && r.Context().Err() == nil {
		s.cfg.Logger.Debug("reading container log", "pod", ns+"/"+pod, "container", container, "err", err)
	}
}

// waitingMessage is how the kubelet words a waiting reason in the answer
// to a logs request: the two image pull failures in words, any other
// reason as it is.
func waitingMessage(reason string) string {
	switch reason {
	case "ErrImagePull":
		return "image can't be pulled"
	case "ImagePullBackOff":
		return "trying and failing to pull image"
	}
	return reason
}

// parseLogQuery reads the containerLogs query: follow, previous,
// timestamps, tailLines, limitBytes, sinceSeconds, sinceTime and stream.
func parseLogQuery(r *http.Request) (logOptions, bool, error) {
	opts := logOptions{tail: -1}
	o, err := params.PodLog(r.URL.Query())
	if err != nil {
		return opts, false, err
	}
	opts.follow, opts.timestamps = o.Follow, o.Timestamps
	if o.TailLines != nil {
		if opts.tail = *o.TailLines; opts.tail < 0 {
			return opts, false, errors.New("tailLines: must be greater than or equal to 0")
		}
	}
	if o.LimitBytes != nil {
		if opts.limitBytes = *o.LimitBytes; opts.limitBytes < 1 {
			return opts, false, errors.New("limitBytes: must be greater than 0")
		}
	}
	if o.SinceSeconds != nil {
		if *o.SinceSeconds < 1 {
			return opts, false, errors.New("sinceSeconds: must be greater than 0")
		}
		opts.since = time.Now().Add(-time.Duration(*o.SinceSeconds) * time.Second)
	}
	if o.SinceTime != nil {
		if o.SinceSeconds != nil {
			return opts, false, errors.New("at most one of `sinceTime` or `sinceSeconds` may be specified")
		}
		opts.since = o.SinceTime.Time
	}
	var stream string
	if o.Stream != nil {
		stream = *o.Stream
	}
	switch v := stream; v {
	case "", corev1.LogStreamAll:
	case corev1.LogStreamStdout:
		opts.stream = "stdout"
	case corev1.LogStreamStderr:
		opts.stream = "stderr"
	default:
		return opts, false, fmt.Errorf("stream: %q is not one of All, Stdout, Stderr", v)
	}
	return opts, o.Previous, nil
}

// flushWriter sends each write to the client at once: kubectl logs -f
// must see a line when the container writes it.
type flushWriter struct {
	w interface{ Write([]byte) (int, error) }
	f http.Flusher
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	if fw.f != nil {
		fw.f.Flush()
	}
	return n, err
}
