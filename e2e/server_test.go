package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// bonsaiBin is the binary under test, built once for the package.
var (
	bonsaiBin string
	goMissing error
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bonsai-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bonsaiBin = filepath.Join(dir, "bonsai")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, statErr := os.Stat(goBin); statErr != nil {
			goMissing = err
		}
	}
	if goMissing == nil {
		cmd := exec.Command(goBin, "build", "-o", bonsaiBin, "./cmd/bonsai")
		cmd.Dir = ".." // the module root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/bonsai: %v\n%s", err, out)
		}
	}
	// The CSI tests' sidecars take minutes to build on a fresh machine:
	// when the CSI tests are to run, build them while the others do.
	flag.Parse()
	if run := flag.Lookup("test.run").Value.String(); goMissing == nil && buildErr == nil && (run == "" || strings.Contains(run, "CSI")) {
		go testenv.PrebuildCSISidecars(goBin, "..")
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func requireBinary(t *testing.T) {
	t.Helper()
	testenv.Require(t, goMissing == nil, "go toolchain to build bonsai: %v", goMissing)
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// server is one running `bonsai server`.
type server struct {
	dataDir  string
	port     int
	cmd      *exec.Cmd
	stderr   string // path of the captured stderr
	done     chan struct{}
	exitCode int
	// now is the clock certificates are verified by (see launchOptions).
	now func() time.Time
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startServer starts bonsai on dataDir and a free loopback port and waits
// until /readyz answers. A port taken between picking and binding is
// retried on another.
func startServer(t *testing.T, dataDir string, extra ...string) *server {
	t.Helper()
	return startServerWith(t, dataDir, launchOptions{}, extra...)
}

// launchOptions change how a server is started beyond its flags.
type launchOptions struct {
	// env is added to the server's environment.
	env []string
	// now is the clock the test's clients verify certificates by
	// (time.Now when nil), for a server whose clock a test moved.
	now func() time.Time
}

func startServerWith(t *testing.T, dataDir string, o launchOptions, extra ...string) *server {
	t.Helper()
	requireBinary(t)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := launch(t, dataDir, freePort(t), o, extra...)
		if err != nil {
			t.Fatal(err)
		}
		err = s.waitReady(t, 30*time.Second)
		if err == nil {
			return s
		}
		lastErr = err
		if !strings.Contains(s.stderrText(), "already in use") {
			break
		}
	}
	t.Fatal(lastErr)
	return nil
}

func launch(t *testing.T, dataDir string, port int, o launchOptions, extra ...string) (*server, error) {
	args := []string{"server",
		"--data-dir", dataDir,
		"--https-listen-port", fmt.Sprint(port),
		"--bind-address", "127.0.0.1",
		"--config", emptyConfig(t),
	}
	// The control plane alone, unless the test picks a node runtime.
	agent, kubeletPort, rootDir, ingress, eviction := false, false, false, false, false
	for _, a := range extra {
		eviction = eviction || strings.HasPrefix(a, "--eviction-hard")
		agent = agent || strings.HasPrefix(a, "--runtime")
		kubeletPort = kubeletPort || strings.HasPrefix(a, "--kubelet-port")
		rootDir = rootDir || strings.HasPrefix(a, "--kubelet-root-dir")
		ingress = ingress || strings.HasPrefix(a, "--ingress-") || strings.HasPrefix(a, "--disable-ingress")
	}
	if !agent {
		args = append(args, "--disable-agent")
	} else if !kubeletPort {
		// Not 10250: a real kubelet or another test may have it.
		args = append(args, "--kubelet-port", fmt.Sprint(freePort(t)))
	}
	if agent && !ingress {
		// Not 80 and 443: the host's own web server, or another
		// test's bonsai, may have them. Tests of the Ingress
		// controller give free ports.
		args = append(args, "--disable-ingress")
	}
	if agent && !eviction {
		// The default thresholds (imagefs.available<15%, ...) are about
		// this machine's disk, not the test: a nearly full host disk
		// would put the node under DiskPressure and evict or refuse the
		// test's pods. Tests of eviction give their own.
		args = append(args, "--eviction-hard=memory.available<100Mi,nodefs.available<1%,imagefs.available<1%,nodefs.inodesFree<1%")
	}
	if agent && !rootDir {
		// Not /var/lib/kubelet: the device manager deletes the sockets
		// there, a real kubelet's plugins' among them.
		args = append(args, "--kubelet-root-dir", filepath.Join(dataDir, "kubelet"))
	}
	args = append(args, extra...)
	logf, err := os.CreateTemp(t.TempDir(), "stderr-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bonsaiBin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(o.env) > 0 {
		cmd.Env = append(os.Environ(), o.env...)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	s := &server{dataDir: dataDir, port: port, cmd: cmd, stderr: logf.Name(), done: make(chan struct{}), now: o.now}
	go func() {
		err := cmd.Wait()
		logf.Close()
		s.exitCode = exitCode(err)
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("bonsai on port %d stderr:\n%s", port, s.stderrText())
		}
	})
	return s, nil
}

// emptyConfig keeps the machine's /etc/bonsai/config.yaml out of a test.
func emptyConfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	default:
		return -1
	}
}

