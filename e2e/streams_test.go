package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/e2e/testenv"
)

// TestKubectlStreams: kubectl logs, exec, cp and port-forward on a pod the
// real binary runs on its own containerd, through the API server and the
// node's kubelet API, with the oldest and newest kubectl.
func TestKubectlStreams(t *testing.T) {
	e := startPodEnv(t)
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "streams"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "main", Command: sh("echo one; echo two; mkdir -p /tmp/www; echo hello-pf > /tmp/www/index.html; exec httpd -f -p 8080 -h /tmp/www")},
		{Name: "side", Command: sh("while true; do echo side; sleep 1; done")},
	}}})
	e.waitPod(t, "streams", 60*time.Second, "Running", running)

	for _, k := range testenv.Kubectls(t) {
		t.Run(k.Version, func(t *testing.T) {
			cache := t.TempDir()
			kubectl := func(stdin string, timeout time.Duration, args ...string) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				cmd := exec.CommandContext(ctx, k.Path, append([]string{"--cache-dir", cache}, args...)...)
				cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(e.s.dataDir, "kubeconfig.yaml"))
				cmd.Dir = cache
				cmd.Stdin = strings.NewReader(stdin)
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				out, err := kubectl("", 30*time.Second, "logs", "streams", "-c", "main")
				if err == nil && out == "one\ntwo\n" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("kubectl logs: %q, %v", out, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if out, err := kubectl("", 30*time.Second, "logs", "streams", "-c", "main", "--tail=1"); err != nil || out != "two\n" {
				t.Errorf("logs --tail=1: %q, %v", out, err)
			}
			if out, _ := kubectl("", 4*time.Second, "logs", "streams", "-c", "side", "-f"); strings.Count(out, "side\n") < 2 {
				t.Errorf("logs -f: %q", out)
			}
			if out, err := kubectl("", 30*time.Second, "exec", "streams", "-c", "main", "--", "hostname"); err != nil || out != "streams\n" {
				t.Errorf("exec hostname: %q, %v", out, err)
			}
			if out, err := kubectl("in\n", 30*time.Second, "exec", "-i", "streams", "-c", "main", "--", "cat"); err != nil || out != "in\n" {
				t.Errorf("exec -i cat: %q, %v", out, err)
			}
			if err := os.WriteFile(filepath.Join(cache, "f"), []byte("copied "+k.Version), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := kubectl("", 30*time.Second, "cp", "f", "streams:/tmp/f", "-c", "main"); err != nil {
				t.Fatalf("cp: %q, %v", out, err)
			}
			if out, err := kubectl("", 30*time.Second, "exec", "streams", "-c", "main", "--", "cat", "/tmp/f"); err != nil || out != "copied "+k.Version {
				t.Errorf("file copied in: %q, %v", out, err)
			}
			port := freePort(t)
			ctx, cancel := context.WithCancel(context.Background())
			pf := exec.CommandContext(ctx, k.Path, "--cache-dir", cache, "port-forward", "--address", "127.0.0.1", "pod/streams", fmt.Sprintf("%d:8080", port))
			pf.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(e.s.dataDir, "kubeconfig.yaml"))
			if err := pf.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cancel()
				pf.Wait()
			}()
			var body string
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
				if err != nil {
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if body = string(b); body == "hello-pf\n" {
					break
				}
			}
			if body != "hello-pf\n" {
				t.Errorf("GET through kubectl port-forward: %q", body)
			}
		})
	}
}
