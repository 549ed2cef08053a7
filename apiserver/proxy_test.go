package apiserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/authn"
)

// TestPodAndServiceProxy: pods/proxy and services/proxy pass a request
// (method, path below .../proxy, query, body) to the pod's IP or a ready
// endpoint of the service, without the caller's credentials, and the
// answer back. bonsai served neither: the official Python and JavaScript
// clients' connect_get_namespaced_pod_proxy_with_path and
// connectGetNamespacedServiceProxyWithPath got 404.
func TestPodAndServiceProxy(t *testing.T) {
	e := newTestEnv(t)
	var seen []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" auth="+r.Header.Get("Authorization")+" body="+string(body))
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "from the pod")
	}))
	defer backend.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))

	pods := e.cs.CoreV1().Pods("default")
	pod, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: 1}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIP = host
	pod.Status.PodIPs = []corev1.PodIP{{IP: host}}
	if _, err := pods.UpdateStatus(e.ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc := e.cs.CoreV1().RESTClient()
	body, err := rc.Get().AbsPath("/api/v1/namespaces/default/pods/web:"+port+"/proxy/some/page/").Param("q", "1").DoRaw(e.ctx)
	if err != nil || string(body) != "from the pod" {
		t.Fatalf("GET pods/web:%s/proxy/some/page/?q=1: %q, %v", port, body, err)
	}
	if _, err := rc.Post().AbsPath("/api/v1/namespaces/default/pods/http:web:" + port + "/proxy/form").Body([]byte("a=b")).DoRaw(e.ctx); err != nil {
		t.Fatalf("POST pods/http:web:%s/proxy/form: %v", port, err)
	}
	_, err = rc.Get().AbsPath("/api/v1/namespaces/default/pods/web:" + port + "/proxy/missing").DoRaw(e.ctx)
	if !apierrors.IsNotFound(err) {
		t.Errorf("a 404 from the pod: %v", err)
	}
	want := []string{"GET /some/page/?q=1 auth= body=", "POST /form auth= body=a=b", "GET /missing auth= body="}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("the pod saw:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}

	svcs := e.cs.CoreV1().Services("default")
	if _, err := svcs.Create(e.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	body, err = rc.Get().AbsPath("/api/v1/namespaces/default/services/web:http/proxy/").DoRaw(e.ctx)
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(string(body), `no endpoints available for service \"web\"`) {
		t.Errorf("services/proxy without endpoints: %v %s", err, body)
	}
	n, _ := strconv.Atoi(port)
	if _, err := e.cs.CoreV1().Endpoints("default").Create(e.ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: host}}, Ports: []corev1.EndpointPort{{Name: "http", Port: int32(n)}}}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, name := range []string{"web:http", "web:80"} {
		body, err = rc.Get().AbsPath("/api/v1/namespaces/default/services/" + name + "/proxy/svc").DoRaw(e.ctx)
		if err != nil || string(body) != "from the pod" {
			t.Errorf("GET services/%s/proxy/svc: %q, %v", name, body, err)
		}
	}
	_, err = rc.Get().AbsPath("/api/v1/namespaces/default/services/web:81/proxy/").DoRaw(e.ctx)
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("services/proxy to a port the service lacks: %v", err)
	}
}

// proxyBackends are what the proxy tests reach: a kubelet (HTTPS) and a
// plain HTTP server that also takes WebSocket upgrades and echoes what
// comes after them; each records what it saw.
type proxyBackends struct {
	kubelet, other *httptest.Server
	mu             sync.Mutex
	seen           []string
}

func newProxyBackends(t *testing.T) *proxyBackends {
	b := &proxyBackends{}
	record := func(who string, r *http.Request) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.seen = append(b.seen, who+" "+r.Method+" "+r.URL.RequestURI()+" auth="+r.Header.Get("Authorization"))
	}
	b.kubelet = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record("kubelet", r)
		io.WriteString(w, "kubelet")
	}))
	b.other = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record("other", r)
		if r.Header.Get("Upgrade") != "websocket" {
			io.WriteString(w, "other")
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		buf.Flush()
		line, _ := buf.ReadString('\n')
		buf.WriteString("echo " + line)
		buf.Flush()
	}))
	t.Cleanup(b.kubelet.Close)
	t.Cleanup(b.other.Close)
	return b
}

func (b *proxyBackends) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.seen
	b.seen = nil
	return out
}

func portOf(s *httptest.Server) string {
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	return port
}

