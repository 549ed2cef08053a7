package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Registry is Debian's docker-registry (the CNCF distribution server) on a
// free loopback port, storing into a temp dir.
type Registry struct {
	Addr string // host:port
}

// StartRegistry runs docker-registry for the test's duration.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	bin, err := LookPath("docker-registry")
	Require(t, err == nil, "docker-registry (Debian package docker-registry): %v", err)
	dir := t.TempDir()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			return &Registry{Addr: addr}
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer on %s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Push uploads a one-layer image (uncompressed layer, as `docker save`
// layers are) as repo:tag with a Docker v2 schema 2 manifest.
func (r *Registry) Push(repo, tag string, layer, config []byte) error {
	blob := func(b []byte, digest string) error {
		resp, err := http.Post("http://"+r.Addr+"/v2/"+repo+"/blobs/uploads/", "", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusAccepted || loc == "" {
			return fmt.Errorf("start upload: %s", resp.Status)
		}
		sep := "?"
		if bytes.ContainsRune([]byte(loc), '?') {
			sep = "&"
		}
		if loc[0] == '/' {
			loc = "http://" + r.Addr + loc
		}
		req, _ := http.NewRequest(http.MethodPut, loc+sep+"digest="+digest, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("upload %s: %s", digest, resp.Status)
		}
		return nil
	}
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	if err := blob(layer, digest(layer)); err != nil {
		return err
	}
	if err := blob(config, digest(config)); err != nil {
		return err
	}
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.docker.distribution.manifest.v2+json",
		"config":        map[string]any{"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config), "digest": digest(config)},
		"layers":        []map[string]any{{"mediaType": "application/vnd.docker.image.rootfs.diff.tar", "size": len(layer), "digest": digest(layer)}},
	})
	req, _ := http.NewRequest(http.MethodPut, "http://"+r.Addr+"/v2/"+repo+"/manifests/"+tag, bytes.NewReader(manifest))
	req.Header.Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("put manifest: %s: %s", resp.Status, body)
	}
	return nil
}
