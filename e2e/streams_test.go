package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestKubectlStreams: kubectl logs, exec, cp and port-forward on a pod the
// real binary runs on its own containerd, through the API server and the
// node's kubelet API, with the oldest and newest kubectl; then exec
// through a mutating webhook that rewrites the command.
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
				// Only stdout is compared: kubectl's own log lines go to
				// stderr, among them client-go's "Unknown stream id 1,
				// discarding message" when the server's empty
				// session-ready frame (sent as the kubelet sends it)
				// beats the client's stream set-up.
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				if stderr.Len() > 0 {
					t.Logf("kubectl %s: stderr: %s", strings.Join(args, " "), stderr.String())
				}
				return stdout.String(), err
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

	// A mutating webhook on CONNECT pods/exec changes the command the
	// kubelet runs, as on Kubernetes.
	certs, err := pki.Ensure(t.TempDir(), pki.SANs{IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	hook := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rev admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&rev); err != nil || rev.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		pt := admissionv1.PatchTypeJSONPatch
		rev.Response = &admissionv1.AdmissionResponse{UID: rev.Request.UID, Allowed: true, PatchType: &pt,
			Patch: []byte(`[{"op":"replace","path":"/command","value":["echo","changed-by-webhook"]}]`)}
		rev.Request = nil
		json.NewEncoder(w).Encode(&rev)
	}))
	hook.TLS = &tls.Config{Certificates: []tls.Certificate{*certs.Serving.Current()}}
	hook.StartTLS()
	t.Cleanup(hook.Close)
	url := hook.URL + "/mutate"
	none := admissionregistrationv1.SideEffectClassNone
	if _, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(context.Background(), &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "exec-rewrite"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "exec.e2e.bonsai.dev", SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: certs.CA.CertPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Connect},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/exec"}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k := testenv.Kubectls(t)[0]
	cmd := exec.Command(k.Path, "--cache-dir", t.TempDir(), "exec", "streams", "-c", "main", "--", "echo", "as-asked")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(e.s.dataDir, "kubeconfig.yaml"))
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "changed-by-webhook\n" {
		t.Errorf("exec through a mutating webhook: %q, %v", out, err)
	}
}
