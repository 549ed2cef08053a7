package containerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadRegistries(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "registries.yaml")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if r, err := LoadRegistries(filepath.Join(dir, "missing.yaml")); r != nil || err != nil {
		t.Fatalf("missing file: %v %v", r, err)
	}
	r, err := LoadRegistries(write("mirrors:\n  docker.io:\n    endpoint: [\"http://127.0.0.1:5000\"]\nconfigs:\n  \"r.example\":\n    auth: {username: me, password: pw}\n"))
	if err != nil || len(r.Mirrors["docker.io"].Endpoints) != 1 || r.Configs["r.example"].Auth.Username != "me" {
		t.Fatalf("valid file: %+v %v", r, err)
	}
	for _, tc := range []struct{ content, want string }{
		{"mirrors: [", "registries.yaml"},
		{"mirrorz: {}\n", "mirrorz"},
		{"mirrors:\n  docker.io:\n    endpoint: [\"ftp://x\"]\n", "not an http(s) URL"},
		{"mirrors:\n  docker.io:\n    rewrite: {\"(\": x}\n", "rewrite"},
		{"configs:\n  r:\n    auth: {auth: \"!!!\"}\n", "not base64"},
		{"configs:\n  r:\n    tls: {ca_file: /nonexistent/ca.pem}\n", "ca_file"},
		{"configs:\n  r:\n    tls: {cert_file: /x.pem}\n", "go together"},
	} {
		if _, err := LoadRegistries(write(tc.content)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one mentioning %q", tc.content, err, tc.want)
		}
	}
}
