package ingress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// env is an API server, a running controller on loopback listeners, and
// an admin client.
type env struct {
	t     *testing.T
	cs    kubernetes.Interface
	c     *Controller
	http  string // host:port
	https string
}

func startEnv(t *testing.T) *env {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{})
	admin := e.ConfigFor(&authn.User{Name: "admin", Groups: []string{"system:masters", authn.GroupAuthenticated}})
	cs := kubernetes.NewForConfigOrDie(admin)
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := e.ConfigFor(&authn.User{Name: authz.UserIngress, Groups: []string{authn.GroupAuthenticated}})
	inf := client.NewInformers(rc)
	c, err := New(Config{RESTConfig: rc, Informers: inf, NodeName: "node-a", FallbackIPs: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
		HTTP: httpLn, HTTPS: httpsLn, Logger: e.Log, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.Ctx)
	inf.Start(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-c.Built():
	case <-time.After(10 * time.Second):
		t.Fatal("no configuration built in 10s")
	}
	return &env{t: t, cs: cs, c: c, http: httpLn.Addr().String(), https: httpsLn.Addr().String()}
}

// backendPort is the port of every test backend, on its own loopback
// address: an EndpointSlice has one port for all its endpoints.
var backendPort = func() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}()

var nextBackendIP atomic.Int32

// streamGo lets a backend's streamed response go on.
var streamGo = make(chan struct{}, 1)

// freeAddr is a loopback address at backendPort where nothing listens.
func freeAddr() string {
	return fmt.Sprintf("127.0.1.%d:%d", nextBackendIP.Add(1), backendPort)
}

// backend is an HTTP server on a loopback address of its own, at
// backendPort, that answers its name and the request's path and
// headers.
func backend(t *testing.T, name string) string {
	ln, err := net.Listen("tcp", freeAddr())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			hj, _ := w.(http.Hijacker)
			conn, brw, err := hj.Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			brw.Flush()
			io.Copy(conn, brw)
			return
		}
		switch r.URL.Path {
		case "/foo/headers":
			// The request's headers and trailers as they came.
			io.Copy(io.Discard, r.Body)
			var lines []string
			for k, vv := range r.Header {
				lines = append(lines, k+": "+strings.Join(vv, ","))
			}
			for k, vv := range r.Trailer {
				lines = append(lines, "trailer "+k+": "+strings.Join(vv, ","))
			}
			sort.Strings(lines)
			fmt.Fprint(w, strings.Join(lines, "\n"))
			return
		case "/foo/die":
			// Promises 100 bytes, sends 10, and hangs up.
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			w.Write([]byte("0123456789"))
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		case "/foo/dribble":
			// A chunked body cut short.
			w.Write([]byte("part"))
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		if r.URL.Path == "/foo/stream" {
			// A chunk, then the rest once the client saw it.
			w.Header().Set("Trailer", "X-Checksum")
			fmt.Fprint(w, "first;")
			w.(http.Flusher).Flush()
			<-streamGo
			fmt.Fprint(w, "second")
			w.Header().Set("X-Checksum", "42")
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %s host=%s xff=%s xfh=%s xfp=%s body=%d", name, r.URL.Path, r.Host,
			r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"), n)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// service makes a Service without selector with one port "http" 80 (to
// target 8080) and an EndpointSlice of addrs (host:port, all the same
// port).
func (e *env) service(name string, addrs ...string) {
	e.t.Helper()
	ctx := e.t.Context()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := e.cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.slice(name, addrs...)
}

func (e *env) slice(svc string, addrs ...string) {
	e.t.Helper()
	ctx := e.t.Context()
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4}
	var port int32
	for _, a := range addrs {
		host, p, _ := net.SplitHostPort(a)
		fmt.Sscan(p, &port)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
	}
	name := "http"
	s.Ports = []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: ptr(corev1.ProtocolTCP)}}
	old, err := e.cs.DiscoveryV1().EndpointSlices("default").Get(ctx, svc, metav1.GetOptions{})
	if err == nil {
		s.ResourceVersion = old.ResourceVersion
		_, err = e.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, s, metav1.UpdateOptions{})
	} else {
		_, err = e.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

func (e *env) create(ing *networkingv1.Ingress) *networkingv1.Ingress {
	e.t.Helper()
	if ing.Namespace == "" {
		ing.Namespace = "default"
	}
	out, err := e.cs.NetworkingV1().Ingresses(ing.Namespace).Create(e.t.Context(), ing, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

var client1 = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 5 * time.Second}

// get requests http://host/path through the controller's HTTP port.
func (e *env) get(host, path string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", "http://"+e.http+path, nil)
	req.Host = host
	resp, err := client1.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually waits until host/path answers with a body starting with
// want (a status code "503 ..." for the controller's own answers).
func (e *env) eventually(host, path, want string) time.Duration {
	e.t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < 10*time.Second {
		code, body := e.get(host, path)
		last = fmt.Sprintf("%d %s", code, body)
		if strings.HasPrefix(body, want) || strings.HasPrefix(last, want) {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatalf("%s%s: %q, want %q", host, path, last, want)
	return 0
}

func rules(host string, paths ...networkingv1.HTTPIngressPath) networkingv1.IngressRule {
	return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: paths}}}
}

func path(p string, t networkingv1.PathType, svc string, port networkingv1.ServiceBackendPort) networkingv1.HTTPIngressPath {
	return networkingv1.HTTPIngressPath{Path: p, PathType: &t, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc, Port: port}}}
}

