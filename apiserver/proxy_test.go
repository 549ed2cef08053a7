package apiserver

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