func (s *server) stderrText() string {
	b, _ := os.ReadFile(s.stderr)
	return string(b)
}

func (s *server) url(path string) string {
	return fmt.Sprintf("https://127.0.0.1:%d%s", s.port, path)
}

func (s *server) waitReady(t *testing.T, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("bonsai exited with %d before it was ready: %s", s.exitCode, s.stderrText())
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := os.Stat(filepath.Join(s.dataDir, "kubeconfig.yaml")); err != nil {
			continue
		}
		resp, err := s.client(t, nil).Get(s.url("/readyz"))
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
	return fmt.Errorf("bonsai not ready within %v: %s", timeout, s.stderrText())
}

// sigterm stops the server and returns its exit code and how long it took.
func (s *server) sigterm(t *testing.T) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
		return s.exitCode, time.Since(start)
	case <-time.After(20 * time.Second):
		t.Fatal("bonsai did not exit within 20s of SIGTERM")
		return 0, 0
	}
}

// kubeconfig is the admin kubeconfig the server wrote.
type kubeconfig struct {
	server            string
	ca, cert, key     []byte
	raw               []byte
	caPool            *x509.CertPool
	clientCertificate tls.Certificate
}

func (s *server) kubeconfig(t *testing.T) kubeconfig {
	t.Helper()
	path := filepath.Join(s.dataDir, "kubeconfig.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(rc.CAData) {
		t.Fatal("kubeconfig CA data holds no certificate")
	}
	pair, err := tls.X509KeyPair(rc.CertData, rc.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig{server: rc.Host, ca: rc.CAData, cert: rc.CertData, key: rc.KeyData, raw: raw, caPool: pool, clientCertificate: pair}
}

// client trusts only the CA from the server's kubeconfig and presents cert
// when given.
func (s *server) client(t *testing.T, cert *tls.Certificate) *http.Client {
	kc := s.kubeconfig(t)
	tc := &tls.Config{RootCAs: kc.caPool, Time: s.now}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}

func get(t *testing.T, c *http.Client, url, bearer string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// runToExit runs a bonsai that is expected to fail at start.
func runToExit(t *testing.T, args ...string) (code int, stderr string) {
	t.Helper()
	var errBuf bytes.Buffer
	cmd := exec.Command(bonsaiBin, args...)
	cmd.Stderr = &errBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitCode(err), errBuf.String()
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("bonsai %v did not exit within 30s; stderr: %s", args, errBuf.String())
		return 0, ""
	}
}

func snapshot(t *testing.T, dir string, names ...string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

var certFiles = []string{"tls/ca.crt", "tls/ca.key", "tls/serving.crt", "tls/serving.key", "tls/admin.crt", "tls/admin.key", "tls/service-account.key",
	"tls/front-proxy-ca.crt", "tls/front-proxy-ca.key", "tls/front-proxy-client.crt", "tls/front-proxy-client.key"}

func TestServer(t *testing.T) {
	requireBinary(t)
	tmp := t.TempDir()
	tokens := filepath.Join(tmp, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("# e2e tokens\ns3cr3t-token,alice,uid-1,\"devs,ops\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	extraKubeconfig := filepath.Join(tmp, "admin.kubeconfig")
	dataDir := filepath.Join(tmp, "data")
	s := startServer(t, dataDir, "--token-file", tokens, "--write-kubeconfig", extraKubeconfig, "--tls-san", "bonsai.e2e.example")
	kc := s.kubeconfig(t)
	anon := s.client(t, nil)
	admin := s.client(t, &kc.clientCertificate)

	t.Run("kubeconfig", func(t *testing.T) {
		if want := s.url(""); kc.server != want {
			t.Errorf("kubeconfig server %q, want %q", kc.server, want)
		}
		for _, p := range []string{filepath.Join(dataDir, "kubeconfig.yaml"), extraKubeconfig} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v, want 0600", p, st.Mode().Perm())
			}
		}
		extra, err := os.ReadFile(extraKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(extra, kc.raw) {
			t.Error("--write-kubeconfig copy differs from <data-dir>/kubeconfig.yaml")
		}
		if st, err := os.Stat(filepath.Join(dataDir, "tls")); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("tls dir: %v %v, want mode 0700", st, err)
		}
		for _, f := range []string{"tls/ca.key", "tls/serving.key", "tls/admin.key", "tls/service-account.key", "tls/front-proxy-ca.key", "tls/front-proxy-client.key"} {
			if st, err := os.Stat(filepath.Join(dataDir, f)); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v %v, want mode 0600", f, st, err)
			}
		}
	})

	t.Run("serving certificate", func(t *testing.T) {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), &tls.Config{RootCAs: kc.caPool, ServerName: "kubernetes.default.svc.cluster.local"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		leaf := conn.ConnectionState().PeerCertificates[0]
		for _, name := range []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "bonsai.e2e.example", "127.0.0.1", "::1", "10.43.0.1"} {
			if err := leaf.VerifyHostname(name); err != nil {
				t.Error(err)
			}
		}
		if leaf.PublicKeyAlgorithm != x509.ECDSA {
			t.Errorf("serving key %v, want ECDSA", leaf.PublicKeyAlgorithm)
		}
	})

	t.Run("TLS below 1.2 refused", func(t *testing.T) {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), &tls.Config{RootCAs: kc.caPool, MaxVersion: tls.VersionTLS11})
		if err == nil {
			conn.Close()
			t.Fatal("TLS 1.1 handshake succeeded")
		}
	})

	t.Run("anonymous health and version", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/livez", "/readyz"} {
			code, _, body := get(t, anon, s.url(p), "")
			if code != http.StatusOK || string(body) != "ok" {
				t.Errorf("GET %s: %d %q, want 200 ok", p, code, body)
			}
		}
		code, _, body := get(t, anon, s.url("/version"), "")
		if code != http.StatusOK {
			t.Fatalf("GET /version: %d %s", code, body)
		}
		var v version.Info
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		if v.Major != "1" || !strings.HasPrefix(v.GitVersion, "v1.") || v.GoVersion == "" {
			t.Errorf("/version = %+v", v)
		}
	})

	t.Run("anonymous API is 401", func(t *testing.T) {
		for _, p := range []string{"/api", "/apis", "/api/v1/namespaces"} {
			code, h, body := get(t, anon, s.url(p), "")
			if code != http.StatusUnauthorized {
				t.Errorf("GET %s: %d, want 401", p, code)
				continue
			}
			if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("GET %s: Content-Type %q", p, ct)
			}
			var st metav1.Status
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatalf("GET %s: %v in %s", p, err, body)
			}
			if st.Kind != "Status" || st.APIVersion != "v1" || st.Code != 401 || st.Reason != metav1.StatusReasonUnauthorized || st.Status != metav1.StatusFailure {
				t.Errorf("GET %s: status %+v", p, st)
			}
		}
	})

	t.Run("admin certificate", func(t *testing.T) {
		code, _, body := get(t, admin, s.url("/readyz?verbose"), "")
		if code != http.StatusOK {
			t.Fatalf("GET /readyz?verbose: %d %s", code, body)
		}
		for _, want := range []string{"[+]ping ok", "[+]store ok", "readyz check passed"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/readyz?verbose lacks %q:\n%s", want, body)
			}
		}
		if code, _, body := get(t, admin, s.url("/api"), ""); code != http.StatusOK {
			t.Errorf("GET /api as admin: %d %s", code, body)
		}
	})

	t.Run("kubernetes service", func(t *testing.T) {
		code, _, body := get(t, admin, s.url("/api/v1/namespaces/default/endpoints/kubernetes"), "")
		if code != http.StatusOK {
			t.Fatalf("GET endpoints/kubernetes: %d %s", code, body)
		}
		var ep corev1.Endpoints
		if err := json.Unmarshal(body, &ep); err != nil {
			t.Fatal(err)
		}
		// bonsai tells the API server where it listens: the bind address
		// and --https-listen-port.
		if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 1 || len(ep.Subsets[0].Ports) != 1 ||
			ep.Subsets[0].Addresses[0].IP != "127.0.0.1" || int(ep.Subsets[0].Ports[0].Port) != s.port {
			t.Errorf("endpoints/kubernetes subsets %+v, want 127.0.0.1:%d", ep.Subsets, s.port)
		}
	})

	t.Run("token file", func(t *testing.T) {
		code, _, body := get(t, anon, s.url("/readyz?verbose"), "s3cr3t-token")
		if code != http.StatusOK || !strings.Contains(string(body), "[+]store ok") {
			t.Errorf("GET /readyz?verbose with a token: %d %s", code, body)
		}
		if code, _, body := get(t, anon, s.url("/api"), "s3cr3t-token"); code == http.StatusUnauthorized {
			t.Errorf("GET /api with a token: 401 %s", body)
		}
		for _, p := range []string{"/api", "/healthz"} {
			if code, _, _ := get(t, anon, s.url(p), "wrong-token"); code != http.StatusUnauthorized {
				t.Errorf("GET %s with a wrong token: %d, want 401", p, code)
			}
		}
	})

	t.Run("client certificate of another CA", func(t *testing.T) {
		foreign, err := pki.Ensure(t.TempDir(), pki.SANs{DNSNames: []string{"localhost"}})
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err := foreign.CA.IssueClient("system:admin", []string{"system:masters"})
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s.client(t, &pair).Get(s.url("/api"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("forged admin certificate: %d", resp.StatusCode)
			}
		}
	})

	t.Run("second server on the same port", func(t *testing.T) {
		other := filepath.Join(tmp, "other-data")
		code, stderr := runToExit(t, "server", "--data-dir", other, "--https-listen-port", fmt.Sprint(s.port),
			"--bind-address", "127.0.0.1", "--disable-agent", "--config", emptyConfig(t))
		if code == 0 {
			t.Fatal("second server on a busy port exited 0")
		}
		want := fmt.Sprintf("bonsai: port %d on 127.0.0.1 is already in use\n", s.port)
		if stderr != want {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
		if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("data dir of the failed server exists (%v)", err)
		}
	})

	t.Run("second server on the same data dir", func(t *testing.T) {
		before := snapshot(t, dataDir, append(certFiles, "kubeconfig.yaml")...)
		code, stderr := runToExit(t, "server", "--data-dir", dataDir, "--https-listen-port", fmt.Sprint(freePort(t)),
			"--bind-address", "127.0.0.1", "--disable-agent", "--config", emptyConfig(t), "--tls-san", "changed.example")
		if code == 0 {
			t.Fatal("second server on a busy data dir exited 0")
		}
		if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "bonsai: ") ||
			!strings.Contains(stderr, dataDir) || !strings.Contains(stderr, "in use") {
			t.Errorf("stderr %q, want one line saying %s is in use", stderr, dataDir)
		}
		after := snapshot(t, dataDir, append(certFiles, "kubeconfig.yaml")...)
		for name := range before {
			if !bytes.Equal(before[name], after[name]) {
				t.Errorf("%s changed", name)
			}
		}
		// The first server is unharmed.
		if code, _, _ := get(t, anon, s.url("/healthz"), ""); code != http.StatusOK {
			t.Errorf("first server /healthz: %d", code)
		}
	})

	t.Run("SIGTERM", func(t *testing.T) {
		code, took := s.sigterm(t)
		if code != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0", code)
		}
		if took > 5*time.Second {
			t.Errorf("took %v to stop, want a few seconds at most", took)
		}
	})
}

