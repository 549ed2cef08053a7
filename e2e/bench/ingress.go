package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// ingressParams size the ingress suite; -quick shrinks it.
type ingressParams struct {
	conns     int           // keep-alive client connections
	warmup    time.Duration // load before each measured phase
	measure   time.Duration // each measured phase
	changes   int           // Ingress edits timed to served
	ingresses int           // Ingresses whose RSS is measured
	// paced is the request rate, over the same connections, of the
	// phases whose latency is compared: well under saturation on a
	// small box, so that the added latency is the proxy's, not a queue.
	paced int
	// rounds of every load phase, alternating; each figure is the
	// median of its rounds, so that a burst of the machine's other
	// load in one phase does not decide a row.
	rounds int
}

func ingressParamsFor(quick bool) ingressParams {
	if quick {
		return ingressParams{conns: 64, warmup: 500 * time.Millisecond, measure: 2 * time.Second, changes: 10, ingresses: 100, paced: 2000, rounds: 1}
	}
	return ingressParams{conns: 64, warmup: time.Second, measure: 5 * time.Second, changes: 50, ingresses: 100, paced: 2000, rounds: 3}
}

// medianLoad is the median of each figure of rs, taken on its own.
func medianLoad(rs []*loadResult) *loadResult {
	med := func(get func(*loadResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		return median(v)
	}
	return &loadResult{
		rps: med(func(r *loadResult) float64 { return r.rps }),
		p50: time.Duration(med(func(r *loadResult) float64 { return float64(r.p50) })),
		p99: time.Duration(med(func(r *loadResult) float64 { return float64(r.p99) })),
	}
}

// loadResult is one phase of load: requests/s and the p99 of each
// request's latency.
type loadResult struct {
	rps      float64
	p50, p99 time.Duration
}

type ingressResults struct {
	// bonsai's ingress and nginx, plain and TLS; direct is the pod
	// itself, what "added" latency is added to.
	direct                                     *loadResult
	bonsaiHTTP, nginxHTTP, bonsaiTLS, nginxTLS *loadResult
	// The same at p.paced requests/s, for latency.
	directPaced                                                    *loadResult
	bonsaiHTTPPaced, nginxHTTPPaced, bonsaiTLSPaced, nginxTLSPaced *loadResult
	changeP99                                                      *float64
	rss100                                                         *float64
}

func ingressRows(p ingressParams, r *ingressResults) []Row {
	rps := func(x *loadResult) *float64 {
		if x == nil {
			return nil
		}
		return num(x.rps)
	}
	added := func(x, direct *loadResult) *float64 {
		if x == nil || direct == nil {
			return nil
		}
		return ms(x.p99 - direct.p99)
	}
	load := fmt.Sprintf("%d keep-alive connections to one pod", p.conns)
	paced := fmt.Sprintf("at %s req/s over %d connections", fmtNum(float64(p.paced)), p.conns)
	return []Row{
		{Name: "ingress: requests/s over HTTP, " + load, Unit: "req/s", Bonsai: rps(r.bonsaiHTTP), PeerName: "nginx", Peer: rps(r.nginxHTTP), Target: atLeastPeerTimes(0.8, "nginx")},
		{Name: "ingress: p99 latency added to the pod's over HTTP, " + paced, Unit: "ms", Bonsai: added(r.bonsaiHTTPPaced, r.directPaced), PeerName: "nginx", Peer: added(r.nginxHTTPPaced, r.directPaced), Target: atMost(1, "ms")},
		{Name: "ingress: p99 latency added over HTTP at saturation (the first row's load)", Unit: "ms", Bonsai: added(r.bonsaiHTTP, r.direct), PeerName: "nginx", Peer: added(r.nginxHTTP, r.direct)},
		{Name: "ingress: requests/s over TLS (HTTP/1.1), " + load, Unit: "req/s", Bonsai: rps(r.bonsaiTLS), PeerName: "nginx", Peer: rps(r.nginxTLS), Target: atLeastPeerTimes(0.8, "nginx")},
		{Name: "ingress: p99 latency added to the pod's over TLS, " + paced, Unit: "ms", Bonsai: added(r.bonsaiTLSPaced, r.directPaced), PeerName: "nginx", Peer: added(r.nginxTLSPaced, r.directPaced), Target: atMost(1, "ms")},
		{Name: fmt.Sprintf("ingress: Ingress change → served p99 (%d edits adding a host)", p.changes), Unit: "ms", Bonsai: r.changeP99, Target: atMost(100, "ms")},
		{Name: fmt.Sprintf("ingress: bonsai anonymous memory (RssAnon) added by %d Ingresses", p.ingresses), Unit: "MB", Bonsai: r.rss100, Target: atMost(10, "MB")},
	}
}

// ingressSuite runs a real node with the Ingress controller on free
// ports of 127.0.0.1, one busybox httpd pod behind a Service and an
// Ingress for it, and Debian's nginx as a reverse proxy to the same pod
// (with keep-alive to it, as ingress-nginx configures it), and loads
// each the same way from this process.
func ingressSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := ingressParamsFor(b.quick)
	res := &ingressResults{}
	rows := func() []Row { return ingressRows(p, res) }
	if os.Geteuid() != 0 {
		return rows(), errors.New("the ingress suite needs root (network namespaces, containerd)")
	}
	var ports [4]int
	for i := range ports {
		port, err := testenv.FreePort()
		if err != nil {
			return rows(), err
		}
		ports[i] = port
	}
	httpPort, httpsPort, nginxHTTP, nginxHTTPS := ports[0], ports[1], ports[2], ports[3]
	b.logf("ingress: starting bonsai with its own containerd, the Ingress controller on 127.0.0.1:%d and :%d", httpPort, httpsPort)
	n, err := startRealNode(ctx, b, "ingress", "10.246.0.0/16", "--service-cidr=10.245.0.0/16",
		"--ingress-http-port="+strconv.Itoa(httpPort), "--ingress-https-port="+strconv.Itoa(httpsPort))
	if err != nil {
		return rows(), err
	}
	defer n.close()

	const host = "bench.local"
	dir := filepath.Join(b.dir, "ingress-tls")
	crt, key, err := writeCert(dir, host)
	if err != nil {
		return rows(), err
	}
	podIP, err := ingressBackend(ctx, b, n, crt, key)
	if err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
	}
	ingURL := fmt.Sprintf("http://127.0.0.1:%d/", httpPort)
	if _, err := untilServed(ctx, ingURL, host, 30*time.Second); err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
	}
	stopNginx, err := startNginx(ctx, b, dir, podIP, nginxHTTP, nginxHTTPS, crt, key)
	if err != nil {
		b.logf("ingress: nginx not measured: %v", err)
	} else {
		defer stopNginx()
	}

	// Memory first, before the load phases leave garbage for the
	// collector and the scavenger to hand back at their own pace.
	b.logf("ingress: RSS with %d more Ingresses", p.ingresses)
	if res.rss100, err = ingressRSS(ctx, b, n, ingURL, p.ingresses); err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
	}
	b.logf("ingress: %d Ingress edits, each adding a host, timed to served", p.changes)
	if res.changeP99, err = ingressChanges(ctx, n, ingURL, p.changes); err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
	}

	phase := func(name, url string, tlsOn bool, rate int) *loadResult {
		b.logf("ingress: %s: %d connections for %s, rate %d/s (0: as fast as they go)", name, p.conns, p.measure, rate)
		r, err := loadHTTP(ctx, url, host, tlsOn, p, rate)
		if err != nil {
			b.logf("ingress: %s: %v", name, err)
			return nil
		}
		b.logf("ingress: %s: %.0f req/s, p50 %s, p99 %s", name, r.rps, r.p50, r.p99)
		return r
	}
	direct := fmt.Sprintf("http://%s/", net.JoinHostPort(podIP, "8080"))
	bonsaiTLS := fmt.Sprintf("https://127.0.0.1:%d/", httpsPort)
	nginxURL, nginxTLS := fmt.Sprintf("http://127.0.0.1:%d/", nginxHTTP), fmt.Sprintf("https://127.0.0.1:%d/", nginxHTTPS)
	// Each of bonsai's phases next to nginx's, so that the machine's
	// other load weighs on both alike, in p.rounds rounds.
	type contender struct {
		name  string
		url   string
		tls   bool
		sat   **loadResult // as fast as they go
		paced **loadResult
	}
	contenders := []contender{
		{"the pod itself", direct, false, &res.direct, &res.directPaced},
		{"bonsai over HTTP", ingURL, false, &res.bonsaiHTTP, &res.bonsaiHTTPPaced},
		{"nginx over HTTP", nginxURL, false, &res.nginxHTTP, &res.nginxHTTPPaced},
		{"bonsai over TLS", bonsaiTLS, true, &res.bonsaiTLS, &res.bonsaiTLSPaced},
		{"nginx over TLS", nginxTLS, true, &res.nginxTLS, &res.nginxTLSPaced},
	}
	runs := map[**loadResult][]*loadResult{}
	for round := range p.rounds {
		for _, rate := range []int{p.paced, 0} {
			for _, c := range contenders {
				if stopNginx == nil && strings.HasPrefix(c.name, "nginx") {
					continue
				}
				into := c.sat
				if rate != 0 {
					into = c.paced
				}
				if r := phase(fmt.Sprintf("%s (round %d)", c.name, round+1), c.url, c.tls, rate); r != nil {
					runs[into] = append(runs[into], r)
				}
			}
		}
	}
	for into, rs := range runs {
		*into = medianLoad(rs)
	}
	return rows(), nil
}