var (
	port80   = networkingv1.ServiceBackendPort{Number: 80}
	portHTTP = networkingv1.ServiceBackendPort{Name: "http"}
)

func TestController(t *testing.T) {
	e := startEnv(t)
	ctx := t.Context()

	// The class, default, and new Ingresses get it.
	clustertest.Eventually(t, 5*time.Second, func() error {
		ic, err := e.cs.NetworkingV1().IngressClasses().Get(ctx, ClassName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ic.Spec.Controller != ControllerName || ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] != "true" {
			return fmt.Errorf("class %+v", ic)
		}
		return nil
	})

	one := backend(t, "one")
	e.service("service1", one)
	e.service("service2", backend(t, "two-a"), backend(t, "two-b"))
	fanout := e.create(&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "simple-fanout-example"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{rules("foo.bar.com",
			path("/foo", networkingv1.PathTypePrefix, "service1", port80),
			path("/bar", networkingv1.PathTypePrefix, "service2", portHTTP))}}})
	if fanout.Spec.IngressClassName == nil || *fanout.Spec.IngressClassName != ClassName {
		t.Errorf("ingressClassName = %v, want %s (DefaultIngressClass)", fanout.Spec.IngressClassName, ClassName)
	}
	e.eventually("foo.bar.com", "/foo/x", "one /foo/x host=foo.bar.com xff=127.0.0.1 xfh=foo.bar.com xfp=http")
	t.Run("round robin", func(t *testing.T) {
		seen := map[string]int{}
		for range 6 {
			_, body := e.get("foo.bar.com", "/bar")
			seen[strings.Fields(body)[0]]++
		}
		if seen["two-a"] != 3 || seen["two-b"] != 3 {
			t.Errorf("answers %v, want 3 each", seen)
		}
	})
	t.Run("no match", func(t *testing.T) {
		if code, body := e.get("foo.bar.com", "/baz"); code != 404 {
			t.Errorf("/baz: %d %s", code, body)
		}
		if code, body := e.get("other.com", "/foo"); code != 404 {
			t.Errorf("other.com: %d %s", code, body)
		}
	})
	t.Run("status", func(t *testing.T) {
		clustertest.Eventually(t, 5*time.Second, func() error {
			ing, err := e.cs.NetworkingV1().Ingresses("default").Get(ctx, "simple-fanout-example", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if lb := ing.Status.LoadBalancer.Ingress; len(lb) != 1 || lb[0].IP != "192.0.2.10" {
				return fmt.Errorf("status %+v", ing.Status)
			}
			return nil
		})
	})
	t.Run("retry on refused endpoint", func(t *testing.T) {
		dead := freeAddr()
		e.service("flaky", dead, backend(t, "alive"))
		e.create(&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "flaky"},
			Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{rules("flaky.example", path("/", networkingv1.PathTypePrefix, "flaky", port80))}}})
		e.eventually("flaky.example", "/", "alive")
		for range 4 {
			if code, body := e.get("flaky.example", "/"); code != 200 {
				t.Errorf("%d %s", code, body)
			}
		}
		e.slice("flaky", dead)
		e.eventually("flaky.example", "/", "502 Bad Gateway: backend default/flaky:80: connection refused")
		if n := len(e.c.state.Load().upstreams[upstreamKey{ns: "default", svc: "flaky", portNumber: 80}].addrs); n != 1 {
			t.Errorf("%d endpoints", n)
		}
	})
	t.Run("bad Ingress breaks no other route", func(t *testing.T) {
		group := "k8s.example.com"
		e.create(&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec: networkingv1.IngressSpec{
				TLS: []networkingv1.IngressTLS{{Hosts: []string{"bad.example"}, SecretName: "missing"}},
				Rules: []networkingv1.IngressRule{rules("bad.example",
					path("/nosvc", networkingv1.PathTypePrefix, "no-such-service", port80),
					path("/noport", networkingv1.PathTypePrefix, "service1", networkingv1.ServiceBackendPort{Number: 81}),
					networkingv1.HTTPIngressPath{Path: "/icons", PathType: ptr(networkingv1.PathTypeImplementationSpecific), Backend: networkingv1.IngressBackend{
						Resource: &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "StorageBucket", Name: "icon-assets"}}},
					path("/ok", networkingv1.PathTypeExact, "service1", port80))}}})
		e.eventually("bad.example", "/ok", "one /ok")
		if code, body := e.get("bad.example", "/nosvc"); code != 503 || !strings.Contains(body, "Service default/no-such-service not found") {
			t.Errorf("/nosvc: %d %s", code, body)
		}
		if code, body := e.get("bad.example", "/noport"); code != 503 || !strings.Contains(body, "no TCP port 81") {
			t.Errorf("/noport: %d %s", code, body)
		}
		if code, body := e.get("bad.example", "/icons/a"); code != 503 || !strings.Contains(body, "resource StorageBucket.k8s.example.com icon-assets") {
			t.Errorf("/icons/a: %d %s", code, body)
		}
		if code, body := e.get("foo.bar.com", "/foo"); code != 200 {
			t.Errorf("other Ingress: %d %s", code, body)
		}
		clustertest.Eventually(t, 5*time.Second, func() error {
			evs, err := e.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=bad"})
			if err != nil {
				return err
			}
			want := map[string]bool{"ServiceNotFound": false, "ServicePortNotFound": false, "UnsupportedBackend": false, "BadTLSSecret": false}
			for _, ev := range evs.Items {
				if _, ok := want[ev.Reason]; ok && ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Kind == "Ingress" {
					want[ev.Reason] = true
				}
			}
			for r, ok := range want {
				if !ok {
					return fmt.Errorf("no Warning %s event among %d", r, len(evs.Items))
				}
			}
			return nil
		})
	})
	t.Run("edit applies at once", func(t *testing.T) {
		ing, err := e.cs.NetworkingV1().Ingresses("default").Get(ctx, "simple-fanout-example", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ing.Spec.Rules = append(ing.Spec.Rules, rules("bar.baz.com", path("/foo", networkingv1.PathTypePrefix, "service2", port80)))
		if _, err := e.cs.NetworkingV1().Ingresses("default").Update(ctx, ing, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if took := e.eventually("bar.baz.com", "/foo", "two-"); took > time.Second {
			t.Errorf("the new host served after %v", took)
		}
	})
	t.Run("hop-by-hop and forwarding headers", func(t *testing.T) {
		// Sent by hand: net/http's client would not send a
		// Connection-named header or trailers this way.
		conn, err := net.Dial("tcp", e.http)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprint(conn, "POST /foo/headers HTTP/1.1\r\nHost: foo.bar.com\r\n"+
			"Connection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nProxy-Authorization: Basic eA==\r\n"+
			"Te: trailers, deflate\r\nX-Forwarded-For: 6.6.6.6\r\nX-Real-Ip: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\n"+
			"X-Kept: a\r\nX-Kept: b\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"3\r\nabc\r\n0\r\nX-Sum: 7\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		got := string(b)
		for _, want := range []string{"X-Kept: a,b", "Te: trailers", "X-Forwarded-For: 127.0.0.1", "X-Real-Ip: 127.0.0.1",
			"X-Forwarded-Host: foo.bar.com", "X-Forwarded-Proto: http", "trailer X-Sum: 7"} {
			if !strings.Contains(got, want+"\n") && !strings.HasSuffix(got, want) {
				t.Errorf("backend got no %q:\n%s", want, got)
			}
		}
		for _, gone := range []string{"X-Secret", "Keep-Alive", "Proxy-Authorization", "6.6.6.6", "Forwarded:", "User-Agent", "deflate"} {
			if strings.Contains(got, gone) {
				t.Errorf("backend got %q:\n%s", gone, got)
			}
		}
	})
	t.Run("a backend hanging up mid-body breaks the response", func(t *testing.T) {
		for _, p := range []string{"/foo/die", "/foo/dribble"} {
			req, _ := http.NewRequest("GET", "http://"+e.http+p, nil)
			req.Host = "foo.bar.com"
			resp, err := client1.Do(req)
			if err != nil {
				continue // cut before the head went out: as broken
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Errorf("%s: read %q whole; want the cut to show", p, b)
			}
		}
	})
	t.Run("upgrade passes through", func(t *testing.T) {
		conn, err := net.Dial("tcp", e.http)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /foo HTTP/1.1\r\nHost: foo.bar.com\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		fmt.Fprintf(conn, "ping\n")
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := br.ReadString('\n')
		if line != "ping\n" {
			t.Errorf("echo %q %v", line, err)
		}
	})
	t.Run("response streams, trailers pass, changes leave it be", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "http://"+e.http+"/foo/stream", nil)
		req.Host = "foo.bar.com"
		resp, err := client1.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 6)
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first;" {
			t.Fatalf("first chunk %q %v", buf, err)
		}
		// Meanwhile the configuration changes, and the endpoint leaves
		// the Service: the request in flight goes on.
		e.create(&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "midway"},
			Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{rules("midway.example", path("/", networkingv1.PathTypePrefix, "service2", port80))}}})
		e.slice("service1")
		e.eventually("midway.example", "/", "two-")
		e.eventually("foo.bar.com", "/foo", "503 Service Unavailable")
		streamGo <- struct{}{}
		defer func() {
			e.slice("service1", one)
			e.eventually("foo.bar.com", "/foo", "one")
		}()
		rest, err := io.ReadAll(resp.Body)
		if err != nil || string(rest) != "second" || resp.Trailer.Get("X-Checksum") != "42" {
			t.Errorf("rest %q, trailer %v, %v", rest, resp.Trailer, err)
		}
	})
	t.Run("large body streams", func(t *testing.T) {
		const size = 64 << 20
		req, _ := http.NewRequest("POST", "http://"+e.http+"/foo", io.LimitReader(zeros{}, size))
		req.Host = "foo.bar.com"
		resp, err := client1.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), fmt.Sprintf("body=%d", size)) {
			t.Errorf("%s", b)
		}
	})
	t.Run("TLS", func(t *testing.T) {
		crt, key := selfSigned(t, "https-example.foo.com")
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "testsecret-tls"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": crt, "tls.key": key}}
		if _, err := e.cs.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.create(&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "tls-example-ingress"},
			Spec: networkingv1.IngressSpec{
				TLS:   []networkingv1.IngressTLS{{Hosts: []string{"https-example.foo.com"}, SecretName: "testsecret-tls"}},
				Rules: []networkingv1.IngressRule{rules("https-example.foo.com", path("/", networkingv1.PathTypePrefix, "service1", port80))}}})
		get := func(crt []byte) (string, error) {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(crt)
			tr := &http.Transport{Proxy: nil, ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "https-example.foo.com"},
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "tcp", e.https)
				}}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://https-example.foo.com/x")
			if err != nil {
				return "", err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.Proto + " " + string(b), nil
		}
		clustertest.Eventually(t, 5*time.Second, func() error {
			got, err := get(crt)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(got, "HTTP/2.0 one /x host=https-example.foo.com xff=127.0.0.1 xfh=https-example.foo.com xfp=https") {
				return fmt.Errorf("%s", got)
			}
			return nil
		})
		// A new certificate in the Secret serves at once.
		crt2, key2 := selfSigned(t, "https-example.foo.com")
		sec.Data = map[string][]byte{"tls.crt": crt2, "tls.key": key2}
		if _, err := e.cs.CoreV1().Secrets("default").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		clustertest.Eventually(t, 5*time.Second, func() error {
			_, err := get(crt2)
			return err
		})
	})
	t.Run("no endpoints", func(t *testing.T) {
		e.slice("service1")
		e.eventually("foo.bar.com", "/foo", "503 Service Unavailable: backend default/service1:80 of Ingress default/simple-fanout-example: Service default/service1 has no ready endpoints for port 80")
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func selfSigned(t *testing.T, host string) (crt, key []byte) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}
