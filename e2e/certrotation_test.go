package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/apiserver/pki"
)

const year = 365 * 24 * time.Hour

// testClock is the clock a server started with BONSAI_TEST_CLOCK_OFFSET_FILE
// runs on: the real one moved by the duration in a file.
type testClock struct{ path string }

func (c testClock) set(t *testing.T, d time.Duration) {
	t.Helper()
	if err := os.WriteFile(c.path, []byte(d.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (c testClock) Now() time.Time {
	data, err := os.ReadFile(c.path)
	if err != nil {
		panic(err)
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(data)))
	if err != nil {
		panic(err)
	}
	return time.Now().Add(d)
}

// tlsErrors counts the certificate errors a client saw.
type tlsErrors struct {
	mu   sync.Mutex
	errs []string
}

func (e *tlsErrors) add(err error) {
	if err == nil {
		return
	}
	s := err.Error()
	if strings.Contains(s, "x509") || strings.Contains(s, "tls:") || strings.Contains(s, "certificate") || strings.Contains(s, "Unauthorized") {
		e.mu.Lock()
		e.errs = append(e.errs, s)
		e.mu.Unlock()
	}
}

func (e *tlsErrors) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.errs...)
}

type countingTransport struct {
	rt   http.RoundTripper
	errs *tlsErrors
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	c.errs.add(err)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		c.errs.add(fmt.Errorf("%s %s: Unauthorized", r.Method, r.URL.Path))
	}
	return resp, err
}

// kubeconfigPair reads the client certificate of the admin kubeconfig on
// disk.
func kubeconfigPair(path string) (*tls.Certificate, *x509.CertPool, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, nil, err
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	pair, err := tls.X509KeyPair(rc.CertData, rc.KeyData)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rc.CAData)
	return &pair, pool, nil
}