// ingressBackend runs the pod (busybox), its Service and the Ingress
// "bench" for host bench.local with TLS, and serves HTTP with keep-alive
// in the pod's network namespace, a 612-byte page (nginx's welcome
// page's size): busybox httpd closes every connection and forks for
// each, so its own cost (and its listen backlog overflowing at 64
// clients, a 1 s SYN retry) would be what the rows measure. It returns
// the pod's IP.
func ingressBackend(ctx context.Context, b *bench, n *realNode, crt, key []byte) (string, error) {
	cs := n.cs
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: n.name, TerminationGracePeriodSeconds: ptrTo(int64(0)),
			Containers: []corev1.Container{{Name: "main", Image: "bonsai.test/busybox:1", ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"}, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bench-tls", Namespace: "default"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	ing := benchIngress("bench", "bench.local")
	ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"bench.local"}, SecretName: "bench-tls"}}
	if _, err := cs.NetworkingV1().Ingresses("default").Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	deadline := time.Now().Add(60 * time.Second)
	var p *corev1.Pod
	for {
		var err error
		p, err = cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			break
		}
		if time.Now().After(deadline) {
			return "", errors.New("pod web not running within 60s")
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return "", err
		}
	}
	var ln net.Listener
	if err := inPodNetns(netnsPath(n, p), func() (err error) {
		ln, err = net.Listen("tcp4", ":8080")
		return err
	}); err != nil {
		return "", err
	}
	page := make([]byte, 612)
	for i := range page {
		page[i] = 'a' + byte(i%26)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write(page)
	}), IdleTimeout: 90 * time.Second}
	go srv.Serve(ln)
	b.onCleanup(func() { srv.Close() })
	return p.Status.PodIP, nil
}

