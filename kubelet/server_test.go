package kubelet

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/klog/v2"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/kubelet/containerd"
	"bonsai.dev/bonsai/kubelet/containerd/ctdtest"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// streamEnv is a real containerd, this package's kubelet API server and
// an in-process API server on TLS, with the pod "web" on node "n1" whose
// containers the test made through the runtime, labelled as the pod
// workers label them.
type streamEnv struct {
	rt         *containerd.Runtime
	dir        string
	cs         kubernetes.Interface
	cfg        *rest.Config
	kubeconfig string
	certs      *pki.Certs
	kubeletURL string
	pod        *corev1.Pod
	sandbox    string
	upgrades   *upgradeLog
}

const httpPort = 8080 // busybox httpd inside the pod's own netns

// upgradeLog records how each request reached the kubelet: the protocol a
// client picked, which shows that kubectl really used WebSocket (or SPDY).
type upgradeLog struct {
	mu   sync.Mutex
	seen []string
}

func (u *upgradeLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, fmt.Sprintf("%s %s %s%s", strings.SplitN(r.URL.Path, "/", 3)[1], r.Header.Get("Upgrade"),
			r.Header.Get("Sec-Websocket-Protocol"), r.Header.Get("X-Stream-Protocol-Version")))
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (u *upgradeLog) since(n int) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen[n:]...)
}

func (u *upgradeLog) len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

// newNetns makes a network namespace with loopback up for the pod, so its
// port 8080 is its own; it is removed at cleanup.
func newNetns(t *testing.T) string {
	t.Helper()
	ip, err := testenv.LookPath("ip")
	testenv.Require(t, err == nil, "ip (Debian package iproute2): %v", err)
	testenv.Require(t, os.Geteuid() == 0, "network namespaces need root")
	b := make([]byte, 4)
	rand.Read(b)
	name := "bonsai-stream-" + hex.EncodeToString(b)
	if out, err := exec.Command(ip, "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(ip, "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	if out, err := exec.Command(ip, "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("loopback up: %v: %s", err, out)
	}
	return "/run/netns/" + name
}

func startStreamEnv(t *testing.T) *streamEnv {
	t.Helper()
	netnsPath := newNetns(t)
	rt, dir := ctdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// client-go and the streaming libraries log every closed stream
	// through klog; ending sessions on purpose is what these tests do.
	klog.SetSlogLogger(quiet)
	t.Cleanup(func() { klog.ClearLogger() })

	sans := pki.SANs{DNSNames: []string{"localhost"}, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	certs, err := pki.Open(pki.Options{Dir: filepath.Join(dir, "tls"), SANs: sans, KubeletSANs: &sans})
	if err != nil {
		t.Fatal(err)
	}

	// The kubelet API, as cmd/bonsai serves it.
	// No agent runs here; as the agent would, Waiting says that brief,
	// which the test never creates, waits for its image.
	waiting := func(ns, pod, container string) (string, bool) {
		return "ImagePullBackOff", ns == "default" && pod == "web" && container == "brief"
	}
	ksrv := NewServer(ServerConfig{Runtime: rt, GetCertificate: certs.KubeletServing.GetCertificate, ClientCAs: certs.CA.Pool(),
		AuthorizedUsers: []string{pki.KubeletClientUser}, Waiting: waiting, Logger: quiet})
	upgrades := &upgradeLog{}
	kln, err := tls.Listen("tcp", "127.0.0.1:0", ksrv.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	khttp := &http.Server{Handler: upgrades.wrap(ksrv), ErrorLog: slog.NewLogLogger(quiet.Handler(), slog.LevelError)}
	go khttp.Serve(kln)
	t.Cleanup(func() { khttp.Close() })
	kport := kln.Addr().(*net.TCPAddr).Port

	// The API server, on TLS so that clients can upgrade connections.
	st, err := store.OpenBadger(store.BadgerOptions{Dir: filepath.Join(dir, "db")})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{
		Store: st, Authenticator: authn.NewX509(certs.CA.Pool()), Logger: quiet,
		KubeletTLS: &tls.Config{GetClientCertificate: certs.KubeletClient.GetClientCertificate, RootCAs: certs.CA.Pool()},
	})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	aln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: certs.Serving.GetCertificate,
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: certs.CA.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	ahttp := &http.Server{Handler: api.Handler(), ErrorLog: slog.NewLogLogger(quiet.Handler(), slog.LevelError)}
	go ahttp.Serve(aln)
	t.Cleanup(func() { api.Shutdown(); ahttp.Close(); st.Close() })
	apiURL := "https://" + aln.Addr().String()
	adminCert, adminKey := certs.Admin.PEM()
	cfg := &rest.Config{Host: apiURL, TLSClientConfig: rest.TLSClientConfig{CAData: certs.CA.CertPEM, CertData: adminCert, KeyData: adminKey}}
	cs := kubernetes.NewForConfigOrDie(cfg)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := pki.WriteKubeconfig(kubeconfig, apiURL, certs.CA.CertPEM, adminCert, adminKey); err != nil {
		t.Fatal(err)
	}

	// The Node, as the agent registers it: the API server finds the
	// kubelet at its InternalIP and reported port.
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: "n1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(kport)
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	for _, c := range []string{"main", "ticker", "attach", "brief"} {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: ctdtest.Image})
	}
	if pod, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// What the pod worker reports; kubectl port-forward wants Running.
	pod.Status.Phase = corev1.PodRunning
	if pod, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	e := &streamEnv{rt: rt, dir: dir, cs: cs, cfg: cfg, kubeconfig: kubeconfig, certs: certs, pod: pod, upgrades: upgrades,
		kubeletURL: fmt.Sprintf("https://127.0.0.1:%d", kport)}
	e.sandbox, err = rt.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Hostname: pod.Name, NetnsPath: netnsPath})
	if err != nil {
		t.Fatal(err)
	}
	// main's first run ended; its second one serves HTTP in the pod.
	first := e.run(t, "main", 0, false, "echo previous run; exit 1")
	waitState(t, rt, first, cri.ContainerExited)
	e.run(t, "main", 1, false, fmt.Sprintf("echo a; echo b; echo c; mkdir -p /tmp/www; echo hello-pf > /tmp/www/index.html; exec httpd -f -p %d -h /tmp/www", httpPort))
	e.run(t, "ticker", 0, false, "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done")
	e.run(t, "attach", 0, true, "cat")
	return e
}

