package containerd

import (
	"os"
	"path/filepath"
	"slices"
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

// With --disable-default-registry-endpoint a mirrored registry is pulled
// from its mirrors only; a registry with no mirror keeps its own endpoint.
func TestRegistryHostsDefaultEndpoint(t *testing.T) {
	regs := &Registries{Mirrors: map[string]Mirror{"registry.example.com": {Endpoints: []string{"http://127.0.0.1:5000"}}}}
	hostsOf := func(noDefault bool, host string) []string {
		r := &Runtime{cfg: Config{NoDefaultEndpoint: noDefault}}
		hs, err := r.registryHosts(regs, nil)(host)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hs {
			out = append(out, h.Scheme+"://"+h.Host+h.Path)
		}
		return out
	}
	for _, c := range []struct {
		noDefault bool
		host      string
		want      []string
	}{
		{false, "registry.example.com", []string{"http://127.0.0.1:5000/v2", "https://registry.example.com/v2"}},
		{true, "registry.example.com", []string{"http://127.0.0.1:5000/v2"}},
		{true, "docker.io", []string{"https://registry-1.docker.io/v2"}},
	} {
		if got := hostsOf(c.noDefault, c.host); !slices.Equal(got, c.want) {
			t.Errorf("noDefault=%v %s: endpoints %v, want %v", c.noDefault, c.host, got, c.want)
		}
	}
}