func benchIngress(name string, hosts ...string) *networkingv1.Ingress {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	prefix := networkingv1.PathTypePrefix
	for _, h := range hosts {
		ing.Spec.Rules = append(ing.Spec.Rules, networkingv1.IngressRule{Host: h, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}})
	}
	return ing
}

// untilServed polls url with Host host until it answers 200, and returns
// how long that took.
func untilServed(ctx context.Context, url, host string, timeout time.Duration) (time.Duration, error) {
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: time.Second}
	start := time.Now()
	last := ""
	for time.Since(start) < timeout {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Host = host
		resp, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
	return 0, fmt.Errorf("%s (Host %s) not served within %s: %s", url, host, timeout, last)
}

// loadHTTP runs p.conns clients, each on its own keep-alive connection,
// for p.warmup and then p.measure, and reports the measured phase. With
// rate, the clients together send that many requests a second, each on
// its own fixed schedule (a late request does not push the next ones
// back, so slowness is measured, not hidden).
func loadHTTP(ctx context.Context, url, host string, tlsOn bool, p ingressParams, rate int) (*loadResult, error) {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: p.conns, MaxConnsPerHost: p.conns, DisableCompression: true,
		TLSClientConfig: &tls.Config{ServerName: host, InsecureSkipVerify: true}, ForceAttemptHTTP2: false,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var (
		mu       sync.Mutex
		lat      []time.Duration
		failures int
		lastErr  error
	)
	start := time.Now()
	measureFrom, end := start.Add(p.warmup), start.Add(p.warmup+p.measure)
	var wg sync.WaitGroup
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(p.conns) / float64(rate))
	}
	for i := range p.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			next := start.Add(interval * time.Duration(i) / time.Duration(p.conns))
			for ctx.Err() == nil {
				if interval > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
				}
				t0 := time.Now()
				if interval > 0 {
					t0 = next // latency from when the request was due
					next = next.Add(interval)
				}
				if t0.After(end) {
					break
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				req.Host = host
				resp, err := c.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s", resp.Status)
					}
				}
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					mu.Lock()
					failures, lastErr = failures+1, err
					mu.Unlock()
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if failures > len(lat)/100 {
		return nil, fmt.Errorf("%d of %d requests failed, the last: %v", failures, failures+len(lat), lastErr)
	}
	return &loadResult{rps: float64(len(lat)) / p.measure.Seconds(), p50: percentile(lat, 0.5), p99: percentile(lat, 0.99)}, nil
}

