package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestClients: the official Python client (Debian's python3-kubernetes)
// and the official JavaScript client (@kubernetes/client-node, pinned by
// testdata/clients/package-lock.json) each drive the real binary with a
// real node: list and watch (resourceVersion, selectors, bookmarks),
// create, get, replace, the four kinds of patch, delete with each
// propagation policy, the error Statuses, and pods/log, exec and
// port-forward over the WebSocket protocols these clients speak, against
// a busybox pod. The scripts (testdata/clients/) check every answer and
// exit non-zero naming each mismatch; Go clients never exercise most of
// what they send.
func TestClients(t *testing.T) {
	python, pyVersion := testenv.PythonWithKubernetes(t)
	node, modules := testenv.NodeModules(t, filepath.Join("testdata", "clients"))
	e := startPodEnv(t)

	scripts := []struct{ name, ns, cmd string }{
		{"python", "clients-py", python},
		{"javascript", "clients-js", node},
	}
	// Each client gets a namespace and a pod of its own, both started at
	// once so the pods come up while the other pod's image is unpacked.
	for _, s := range scripts {
		if _, err := e.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		grace := int64(1)
		e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "streams", Namespace: s.ns, Labels: map[string]string{"app": "streams"}}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "main", Command: sh(
				"echo log-1; echo log-2; mkdir -p /tmp/www; echo hello-pf > /tmp/www/index.html; " +
					"head -c 1048576 /dev/zero | tr '\\0' b > /tmp/www/big; httpd -p 8080 -h /tmp/www; " +
					"i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.5; done")}},
		}})
	}
	for _, s := range scripts {
		deadline := time.Now().Add(60 * time.Second)
		for {
			p, err := e.cs.CoreV1().Pods(s.ns).Get(t.Context(), "streams", metav1.GetOptions{})
			if err == nil && running(p) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s/streams not running within 60s: %v %s", s.ns, err, statusSummary(p))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The JavaScript client is an ES module package: node resolves it from
	// the script's directory, so the script runs from a directory that
	// links the installed node_modules.
	jsDir := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(jsDir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "clients", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(jsDir, "client.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	pyScript, err := filepath.Abs(filepath.Join("testdata", "clients", "client.py"))
	if err != nil {
		t.Fatal(err)
	}
	args := map[string][]string{
		"python":     {"-u", pyScript},
		"javascript": {filepath.Join(jsDir, "client.mjs")},
	}
	nodeVersion, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", node, err)
	}
	t.Logf("python3-kubernetes %s; node %s with %s", pyVersion, strings.TrimSpace(string(nodeVersion)), modules)

	kubeconfig := filepath.Join(e.s.dataDir, "kubeconfig.yaml")
	t.Run("clients", func(t *testing.T) {
		for _, s := range scripts {
			t.Run(s.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, s.cmd, args[s.name]...)
				cmd.Dir = t.TempDir()
				// HOME and TMPDIR in the test's own dir: the clients
				// cache there (the Python dynamic client's discovery
				// file goes to the temp dir), and it is removed after.
				cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "BONSAI_NS="+s.ns, "BONSAI_POD=streams", "BONSAI_IMAGE="+podImage,
					"HOME="+cmd.Dir, "TMPDIR="+cmd.Dir)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				start := time.Now()
				err := cmd.Run()
				text := strings.TrimRight(out.String(), "\n")
				if err != nil {
					t.Errorf("%s client: %v after %v:\n%s", s.name, err, time.Since(start).Round(time.Millisecond), text)
					return
				}
				t.Logf("%s client passed in %v:\n%s", s.name, time.Since(start).Round(time.Millisecond), text)
			})
		}
	})
}