// run starts one container of the pod, as a pod worker would.
func (e *streamEnv) run(t *testing.T, name string, attempt uint32, stdin bool, script string) string {
	t.Helper()
	ctx := context.Background()
	uid := string(e.pod.UID)
	id, err := e.rt.CreateContainer(ctx, e.sandbox, cri.ContainerConfig{
		Name: name, Attempt: attempt, Image: ctdtest.Image, Command: []string{"sh", "-c", script}, Stdin: stdin,
		LogPath: filepath.Join(e.dir, "pods", e.pod.Namespace+"_"+e.pod.Name+"_"+uid, name, fmt.Sprintf("%d.log", attempt)),
		Labels:  map[string]string{cri.LabelPodUID: uid, cri.LabelPodName: e.pod.Name, cri.LabelPodNamespace: e.pod.Namespace, cri.LabelContainerName: name},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rt.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func waitState(t *testing.T, rt cri.Runtime, id string, want cri.ContainerState) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := rt.ContainerStatus(context.Background(), id)
		if err == nil && st.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s: %v, %v; want %v", id, st.State, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *streamEnv) logs(t *testing.T, opts corev1.PodLogOptions) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc, err := e.cs.CoreV1().Pods("default").GetLogs("web", &opts).Stream(ctx)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// waitLogs polls until the container's log is what it will stay.
func (e *streamEnv) waitLogs(t *testing.T, opts corev1.PodLogOptions, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := e.logs(t, opts)
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs %+v = %q, %v; want %q", opts, got, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *streamEnv) streamURL(sub string, params url.Values) *url.URL {
	u := e.cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("web").SubResource(sub).URL()
	u.RawQuery = params.Encode()
	return u
}

func int64ptr(v int64) *int64 { return &v }

func TestStreamingThroughAPIServer(t *testing.T) {
	e := startStreamEnv(t)

	t.Run("logs", func(t *testing.T) {
		e.waitLogs(t, corev1.PodLogOptions{Container: "main"}, "a\nb\nc\n")
		for _, tc := range []struct {
			name string
			opts corev1.PodLogOptions
			want string
		}{
			{name: "tail", opts: corev1.PodLogOptions{Container: "main", TailLines: int64ptr(2)}, want: "b\nc\n"},
			{name: "limit bytes", opts: corev1.PodLogOptions{Container: "main", LimitBytes: int64ptr(3)}, want: "a\nb"},
			{name: "previous", opts: corev1.PodLogOptions{Container: "main", Previous: true}, want: "previous run\n"},
			{name: "since the future", opts: corev1.PodLogOptions{Container: "main", SinceTime: &metav1.Time{Time: time.Now().Add(time.Hour)}}, want: ""},
			{name: "since seconds", opts: corev1.PodLogOptions{Container: "main", SinceSeconds: int64ptr(3600)}, want: "a\nb\nc\n"},
		} {
			got, err := e.logs(t, tc.opts)
			if err != nil || got != tc.want {
				t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
			}
		}
		got, err := e.logs(t, corev1.PodLogOptions{Container: "main", Timestamps: true, TailLines: int64ptr(1)})
		ts, line, _ := strings.Cut(got, " ")
		if _, perr := time.Parse(time.RFC3339Nano, ts); err != nil || perr != nil || line != "c\n" {
			t.Errorf("timestamps: %q, %v", got, err)
		}
		// No previous instance: the kubelet's message, as a 400.
		_, err = e.logs(t, corev1.PodLogOptions{Container: "ticker", Previous: true})
		if !apierrors.IsBadRequest(err) || err.Error() != `previous terminated container "ticker" in pod "web" not found` {
			t.Errorf("previous of a first run: %v", err)
		}
		_, err = e.logs(t, corev1.PodLogOptions{})
		if !apierrors.IsBadRequest(err) || err.Error() != "a container name must be specified for pod web, choose one of: [main ticker attach brief]" {
			t.Errorf("no container: %v", err)
		}
		// brief has not started: waiting, in the kubelet's words for
		// the agent's reason.
		_, err = e.logs(t, corev1.PodLogOptions{Container: "brief"})
		if !apierrors.IsBadRequest(err) || err.Error() != `container "brief" in pod "web" is waiting to start: trying and failing to pull image` {
			t.Errorf("not started: %v", err)
		}
	})

	t.Run("logs follow", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rc, err := e.cs.CoreV1().Pods("default").GetLogs("web", &corev1.PodLogOptions{Container: "ticker", Follow: true, TailLines: int64ptr(1)}).Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		buf := make([]byte, 0, 256)
		var n int
		for strings.Count(string(buf), "\n") < 4 {
			chunk := make([]byte, 64)
			m, err := rc.Read(chunk)
			if err != nil {
				t.Fatalf("after %q: %v", buf, err)
			}
			buf, n = append(buf, chunk[:m]...), n+1
		}
		lines := strings.Split(strings.TrimSpace(string(buf)), "\n")
		for i := 1; i < len(lines); i++ {
			var a, b int
			fmt.Sscanf(lines[i-1], "tick %d", &a)
			fmt.Sscanf(lines[i], "tick %d", &b)
			if b != a+1 {
				t.Fatalf("followed lines %q are not consecutive", lines)
			}
		}

		// A follow ends when the container does, with all its output.
		e.run(t, "brief", 0, false, "echo start; sleep 2; echo end")
		e.waitLogs(t, corev1.PodLogOptions{Container: "brief", TailLines: int64ptr(1)}, "start\n")
		start := time.Now()
		got, err := e.logs(t, corev1.PodLogOptions{Container: "brief", Follow: true})
		if err != nil || got != "start\nend\n" {
			t.Fatalf("follow to the end: %q, %v", got, err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("follow outlived the container by far")
		}
	})

	executors := map[string]func(*url.URL) (remotecommand.Executor, error){
		"spdy": func(u *url.URL) (remotecommand.Executor, error) {
			return remotecommand.NewSPDYExecutor(e.cfg, "POST", u)
		},
		"websocket": func(u *url.URL) (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(e.cfg, "GET", u.String())
		},
	}
	for proto, newExec := range executors {
		t.Run("exec over "+proto, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			params := url.Values{"container": {"main"}, "stdout": {"true"}, "stderr": {"true"}, "command": {"sh", "-c", "echo out; echo err >&2; exit 3"}}
			ex, err := newExec(e.streamURL("exec", params))
			if err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb})
			var code interface{ ExitStatus() int }
			if !errors.As(err, &code) || code.ExitStatus() != 3 || out.String() != "out\n" || errb.String() != "err\n" {
				t.Fatalf("exec: %v (%T), stdout %q stderr %q", err, err, out.String(), errb.String())
			}

			// stdin's end reaches the command (v5's close signal on
			// WebSocket): cat exits.
			params = url.Values{"container": {"main"}, "stdin": {"true"}, "stdout": {"true"}, "command": {"cat"}}
			ex, _ = newExec(e.streamURL("exec", params))
			out.Reset()
			if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("piped\n"), Stdout: &out}); err != nil || out.String() != "piped\n" {
				t.Fatalf("exec cat: %q, %v", out.String(), err)
			}

			// A terminal, and its size from the client.
			params = url.Values{"container": {"main"}, "stdin": {"true"}, "stdout": {"true"}, "tty": {"true"}, "command": {"sh", "-c", "sleep 0.5; stty size; tty"}}
			ex, _ = newExec(e.streamURL("exec", params))
			out.Reset()
			sizes := &sizeQueue{sizes: []remotecommand.TerminalSize{{Width: 123, Height: 45}}}
			pr, pw := io.Pipe()
			defer pw.Close()
			if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: &out, Tty: true, TerminalSizeQueue: sizes}); err != nil {
				t.Fatal(err)
			}
			if got := strings.ReplaceAll(out.String(), "\r", ""); !strings.HasPrefix(got, "45 123\n/dev/pts/") {
				t.Fatalf("tty exec output %q", got)
			}
		})

		t.Run("attach over "+proto, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			params := url.Values{"container": {"attach"}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}}
			ex, err := newExec(e.streamURL("attach", params))
			if err != nil {
				t.Fatal(err)
			}
			pr, pw := io.Pipe()
			out := &lineWaiter{want: "ping-" + proto + "\n", got: make(chan struct{})}
			done := make(chan error, 1)
			sctx, stop := context.WithCancel(ctx)
			go func() {
				done <- ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: pr, Stdout: out, Stderr: io.Discard})
			}()
			// The attached cat echoes what we send; a session only ends
			// when the client leaves.
			go func() {
				for {
					select {
					case <-out.got:
						return
					case <-time.After(200 * time.Millisecond):
						pw.Write([]byte("ping-" + proto + "\n"))
					}
				}
			}()
			select {
			case <-out.got:
			case err := <-done:
				t.Fatalf("attach ended: %v", err)
			case <-ctx.Done():
				t.Fatalf("attach saw %q", out.String())
			}
			stop()
			pw.Close()
			<-done
		})
	}

	t.Run("port-forward", func(t *testing.T) {
		u := e.streamURL("portforward", nil)
		rt, upgrader, err := spdy.RoundTripperFor(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		tunnel, err := portforward.NewSPDYOverWebsocketDialer(u, e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for name, d := range map[string]httpstream.Dialer{
			"spdy":                spdy.NewDialer(upgrader, &http.Client{Transport: rt}, "POST", u),
			"spdy over websocket": tunnel,
		} {
			before := e.upgrades.len()
			body := portForwardGet(t, d)
			if body != "hello-pf\n" {
				t.Errorf("%s: GET through the forward: %q", name, body)
			}
			seen := strings.Join(e.upgrades.since(before), "; ")
			want := "portForward SPDY/3.1 portforward.k8s.io"
			if name != "spdy" {
				want = "portForward websocket SPDY/3.1+portforward.k8s.io"
			}
			if !strings.Contains(seen, want) {
				t.Errorf("%s reached the kubelet as %q, want %q", name, seen, want)
			}
		}
	})

	t.Run("kubelet API authorization", func(t *testing.T) {
		get := func(cert []tls.Certificate, path string) int {
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.certs.CA.Pool(), Certificates: cert}}}
			resp, err := c.Get(e.kubeletURL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		admin, err := tls.X509KeyPair(e.certs.Admin.PEM())
		if err != nil {
			t.Fatal(err)
		}
		otherCert, otherKey, err := e.certs.CA.IssueClient("system:node:n1", []string{"system:nodes"})
		if err != nil {
			t.Fatal(err)
		}
		other, _ := tls.X509KeyPair(otherCert, otherKey)
		logs := "/containerLogs/default/web/main"
		for _, tc := range []struct {
			name string
			cert []tls.Certificate
			path string
			want int
		}{
			{"anonymous", nil, logs, 401},
			{"anonymous health", nil, "/healthz", 401},
			{"another identity", []tls.Certificate{other}, logs, 403},
			{"another identity's health check", []tls.Certificate{other}, "/healthz", 200},
			{"system:masters", []tls.Certificate{admin}, logs, 200},
		} {
			if got := get(tc.cert, tc.path); got != tc.want {
				t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
			}
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		for _, k := range testenv.Kubectls(t) {
			t.Run(k.Version, func(t *testing.T) { e.testKubectl(t, k) })
		}
	})
}

// lineWaiter closes got once want has been written to it.
type lineWaiter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	got  chan struct{}
	once sync.Once
}

