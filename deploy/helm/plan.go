package helm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// localRef is a spec's reference to an object of its namespace.
type localRef struct {
	Name string `json:"name"`
}

// chartSpec is a HelmChart's spec, as k3s-io/helm-controller defines it.
type chartSpec struct {
	TargetNamespace       string                        `json:"targetNamespace,omitempty"`
	CreateNamespace       bool                          `json:"createNamespace,omitempty"`
	Chart                 string                        `json:"chart,omitempty"`
	Version               string                        `json:"version,omitempty"`
	Repo                  string                        `json:"repo,omitempty"`
	RepoCA                string                        `json:"repoCA,omitempty"`
	RepoCAConfigMap       *localRef                     `json:"repoCAConfigMap,omitempty"`
	Set                   map[string]intstr.IntOrString `json:"set,omitempty"`
	ValuesContent         string                        `json:"valuesContent,omitempty"`
	ValuesSecrets         []json.RawMessage             `json:"valuesSecrets,omitempty"`
	HelmVersion           string                        `json:"helmVersion,omitempty"`
	Bootstrap             bool                          `json:"bootstrap,omitempty"`
	ChartContent          string                        `json:"chartContent,omitempty"`
	Timeout               string                        `json:"timeout,omitempty"`
	FailurePolicy         string                        `json:"failurePolicy,omitempty"`
	AuthSecret            *localRef                     `json:"authSecret,omitempty"`
	InsecureSkipTLSVerify bool                          `json:"insecureSkipTLSVerify,omitempty"`
}

// configSpec is a HelmChartConfig's spec.
type configSpec struct {
	ValuesContent string            `json:"valuesContent,omitempty"`
	ValuesSecrets []json.RawMessage `json:"valuesSecrets,omitempty"`
	FailurePolicy string            `json:"failurePolicy,omitempty"`
}

const (
	FailurePolicyReinstall = "reinstall"
	FailurePolicyAbort     = "abort"
	// DefaultTimeout is helm's --timeout, as in k3s.
	DefaultTimeout = 300 * time.Second
)

// plan is what a HelmChart and its HelmChartConfig ask for.
type plan struct {
	release, target string
	createNamespace bool
	src             *source
	values          map[string]any
	timeout         time.Duration
	failurePolicy   string
	// hash identifies the chart source and values: a release labelled
	// with it is up to date.
	hash string
}

func decodeSpec(u *unstructured.Unstructured, into any) error {
	spec, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec")
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, into); err != nil {
		return specErrorf("%s %s/%s: spec: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// targetNamespace is where a HelmChart's release goes.
func targetNamespace(hc *unstructured.Unstructured) string {
	ns, _, _ := unstructured.NestedString(hc.Object, "spec", "targetNamespace")
	if ns == "" {
		ns = hc.GetNamespace()
	}
	return ns
}

// makePlan reads a HelmChart and its HelmChartConfig (nil if none).
// chartDirs hold the files of static chart URLs. Its error is a
// *specError when the objects themselves are wrong.
func makePlan(hc, hcc *unstructured.Unstructured, chartDirs []string) (*plan, error) {
	var spec chartSpec
	if err := decodeSpec(hc, &spec); err != nil {
		return nil, err
	}
	var conf configSpec
	if hcc != nil {
		if err := decodeSpec(hcc, &conf); err != nil {
			return nil, err
		}
	}
	switch {
	case spec.HelmVersion != "" && spec.HelmVersion != "v3":
		return nil, specErrorf("spec.helmVersion %q: only v3 is supported", spec.HelmVersion)
	case spec.AuthSecret != nil:
		return nil, specErrorf("spec.authSecret is not supported by bonsai's helm controller")
	case spec.RepoCAConfigMap != nil:
		return nil, specErrorf("spec.repoCAConfigMap is not supported by bonsai's helm controller; use spec.repoCA")
	case len(spec.ValuesSecrets) > 0 || len(conf.ValuesSecrets) > 0:
		return nil, specErrorf("spec.valuesSecrets is not supported by bonsai's helm controller; use spec.valuesContent")
	}
	p := &plan{
		release: hc.GetName(), target: targetNamespace(hc),
		createNamespace: spec.CreateNamespace,
		timeout:         DefaultTimeout,
		failurePolicy:   FailurePolicyReinstall,
	}
	for _, fp := range []string{spec.FailurePolicy, conf.FailurePolicy} {
		switch fp {
		case "":
		case FailurePolicyReinstall, FailurePolicyAbort:
			p.failurePolicy = fp
		default:
			return nil, specErrorf("failurePolicy %q: must be %s or %s", fp, FailurePolicyReinstall, FailurePolicyAbort)
		}
	}
	if spec.Timeout != "" {
		d, err := time.ParseDuration(spec.Timeout)
		if err != nil || d <= 0 {
			return nil, specErrorf("spec.timeout %q: not a positive duration (300s, 5m)", spec.Timeout)
		}
		p.timeout = d
	}
	vals, err := parseValues("spec.valuesContent", spec.ValuesContent)
	if err != nil {
		return nil, &specError{err}
	}
	if hcc != nil {
		cv, err := parseValues("HelmChartConfig "+hcc.GetName()+": spec.valuesContent", conf.ValuesContent)
		if err != nil {
			return nil, &specError{err}
		}
		vals = mergeValues(vals, cv)
	}
	if err := applySet(vals, spec.Set); err != nil {
		return nil, &specError{err}
	}
	p.values = vals
	if p.src, err = resolveSource(&spec, chartDirs); err != nil {
		return nil, err
	}
	if p.hash, err = p.makeHash(); err != nil {
		return nil, err
	}
	return p, nil
}

// makeHash sums what the release is made of.
func (p *plan) makeHash() (string, error) {
	h := sha256.New()
	var chartSum []byte
	switch p.src.kind {
	case fromContent:
		s := sha256.Sum256(p.src.content)
		chartSum = s[:]
	case fromFile:
		data, err := os.ReadFile(p.src.file)
		if err != nil {
			return "", err
		}
		s := sha256.Sum256(data)
		chartSum = s[:]
	}
	vals, err := json.Marshal(p.values) // keys sorted
	if err != nil {
		return "", specErrorf("values: %v", err)
	}
	fmt.Fprintf(h, "v1\x00%s\x00%s\x00%s\x00%s\x00%s\x00%x\x00%s\x00", p.src.kind, p.src.repo, p.src.chart, p.src.version, p.src.url, chartSum, p.target)
	h.Write(vals)
	// A label value: at most 63 characters.
	return hex.EncodeToString(h.Sum(nil))[:40], nil
}
