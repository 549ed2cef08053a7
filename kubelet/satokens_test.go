package kubelet

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// tokenEnv is an API server with a pod "web" in the default namespace
// (with the token volume admission adds) and this node's client.
type tokenEnv struct {
	ctx    context.Context
	cs     *kubernetes.Clientset
	client *Client
	pod    *corev1.Pod
}

func newTokenEnv(t *testing.T) *tokenEnv {
	t.Helper()
	api := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true})
	cfg := api.ConfigFor(&authn.User{Name: "system:node:n1", Groups: []string{"system:nodes"}})
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &tokenEnv{ctx: t.Context(), cs: kubernetes.NewForConfigOrDie(cfg), client: c}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if e.pod, err = e.cs.CoreV1().Pods("default").Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

func jwtClaims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestProjectedServiceAccountTokenVolume: the volume the ServiceAccount
// admission adds holds, where rest.InClusterConfig reads them, a token
// bound to the pod, the cluster CA and the namespace.
func TestProjectedServiceAccountTokenVolume(t *testing.T) {
	e := newTokenEnv(t)
	const ca = "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": ca}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := newPodManager(Config{Client: e.client, RootDir: kubeletRootDir(t)})
	w := newPodWorker(m, e.pod)
	if err := w.setupVolumes(e.ctx, e.pod); err != nil {
		t.Fatal(err)
	}
	var dir string
	for _, v := range e.pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			dir, _ = w.volumePath(e.pod, v.Name)
		}
	}
	if dir == "" {
		t.Fatalf("pod has no token volume: %+v", e.pod.Spec.Volumes)
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("ca.crt"); got != ca {
		t.Errorf("ca.crt %q", got)
	}
	if got := read("namespace"); got != "default" {
		t.Errorf("namespace %q", got)
	}
	token := read("token")
	c := jwtClaims(t, token)
	k8s := c["kubernetes.io"].(map[string]any)
	if c["sub"] != "system:serviceaccount:default:default" || !cmp.Equal(k8s["pod"], map[string]any{"name": "web", "uid": string(e.pod.UID)}) {
		t.Errorf("token claims %v", c)
	}
	if st, err := os.Stat(filepath.Join(dir, "token")); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o644 {
		t.Errorf("token file mode %v, want the volume's default 0644", st.Mode().Perm())
	}

	// The next sync keeps the cached token: no new file.
	if err := w.setupVolumes(e.ctx, e.pod); err != nil {
		t.Fatal(err)
	}
	if got := read("token"); got != token {
		t.Error("a second sync rewrote the token")
	}
}

// TestTokenManagerRefresh moves the manager's clock; the API server
// stamps tokens with the real one, a few seconds at most from t0.
func TestTokenManagerRefresh(t *testing.T) {
	e := newTokenEnv(t)
	t0 := time.Now()
	now := t0
	m := newTokenManager(e.client)
	m.now = func() time.Time { return now }
	get := func(exp int64, bound bool) (string, error) {
		t.Helper()
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}
		if bound {
			tr.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "web", UID: e.pod.UID}
		}
		out, err := m.get(e.ctx, "default", "default", tr)
		if err != nil {
			return "", err
		}
		return out.Status.Token, nil
	}
	must := func(exp int64, bound bool) string {
		t.Helper()
		tok, err := get(exp, bound)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// An hour-long token is kept until 80 % of its life has passed
	// (less up to 10 s of jitter), then replaced.
	first := must(3600, true)
	now = t0.Add(2860 * time.Second)
	if must(3600, true) != first {
		t.Error("token replaced before 80 % of its lifetime")
	}
	now = t0.Add(2900 * time.Second)
	second := must(3600, true)
	if second == first {
		t.Error("token not replaced after 80 % of its lifetime")
	}

	// With the pod gone the refresh fails: the cached token is served
	// while it is valid, then the error.
	if err := e.cs.CoreV1().Pods("default").Delete(e.ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(2950 * time.Second)
	if tok, err := get(3600, true); err != nil || tok != second {
		t.Errorf("failed refresh of a valid token: %v, want the cached one", err)
	}
	now = t0.Add(3700 * time.Second)
	if _, err := get(3600, true); err == nil || !strings.Contains(err.Error(), "expired and refresh failed") {
		t.Errorf("failed refresh of an expired token: %v", err)
	}

	// A pod's worker ending drops its tokens.
	m.forgetPod(e.pod.UID)
	if n := len(m.tokens); n != 0 {
		t.Errorf("%d tokens left after the pod went", n)
	}

	// A week-long token is replaced after a day.
	now = t0
	week := must(7*24*3600, false)
	now = t0.Add(24*time.Hour - time.Minute)
	if must(7*24*3600, false) != week {
		t.Error("week-long token replaced before a day")
	}
	now = t0.Add(24*time.Hour + time.Minute)
	if must(7*24*3600, false) == week {
		t.Error("week-long token not replaced after a day")
	}
}
