package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PythonWithKubernetes is the Python that has the official Kubernetes
// client (Debian's python3-kubernetes) and the client's version. Debian's
// /usr/bin/python3 is preferred to whatever python3 comes first on PATH
// (pyenv's, a virtualenv's), which cannot see Debian's modules.
func PythonWithKubernetes(t testing.TB) (python, version string) {
	t.Helper()
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil && p != candidates[0] {
		candidates = append(candidates, p)
	}
	var tried []string
	for _, p := range candidates {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, p, "-c", "import kubernetes; print(kubernetes.__version__)").CombinedOutput()
		cancel()
		if err == nil {
			return p, strings.TrimSpace(string(out))
		}
		tried = append(tried, fmt.Sprintf("%s: %v: %s", p, err, tail(out, 300)))
	}
	Require(t, false, "the official Python client (Debian package python3-kubernetes): %s", strings.Join(tried, "; "))
	return "", ""
}

// NodeClientCacheDir is where NodeModules installs: BONSAI_NODE_CLIENT_CACHE,
// else <user cache dir>/bonsai/node-clients-<hash of the lock file>, so a
// changed lock file gets a fresh install.
func NodeClientCacheDir(lock []byte) (string, error) {
	if d := os.Getenv("BONSAI_NODE_CLIENT_CACHE"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(lock)
	return filepath.Join(base, "bonsai", "node-clients-"+hex.EncodeToString(sum[:6])), nil
}

// NodeModules installs the npm packages that srcDir's package.json and
// package-lock.json pin (npm ci: exactly the locked versions, checked
// against their integrity hashes, no install scripts) into a cache dir,
// unless they are there already, and returns the node binary and the
// node_modules directory. Node and npm are Debian's nodejs and npm (or
// NodeSource's nodejs, which carries npm); BONSAI_NODE names another node
// binary to run the scripts with (an older or newer release).
func NodeModules(t testing.TB, srcDir string) (node, modules string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if env := os.Getenv("BONSAI_NODE"); env != "" {
		node, err = env, nil
	}
	Require(t, err == nil, "node (Debian package nodejs): %v", err)
	npm, err := exec.LookPath("npm")
	Require(t, err == nil, "npm (Debian package npm): %v", err)
	pkg, err := os.ReadFile(filepath.Join(srcDir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(filepath.Join(srcDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := NodeClientCacheDir(append(pkg, lock...))
	if err != nil {
		t.Fatal(err)
	}
	modules, took, err := InstallNodeModules(npm, dir, pkg, lock)
	if err != nil {
		t.Fatal(err)
	}
	if took > 0 {
		t.Logf("npm ci into %s in %v", dir, took.Round(time.Second))
	}
	return node, modules
}

// InstallNodeModules runs npm ci for pkg and lock in dir unless dir already
// holds the result, and returns dir/node_modules and how long the install
// took (0 when reused). A lock file serialises concurrent test packages.
func InstallNodeModules(npm, dir string, pkg, lock []byte) (string, time.Duration, error) {
	modules := filepath.Join(dir, "node_modules")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	lk, err := os.OpenFile(filepath.Join(dir, "install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", 0, err
	}
	defer lk.Close()
	if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX); err != nil {
		return "", 0, fmt.Errorf("lock %s: %w", lk.Name(), err)
	}
	defer syscall.Flock(int(lk.Fd()), syscall.LOCK_UN)
	// The marker is written last: a half-finished install is redone.
	done := filepath.Join(dir, "installed")
	if _, err := os.Stat(done); err == nil {
		return modules, 0, nil
	}
	start := time.Now()
	src := filepath.Join(dir, "src")
	os.RemoveAll(src)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", 0, err
	}
	if err := os.WriteFile(filepath.Join(src, "package.json"), pkg, 0o644); err != nil {
		return "", 0, err
	}
	if err := os.WriteFile(filepath.Join(src, "package-lock.json"), lock, 0o644); err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=dev")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("npm ci in %s: %v\n%s", src, err, tail(out, 3000))
	}
	os.RemoveAll(modules)
	if err := os.Rename(filepath.Join(src, "node_modules"), modules); err != nil {
		return "", 0, err
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", 0, err
	}
	return modules, time.Since(start), nil
}