// TestNodeProxy: nodes/proxy reaches the node's kubelet API over HTTPS
// with the API server's kubelet-client transport when no port or the
// kubelet's is named, and any other port of the node's address over
// plain HTTP, with kube-apiserver's errors and redirect; it is
// authorized as upstream, on the proxy subresource of nodes, so reading
// nodes is not enough (system:kubelet-api-admin is).
func TestNodeProxy(t *testing.T) {
	b := newProxyBackends(t)
	roots := x509.NewCertPool()
	roots.AddCert(b.kubelet.Certificate())
	// Under RBAC, the default mode.
	s, _ := newAuthServerWith(t, "admin-token,admin,1,system:masters\n", Config{KubeletTLS: &tls.Config{RootCAs: roots}})
	cs := kubernetes.NewForConfigOrDie(s.ClientConfig(adminUser()))
	ctx := context.Background()
	kport, _ := strconv.Atoi(portOf(b.kubelet))
	for name, annotations := range map[string]map[string]string{"edge": nil, "sim": {simulatedAnnotation: "true"}} {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		if annotations == nil {
			n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(kport)
		}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rc := cs.CoreV1().RESTClient()
	for _, tc := range []struct {
		path, want, seen string
	}{
		{"/api/v1/nodes/edge/proxy/healthz", "kubelet", "kubelet GET /healthz auth="},
		{"/api/v1/nodes/edge:" + portOf(b.kubelet) + "/proxy/stats/summary", "kubelet", "kubelet GET /stats/summary auth="},
		{"/api/v1/nodes/https:edge:" + portOf(b.kubelet) + "/proxy/pods", "kubelet", "kubelet GET /pods auth="},
		// The query is the backend's: watch=1 does not make a watch.
		{"/api/v1/nodes/edge:" + portOf(b.other) + "/proxy/metrics?watch=1", "other", "other GET /metrics?watch=1 auth="},
	} {
		path, query, _ := strings.Cut(tc.path, "?")
		req := rc.Get().AbsPath(path)
		if k, v, ok := strings.Cut(query, "="); ok {
			req = req.Param(k, v)
		}
		body, err := req.DoRaw(ctx)
		if err != nil || string(body) != tc.want {
			t.Errorf("GET %s: %q, %v; want %q", tc.path, body, err, tc.want)
		}
		if got := b.take(); len(got) == 0 || got[len(got)-1] != tc.seen {
			t.Errorf("GET %s: backend saw %q, want %q", tc.path, got, tc.seen)
		}
	}
	for _, tc := range []struct {
		path string
		code int32
		msg  string
	}{
		{"/api/v1/nodes/a:b:c:d/proxy/", 400, `invalid node request "a:b:c:d"`},
		{"/api/v1/nodes/ftp:edge:21/proxy/", 400, `invalid node request "ftp:edge:21"`},
		{"/api/v1/nodes/nope/proxy/", 404, `nodes "nope" not found`},
		{"/api/v1/nodes/sim/proxy/healthz", 503, "node sim is simulated and serves no kubelet API"},
	} {
		body, err := rc.Get().AbsPath(tc.path).DoRaw(ctx)
		var st metav1.Status
		if err == nil || json.Unmarshal(body, &st) != nil || st.Code != tc.code || !strings.Contains(st.Message, tc.msg) {
			t.Errorf("GET %s: %v %s, want %d with %q", tc.path, err, body, tc.code, tc.msg)
		}
	}

	// Without a path: redirected below .../proxy/, as upstream.
	rec := serveAs(s, "GET", "/api/v1/nodes/edge/proxy", "admin-token", "", nil)
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/api/v1/nodes/edge/proxy/" {
		t.Errorf("GET .../proxy: %d to %q, want 301 to .../proxy/", rec.Code, rec.Header().Get("Location"))
	}

	// Authorization: the proxy subresource of nodes, by verb.
	viewer := &authn.User{Name: "viewer", Groups: []string{authn.GroupAuthenticated}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "node-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"nodes"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(role string) {
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewer-" + role},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "viewer"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind("node-reader")
	vc := kubernetes.NewForConfigOrDie(s.ClientConfig(viewer)).CoreV1().RESTClient()
	err := vc.Get().AbsPath("/api/v1/nodes/edge/proxy/healthz").Do(ctx).Error()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "viewer" cannot get resource "nodes/proxy" in API group "" at the cluster scope`) {
		t.Errorf("nodes/proxy with get on nodes only: %v, want Forbidden", err)
	}
	bind("system:kubelet-api-admin")
	eventually(t, "nodes/proxy as system:kubelet-api-admin", func() error {
		_, err := vc.Get().AbsPath("/api/v1/nodes/edge/proxy/healthz").DoRaw(ctx)
		return err
	})
	if _, err := vc.Post().AbsPath("/api/v1/nodes/edge/proxy/run").Body([]byte("x")).DoRaw(ctx); err != nil {
		t.Errorf("POST nodes/proxy as system:kubelet-api-admin: %v", err)
	}
	if got := b.take(); len(got) == 0 || got[len(got)-1] != "kubelet POST /run auth=" {
		t.Errorf("kubelet saw %q", got)
	}
}

// TestProxyWebSocket: a WebSocket upgrade passes through pods/proxy,
// services/proxy and nodes/proxy, and the upgraded connection carries
// data both ways.
func TestProxyWebSocket(t *testing.T) {
	b := newProxyBackends(t)
	e := newTestEnv(t)
	port := portOf(b.other)
	n, _ := strconv.Atoi(port)
	pod, err := e.cs.CoreV1().Pods("default").Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ws"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIP = "127.0.0.1"
	if _, err := e.cs.CoreV1().Pods("default").UpdateStatus(e.ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().Services("default").Create(e.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ws"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().Endpoints("default").Create(e.ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "ws"},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "127.0.0.1"}}, Ports: []corev1.EndpointPort{{Name: "http", Port: int32(n)}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node, err := e.cs.CoreV1().Nodes().Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	if _, err := e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.s.Handler())
	defer srv.Close()
	for _, path := range []string{
		"/api/v1/namespaces/default/pods/ws:" + port + "/proxy/socket",
		"/api/v1/namespaces/default/services/ws:80/proxy/socket",
		"/api/v1/nodes/edge:" + port + "/proxy/socket",
	} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: bonsai\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path)
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Errorf("%s: %v %v, want 101", path, resp, err)
			conn.Close()
			continue
		}
		io.WriteString(conn, "hello\n")
		line, err := r.ReadString('\n')
		if err != nil || line != "echo hello\n" {
			t.Errorf("%s: read %q, %v after the upgrade", path, line, err)
		}
		conn.Close()
		if got := b.take(); len(got) != 1 || got[0] != "other GET /socket auth=" {
			t.Errorf("%s: backend saw %q", path, got)
		}
	}
}
