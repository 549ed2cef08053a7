package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// promOperator is the published module whose CRDs the test installs, as
// an operator's users install them, straight from the module cache.
const promOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// prometheusOperatorCRDs downloads the module (through the Go module
// proxy) and returns its example/prometheus-operator-crd directory.
func prometheusOperatorCRDs(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	testenv.Require(t, err == nil, "go not found: %v", err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "mod", "download", "-json", promOperator).Output()
	testenv.Require(t, err == nil, "go mod download %s: %v", promOperator, err)
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, mod.Error == "" && mod.Dir != "", "go mod download %s: %s", promOperator, mod.Error)
	return filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
}

// TestKubectlPrometheusOperatorCRDs installs prometheus-operator's ten
// CRDs with kubectl and uses them: validation, defaults, printer columns,
// scale, explain and watch.
func TestKubectlPrometheusOperatorCRDs(t *testing.T) {
	requireBinary(t)
	dir := prometheusOperatorCRDs(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) != 10 {
		t.Fatalf("CRDs in %s: %v %v", dir, files, err)
	}
	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1] // the newest
	s := startServer(t, t.TempDir())
	k := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: filepath.Join(s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}

	// The CRDs are too big for client-side apply's annotation; their
	// project installs them server-side.
	args := []string{"apply", "--server-side"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	out := k.must(args...)
	wantContains(t, "apply", out, "customresourcedefinition.apiextensions.k8s.io/prometheuses.monitoring.coreos.com serverside-applied")
	// A CRD read before the naming controller wrote its first status has
	// "conditions": null, which kubectl wait refuses instead of waiting
	// (kubernetes/kubernetes#66439, the same on every cluster): retry.
	applied := time.Now()
	for {
		r := k.run("wait", "--for=condition=Established", "--timeout=30s", "crd/prometheuses.monitoring.coreos.com", "crd/servicemonitors.monitoring.coreos.com")
		if r.code == 0 {
			break
		}
		if !strings.Contains(r.stderr, ".status.conditions accessor error") || time.Since(applied) > 30*time.Second {
			t.Fatalf("kubectl wait: exit %d: %s", r.code, r.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("CRDs established %v after apply", time.Since(applied))
	wantContains(t, "api-resources", k.must("api-resources", "--api-group=monitoring.coreos.com"), "servicemonitors", "smon", "prometheuses", "prom")

	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	lines, _ := k.start(watchCtx, "get", "servicemonitors", "-n", "default", "--watch", "-o", "name")

	// Validation: the schema's pattern and required fields, with
	// Kubernetes' messages.
	bad := writeFile(t, "bad.yaml", `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: bad, namespace: default}
spec:
  endpoints:
  - port: web
    interval: soon
`, 0o600)
	msg := k.fails("apply", "-f", bad)
	wantContains(t, "invalid ServiceMonitor", msg, `The ServiceMonitor "bad" is invalid`, "spec.endpoints[0].interval", "spec.selector: Required value")

	// Defaults: a relabeling's action is "replace" unless set.
	good := writeFile(t, "good.yaml", `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  endpoints:
  - port: web
    interval: 30s
    metricRelabelings:
    - sourceLabels: [__name__]
      targetLabel: metric
`, 0o600)
	k.must("apply", "-f", good)
	if got := k.must("get", "smon", "web", "-o", "jsonpath={.spec.endpoints[0].metricRelabelings[0].action}"); got != "replace" {
		t.Errorf("defaulted action = %q", got)
	}
	select {
	case l := <-lines:
		if strings.TrimSpace(l) != "servicemonitor.monitoring.coreos.com/web" {
			t.Errorf("watch line %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Error("the watch saw no ServiceMonitor")
	}

	// kubectl validates fields against the schema (Strict by default).
	unknown := writeFile(t, "unknown.yaml", `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: typo, namespace: default}
spec:
  selector: {}
  endpoints: [{port: web}]
  jobLable: oops
`, 0o600)
	wantContains(t, "unknown field", k.fails("apply", "-f", unknown), `unknown field "spec.jobLable"`)

	// The dynamic client: create, watch and read a PodMonitor, defaults
	// included.
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.kubeconfig(t).raw)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	podMonitors := dyn.Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "podmonitors"}).Namespace("default")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := podMonitors.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	pm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
		"metadata": map[string]any{"name": "pods"},
		"spec": map[string]any{
			"selector":            map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"podMetricsEndpoints": []any{map[string]any{"port": "metrics", "relabelings": []any{map[string]any{"targetLabel": "x", "replacement": "y"}}}},
		},
	}}
	if _, err := podMonitors.Create(ctx, pm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		u, _ := ev.Object.(*unstructured.Unstructured)
		if ev.Type != watch.Added || u == nil || u.GetName() != "pods" {
			t.Errorf("watch event %v %v", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event for the PodMonitor")
	}
	got, err := podMonitors.Get(ctx, "pods", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eps, _, _ := unstructured.NestedSlice(got.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 {
		t.Fatalf("endpoints = %v", eps)
	}
	if rl, _, _ := unstructured.NestedSlice(eps[0].(map[string]any), "relabelings"); len(rl) != 1 || rl[0].(map[string]any)["action"] != "replace" {
		t.Errorf("relabelings = %v", rl)
	}

	// Scale and printer columns.
	prom := writeFile(t, "prom.yaml", `apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: main, namespace: default}
spec:
  version: v3.5.0
  replicas: 2
  shards: 1
`, 0o600)
	k.must("apply", "-f", prom)
	wantContains(t, "scale", k.must("scale", "prometheus/main", "--replicas=3"), "prometheus.monitoring.coreos.com/main scaled")
	if got := k.must("get", "prometheus", "main", "-o", "jsonpath={.spec.shards}"); got != "3" {
		t.Errorf("shards after scale = %q", got)
	}
	table := k.must("get", "prom")
	wantContains(t, "get prom", table, "VERSION", "DESIRED", "main", "v3.5.0")
	// By category, as the CRDs declare it.
	wantContains(t, "get category", k.must("get", "prometheus-operator"), "prometheus.monitoring.coreos.com/main", "servicemonitor.monitoring.coreos.com/web")

	// A second client-side apply of a custom resource patches: kubectl
	// reads from OpenAPI v3 whether the path takes a strategic merge
	// patch, and a server that advertised one for custom resources got
	// it and answered 415.
	widgets := writeFile(t, "widgets.yaml", `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              tags: {type: array, items: {type: string}}
`, 0o600)
	k.must("apply", "-f", widgets)
	k.must("wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=30s")
	// Every kubectl version: 1.32 sends a strategic merge patch when
	// OpenAPI offers it, 1.33 does not.
	for _, kc := range kcs {
		kv := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: k.kubeconfig, cacheDir: t.TempDir()}
		name := "w-" + strings.ReplaceAll(kc.Version, ".", "-")
		widget := func(size int) string {
			return writeFile(t, name+".yaml", fmt.Sprintf("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: %s, namespace: default}\nspec: {size: %d, tags: [a, b]}\n", name, size), 0o600)
		}
		wantContains(t, kc.Version+" first apply", kv.must("apply", "-f", widget(1)), "widget.example.com/"+name+" created")
		out = kv.must("apply", "-f", widget(2))
		wantContains(t, kc.Version+" second apply", out, "widget.example.com/"+name+" configured")
		if strings.Contains(out, "warning") {
			t.Errorf("kubectl %s: second apply warned: %s", kc.Version, out)
		}
		if got := kv.must("get", "widget", name, "-o", "jsonpath={.spec.size}"); got != "2" {
			t.Errorf("kubectl %s: size after the second apply = %q", kc.Version, got)
		}
	}

	// Strategic merge patch is refused as upstream refuses it.
	msg = k.fails("patch", "prometheus", "main", "--type=strategic", "-p", `{"spec":{"replicas":1}}`)
	wantContains(t, "strategic patch", msg, "is not supported by monitoring.coreos.com/v1, Kind=Prometheus", "application/merge-patch+json")

	// kubectl explain reads the schema from OpenAPI, of the CRDs too.
	wantContains(t, "explain crd", k.must("explain", "crd.spec.names"), "plural", "shortNames")
	wantContains(t, "get crd", k.must("get", "crd"), "NAME", "CREATED AT", "prometheuses.monitoring.coreos.com")
	wantContains(t, "explain", k.must("explain", "servicemonitor.spec.endpoints.interval"), "Interval at which Prometheus scrapes")

	// Deleting the CRD takes its objects with it.
	k.must("delete", "crd", "servicemonitors.monitoring.coreos.com", "--timeout=30s")
	k.cacheDir = t.TempDir() // what discovery said before is stale
	msg = k.fails("get", "servicemonitors")
	wantContains(t, "get after delete", msg, "the server doesn't have a resource type")
	if _, err := os.Stat(s.dataDir); err != nil {
		t.Fatal(err)
	}
}
