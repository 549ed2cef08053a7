package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/testsupport/testenv"
)

const psaAdmissionConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: privileged
    exemptions:
      namespaces: [ops]
`

// psaPrivilegedPod breaks the baseline level twice.
const psaPrivilegedPod = `apiVersion: v1
kind: Pod
metadata:
  name: priv
spec:
  hostNetwork: true
  containers:
  - name: c
    image: busybox
    securityContext:
      privileged: true
`

const psaPlainPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: c
    image: busybox
`

// TestPodSecurityKubectl drives PodSecurity admission of the real binary
// with kubectl: a privileged pod in a baseline namespace is refused with
// upstream's message, a warn namespace prints upstream's warning, a
// Deployment gets the warning of its template, labelling a namespace
// restricted warns about its pods, a bad level is refused, and the
// namespace exempted by --admission-control-config-file is told so.
func TestPodSecurityKubectl(t *testing.T) {
	requireBinary(t)
	cfg := writeFile(t, "admission.yaml", psaAdmissionConfig, 0o600)
	s := startServer(t, t.TempDir(), "--admission-control-config-file", cfg)
	kcs := testenv.Kubectls(t)
	k := &kubectlRunner{t: t, bin: kcs[len(kcs)-1].Path, kubeconfig: filepath.Join(s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	priv := writeFile(t, "priv.yaml", psaPrivilegedPod, 0o600)
	plain := writeFile(t, "web.yaml", psaPlainPod, 0o600)
	privDetail := `host namespaces (hostNetwork=true), privileged (container "c" must not set securityContext.privileged=true)`

	// namespace creates ns, labels it, and waits for its default
	// ServiceAccount, which pods need; it returns the label's stderr.
	namespace := func(ns string, labels ...string) string {
		t.Helper()
		k.must("create", "namespace", ns)
		var stderr string
		if len(labels) > 0 {
			r := k.run(append([]string{"label", "namespace", ns}, labels...)...)
			if r.code != 0 {
				t.Fatalf("kubectl label namespace %s: exit %d: %s", ns, r.code, r.stderr)
			}
			stderr = r.stderr
		}
		deadline := time.Now().Add(30 * time.Second)
		for k.run("get", "serviceaccount", "default", "-n", ns).code != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no default ServiceAccount in %s", ns)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return stderr
	}

	namespace("base", "pod-security.kubernetes.io/enforce=baseline")
	stderr := k.fails("create", "-n", "base", "-f", priv)
	wantContains(t, "privileged pod in a baseline namespace", stderr,
		`Error from server (Forbidden): error when creating "`+priv+`": pods "priv" is forbidden: violates PodSecurity "baseline:latest": `+privDetail)
	if r := k.run("get", "pod", "priv", "-n", "base"); r.code == 0 {
		t.Errorf("the refused pod exists:\n%s", r.stdout)
	}

	namespace("warned", "pod-security.kubernetes.io/warn=baseline")
	r := k.run("create", "-n", "warned", "-f", priv)
	if r.code != 0 {
		t.Fatalf("privileged pod in a warn namespace: exit %d: %s", r.code, r.stderr)
	}
	wantContains(t, "privileged pod in a warn namespace", r.stderr, `Warning: would violate PodSecurity "baseline:latest": `+privDetail)

	namespace("restricted-warn", "pod-security.kubernetes.io/warn=restricted")
	r = k.run("create", "deployment", "web", "--image=busybox", "-n", "restricted-warn")
	if r.code != 0 {
		t.Fatalf("deployment: exit %d: %s", r.code, r.stderr)
	}
	wantContains(t, "deployment in a restricted warn namespace", r.stderr,
		`Warning: would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "busybox" must set securityContext.allowPrivilegeEscalation=false)`)

	namespace("apps")
	k.must("create", "-n", "apps", "-f", plain)
	r = k.run("label", "namespace", "apps", "pod-security.kubernetes.io/enforce=restricted")
	if r.code != 0 {
		t.Fatalf("label apps restricted: exit %d: %s", r.code, r.stderr)
	}
	wantContains(t, "labelling a namespace with a violating pod restricted", r.stderr,
		`Warning: existing pods in namespace "apps" violate the new PodSecurity enforce level "restricted:latest"`,
		`Warning: web: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile`)

	stderr = k.fails("label", "namespace", "apps", "pod-security.kubernetes.io/warn=strict")
	wantContains(t, "a bad level", stderr, `is invalid: metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "strict": must be one of privileged, baseline, restricted`)

	stderr = namespace("ops", "pod-security.kubernetes.io/enforce=restricted")
	wantContains(t, "labelling the exempt namespace", stderr,
		`Warning: namespace "ops" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored`)
	k.must("create", "-n", "ops", "-f", priv)
}

// TestAdmissionControlConfigFileErrors: a bad
// --admission-control-config-file stops bonsai before it starts: a
// non-zero exit, one line on stderr naming the flag and the fault.
func TestAdmissionControlConfigFileErrors(t *testing.T) {
	requireBinary(t)
	for _, tc := range []struct {
		name, content, want string
	}{
		{"bad level", strings.Replace(psaAdmissionConfig, "enforce: privileged", "enforce: strict", 1),
			`plugin PodSecurity: defaults.enforce: Invalid value: "strict": must be one of privileged, baseline, restricted`},
		{"bad exemption", strings.Replace(psaAdmissionConfig, "[ops]", "[Ops_Team]", 1),
			`plugin PodSecurity: exemptions.namespaces[0]: Invalid value: "Ops_Team"`},
		{"unknown field", psaAdmissionConfig + "extra: 1\n", `strict decoding error: unknown field "extra"`},
		{"not an AdmissionConfiguration", "apiVersion: v1\nkind: ConfigMap\n", `no kind "ConfigMap" is registered`},
		{"missing", "", "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "absent.yaml")
			if tc.content != "" {
				path = writeFile(t, "admission.yaml", tc.content, 0o600)
			}
			dataDir := filepath.Join(t.TempDir(), "data")
			code, stderr := runToExit(t, "server", "--data-dir", dataDir, "--https-listen-port", fmt.Sprint(freePort(t)), "--bind-address", "127.0.0.1",
				"--disable-agent", "--config", emptyConfig(t), "--admission-control-config-file", path)
			if code == 0 {
				t.Fatal("exited 0")
			}
			if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "bonsai: --admission-control-config-file "+path+": ") ||
				!strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q, want one line about %s saying %q", stderr, path, tc.want)
			}
		})
	}
}
