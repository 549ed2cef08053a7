package admission

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	// No file: PodSecurity's defaults.
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PodSecurity == nil || cfg.PodSecurity.Defaults.Enforce != "privileged" || len(cfg.Unused) > 0 {
		t.Fatalf("no file: %+v", cfg)
	}

	// An embedded configuration (YAML), as kube-apiserver's docs show it.
	embedded := write(t, dir, "embedded.yaml", `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: EventRateLimit
  path: eventconfig.yaml
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      audit: restricted
    exemptions:
      namespaces: [kube-system]
      usernames: [system:serviceaccount:kube-system:replicaset-controller]
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: restricted
`)
	cfg, err = LoadConfig(embedded)
	if err != nil {
		t.Fatal(err)
	}
	// The first entry of a plugin counts, as in kube-apiserver.
	d := cfg.PodSecurity.Defaults
	if d.Enforce != "baseline" || d.Audit != "restricted" || d.Warn != "privileged" || d.EnforceVersion != "latest" {
		t.Errorf("defaults %+v", d)
	}
	if diff := cmp.Diff([]string{"kube-system"}, cfg.PodSecurity.Exemptions.Namespaces); diff != "" {
		t.Errorf("exempt namespaces (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"EventRateLimit"}, cfg.Unused); diff != "" {
		t.Errorf("unused (-want +got):\n%s", diff)
	}

	// A path relative to the AdmissionConfiguration's directory, and the
	// older apiserver.k8s.io/v1alpha1 group.
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, sub, "psa.yaml", "apiVersion: pod-security.admission.config.k8s.io/v1beta1\nkind: PodSecurityConfiguration\ndefaults:\n  warn: restricted\n")
	byPath := write(t, sub, "admission.yaml", "apiVersion: apiserver.k8s.io/v1alpha1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: psa.yaml\n")
	cfg, err = LoadConfig(byPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PodSecurity.Defaults.Warn != "restricted" {
		t.Errorf("by path: %+v", cfg.PodSecurity.Defaults)
	}

	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"missing", "", []string{"unable to read admission control configuration", "no such file"}},
		{"unknown-field.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugin: []\n", []string{`strict decoding error: unknown field "plugin"`}},
		{"wrong-kind.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: Policy\n", []string{`no kind "Policy" is registered`}},
		{"not-yaml.yaml", "{{{", []string{"couldn't get version/kind"}},
		{"bad-level.yaml", `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults: {enforce: strict}
`, []string{"plugin PodSecurity", `defaults.enforce: Invalid value: "strict": must be one of privileged, baseline, restricted`}},
		{"bad-exemption.yaml", `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    exemptions: {namespaces: [Bad_NS]}
`, []string{"plugin PodSecurity", `exemptions.namespaces[0]: Invalid value: "Bad_NS"`}},
		{"missing-path.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: nowhere.yaml\n", []string{"plugin PodSecurity", "nowhere.yaml", "no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if tc.content != "" {
				path = write(t, dir, tc.name, tc.content)
			}
			_, err := LoadConfig(path)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
