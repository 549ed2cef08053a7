package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// openAPIManifest is what a user applies on day one. The Secret uses data,
// not stringData: kubectl reports stringData secrets as "configured" on
// every apply, on Kubernetes too.
const openAPIManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: demo
data:
  mode: fast
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: demo
data:
  password: aHVudGVyMg==
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: demo
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 80
`

func TestKubectlOpenAPI(t *testing.T) {
	// kubectl validates with the server's OpenAPI differently across
	// versions (1.27 still downloads v2, 1.33 reads only v3).
	for _, kc := range testenv.Kubectls(t) {
		bin := kc.Path
		t.Run(kc.Version, func(t *testing.T) {
			s := startServer(t, t.TempDir())
			manifest := filepath.Join(t.TempDir(), "app.yaml")
			if err := os.WriteFile(manifest, []byte(openAPIManifest), 0o600); err != nil {
				t.Fatal(err)
			}
			cacheDir := t.TempDir()
			kubectl := func(args ...string) (string, error) {
				cmd := exec.Command(bin, append([]string{"--cache-dir", cacheDir}, args...)...)
				cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(s.dataDir, "kubeconfig.yaml"))
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			must := func(args ...string) string {
				t.Helper()
				out, err := kubectl(args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			wantLines := func(what, out string, want ...string) {
				t.Helper()
				got := strings.Split(strings.TrimSpace(out), "\n")
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s:\n%s\nwant:\n%s", what, out, strings.Join(want, "\n"))
				}
			}

			// Default validation: kubectl downloads OpenAPI to learn that
			// the server validates fields itself.
			wantLines("first apply", must("apply", "-f", manifest),
				"namespace/demo created", "configmap/settings created", "secret/creds created",
				"deployment.apps/web created", "service/web created")
			wantLines("second apply", must("apply", "-f", manifest),
				"namespace/demo unchanged", "configmap/settings unchanged", "secret/creds unchanged",
				"deployment.apps/web unchanged", "service/web unchanged")
			must("get", "-n", "demo", "configmap/settings", "secret/creds", "deployment/web", "service/web")

			// The server, told by kubectl to be strict, rejects unknown
			// fields: proof that kubectl found fieldValidation in OpenAPI.
			bad := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad, namespace: demo}\nbogus: 1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := kubectl("apply", "-f", bad); err == nil || !strings.Contains(out, `unknown field "bogus"`) {
				t.Errorf("apply with an unknown field: %v\n%s", err, out)
			}

			explain := must("explain", "pod.spec.containers")
			for _, phrase := range []string{"List of containers belonging to the pod", "image\t<string>", "Container image name."} {
				if !strings.Contains(explain, phrase) {
					t.Errorf("kubectl explain pod.spec.containers lacks %q:\n%s", phrase, explain)
				}
			}
			recursive := must("explain", "deployment.spec", "--recursive")
			for _, phrase := range []string{"template\t<PodTemplateSpec> -required-", "maxSurge\t<IntOrString>"} {
				if !strings.Contains(recursive, phrase) {
					t.Errorf("kubectl explain deployment.spec --recursive lacks %q:\n%s", phrase, recursive)
				}
			}

			dry := must("create", "configmap", "x", "-n", "demo", "--from-literal=a=b", "--dry-run=server", "-o", "yaml")
			if !strings.Contains(dry, "name: x") || !strings.Contains(dry, "a: b") {
				t.Errorf("create --dry-run=server printed:\n%s", dry)
			}
			if out, err := kubectl("get", "configmap", "x", "-n", "demo"); err == nil || !strings.Contains(out, "NotFound") {
				t.Errorf("dry run stored the configmap: %v\n%s", err, out)
			}

			wantLines("server-side apply", must("apply", "--server-side", "-f", manifest),
				"namespace/demo serverside-applied", "configmap/settings serverside-applied", "secret/creds serverside-applied",
				"deployment.apps/web serverside-applied", "service/web serverside-applied")

			// kubectl edit gets the object, runs $EDITOR and sends a patch.
			t.Setenv("EDITOR", "sed -i s/replicas:.1$/replicas:\\ 3/")
			must("edit", "-n", "demo", "deployment/web")
			if got := must("get", "-n", "demo", "deployment/web", "-o", "jsonpath={.spec.replicas}"); got != "3" {
				t.Errorf("replicas after kubectl edit = %q, want 3", got)
			}
		})
	}
}