func TestServerRestartReusesCertificates(t *testing.T) {
	requireBinary(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	s := startServer(t, dataDir, "--log-format", "json")
	first := snapshot(t, dataDir, certFiles...)
	if code, _ := s.sigterm(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	// JSON logs: every line one object, so log shippers can parse them.
	for _, line := range strings.Split(strings.TrimSpace(s.stderrText()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("--log-format=json wrote a non-JSON line %q", line)
		}
	}

	s = startServer(t, dataDir)
	second := snapshot(t, dataDir, certFiles...)
	for _, f := range certFiles {
		if !bytes.Equal(first[f], second[f]) {
			t.Errorf("%s changed on restart", f)
		}
	}
	kc := s.kubeconfig(t)
	if !bytes.Equal(kc.ca, first["tls/ca.crt"]) {
		t.Error("kubeconfig CA is not the CA of the first start")
	}
	if code, _ := s.sigterm(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}

	s = startServer(t, dataDir, "--tls-san", "added.e2e.example")
	third := snapshot(t, dataDir, certFiles...)
	for _, f := range certFiles {
		changed := !bytes.Equal(first[f], third[f])
		if want := strings.HasPrefix(f, "tls/serving."); changed != want {
			t.Errorf("%s changed=%v after a new --tls-san, want %v", f, changed, want)
		}
	}
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), &tls.Config{RootCAs: s.kubeconfig(t).caPool, ServerName: "added.e2e.example"})
	if err != nil {
		t.Fatalf("serving certificate without the new SAN: %v", err)
	}
	conn.Close()
	if code, _ := s.sigterm(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}

func TestServerWithEtcd(t *testing.T) {
	requireBinary(t)
	etcd := testenv.EtcdForTest(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	s := startServer(t, dataDir, "--datastore-endpoint", etcd.Endpoint)
	kc := s.kubeconfig(t)
	code, _, body := get(t, s.client(t, &kc.clientCertificate), s.url("/readyz?verbose"), "")
	if code != http.StatusOK || !strings.Contains(string(body), "[+]store ok") {
		t.Errorf("/readyz?verbose on etcd: %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("embedded store created despite --datastore-endpoint (%v)", err)
	}
	// The store's lock does not cover an etcd datastore; the data dir's
	// own lock still keeps a second bonsai out of the certificates.
	code, stderr := runToExit(t, "server", "--data-dir", dataDir, "--https-listen-port", fmt.Sprint(freePort(t)),
		"--bind-address", "127.0.0.1", "--disable-agent", "--config", emptyConfig(t), "--datastore-endpoint", etcd.Endpoint)
	if code == 0 || !strings.Contains(stderr, "in use") {
		t.Errorf("second bonsai on the data dir of an etcd-backed one: exit %d, %q", code, stderr)
	}
	if code, took := s.sigterm(t); code != 0 || took > 5*time.Second {
		t.Errorf("SIGTERM: exit %d after %v, want 0 within 5s", code, took)
	}
}
