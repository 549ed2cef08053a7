package helm

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/repo"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// sourceKind is where a chart comes from.
type sourceKind string

const (
	fromContent sourceKind = "chartContent"
	fromFile    sourceKind = "file"
	fromRepo    sourceKind = "repo"
	fromURL     sourceKind = "url"
)

// source is a HelmChart's chart, resolved but not loaded.
type source struct {
	kind    sourceKind
	content []byte // fromContent: the .tgz
	file    string // fromFile: its path
	// fromRepo: chart in the repository at repo, version a semver
	// constraint ("" for the newest stable). fromURL: url.
	repo, chart, version, url string
	caPEM                     string
	insecure                  bool
}

// specError is a HelmChart that cannot be installed as it is: tried
// again only when it (or its HelmChartConfig) changes.
type specError struct{ err error }

func (e *specError) Error() string { return e.err.Error() }
func (e *specError) Unwrap() error { return e.err }

func specErrorf(format string, a ...any) error { return &specError{fmt.Errorf(format, a...)} }

// staticChart is k3s's URL of a chart it serves from its data dir,
// https://%{KUBERNETES_API}%/static/charts/NAME.tgz: read here from the
// chart directories.
var staticChart = regexp.MustCompile(`^https?://%\{KUBERNETES_API\}%/static/charts/([^/]+\.tgz)$`)

// chartFiles are the paths a HelmChart's static chart URL may name, in
// the order they are looked for; none for another source.
func chartFiles(hc *unstructured.Unstructured, chartDirs []string) []string {
	chart, _, _ := unstructured.NestedString(hc.Object, "spec", "chart")
	content, _, _ := unstructured.NestedString(hc.Object, "spec", "chartContent")
	m := staticChart.FindStringSubmatch(chart)
	if content != "" || m == nil {
		return nil
	}
	var paths []string
	for _, d := range chartDirs {
		paths = append(paths, filepath.Join(d, m[1]))
	}
	return paths
}

// resolveSource says where spec's chart is. chartDirs are searched, in
// order, for the file of a static URL.
func resolveSource(spec *chartSpec, chartDirs []string) (*source, error) {
	src := &source{caPEM: spec.RepoCA, insecure: spec.InsecureSkipTLSVerify, version: spec.Version}
	switch {
	case spec.ChartContent != "":
		// Line breaks (base64 -w76) are allowed.
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(spec.ChartContent), ""))
		if err != nil {
			return nil, specErrorf("spec.chartContent is not base64: %v", err)
		}
		src.kind, src.content = fromContent, b
	case strings.Contains(spec.Chart, "%{KUBERNETES_API}%"):
		m := staticChart.FindStringSubmatch(spec.Chart)
		if m == nil {
			return nil, specErrorf("spec.chart %q: only https://%%{KUBERNETES_API}%%/static/charts/NAME.tgz is served", spec.Chart)
		}
		src.kind = fromFile
		for _, d := range chartDirs {
			p := filepath.Join(d, m[1])
			if _, err := os.Stat(p); err == nil {
				src.file = p
				break
			}
		}
		if src.file == "" {
			// Not a specError: the file may be copied in after the
			// manifest.
			return nil, fmt.Errorf("spec.chart %q: no file %s in %s", spec.Chart, m[1], strings.Join(chartDirs, " or "))
		}
	case spec.Repo != "":
		if spec.Chart == "" {
			return nil, specErrorf("spec.repo is set but spec.chart is empty")
		}
		src.kind, src.repo, src.chart = fromRepo, spec.Repo, spec.Chart
	case strings.HasPrefix(spec.Chart, "http://") || strings.HasPrefix(spec.Chart, "https://"):
		src.kind, src.url = fromURL, spec.Chart
	case strings.HasPrefix(spec.Chart, "oci://"):
		return nil, specErrorf("spec.chart %q: OCI registries are not supported; use spec.repo, a URL, spec.chartContent or a .tgz in the manifests directory", spec.Chart)
	case spec.Chart == "":
		return nil, specErrorf("neither spec.chart nor spec.chartContent is set")
	default:
		return nil, specErrorf("spec.chart %q: a chart name needs spec.repo (or give a URL, spec.chartContent or a .tgz in the manifests directory)", spec.Chart)
	}
	return src, nil
}

// maxChart bounds what is read of a chart archive or a repository index.
const maxChart = 64 << 20

// load reads the chart.
func (s *source) load(ctx context.Context) (*chart.Chart, error) {
	var data []byte
	var err error
	switch s.kind {
	case fromContent:
		data = s.content
	case fromFile:
		data, err = os.ReadFile(s.file)
	case fromURL:
		data, err = s.get(ctx, s.url)
	case fromRepo:
		var u string
		u, err = s.findInRepo(ctx)
		if err == nil {
			data, err = s.get(ctx, u)
		}
	}
	if err != nil {
		return nil, err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		err = fmt.Errorf("%s: not a chart archive: %v", s, err)
		if s.kind == fromContent {
			return nil, &specError{err}
		}
		return nil, err
	}
	return ch, nil
}

func (s *source) String() string {
	switch s.kind {
	case fromFile:
		return s.file
	case fromURL:
		return s.url
	case fromRepo:
		v := s.version
		if v == "" {
			v = "latest"
		}
		return fmt.Sprintf("%s %s from %s", s.chart, v, s.repo)
	}
	return string(s.kind)
}

// findInRepo reads the repository's index.yaml and resolves the URL of
// the chart's version.
func (s *source) findInRepo(ctx context.Context) (string, error) {
	base := strings.TrimSuffix(s.repo, "/")
	data, err := s.get(ctx, base+"/index.yaml")
	if err != nil {
		return "", err
	}
	var idx repo.IndexFile
	if err := yaml.Unmarshal(data, &idx); err != nil {
		return "", fmt.Errorf("%s/index.yaml: %v", base, err)
	}
	idx.SortEntries()
	cv, err := idx.Get(s.chart, s.version)
	if err != nil {
		return "", fmt.Errorf("chart %q version %q in %s: %v", s.chart, s.version, base, err)
	}
	if len(cv.URLs) == 0 {
		return "", fmt.Errorf("chart %q %s in %s has no URL", s.chart, cv.Version, base)
	}
	u, err := repo.ResolveReferenceURL(base+"/", cv.URLs[0])
	if err != nil {
		return "", fmt.Errorf("chart %q %s in %s: %v", s.chart, cv.Version, base, err)
	}
	return u, nil
}

func (s *source) client() (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.caPEM != "" || s.insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: s.insecure}
		if s.caPEM != "" {
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM([]byte(s.caPEM)) {
				return nil, specErrorf("spec.repoCA holds no PEM certificate")
			}
			tr.TLSClientConfig.RootCAs = pool
		}
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}, nil
}

func (s *source) get(ctx context.Context, u string) ([]byte, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, specErrorf("%s: %v", u, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxChart+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %v", u, err)
	}
	if len(data) > maxChart {
		return nil, errors.New("GET " + u + ": more than 64 MiB")
	}
	return data, nil
}
