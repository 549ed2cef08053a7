package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bonsai.dev/bonsai/apiserver/pki"
)

func runBonsai(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd(&out, io.Discard, nil)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestCertificateCheckAndRotate(t *testing.T) {
	dataDir := t.TempDir()
	sans, err := pki.ServingSANs("cluster.local", netip.MustParsePrefix("10.43.0.0/16"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ks := sans
	if _, err := pki.Open(pki.Options{Dir: filepath.Join(dataDir, "tls"), SANs: sans, KubeletSANs: &ks}); err != nil {
		t.Fatal(err)
	}

	out, err := runBonsai(t, "certificate", "check", "--data-dir", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "ca.crt: certificate bonsai-ca@") || !strings.Contains(lines[0], "(CertSign) is ok, expires at ") {
		t.Errorf("check:\n%s", out)
	}
	if !strings.Contains(out, "serving.crt: certificate bonsai (ServerAuth) is ok, expires at ") {
		t.Errorf("check does not show the serving certificate:\n%s", out)
	}

	out, err = runBonsai(t, "certificate", "check", "--data-dir", dataDir, "-o", "table", "--service", "admin")
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "FILENAME") || !strings.Contains(lines[0], "RESIDUAL TIME") ||
		!strings.HasPrefix(lines[1], "admin.crt ") || !strings.Contains(lines[1], "364d") || !strings.HasSuffix(lines[1], "OK") {
		t.Errorf("check -o table --service admin:\n%s", out)
	}

	out, err = runBonsai(t, "certificate", "check", "--data-dir", dataDir, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Certificates []struct{ Filename, Status string }
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js.Certificates) != 7 {
		t.Errorf("check -o json: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"certificate", "check", "--data-dir", dataDir, "-o", "yaml"}, `--output "yaml": must be text, table or json`},
		{[]string{"certificate", "check", "--data-dir", dataDir, "--service", "etcd"}, "service etcd is not recognized (bonsai's: admin, api-server, auth-proxy, kubelet)"},
		{[]string{"certificate", "rotate", "--data-dir", dataDir, "-s", "admin,scheduler"}, "service scheduler is not recognized (bonsai's: admin, api-server, auth-proxy, kubelet)"},
		{[]string{"certificate", "check", "--data-dir", filepath.Join(dataDir, "none")}, "certificate directory " + filepath.Join(dataDir, "none", "tls") + ": no such file or directory"},
		{[]string{"certificate", "rotate", "--data-dir", filepath.Join(dataDir, "none")}, "data dir " + filepath.Join(dataDir, "none") + ": no such file or directory"},
	} {
		if _, err := runBonsai(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}

	// A running server holds the lock: rotate refuses.
	lock, err := lockDataDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runBonsai(t, "certificate", "rotate", "--data-dir", dataDir); err == nil || !strings.Contains(err.Error(), "is running") {
		t.Errorf("rotate with a server running: %v", err)
	}
	lock.Close()

	out, err = runBonsai(t, "certificate", "rotate", "--data-dir", dataDir, "--service", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "removed "+filepath.Join(dataDir, "tls", pki.KubeletServingCertFile)) || !strings.Contains(out, "backed up the certificates to "+filepath.Join(dataDir, "tls-")) {
		t.Errorf("rotate --service kubelet:\n%s", out)
	}
	for f, want := range map[string]bool{pki.KubeletServingCertFile: false, pki.KubeletServingKeyFile: false, pki.ServingCertFile: true, pki.CACertFile: true} {
		_, err := os.Stat(filepath.Join(dataDir, "tls", f))
		if (err == nil) != want {
			t.Errorf("after rotate --service kubelet, %s present=%v, want %v", f, err == nil, want)
		}
	}
	// The next start issues what rotate removed.
	c, err := pki.Open(pki.Options{Dir: filepath.Join(dataDir, "tls"), SANs: sans, KubeletSANs: &ks})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Issued) != 1 || c.Issued[0] != pki.KubeletServingCertFile {
		t.Errorf("start after rotate issued %v", c.Issued)
	}
}