// ingressChanges edits the Ingress "changes" n times, each time adding a
// host, and returns the p99 of the time from the write to the new host
// answering 200.
func ingressChanges(ctx context.Context, n *realNode, url string, count int) (*float64, error) {
	ings := n.cs.NetworkingV1().Ingresses("default")
	if _, err := ings.Create(ctx, benchIngress("changes", "change-0.bench.local"), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := untilServed(ctx, url, "change-0.bench.local", 10*time.Second); err != nil {
		return nil, err
	}
	var took []time.Duration
	hosts := []string{"change-0.bench.local"}
	for i := 1; i <= count; i++ {
		h := fmt.Sprintf("change-%d.bench.local", i)
		hosts = append(hosts, h)
		ing, err := ings.Get(ctx, "changes", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		ing.Spec.Rules = benchIngress("", hosts...).Spec.Rules
		start := time.Now()
		// The controller writes the status meanwhile: a conflict is
		// retried on the newer object, and counted in.
		for {
			_, err = ings.Update(ctx, ing, metav1.UpdateOptions{})
			if !apierrors.IsConflict(err) {
				break
			}
			if ing, err = ings.Get(ctx, "changes", metav1.GetOptions{}); err != nil {
				return nil, err
			}
			ing.Spec.Rules = benchIngress("", hosts...).Spec.Rules
		}
		if err != nil {
			return nil, err
		}
		if _, err := untilServed(ctx, url, h, 10*time.Second); err != nil {
			return nil, err
		}
		took = append(took, time.Since(start))
	}
	return ms(percentile(took, 0.99)), nil
}

// ingressRSS reads bonsai's RSS after a start, creates count
// Ingresses of two hosts each (one of them with TLS), starts bonsai
// again, and returns what the RSS after that start grew by: both
// figures are taken after the start-up trim, the same kind of moment, so
// garbage of the writes is not counted (as the netpol suite measures).
func ingressRSS(ctx context.Context, b *bench, n *realNode, url string, count int) (*float64, error) {
	// Both figures from a fresh start that serves every Ingress and
	// has settled, so that what the first start did (pulling the pod
	// up, the Ingresses' creation) weighs on neither.
	settled := func(host string) (*float64, error) {
		n.close()
		if err := n.start(ctx, b); err != nil {
			return nil, err
		}
		if _, err := untilServed(ctx, url, host, 30*time.Second); err != nil {
			return nil, err
		}
		if err := n.srv.waitLog(ctx, startupTrimmed, 30*time.Second); err != nil {
			return nil, err
		}
		anon, err := anonBytes(n.srv.cmd.Process.Pid)
		return num(float64(anon) / (1 << 20)), err
	}
	before, err := settled("bench.local")
	if err != nil {
		return nil, err
	}
	ings := n.cs.NetworkingV1().Ingresses("default")
	for i := range count {
		ing := benchIngress(fmt.Sprintf("many-%d", i), fmt.Sprintf("a-%d.many.bench.local", i), fmt.Sprintf("b-%d.many.bench.local", i))
		ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{fmt.Sprintf("a-%d.many.bench.local", i)}, SecretName: "bench-tls"}}
		if _, err := ings.Create(ctx, ing, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	after, err := settled(fmt.Sprintf("b-%d.many.bench.local", count-1))
	if err != nil {
		return nil, err
	}
	return num(*after - *before), nil
}

// startNginx runs Debian's nginx as the peer: a reverse proxy to the pod
// with ingress-nginx's settings that matter here (worker per core,
// keep-alive upstream connections, X-Forwarded headers), on HTTP and TLS.
func startNginx(ctx context.Context, b *bench, dir, podIP string, httpPort, httpsPort int, crt, key []byte) (stop func(), err error) {
	bin, err := testenv.LookPath("nginx")
	if err != nil {
		return nil, fmt.Errorf("nginx (Debian package nginx): %v", err)
	}
	for _, d := range []string{"tmp", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o777); err != nil {
			return nil, err
		}
	}
	conf := fmt.Sprintf(`worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/logs/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/tmp/body;
  proxy_temp_path %[1]s/tmp/proxy;
  fastcgi_temp_path %[1]s/tmp/fastcgi;
  uwsgi_temp_path %[1]s/tmp/uwsgi;
  scgi_temp_path %[1]s/tmp/scgi;
  keepalive_timeout 75s;
  keepalive_requests 1000000;
  upstream web { server %[2]s:8080; keepalive 320; }
  server {
    listen 127.0.0.1:%[3]d;
    listen 127.0.0.1:%[4]d ssl;
    ssl_certificate %[1]s/tls.crt;
    ssl_certificate_key %[1]s/tls.key;
    location / {
      proxy_pass http://web;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Real-IP $remote_addr;
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Forwarded-Host $host;
      proxy_set_header X-Forwarded-Proto $scheme;
    }
  }
}
`, dir, podIP, httpPort, httpsPort)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if out, err := execCommand(ctx, bin, "-V").CombinedOutput(); err == nil {
		b.noteOnce("nginx", "ingress peer: %s", firstLine(string(out)))
	}
	cmd := execCommand(ctx, bin, "-c", path, "-p", dir)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	b.onCleanup(stop)
	if _, err := untilServed(ctx, fmt.Sprintf("http://127.0.0.1:%d/", httpPort), "bench.local", 10*time.Second); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}

// writeCert makes a self-signed certificate for host, writes it and its
// key as tls.crt and tls.key in dir (for nginx) and returns them (for
// the Secret).
func writeCert(dir, host string) (crt, key []byte, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	crt = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	key = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o644); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600); err != nil {
		return nil, nil, err
	}
	return crt, key, nil
}