func (l *lineWaiter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if strings.Contains(l.buf.String(), l.want) {
		l.once.Do(func() { close(l.got) })
	}
	return len(p), nil
}

func (l *lineWaiter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type sizeQueue struct {
	mu    sync.Mutex
	sizes []remotecommand.TerminalSize
}

// Next hands out the sizes, then blocks: nil would end the resize stream.
func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	q.mu.Lock()
	if len(q.sizes) > 0 {
		s := q.sizes[0]
		q.sizes = q.sizes[1:]
		q.mu.Unlock()
		return &s
	}
	q.mu.Unlock()
	select {}
}

// portForwardGet forwards a free local port to the pod's 8080 through
// dialer and returns the body of one GET through it.
func portForwardGet(t *testing.T, dialer httpstream.Dialer) string {
	t.Helper()
	stop, ready := make(chan struct{}), make(chan struct{})
	var errOut bytes.Buffer
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", httpPort)}, stop, ready, io.Discard, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	defer func() {
		close(stop)
		<-done
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward: %v (%s)", err, errOut.String())
	case <-time.After(20 * time.Second):
		t.Fatal("port-forward not ready")
	}
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[0].Local))
	if err != nil {
		t.Fatalf("GET through the forward: %v (%s)", err, errOut.String())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// kubectl runs one kubectl against the test's API server.
func (e *streamEnv) kubectl(t *testing.T, k testenv.Kubectl, stdin string, timeout time.Duration, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.Path, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, "HOME="+e.dir)
	cmd.Dir = e.dir
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func (e *streamEnv) testKubectl(t *testing.T, k testenv.Kubectl) {
	ok := func(stdin string, want string, args ...string) {
		t.Helper()
		out, stderr, err := e.kubectl(t, k, stdin, 60*time.Second, args...)
		if err != nil || out != want {
			t.Errorf("kubectl %s: %q, %v (%s); want %q", strings.Join(args, " "), out, err, stderr, want)
		}
	}
	ok("", "c\n", "logs", "web", "-c", "main", "--tail=1")
	ok("", "previous run\n", "logs", "web", "-c", "main", "--previous")
	ok("", "a\nb", "logs", "web", "-c", "main", "--limit-bytes=3")
	out, _, err := e.kubectl(t, k, "", 60*time.Second, "logs", "web", "-c", "main", "--timestamps", "--tail=1")
	if ts, line, _ := strings.Cut(out, " "); err != nil || line != "c\n" || !strings.HasPrefix(ts, time.Now().UTC().Format("2006-")) {
		t.Errorf("logs --timestamps: %q, %v", out, err)
	}
	out, stderr, err := e.kubectl(t, k, "", 60*time.Second, "logs", "web", "--all-containers", "--prefix", "--tail=1")
	if err != nil || !strings.Contains(out, "[pod/web/main] c\n") || !strings.Contains(out, "[pod/web/ticker] tick ") || !strings.Contains(out, "[pod/web/brief] end\n") {
		t.Errorf("logs --all-containers: %q, %v (%s)", out, err, stderr)
	}
	_, stderr, err = e.kubectl(t, k, "", 60*time.Second, "logs", "web", "-c", "ticker", "--previous")
	if err == nil || !strings.Contains(stderr, `previous terminated container "ticker" in pod "web" not found`) {
		t.Errorf("logs --previous of a first run: %v, %s", err, stderr)
	}
	// -f runs until killed; it must have shown new lines by then.
	out, _, _ = e.kubectl(t, k, "", 3*time.Second, "logs", "web", "-c", "ticker", "-f", "--tail=1")
	if strings.Count(out, "tick ") < 3 {
		t.Errorf("logs -f showed %q", out)
	}

	before := e.upgrades.len()
	ok("", "hi\n", "exec", "web", "-c", "main", "--", "echo", "hi")
	ok("piped through\n", "piped through\n", "exec", "-i", "web", "-c", "main", "--", "cat")
	wantExec := "exec SPDY/3.1 v4.channel.k8s.io"
	if k.Minor >= 30 {
		wantExec = "exec websocket v5.channel.k8s.io"
	}
	if seen := strings.Join(e.upgrades.since(before), "; "); !strings.Contains(seen, wantExec) {
		t.Errorf("kubectl %s exec reached the kubelet as %q, want %q", k.Version, seen, wantExec)
	}
	_, stderr, err = e.kubectl(t, k, "", 60*time.Second, "exec", "web", "-c", "main", "--", "sh", "-c", "exit 5")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(stderr, "command terminated with exit code 5") {
		t.Errorf("exec exit 5: %v, %s", err, stderr)
	}

	out, _, _ = e.kubectl(t, k, "", 4*time.Second, "attach", "web", "-c", "ticker")
	if !strings.Contains(out, "tick ") {
		t.Errorf("attach showed %q", out)
	}

	// cp both ways: tar over exec, stdin closed at the end of the file.
	payload := strings.Repeat("bonsai cp "+k.Version+"\n", 5000)
	if err := os.WriteFile(filepath.Join(e.dir, "cp-in"), []byte(payload), 0o644); err != nil {
		t.Fatal(err)
	}
	remote := "/tmp/cp-" + strings.ReplaceAll(k.Version, ".", "-")
	if _, stderr, err := e.kubectl(t, k, "", 60*time.Second, "cp", "cp-in", "default/web:"+remote, "-c", "main"); err != nil {
		t.Fatalf("kubectl cp to the pod: %v, %s", err, stderr)
	}
	out, _, err = e.kubectl(t, k, "", 60*time.Second, "exec", "web", "-c", "main", "--", "cat", remote)
	if err != nil || out != payload {
		t.Errorf("file copied in: %d bytes, %v", len(out), err)
	}
	os.Remove(filepath.Join(e.dir, "cp-out"))
	if _, stderr, err := e.kubectl(t, k, "", 60*time.Second, "cp", "default/web:"+remote, "cp-out", "-c", "main"); err != nil {
		t.Fatalf("kubectl cp from the pod: %v, %s", err, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(e.dir, "cp-out")); err != nil || string(b) != payload {
		t.Errorf("file copied out: %d bytes, %v", len(b), err)
	}

	// port-forward: kubectl 1.31+ tunnels SPDY through WebSocket.
	before = e.upgrades.len()
	e.kubectlPortForward(t, k)
	wantPF := "portForward SPDY/3.1 portforward.k8s.io"
	if k.Minor >= 31 {
		wantPF = "portForward websocket SPDY/3.1+portforward.k8s.io"
	}
	if seen := strings.Join(e.upgrades.since(before), "; "); !strings.Contains(seen, wantPF) {
		t.Errorf("kubectl %s port-forward reached the kubelet as %q, want %q", k.Version, seen, wantPF)
	}
}

func (e *streamEnv) kubectlPortForward(t *testing.T, k testenv.Kubectl) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.Path, "port-forward", "--address", "127.0.0.1", "pod/web", fmt.Sprintf(":%d", httpPort))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, "HOME="+e.dir)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// "Forwarding from 127.0.0.1:41234 -> 8080"
	var local int
	buf := make([]byte, 0, 256)
	for local == 0 {
		chunk := make([]byte, 128)
		n, err := stdout.Read(chunk)
		if err != nil {
			t.Fatalf("kubectl port-forward: %q, %v, %s", buf, err, errb.String())
		}
		buf = append(buf, chunk[:n]...)
		if i := strings.Index(string(buf), "127.0.0.1:"); i >= 0 {
			fmt.Sscanf(string(buf[i:]), "127.0.0.1:%d ->", &local)
		}
	}
	go io.Copy(io.Discard, stdout)
	for i := 0; i < 2; i++ { // a second connection over the same session
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/", local))
		if err != nil {
			t.Fatalf("GET through kubectl port-forward: %v (%s)", err, errb.String())
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello-pf\n" {
			t.Errorf("GET through kubectl port-forward: %q", b)
		}
	}
}
