package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// helmChartTgz is a chart archive made here: a ConfigMap NAME-cm showing
// the values it was rendered with, and the chart's version.
func helmChartTgz(t *testing.T, name, version string) []byte {
	t.Helper()
	files := map[string]string{
		"Chart.yaml":  fmt.Sprintf("apiVersion: v2\nname: %s\nversion: %s\n", name, version),
		"values.yaml": "greeting: hello\ncolor: none\nreplicas: 1\n",
		"templates/cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-cm
data:
  greeting: {{ .Values.greeting | quote }}
  color: {{ .Values.color | quote }}
  replicas: {{ .Values.replicas | quote }}
  chart: {{ .Chart.Version | quote }}
`,
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range []string{"Chart.yaml", "values.yaml", "templates/cm.yaml"} {
		body := files[f]
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + f, Mode: 0o644, Size: int64(len(body)), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// serveHelmRepo serves a chart repository on 127.0.0.1: index.yaml
// and the archives of repochart 0.1.0 and 0.2.0 (relative URLs).
func serveHelmRepo(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	index := "apiVersion: v1\nentries:\n  repochart:\n"
	for _, v := range []string{"0.1.0", "0.2.0"} {
		tgz := helmChartTgz(t, "repochart", v)
		file := "repochart-" + v + ".tgz"
		mux.HandleFunc("/charts/"+file, func(w http.ResponseWriter, r *http.Request) { w.Write(tgz) })
		index += fmt.Sprintf("  - apiVersion: v2\n    name: repochart\n    version: %s\n    urls: [%s]\n", v, file)
	}
	mux.HandleFunc("/charts/index.yaml", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(index)) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/charts"
}

// TestHelmChartsWithKubectl: HelmCharts from chartContent, from a .tgz in
// the manifests directory (k3s's static URL) and from a repository are
// installed in-process, upgraded when their values, version, archive or
// HelmChartConfig change, and uninstalled when deleted; releases are
// helm's Secrets; a broken HelmChart says why and installs nothing.
func TestHelmChartsWithKubectl(t *testing.T) {
	requireBinary(t)
	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1]
	dir := t.TempDir()
	mdir := filepath.Join(dir, "server", "manifests")
	if err := os.MkdirAll(mdir, 0o700); err != nil {
		t.Fatal(err)
	}
	put := func(path string, content []byte) {
		t.Helper()
		tmp := filepath.Join(dir, filepath.Base(path)+".tmp")
		if err := os.WriteFile(tmp, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	// (b) offline: the archive and its HelmChart in the manifests dir.
	put(filepath.Join(mdir, "offline.tgz"), helmChartTgz(t, "offline", "1.0.0"))
	put(filepath.Join(mdir, "offline.yaml"), []byte(`apiVersion: helm.cattle.io/v1
kind: HelmChart
metadata: {name: offline}
spec:
  chart: https://%{KUBERNETES_API}%/static/charts/offline.tgz
  targetNamespace: helm-offline
  createNamespace: true
  valuesContent: |
    greeting: offline
`))
	repoURL := serveHelmRepo(t)

	start := time.Now()
	s := startServer(t, dir)
	k := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: filepath.Join(s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	waitFor := func(what string, timeout time.Duration, ok func() bool) time.Duration {
		t.Helper()
		begin := time.Now()
		for !ok() {
			if time.Since(begin) > timeout {
				t.Fatalf("%s: not within %v", what, timeout)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return time.Since(begin)
	}
	cm := func(ns, name string) string {
		r := k.run("get", "configmap", name, "-n", ns, "-o", `jsonpath={.data.greeting} {.data.color} {.data.replicas} {.data.chart}`)
		if r.code != 0 {
			return ""
		}
		return r.stdout
	}
	exists := func(args ...string) bool { return k.run(append([]string{"get"}, args...)...).code == 0 }
	releaseSecret := func(ns, name string, v int) bool {
		return exists("secret", fmt.Sprintf("sh.helm.release.v1.%s.v%d", name, v), "-n", ns)
	}
	apply := func(name, yaml string) {
		t.Helper()
		p := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		k.must("apply", "--server-side", "--force-conflicts", "-f", p)
	}

	took := waitFor("offline chart installed from the manifests dir", 60*time.Second, func() bool { return cm("helm-offline", "offline-cm") == "offline none 1 1.0.0" })
	t.Logf("offline chart installed %v after the server was ready (%v after start)", took, time.Since(start).Round(time.Millisecond))
	if !releaseSecret("helm-offline", "offline", 1) {
		t.Error("no release Secret sh.helm.release.v1.offline.v1 in helm-offline")
	}
	if got := k.must("get", "secret", "sh.helm.release.v1.offline.v1", "-n", "helm-offline", "-o", `jsonpath={.type} {.metadata.labels.owner} {.metadata.labels.status}`); got != "helm.sh/release.v1 helm deployed" {
		t.Errorf("release Secret: %q", got)
	}
	if got := k.must("get", "helmchart", "offline", "-n", "kube-system", "-o", `jsonpath={.metadata.finalizers} {.status.revision} {.status.conditions[?(@.type=="Deployed")].status}`); got != `["wrangler.cattle.io/on-helm-chart-remove"] 1 True` {
		t.Errorf("offline HelmChart: %q", got)
	}

	// A new archive under the same name upgrades.
	put(filepath.Join(mdir, "offline.tgz"), helmChartTgz(t, "offline", "1.1.0"))
	took = waitFor("offline chart upgraded for its new archive", 15*time.Second, func() bool { return cm("helm-offline", "offline-cm") == "offline none 1 1.1.0" })
	t.Logf("upgrade on a replaced .tgz: %v", took)

	row := regexp.MustCompile(`(?m)^kube-system +offline +https://%\{KUBERNETES_API\}%/static/charts/offline.tgz +helm-offline +2 +True +False +`)
	waitFor("kubectl get helmcharts shows revision 2 deployed", 10*time.Second, func() bool {
		return row.MatchString(k.must("get", "helmcharts", "-A", "--no-headers"))
	})

	// (a) chartContent, values and set; upgraded on a values change and
	// by a HelmChartConfig.
	content := base64.StdEncoding.EncodeToString(helmChartTgz(t, "inline", "2.0.0"))
	inline := func(greeting string) string {
		return fmt.Sprintf(`apiVersion: helm.cattle.io/v1
kind: HelmChart
metadata: {name: inline, namespace: default}
spec:
  chartContent: %s
  set: {replicas: 3}
  valuesContent: |
    greeting: %s
`, content, greeting)
	}
	apply("inline", inline("one"))
	waitFor("inline chart installed", 30*time.Second, func() bool { return cm("default", "inline-cm") == "one none 3 2.0.0" })
	apply("inline", inline("two"))
	took = waitFor("inline chart upgraded for its valuesContent", 30*time.Second, func() bool { return cm("default", "inline-cm") == "two none 3 2.0.0" })
	t.Logf("upgrade on a valuesContent change: %v", took)
	apply("inline-config", `apiVersion: helm.cattle.io/v1
kind: HelmChartConfig
metadata: {name: inline, namespace: default}
spec:
  valuesContent: |
    color: blue
    greeting: three
`)
	waitFor("inline chart upgraded for its HelmChartConfig", 30*time.Second, func() bool { return cm("default", "inline-cm") == "three blue 3 2.0.0" })
	for v := 1; v <= 3; v++ {
		if !releaseSecret("default", "inline", v) {
			t.Errorf("no release Secret sh.helm.release.v1.inline.v%d", v)
		}
	}
	waitFor("inline HelmChart's status at revision 3", 10*time.Second, func() bool {
		return k.must("get", "helmchart", "inline", "-o", "jsonpath={.status.revision} {.status.chart}") == "3 inline-2.0.0"
	})

	// (c) a repository on 127.0.0.1; a new version upgrades.
	fromRepo := func(version string) string {
		return fmt.Sprintf(`apiVersion: helm.cattle.io/v1
kind: HelmChart
metadata: {name: fromrepo, namespace: default}
spec:
  repo: %s
  chart: repochart
  version: %s
  targetNamespace: helm-repo
  createNamespace: true
  set: {greeting: "007"}
`, repoURL, version)
	}
	apply("fromrepo", fromRepo("0.1.0"))
	waitFor("repository chart 0.1.0 installed", 30*time.Second, func() bool { return cm("helm-repo", "fromrepo-cm") == "007 none 1 0.1.0" })
	apply("fromrepo", fromRepo("0.2.0"))
	waitFor("repository chart upgraded to 0.2.0", 30*time.Second, func() bool { return cm("helm-repo", "fromrepo-cm") == "007 none 1 0.2.0" })
	if !releaseSecret("helm-repo", "fromrepo", 2) {
		t.Error("no release Secret sh.helm.release.v1.fromrepo.v2 in helm-repo")
	}
	// A HelmChartConfig's values apply, and go when it goes.
	apply("fromrepo-config", `apiVersion: helm.cattle.io/v1
kind: HelmChartConfig
metadata: {name: fromrepo, namespace: default}
spec:
  valuesContent: "color: red"
`)
	waitFor("fromrepo upgraded for its HelmChartConfig", 30*time.Second, func() bool { return cm("helm-repo", "fromrepo-cm") == "007 red 1 0.2.0" })
	k.must("delete", "helmchartconfig", "fromrepo")
	waitFor("fromrepo back to the chart's color without its HelmChartConfig", 30*time.Second, func() bool { return cm("helm-repo", "fromrepo-cm") == "007 none 1 0.2.0" })

	// Broken HelmCharts: a Warning event and status say why; nothing
	// is installed.
	apply("bad", `apiVersion: helm.cattle.io/v1
kind: HelmChart
metadata: {name: badcontent, namespace: default}
spec:
  chartContent: "this is not base64!"
---
apiVersion: helm.cattle.io/v1
kind: HelmChart
metadata: {name: badvalues, namespace: default}
spec:
  chartContent: `+content+`
  valuesContent: "greeting: [unclosed"
---
apiVersion: helm.cattle.io/v1
kind: HelmChart
metadata: {name: nofile, namespace: default}
spec:
  chart: https://%{KUBERNETES_API}%/static/charts/missing.tgz
`)
	for name, want := range map[string]string{
		"badcontent": "spec.chartContent is not base64",
		"badvalues":  "spec.valuesContent: ",
		"nofile":     "no file missing.tgz in " + mdir,
	} {
		waitFor(name+"'s Failed condition", 30*time.Second, func() bool {
			out := k.must("get", "helmchart", name, "-o", `jsonpath={.status.conditions[?(@.type=="Failed")].status} {.status.conditions[?(@.type=="Failed")].message}`)
			return strings.HasPrefix(out, "True ") && strings.Contains(out, want)
		})
		waitFor(name+"'s Warning event", 15*time.Second, func() bool {
			out := k.must("get", "events", "-n", "default", "--field-selector", "involvedObject.name="+name, "-o", `jsonpath={range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}`)
			return strings.Contains(out, "Warning Failed: ") && strings.Contains(out, want)
		})
		if releaseSecret("default", name, 1) || exists("configmap", name+"-cm", "-n", "default") {
			t.Errorf("%s: something was installed", name)
		}
	}
	// Fixed, it installs.
	put(filepath.Join(mdir, "missing.tgz"), helmChartTgz(t, "missing", "0.0.1"))
	took = waitFor("nofile installed once its archive is there", 15*time.Second, func() bool { return cm("default", "nofile-cm") == "hello none 1 0.0.1" })
	t.Logf("install once a missing .tgz is there: %v", took)

	// Deleting a HelmChart uninstalls its release.
	k.must("delete", "helmchart", "inline", "--wait=false")
	took = waitFor("inline uninstalled", 30*time.Second, func() bool {
		return !exists("configmap", "inline-cm", "-n", "default") && !releaseSecret("default", "inline", 3) && !exists("helmchart", "inline")
	})
	t.Logf("uninstall on delete: %v", took)
	if !exists("helmchartconfig", "inline") {
		t.Error("the HelmChartConfig went with its HelmChart")
	}
	// Removing the manifest deletes its HelmChart, which uninstalls.
	if err := os.Remove(filepath.Join(mdir, "offline.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor("offline uninstalled once its manifest is removed", 30*time.Second, func() bool {
		return !exists("configmap", "offline-cm", "-n", "helm-offline") && !releaseSecret("helm-offline", "offline", 2) && !exists("helmchart", "offline", "-n", "kube-system")
	})

	// A restart changes nothing that is up to date: no new revision.
	if code, _ := s.sigterm(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	s = startServer(t, dir)
	time.Sleep(5 * time.Second)
	waitFor("fromrepo still at revision 4 after a restart", 10*time.Second, func() bool {
		return cm("helm-repo", "fromrepo-cm") == "007 none 1 0.2.0" && releaseSecret("helm-repo", "fromrepo", 4)
	})
	if releaseSecret("helm-repo", "fromrepo", 5) {
		t.Error("a restart made revision 5 of an up to date release")
	}
}
