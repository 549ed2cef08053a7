package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"bonsai.dev/bonsai/apiserver/metricsapi"
	"bonsai.dev/bonsai/store"
)

// fakeSummaries is a metrics source whose figures the test sets.
type fakeSummaries struct {
	mu   sync.Mutex
	sums map[string]*statsapi.Summary
}

func (f *fakeSummaries) Summary(_ context.Context, node string) (*statsapi.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sums[node]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("no node %q", node)
}

func (f *fakeSummaries) set(node string, s *statsapi.Summary) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sums[node] = s
}

// summaryAt is a node's summary at t: the node and the pod web's
// container main have used cpuNs of CPU and memory bytes of memory.
func summaryAt(node string, uid types.UID, t time.Time, cpuNs, memory uint64) *statsapi.Summary {
	cpu := &statsapi.CPUStats{Time: metav1.NewTime(t), UsageCoreNanoSeconds: &cpuNs}
	mem := &statsapi.MemoryStats{Time: metav1.NewTime(t), WorkingSetBytes: &memory}
	return &statsapi.Summary{
		Node: statsapi.NodeStats{NodeName: node, CPU: cpu, Memory: mem},
		Pods: []statsapi.PodStats{{PodRef: statsapi.PodReference{Name: "web", Namespace: "default", UID: string(uid)},
			Containers: []statsapi.ContainerStats{{Name: "main", CPU: cpu, Memory: mem}}}},
	}
}

