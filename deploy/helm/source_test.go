package helm

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func helmChart(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func isSpecError(err error) bool {
	var se *specError
	return errors.As(err, &se)
}

func TestResolveSource(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	tgz := chartTgz(t, "x", "1.0.0")
	if err := os.WriteFile(filepath.Join(d2, "x.tgz"), tgz, 0o600); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(tgz)
	wrapped := b64[:40] + "\n" + b64[40:80] + "\r\n  " + b64[80:] + "\n" // base64 -w, or a YAML block
	for _, tc := range []struct {
		name string
		spec chartSpec
		kind sourceKind
		// err is in the error; spec says it is a specError.
		err    string
		isSpec bool
	}{
		{name: "content", spec: chartSpec{ChartContent: b64}, kind: fromContent},
		{name: "content with line breaks", spec: chartSpec{ChartContent: wrapped}, kind: fromContent},
		{name: "content wins over chart", spec: chartSpec{ChartContent: b64, Chart: "stable/x"}, kind: fromContent},
		{name: "bad base64", spec: chartSpec{ChartContent: "not base64!"}, err: "spec.chartContent is not base64", isSpec: true},
		{name: "static file in the second dir", spec: chartSpec{Chart: "https://%{KUBERNETES_API}%/static/charts/x.tgz"}, kind: fromFile},
		{name: "missing static file", spec: chartSpec{Chart: "https://%{KUBERNETES_API}%/static/charts/y.tgz"}, err: "no file y.tgz in " + d1 + " or " + d2},
		{name: "other static path", spec: chartSpec{Chart: "https://%{KUBERNETES_API}%/static/../../etc/passwd"}, err: "only https://%{KUBERNETES_API}%/static/charts/NAME.tgz", isSpec: true},
		{name: "static subdir", spec: chartSpec{Chart: "https://%{KUBERNETES_API}%/static/charts/a/x.tgz"}, err: "only https://", isSpec: true},
		{name: "repo", spec: chartSpec{Repo: "https://charts.example/", Chart: "x", Version: "1.0.0"}, kind: fromRepo},
		{name: "repo without chart", spec: chartSpec{Repo: "https://charts.example/"}, err: "spec.chart is empty", isSpec: true},
		{name: "url", spec: chartSpec{Chart: "http://127.0.0.1:1/x-1.0.0.tgz"}, kind: fromURL},
		{name: "oci", spec: chartSpec{Chart: "oci://registry/x"}, err: "OCI registries are not supported", isSpec: true},
		{name: "name without repo", spec: chartSpec{Chart: "stable/x"}, err: "needs spec.repo", isSpec: true},
		{name: "nothing", spec: chartSpec{}, err: "neither spec.chart nor spec.chartContent", isSpec: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := resolveSource(&tc.spec, []string{d1, d2})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				if isSpecError(err) != tc.isSpec {
					t.Errorf("error %q: specError %v, want %v", err, isSpecError(err), tc.isSpec)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if src.kind != tc.kind {
				t.Errorf("kind %s, want %s", src.kind, tc.kind)
			}
			if src.kind == fromFile && src.file != filepath.Join(d2, "x.tgz") {
				t.Errorf("file %s", src.file)
			}
			if src.kind == fromContent {
				ch, err := src.load(context.Background())
				if err != nil || ch.Metadata.Name != "x" {
					t.Errorf("load: %v, %v", ch, err)
				}
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	// Base64 of something that is not a chart: a specError (the spec
	// must change); a bad file in the directory is not (the file may).
	src := &source{kind: fromContent, content: []byte("hello")}
	if _, err := src.load(context.Background()); err == nil || !isSpecError(err) || !strings.Contains(err.Error(), "not a chart archive") {
		t.Errorf("content not a chart: %v", err)
	}
	p := filepath.Join(t.TempDir(), "bad.tgz")
	if err := os.WriteFile(p, []byte("not gzip"), 0o600); err != nil {
		t.Fatal(err)
	}
	src = &source{kind: fromFile, file: p}
	if _, err := src.load(context.Background()); err == nil || isSpecError(err) || !strings.Contains(err.Error(), p+": not a chart archive") {
		t.Errorf("file not a chart: %v", err)
	}
	src = &source{kind: fromFile, file: filepath.Join(t.TempDir(), "gone.tgz")}
	if _, err := src.load(context.Background()); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file gone: %v", err)
	}
}

// serveRepo serves a chart repository on 127.0.0.1: x 0.1.0, 0.1.5 and
// 0.2.0 (relative URLs), other with an absolute URL, broken whose
// archive is missing.
func serveRepo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	index := "apiVersion: v1\nentries:\n  x:\n"
	for _, v := range []string{"0.1.0", "0.1.5", "0.2.0"} {
		tgz := chartTgz(t, "x", v)
		mux.HandleFunc("/repo/x-"+v+".tgz", func(w http.ResponseWriter, r *http.Request) { w.Write(tgz) })
		index += fmt.Sprintf("  - {apiVersion: v2, name: x, version: %s, urls: [x-%s.tgz]}\n", v, v)
	}
	otgz := chartTgz(t, "other", "1.0.0")
	mux.HandleFunc("/elsewhere/other.tgz", func(w http.ResponseWriter, r *http.Request) { w.Write(otgz) })
	index += fmt.Sprintf("  other:\n  - {apiVersion: v2, name: other, version: 1.0.0, urls: [%s/elsewhere/other.tgz]}\n", base)
	index += "  broken:\n  - {apiVersion: v2, name: broken, version: 1.0.0, urls: [broken-missing.tgz]}\n"
	mux.HandleFunc("/repo/index.yaml", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(index)) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return base + "/repo"
}

func TestLoadFromRepo(t *testing.T) {
	repoURL := serveRepo(t)
	ctx := context.Background()
	for _, tc := range []struct{ chart, version, want, err string }{
		{chart: "x", version: "", want: "x-0.2.0"},
		{chart: "x", version: "0.1.0", want: "x-0.1.0"},
		{chart: "x", version: "~0.1", want: "x-0.1.5"},
		{chart: "other", want: "other-1.0.0"},
		{chart: "x", version: "9.9.9", err: `chart "x" version "9.9.9" in ` + repoURL},
		{chart: "nope", err: `chart "nope" version "" in ` + repoURL},
		{chart: "broken", err: "404 Not Found"},
	} {
		for _, repo := range []string{repoURL, repoURL + "/"} {
			src := &source{kind: fromRepo, repo: repo, chart: tc.chart, version: tc.version}
			ch, err := src.load(ctx)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || isSpecError(err) {
					t.Errorf("%s %s from %s: error %v, want one with %q, to be retried", tc.chart, tc.version, repo, err, tc.err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s %s from %s: %v", tc.chart, tc.version, repo, err)
				continue
			}
			if got := ch.Metadata.Name + "-" + ch.Metadata.Version; got != tc.want {
				t.Errorf("%s %s from %s: %s, want %s", tc.chart, tc.version, repo, got, tc.want)
			}
		}
	}
	// A chart URL, without a repository.
	src := &source{kind: fromURL, url: repoURL + "/x-0.1.0.tgz"}
	if ch, err := src.load(ctx); err != nil || ch.Metadata.Version != "0.1.0" {
		t.Errorf("chart URL: %v, %v", ch, err)
	}
	// A repository that is not there.
	src = &source{kind: fromRepo, repo: repoURL + "/../nothing-here", chart: "x"}
	if _, err := src.load(ctx); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("no repository: %v", err)
	}
	src = &source{kind: fromRepo, repo: "http://127.0.0.1:1", chart: "x", caPEM: "not PEM"}
	if _, err := src.load(ctx); err == nil || !isSpecError(err) || !strings.Contains(err.Error(), "spec.repoCA holds no PEM certificate") {
		t.Errorf("bad repoCA: %v", err)
	}
}

func TestMakePlan(t *testing.T) {
	content := base64.StdEncoding.EncodeToString(chartTgz(t, "x", "1.0.0"))
	hc := func(extra string) *unstructured.Unstructured {
		return helmChart(t, "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata: {name: app, namespace: kube-system}\nspec:\n  chartContent: "+content+"\n"+extra)
	}
	hcc := func(spec string) *unstructured.Unstructured {
		return helmChart(t, "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\nmetadata: {name: app, namespace: kube-system}\nspec:\n"+spec)
	}
	p, err := makePlan(hc("  valuesContent: |\n    a: {b: 1, c: 2}\n  set: {a.d: x}\n"), hcc("  valuesContent: |\n    a: {c: 3}\n  failurePolicy: abort\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.release != "app" || p.target != "kube-system" || p.failurePolicy != FailurePolicyAbort || p.timeout != DefaultTimeout {
		t.Errorf("plan: %+v", p)
	}
	if got := fmt.Sprint(p.values); got != "map[a:map[b:1 c:3 d:x]]" {
		t.Errorf("values: %s", got)
	}
	// The hash moves with the values, the config, the target; not with
	// the timeout.
	base, _ := makePlan(hc(""), nil, nil)
	same, _ := makePlan(hc("  timeout: 10m\n"), hcc("  failurePolicy: abort\n"), nil)
	if base.hash != same.hash || len(base.hash) != 40 {
		t.Errorf("hash %q and %q: want equal, 40 characters", base.hash, same.hash)
	}
	if same.timeout.String() != "10m0s" {
		t.Errorf("timeout %v", same.timeout)
	}
	for name, o := range map[string]*plan{
		"values": must(makePlan(hc("  valuesContent: 'a: 1'\n"), nil, nil)),
		"config": must(makePlan(hc(""), hcc("  valuesContent: 'a: 1'\n"), nil)),
		"set":    must(makePlan(hc("  set: {a: 1}\n"), nil, nil)),
		"target": must(makePlan(hc("  targetNamespace: other\n"), nil, nil)),
	} {
		if o.hash == base.hash {
			t.Errorf("%s: the hash did not change", name)
		}
	}
	for _, tc := range []struct {
		chart, config, err string
	}{
		{chart: "  valuesContent: 'greeting: [unclosed'\n", err: "spec.valuesContent: "},
		{chart: "", config: "  valuesContent: 'a: [b'\n", err: "HelmChartConfig app: spec.valuesContent: "},
		{chart: "  helmVersion: v2\n", err: `spec.helmVersion "v2": only v3`},
		{chart: "  failurePolicy: retry\n", err: `failurePolicy "retry"`},
		{chart: "", config: "  failurePolicy: never\n", err: `failurePolicy "never"`},
		{chart: "  timeout: soon\n", err: `spec.timeout "soon"`},
		{chart: "  authSecret: {name: s}\n", err: "spec.authSecret is not supported"},
		{chart: "  set: {'a[': x}\n", err: "spec.set[a[]"},
		{chart: "  set: {a: [1, 2]}\n", err: "spec: json: cannot unmarshal"},
	} {
		var c *unstructured.Unstructured
		if tc.config != "" {
			c = hcc(tc.config)
		}
		_, err := makePlan(hc(tc.chart), c, nil)
		if err == nil || !strings.Contains(err.Error(), tc.err) || !isSpecError(err) {
			t.Errorf("%q %q: error %v, want a specError with %q", tc.chart, tc.config, err, tc.err)
		}
	}
}

func must(p *plan, err error) *plan {
	if err != nil {
		panic(err)
	}
	return p
}
