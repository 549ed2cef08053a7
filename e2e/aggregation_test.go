package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestAggregatedAPI: an aggregated API server on the host, behind a
// selectorless Service and an EndpointSlice pointing at 127.0.0.1, is
// registered with an APIService. It trusts the proxy as servers built on
// k8s.io/apiserver do, from kube-system/extension-apiserver-authentication
// (front-proxy CA, allowed names, header names). kubectl sees the
// APIService Available, lists its resources in `api-resources` and gets
// its objects, as the admin whose identity reaches the backend in the
// front-proxy headers.
func TestAggregatedAPI(t *testing.T) {
	requireBinary(t)
	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1]
	s := startServer(t, t.TempDir())
	kubeconfig := filepath.Join(s.dataDir, "kubeconfig.yaml")
	admin := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: kubeconfig, cacheDir: t.TempDir()}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	auth, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	backend := startFlunderServer(t, auth.Data)

	manifest := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: flunders, namespace: default}
spec:
  ports: [{name: https, port: 443, targetPort: %[1]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: flunders-host
  namespace: default
  labels: {kubernetes.io/service-name: flunders}
addressType: IPv4
endpoints: [{addresses: [127.0.0.1], conditions: {ready: true}}]
ports: [{name: https, port: %[1]d}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.wardle.example.com}
spec:
  group: wardle.example.com
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 15
  caBundle: %[2]s
  service: {namespace: default, name: flunders}
`, backend.port, base64.StdEncoding.EncodeToString(backend.ca))
	admin.must("apply", "-f", writeFile(t, "aggregated.yaml", manifest, 0o600))
	admin.must("wait", "--for=condition=Available", "apiservice/v1alpha1.wardle.example.com", "--timeout=30s")
	if out := admin.must("get", "apiservice", "v1alpha1.wardle.example.com", "--no-headers"); !strings.Contains(out, "default/flunders") || !strings.Contains(out, "True") {
		t.Errorf("kubectl get apiservice: %q", out)
	}
	if out := admin.must("get", "apiservice", "v1.apps", "--no-headers"); !strings.Contains(out, "Local") || !strings.Contains(out, "True") {
		t.Errorf("kubectl get apiservice v1.apps: %q", out)
	}

	out := admin.must("api-resources", "--api-group=wardle.example.com", "--no-headers")
	if f := strings.Fields(out); len(f) < 5 || f[0] != "flunders" || f[1] != "fl" || f[2] != "wardle.example.com/v1alpha1" || f[3] != "true" || f[4] != "Flunder" {
		t.Errorf("kubectl api-resources: %q", out)
	}
	out = admin.must("get", "flunders", "-n", "default")
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "first") {
		t.Errorf("kubectl get flunders: %q", out)
	}
	if out := admin.must("get", "fl", "-n", "default", "-o", "jsonpath={.items[*].metadata.name}"); out != "first" {
		t.Errorf("kubectl get fl -o jsonpath: %q", out)
	}
	// kubectl explain reads the backend's OpenAPI v3 through bonsai.
	if out := admin.must("explain", "flunders.spec"); !strings.Contains(out, "KIND:") || !strings.Contains(out, "Flunder") || !strings.Contains(out, "The flunder this one refers to.") {
		t.Errorf("kubectl explain flunders.spec:\n%s", out)
	}
	h := backend.last()
	if h.Get("X-Remote-User") != "system:admin" || !slices.Contains(h.Values("X-Remote-Group"), "system:masters") || h.Get("Authorization") != "" {
		t.Errorf("identity sent: user %q groups %q authorization %q", h.Get("X-Remote-User"), h.Values("X-Remote-Group"), h.Get("Authorization"))
	}
	if n := backend.refusedCount(); n != 0 {
		t.Errorf("the aggregated server refused %d requests without the front-proxy certificate", n)
	}
	// Unregistered, the group is gone from discovery and its paths.
	admin.must("delete", "apiservice", "v1alpha1.wardle.example.com")
	waitFor(t, 10*time.Second, "wardle gone from api-resources", func() bool {
		return !strings.Contains(admin.run("api-resources", "--api-group=wardle.example.com").stdout, "flunders")
	})
	if stderr := admin.fails("get", "--raw", "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders"); !strings.Contains(stderr, "NotFound") {
		t.Errorf("after unregistering: %s", stderr)
	}
}

// flunderServer serves wardle.example.com/v1alpha1 flunders (one,
// "first") over HTTPS with a CA of its own, to clients presenting a
// certificate of the front-proxy CA with an allowed name.
type flunderServer struct {
	port    int
	ca      []byte
	mu      sync.Mutex
	seen    []http.Header
	refused int
}

func startFlunderServer(t *testing.T, auth map[string]string) *flunderServer {
	t.Helper()
	certs, err := testenv.WebhookCerts(t.TempDir(), "flunders.default.svc")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(auth["requestheader-client-ca-file"])) {
		t.Fatal("requestheader-client-ca-file holds no certificate")
	}
	var allowed, users []string
	if err := json.Unmarshal([]byte(auth["requestheader-allowed-names"]), &allowed); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(auth["requestheader-username-headers"]), &users); err != nil || len(users) == 0 {
		t.Fatalf("requestheader-username-headers %q", auth["requestheader-username-headers"])
	}
	f := &flunderServer{ca: certs.CA.CertPEM}
	gv := "wardle.example.com/v1alpha1"
	first := map[string]any{"apiVersion": gv, "kind": "Flunder", "metadata": map[string]any{"name": "first", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || !slices.Contains(allowed, r.TLS.PeerCertificates[0].Subject.CommonName) || r.Header.Get(users[0]) == "" {
			f.mu.Lock()
			f.refused++
			f.mu.Unlock()
			http.Error(w, "not the front proxy", http.StatusUnauthorized)
			return
		}
		f.mu.Lock()
		f.seen = append(f.seen, r.Header.Clone())
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		switch r.URL.Path {
		case "/apis/" + gv:
			enc.Encode(metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv,
				APIResources: []metav1.APIResource{{Name: "flunders", SingularName: "flunder", Namespaced: true, Kind: "Flunder", ShortNames: []string{"fl"}, Verbs: metav1.Verbs{"get", "list"}}}})
		case "/openapi/v3/apis/" + gv:
			w.Write([]byte(flunderOpenAPI))
		case "/apis/" + gv + "/namespaces/default/flunders":
			if strings.Contains(r.Header.Get("Accept"), "as=Table") {
				enc.Encode(metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"},
					ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name"}},
					Rows:              []metav1.TableRow{{Cells: []any{"first"}}}})
				return
			}
			enc.Encode(map[string]any{"apiVersion": gv, "kind": "FlunderList", "metadata": map[string]any{}, "items": []any{first}})
		default:
			http.NotFound(w, r)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*certs.Serving.Current()}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	f.port = int(netip.MustParseAddrPort(srv.Listener.Addr().String()).Port())
	return f
}

const flunderOpenAPI = `{"openapi":"3.0.0","info":{"title":"wardle","version":"v1alpha1"},
"paths":{"/apis/wardle.example.com/v1alpha1/namespaces/{namespace}/flunders":{"get":{"x-kubernetes-action":"list","x-kubernetes-group-version-kind":{"group":"wardle.example.com","kind":"Flunder","version":"v1alpha1"},
 "responses":{"200":{"description":"OK"}}}}},
"components":{"schemas":{
"com.example.wardle.v1alpha1.Flunder":{"type":"object","description":"A Flunder is what the wardle server keeps.",
 "properties":{"apiVersion":{"type":"string"},"kind":{"type":"string"},"spec":{"type":"object","description":"What the flunder should be.","properties":{"reference":{"type":"string","description":"The flunder this one refers to."}}}},
 "x-kubernetes-group-version-kind":[{"group":"wardle.example.com","kind":"Flunder","version":"v1alpha1"}]}}}}`

func (f *flunderServer) last() http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		return http.Header{}
	}
	return f.seen[len(f.seen)-1]
}

func (f *flunderServer) refusedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refused
}
