package apiserver

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
)

// sample is one line of the text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads /metrics through the whole handler chain.
func scrape(t *testing.T, s *Server) []sample {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	var out []sample
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// No label value here holds a space, a comma or a quote, so a
		// plain split suffices.
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q: %v", line, err)
		}
		smp := sample{name: line[:sp], labels: map[string]string{}, value: v}
		if i := strings.IndexByte(smp.name, '{'); i >= 0 {
			for _, kv := range strings.Split(strings.TrimSuffix(smp.name[i+1:], "}"), ",") {
				k, v, _ := strings.Cut(kv, "=")
				smp.labels[k] = strings.Trim(v, `"`)
			}
			smp.name = smp.name[:i]
		}
		out = append(out, smp)
	}
	return out
}

// value is the sum over the samples named name whose labels include want,
// and whether any matched.
func value(samples []sample, name string, want map[string]string) (float64, bool) {
	var sum float64
	found := false
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		sum += s.value
		found = true
	}
	return sum, found
}

func cmLabels(verb, scope, code string) map[string]string {
	l := map[string]string{"verb": verb, "group": "", "version": "v1", "resource": "configmaps", "subresource": "", "scope": scope, "component": "apiserver"}
	if code != "" {
		l["code"] = code
	}
	return l
}

func TestMetricsRequests(t *testing.T) {
	e := newTestEnv(t)
	// A second server in the same process must not collide with the
	// first on metric registration.
	other := newTestEnv(t)

	// Start-up writes one ConfigMap of its own (kube-system's
	// extension-apiserver-authentication).
	bootCreates, _ := value(scrape(t, e.s), "etcd_request_duration_seconds_count", map[string]string{"operation": "create", "type": "configmaps"})
	cms := e.cs.CoreV1().ConfigMaps("default")
	c, err := cms.Create(e.ctx, cm("a", map[string]string{"k": "v"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(e.ctx, "a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(e.ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := cms.List(e.ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Data["k"] = "v2"
	if _, err := cms.Update(e.ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Patch(e.ctx, "a", types.MergePatchType, []byte(`{"data":{"k":"v3"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	applied := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"},"data":{"x":"y"}}`)
	if _, err := cms.Patch(e.ctx, "b", types.ApplyPatchType, applied, metav1.PatchOptions{FieldManager: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(e.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().ConfigMaps("").List(e.ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}

	m := scrape(t, e.s)
	for _, c := range []struct {
		verb, scope, code string
		want              float64
	}{
		{"POST", "resource", "201", 1},
		{"GET", "resource", "200", 1},
		{"GET", "resource", "404", 1},
		{"LIST", "namespace", "200", 1},
		{"LIST", "cluster", "200", 1},
		{"PUT", "resource", "200", 1},
		{"PATCH", "resource", "200", 1},
		{"APPLY", "resource", "201", 1},
		{"DELETE", "resource", "200", 1},
	} {
		got, _ := value(m, "apiserver_request_total", cmLabels(c.verb, c.scope, c.code))
		if got != c.want {
			t.Errorf("apiserver_request_total %s %s %s = %v, want %v", c.verb, c.scope, c.code, got, c.want)
		}
	}
	if got, _ := value(m, "apiserver_request_duration_seconds_count", cmLabels("GET", "resource", "")); got != 2 {
		t.Errorf("apiserver_request_duration_seconds_count for configmap GETs = %v, want 2", got)
	}
	// Every write reached the store; the reads of updates and patches too.
	if got, _ := value(m, "etcd_request_duration_seconds_count", map[string]string{"operation": "create", "type": "configmaps"}); got-bootCreates != 2 {
		t.Errorf("store creates of configmaps = %v after %v at start, want 2 more", got, bootCreates)
	}
	if got, _ := value(m, "etcd_request_duration_seconds_count", map[string]string{"operation": "delete", "type": "configmaps"}); got != 1 {
		t.Errorf("store deletes of configmaps = %v, want 1", got)
	}
	if got, _ := value(m, "etcd_request_duration_seconds_count", map[string]string{"operation": "get", "type": "namespaces"}); got < 2 {
		t.Errorf("store gets of namespaces (creates check the namespace) = %v, want >= 2", got)
	}
	all, err := e.cs.CoreV1().ConfigMaps("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := value(m, "apiserver_storage_objects", map[string]string{"resource": "configmaps"}); !ok || got != float64(len(all.Items)) {
		t.Errorf("apiserver_storage_objects{configmaps} = %v (present %v), want %d", got, ok, len(all.Items))
	}
	if got, _ := value(m, "apiserver_storage_objects", map[string]string{"resource": "namespaces"}); got < float64(len(systemNamespaces)) {
		t.Errorf("apiserver_storage_objects{namespaces} = %v, want >= %d", got, len(systemNamespaces))
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if _, ok := value(m, name, nil); !ok {
			t.Errorf("no %s", name)
		}
	}
	// A made-up resource gets no labels of its own.
	if _, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/default/nonsense").DoRaw(e.ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("GET of a made-up resource: %v", err)
	}
	if _, ok := value(scrape(t, e.s), "apiserver_request_total", map[string]string{"resource": "nonsense"}); ok {
		t.Error("a made-up resource got a series of its own")
	}
	// The other server saw none of it.
	if got, _ := value(scrape(t, other.s), "apiserver_request_total", cmLabels("POST", "resource", "201")); got != 0 {
		t.Errorf("the other server counted %v configmap creates", got)
	}
}

func TestMetricsWatchGauge(t *testing.T) {
	e := newTestEnv(t)
	labels := cmLabels("WATCH", "namespace", "")
	w, err := e.cs.CoreV1().ConfigMaps("default").Watch(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The response header is out, so the handler is running.
	if got, _ := value(scrape(t, e.s), "apiserver_longrunning_requests", labels); got != 1 {
		w.Stop()
		t.Fatalf("open watches = %v, want 1", got)
	}
	w.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := scrape(t, e.s)
		open, _ := value(m, "apiserver_longrunning_requests", labels)
		done, _ := value(m, "apiserver_request_total", cmLabels("WATCH", "namespace", "200"))
		if open == 0 && done == 1 {
			if _, ok := value(m, "apiserver_request_duration_seconds_count", map[string]string{"verb": "WATCH"}); ok {
				t.Error("watches are in the latency histogram")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the watch ended: open watches %v, finished watches %v", open, done)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMetricsNeedAuthentication(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := authn.ParseTokenFile(strings.NewReader("secret,alice,1,system:monitoring\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: st, Authenticator: tokens, AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); st.Close() })

	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("anonymous GET /metrics: %d, want 401", rec.Code)
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer secret")
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `apiserver_request_total{code="401",component="apiserver",group="",resource="",scope="",subresource="",verb="GET",version=""} 1`) {
		t.Fatalf("authenticated GET /metrics: %d, want 200 counting the anonymous 401:\n%s", rec.Code, rec.Body)
	}
}

// BenchmarkMetricsOverhead is what labelling, counting and timing add to
// one request, the handler itself left out.
func BenchmarkMetricsOverhead(b *testing.B) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(); st.Close() })
	h := s.withMetrics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/configmaps/a", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}