// The metrics API serves NodeMetrics and PodMetrics from two scrapes,
// with selectors, upstream's errors, simulated nodes' figures from
// requests, discovery and a local APIService.
func TestMetricsAPI(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSummaries{sums: map[string]*statsapi.Summary{}}
	// The node agent's kubelet, reached over HTTPS: 0.5 cores more at
	// each scrape, 10 s apart.
	var scrapes atomic.Int64
	agentT0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	kubelet := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stats/summary" || r.URL.Query().Get("only_cpu_and_memory") != "true" {
			http.NotFound(w, r)
			return
		}
		n := scrapes.Add(1)
		sum := summaryAt("agent", "", agentT0.Add(time.Duration(n)*10*time.Second), uint64(n)*5e9, 1<<20)
		sum.Pods = nil
		json.NewEncoder(w).Encode(sum)
	}))
	t.Cleanup(kubelet.Close)
	roots := x509.NewCertPool()
	roots.AddCert(kubelet.Certificate())
	s, cs := newServerOn(t, st, Config{MetricsSource: src, MetricResolution: -1, KubeletTLS: &tls.Config{RootCAs: roots}})
	ctx := context.Background()
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "edge", Labels: map[string]string{"zone": "a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "sim-0", Labels: map[string]string{"zone": "b"}, Annotations: map[string]string{"bonsai.dev/simulated": "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "agent"}},
	} {
		n, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Name == "agent" {
			port, _ := strconv.Atoi(portOf(kubelet))
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
			n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
			if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mkPod := func(name, node string, requests corev1.ResourceList) *corev1.Pod {
		p, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: requests}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		if p, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	web := mkPod("web", "edge", nil)
	mkPod("sim", "sim-0", corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("200m"), corev1.ResourceMemory: apiresource.MustParse("64Mi")})

	get := func(path string) (int, []byte) {
		rec := serveAs(s, "GET", path, "", "", nil)
		return rec.Code, rec.Body.Bytes()
	}
	nodeList := func(query string) []metricsv1beta1.NodeMetrics {
		t.Helper()
		code, body := get("/apis/metrics.k8s.io/v1beta1/nodes" + query)
		var l metricsv1beta1.NodeMetricsList
		if code != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("list nodes%s: %d %s", query, code, body)
		}
		return l.Items
	}

	// One scrape: no rate yet, so only the simulated node has figures.
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	src.set("edge", summaryAt("edge", web.UID, t0, 1e9, 10<<20))
	s.resourceMetrics.Scrape(ctx)
	if items := nodeList(""); len(items) != 1 || items[0].Name != "sim-0" {
		t.Fatalf("after one scrape: %+v", items)
	}
	code, body := get("/apis/metrics.k8s.io/v1beta1/nodes/edge")
	if code != http.StatusNotFound || !strings.Contains(string(body), `"message":"nodemetrics.metrics.k8s.io \"edge\" not found"`) {
		t.Errorf("get edge before two scrapes: %d %s", code, body)
	}

	// A second, 10 s later, 0.25 cores used in between.
	src.set("edge", summaryAt("edge", web.UID, t0.Add(10*time.Second), 1e9+2.5e9, 12<<20))
	s.resourceMetrics.Scrape(ctx)
	code, body = get("/apis/metrics.k8s.io/v1beta1/nodes/edge")
	var nm metricsv1beta1.NodeMetrics
	if code != http.StatusOK || json.Unmarshal(body, &nm) != nil {
		t.Fatalf("get edge: %d %s", code, body)
	}
	if nm.Kind != "NodeMetrics" || nm.APIVersion != "metrics.k8s.io/v1beta1" || nm.Labels["zone"] != "a" ||
		!nm.Timestamp.Time.Equal(t0.Add(10*time.Second)) || nm.Window.Duration != 10*time.Second ||
		nm.Usage.Cpu().MilliValue() != 250 || nm.Usage.Memory().Value() != 12<<20 {
		t.Errorf("edge: %s", body)
	}
	if items := nodeList("?labelSelector=zone%3Da"); len(items) != 1 || items[0].Name != "edge" {
		t.Errorf("zone=a: %+v", items)
	}
	if items := nodeList("?fieldSelector=metadata.name%3Dsim-0"); len(items) != 1 || items[0].Name != "sim-0" ||
		items[0].Annotations[metricsapi.AnnotationSimulated] != "true" || items[0].Usage.Cpu().MilliValue() != 100 || items[0].Usage.Memory().Value() != 64<<20 {
		t.Errorf("sim-0: %+v", items)
	}
	if code, body := get("/apis/metrics.k8s.io/v1beta1/nodes?fieldSelector=spec.nodeName%3Dx"); code != http.StatusBadRequest ||
		!strings.Contains(string(body), "field label not supported: spec.nodeName") {
		t.Errorf("unsupported field: %d %s", code, body)
	}

	code, body = get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=" + url.QueryEscape("app in (web,sim)"))
	var pl metricsv1beta1.PodMetricsList
	if code != http.StatusOK || json.Unmarshal(body, &pl) != nil || len(pl.Items) != 2 {
		t.Fatalf("pods: %d %s", code, body)
	}
	for _, pm := range pl.Items {
		want := map[string]int64{"web": 250, "sim": 100}[pm.Name]
		if len(pm.Containers) != 1 || pm.Containers[0].Name != "main" || pm.Containers[0].Usage.Cpu().MilliValue() != want ||
			(pm.Annotations[metricsapi.AnnotationSimulated] == "true") != (pm.Name == "sim") || pm.Labels["app"] != pm.Name {
			t.Errorf("pod %s: %+v", pm.Name, pm)
		}
	}
	if code, body := get("/apis/metrics.k8s.io/v1beta1/pods"); code != http.StatusOK || !strings.Contains(string(body), `"name":"web"`) {
		t.Errorf("pods in all namespaces: %d %s", code, body)
	}
	code, body = get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope")
	if code != http.StatusNotFound || !strings.Contains(string(body), `"message":"podmetrics.metrics.k8s.io \"default/nope\" not found"`) {
		t.Errorf("get missing pod: %d %s", code, body)
	}
	// Read-only, as metrics-server.
	rec := serveAs(s, "DELETE", "/apis/metrics.k8s.io/v1beta1/nodes/edge", "", "", nil)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("delete: %d %s", rec.Code, rec.Body)
	}
	if code, body := get("/apis/metrics.k8s.io/v1beta1/nodes?watch=1"); code != http.StatusMethodNotAllowed {
		t.Errorf("watch: %d %s", code, body)
	}

	// A node that stops answering loses its figures.
	delete(src.sums, "edge")
	s.resourceMetrics.Scrape(ctx)
	var names []string
	for _, m := range nodeList("") {
		names = append(names, m.Name)
		if m.Name == "agent" && (m.Usage.Cpu().MilliValue() != 500 || m.Window.Duration != 10*time.Second) {
			t.Errorf("agent, scraped over HTTPS: %+v", m)
		}
	}
	if got := strings.Join(names, " "); got != "agent sim-0" || scrapes.Load() != 3 {
		t.Errorf("after edge stopped answering: %s; the agent's kubelet scraped %d times", got, scrapes.Load())
	}

	// Discovery and the local APIService.
	rl, err := cs.Discovery().ServerResourcesForGroupVersion("metrics.k8s.io/v1beta1")
	if err != nil {
		t.Fatal(err)
	}
	names = nil
	for _, r := range rl.APIResources {
		names = append(names, fmt.Sprintf("%s:%s:%v:%v", r.Name, r.Kind, r.Namespaced, r.Verbs))
	}
	if got := strings.Join(names, " "); got != "nodes:NodeMetrics:false:[get list] pods:PodMetrics:true:[get list]" {
		t.Errorf("discovery: %s", got)
	}
	// metrics-server's own APIService cannot take the group over.
	rec = serveAs(s, "PUT", "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io", "", `{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService",
		"metadata":{"name":"v1beta1.metrics.k8s.io"},"spec":{"group":"metrics.k8s.io","version":"v1beta1","groupPriorityMinimum":100,"versionPriority":100,
		"insecureSkipTLSVerify":true,"service":{"name":"metrics-server","namespace":"kube-system"}}}`, nil)
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), `spec.service: Forbidden: \"metrics.k8s.io\" is served by the API server itself`) {
		t.Errorf("metrics-server's APIService: %d %s", rec.Code, rec.Body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get("/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io")
		var as apiregistrationv1.APIService
		if code == http.StatusOK && json.Unmarshal(body, &as) == nil && as.Spec.Service == nil && as.Spec.GroupPriorityMinimum == 100 &&
			len(as.Status.Conditions) > 0 && as.Status.Conditions[0].Type == apiregistrationv1.Available && as.Status.Conditions[0].Status == apiregistrationv1.ConditionTrue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("APIService v1beta1.metrics.k8s.io: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