// TestCertificatesRenewAcrossClockJumps moves a running server's clock
// +1, +5 and +9 years, back to a day before now, then to 20 days before
// the CA's end (the leaves are cut off there: a Warning): a client-go client
// whose TLS runs on the same clock and reads its certificate from the
// admin kubeconfig on disk at each handshake (dropping idle connections
// after a jump, as client-go does when its certificate file changes)
// keeps a watch open across all of it and sees no certificate error; the
// kubelet API and the front proxy's certificate are renewed with the
// rest. Then, stopped and started again two years on, with every leaf
// expired, the server recovers on its own.
func TestCertificatesRenewAcrossClockJumps(t *testing.T) {
	requireBinary(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	clk := testClock{path: filepath.Join(t.TempDir(), "clock-offset")}
	clk.set(t, 0)
	kubeletPort := freePort(t)
	opts := launchOptions{env: []string{"BONSAI_TEST_CLOCK_OFFSET_FILE=" + clk.path}, now: clk.Now}
	args := []string{"--runtime=simulated", "--node-name=cert-node", "--kubelet-port", fmt.Sprint(kubeletPort)}
	s := startServerWith(t, dataDir, opts, args...)
	kcPath := filepath.Join(dataDir, "kubeconfig.yaml")
	_, caPool, err := kubeconfigPair(kcPath)
	if err != nil {
		t.Fatal(err)
	}

	errs := &tlsErrors{}
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: caPool, Time: clk.Now,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			pair, _, err := kubeconfigPair(kcPath)
			return pair, err
		},
	}}
	cfg := &rest.Config{Host: s.kubeconfig(t).server, Transport: countingTransport{tr, errs}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// One watch kept open from start to end, and an informer.
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptr(int64(600))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := make(chan string, 16)
	go func() {
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Added && strings.HasPrefix(cm.Name, "step-") {
				seen <- cm.Name
			}
		}
		close(seen)
	}()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { errs.add(err) })
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}

	var lastServing []byte
	check := func(step string) {
		t.Helper()
		now := clk.Now()
		// Dropping idle connections is what client-go does when its
		// certificate file changes; the watches stay open.
		tr.CloseIdleConnections()
		name := "step-" + strings.NewReplacer("+", "plus", "-", "minus").Replace(step)
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: create: %v", step, err)
		}
		select {
		case got, ok := <-seen:
			if !ok || got != name {
				t.Fatalf("%s: the watch opened at the start delivered %q (open=%v), want %q", step, got, ok, name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the watch opened at the start delivered nothing", step)
		}
		waitErr(t, 10*time.Second, func() error {
			if _, ok, _ := inf.GetStore().GetByKey("default/" + name); !ok {
				return fmt.Errorf("%s: informer has not seen %s", step, name)
			}
			return nil
		})

		// The admin kubeconfig on disk is valid now.
		pair, _, err := kubeconfigPair(kcPath)
		if err != nil {
			t.Fatalf("%s: admin kubeconfig: %v", step, err)
		}
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: caPool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: admin kubeconfig's certificate: %v", step, err)
		}
		// A new connection gets a serving certificate valid now, and a
		// new one after each jump.
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), &tls.Config{RootCAs: caPool, Time: clk.Now, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("%s: serving certificate: %v", step, err)
		}
		serving := conn.ConnectionState().PeerCertificates[0]
		conn.Close()
		if lastServing != nil && string(serving.Raw) == string(lastServing) {
			t.Errorf("%s: serving certificate not renewed", step)
		}
		lastServing = serving.Raw
		// The kubelet API serves a certificate valid now and accepts the
		// admin's.
		kc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool, Time: clk.Now, Certificates: []tls.Certificate{*pair}}}}
		resp, err := kc.Get(fmt.Sprintf("https://127.0.0.1:%d/pods", kubeletPort))
		if err != nil {
			t.Fatalf("%s: kubelet API: %v", step, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: kubelet API /pods: %d", step, resp.StatusCode)
		}
		// The API server reaches the kubelet API (its kubelet client
		// certificate and the kubelet's serving one, both checked now).
		if body, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/cert-node/proxy/pods").DoRaw(ctx); err != nil {
			t.Errorf("%s: nodes/proxy to the kubelet API: %v %s", step, err, body)
		}
		// The front proxy's client certificate in force (the gauge reads
		// the one in memory) is the renewed one on disk, valid now.
		fpPEM, err := os.ReadFile(filepath.Join(dataDir, "tls", pki.FrontProxyClientCertFile))
		if err != nil {
			t.Fatal(err)
		}
		fp, err := tls.X509KeyPair(fpPEM, mustRead(t, filepath.Join(dataDir, "tls", pki.FrontProxyClientKeyFile)))
		if err != nil {
			t.Fatal(err)
		}
		if now.Before(fp.Leaf.NotBefore) || !now.Before(fp.Leaf.NotAfter) {
			t.Errorf("%s: front-proxy client valid %s to %s, not now", step, fp.Leaf.NotBefore, fp.Leaf.NotAfter)
		}
		metrics, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatalf("%s: /metrics: %v", step, err)
		}
		want := fmt.Sprintf(`bonsai_certificate_expiration_timestamp_seconds{file="front-proxy-client.crt",subject="front-proxy-client",usages="ClientAuth"} %s`, gaugeValue(fp.Leaf.NotAfter))
		if !strings.Contains(string(metrics), want) {
			t.Errorf("%s: /metrics lacks %s", step, want)
		}
	}

	check("start")
	for _, step := range []struct {
		name   string
		offset time.Duration
	}{{"+1y", year}, {"+5y", 5 * year}, {"+9y", 9 * year}, {"-1d", -24 * time.Hour}, {"+10y-20d", 10*year - 20*24*time.Hour}} {
		clk.set(t, step.offset)
		check(step.name)
		switch step.name {
		case "+9y":
			// The CA has less than a year left: a Warning on the Node.
			waitEvent(t, ctx, cs, "CACertificateExpirationWarning", "ca.crt")
		case "+10y-20d":
			// Leaves cut off at the CA's end, 20 days ahead.
			waitEvent(t, ctx, cs, "CertificateExpirationWarning", "serving.crt (bonsai) expires at")
		}
	}
	if e := errs.list(); len(e) > 0 {
		t.Errorf("the client saw %d certificate errors across the jumps: %q", len(e), e)
	}
	cancel()

	// Off for two years: every leaf expired while stopped; the next
	// start recovers with no manual step.
	if code, _ := s.sigterm(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	clk.set(t, 2*year-24*time.Hour)
	s = startServerWith(t, dataDir, opts, args...)
	if !strings.Contains(s.stderrText(), "issued certificates") {
		t.Errorf("restart after expiry issued nothing:\n%s", s.stderrText())
	}
	pair, _, err := kubeconfigPair(kcPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: caPool, CurrentTime: clk.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin kubeconfig after restart: %v", err)
	}
	code, _, body := get(t, s.client(t, pair), s.url("/api/v1/namespaces/default/configmaps/step-plus9y"), "")
	if code != http.StatusOK {
		t.Errorf("after restart past expiry: GET %d %s", code, body)
	}
}

// waitEvent waits for a Warning event with reason on the Node
// cert-node whose message holds text.
func waitEvent(t *testing.T, ctx context.Context, cs kubernetes.Interface, reason, text string) {
	t.Helper()
	waitErr(t, 20*time.Second, func() error {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == reason && ev.Type == corev1.EventTypeWarning &&
				ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == "cert-node" && strings.Contains(ev.Message, text) {
				return nil
			}
		}
		return fmt.Errorf("no %s event on the Node about %q among %d events", reason, text, len(evs.Items))
	})
}

func gaugeValue(t time.Time) string {
	// Prometheus' text format writes large floats in e notation.
	return strings.TrimSpace(fmt.Sprintf("%v", float64(t.Unix())))
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitErr retries f until it returns nil, failing with its last error.
func waitErr(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
