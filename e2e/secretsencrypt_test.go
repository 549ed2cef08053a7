package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestSecretsEncrypt drives the real binary: `bonsai server
// --secrets-encryption` makes its key file (0600) and stores Secrets
// encrypted; `bonsai secrets-encrypt status` names the write key and
// says every Secret uses it; `rotate` adds a key first in the file and
// re-encrypts every Secret, online; no file of the data dir holds a
// Secret's value; a restart reads them all with the rotated file. The
// command's failures are one line and exit 1.
func TestSecretsEncrypt(t *testing.T) {
	requireBinary(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	s := startServer(t, dataDir, "--secrets-encryption")
	cs := adminClientset(t, s)
	ctx := t.Context()

	values := map[string][]byte{}
	for i := 0; i < 5; i++ {
		v := make([]byte, 48)
		rand.Read(v)
		name := fmt.Sprintf("secret-%d", i)
		values[name] = v
		if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"v": v}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	configPath := filepath.Join(dataDir, "encryption-config.yaml")
	if st, err := os.Stat(configPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", configPath, st, err)
	}

	bonsai := func(args ...string) (string, int) {
		t.Helper()
		out, err := exec.Command(bonsaiBin, args...).CombinedOutput()
		return string(out), exitCode(err)
	}
	keyRE := regexp.MustCompile(`writes with (aescbc:key-[0-9TZ-]+)`)
	out, code := bonsai("secrets-encrypt", "status", "--data-dir", dataDir)
	m := keyRE.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "Encryption Status: Enabled") || !strings.Contains(out, "5 stored objects, all written with "+m[1]) {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	firstKey := m[1]

	out, code = bonsai("secrets-encrypt", "rotate", "--data-dir", dataDir)
	added := regexp.MustCompile(`Added keys: (aescbc:key-[0-9TZ-]+)`).FindStringSubmatch(out)
	if code != 0 || added == nil || added[1] == firstKey || !strings.Contains(out, "Re-encrypted: 5") {
		t.Fatalf("rotate: exit %d\n%s", code, out)
	}
	out, code = bonsai("secrets-encrypt", "status", "--data-dir", dataDir)
	if code != 0 || !strings.Contains(out, "writes with "+added[1]+", reads with "+added[1]+", "+firstKey+", identity") ||
		!strings.Contains(out, "5 stored objects, all written with "+added[1]) || !strings.Contains(out, "Stored Objects: all written with their write key") {
		t.Fatalf("status after rotate: exit %d\n%s", code, out)
	}
	data, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	newName, oldName := strings.TrimPrefix(added[1], "aescbc:"), strings.TrimPrefix(firstKey, "aescbc:")
	if i, j := strings.Index(string(data), newName), strings.Index(string(data), oldName); i < 0 || j < 0 || i > j {
		t.Errorf("the rotated file does not have the new key before the old one:\n%s", data)
	}
	if st, _ := os.Stat(configPath); st.Mode().Perm() != 0o600 {
		t.Errorf("the rotated file has mode %04o", st.Mode().Perm())
	}
	for name, v := range values {
		if got, err := cs.CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{}); err != nil || !bytes.Equal(got.Data["v"], v) {
			t.Errorf("%s after rotation: %v", name, err)
		}
	}

	if code, _ := s.sigterm(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	// The server is gone: the command says so in one line, and fails.
	out, code = bonsai("secrets-encrypt", "rotate", "--data-dir", dataDir)
	if code != 1 || !strings.HasPrefix(out, "bonsai: secrets-encrypt rotate: ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, "connection refused") {
		t.Errorf("rotate without a server: exit %d %q", code, out)
	}
	// No file of the data dir holds a Secret's value (every 12 bytes of
	// each looked for), nor its base64.
	err = filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for name, v := range values {
			for i := 0; i+12 <= len(v); i += 12 {
				if bytes.Contains(b, v[i:i+12]) {
					t.Errorf("%s holds %s's value in plaintext", path, name)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Restarted, the server reads every Secret with the rotated file.
	s = startServer(t, dataDir, "--secrets-encryption")
	cs = adminClientset(t, s)
	list, err := cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != len(values) {
		t.Fatalf("after a restart: %v %v", list, err)
	}
	for _, sec := range list.Items {
		if !bytes.Equal(sec.Data["v"], values[sec.Name]) {
			t.Errorf("%s after a restart: wrong value", sec.Name)
		}
	}
	s.sigterm(t)

	// A server without encryption: status says so; rotate refuses, in
	// one line.
	plain := startServer(t, filepath.Join(t.TempDir(), "plain"))
	defer plain.sigterm(t)
	if out, code := bonsai("secrets-encrypt", "status", "--data-dir", plain.dataDir); code != 0 || out != "Encryption Status: Disabled\n" {
		t.Errorf("status without encryption: exit %d %q", code, out)
	}
	out, code = bonsai("secrets-encrypt", "rotate-keys", "--data-dir", plain.dataDir)
	if code != 1 || out != "bonsai: secrets-encrypt rotate: encryption at rest is not enabled: start bonsai server with --encryption-provider-config or --secrets-encryption\n" {
		t.Errorf("rotate without encryption: exit %d %q", code, out)
	}
}

// adminClientset is a clientset of the server's admin kubeconfig.
func adminClientset(t *testing.T, s *server) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.kubeconfig(t).raw)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}
