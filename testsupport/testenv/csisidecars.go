package testenv

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CSI sidecars the tests run, unmodified, from the versions pinned as
// tools in e2e/csisidecars (external-provisioner needs an older
// Kubernetes library set than the others, so it has its own module).
var csiSidecars = map[string]struct{ module, pkg string }{
	"csi-provisioner": {"e2e/csisidecars/provisioner", "github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner"},
	"csi-attacher":    {"e2e/csisidecars", "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"},
	"csi-resizer":     {"e2e/csisidecars", "github.com/kubernetes-csi/external-resizer/cmd/csi-resizer"},
}

// CSISidecar builds a kubernetes-csi sidecar (csi-provisioner,
// csi-attacher, csi-resizer) from its Go module at the version the
// repository pins, into the user cache dir keyed by that pin, and returns
// its path. The first build takes minutes; later ones reuse it.
func CSISidecar(t testing.TB, name string) string {
	t.Helper()
	sc, ok := csiSidecars[name]
	if !ok {
		t.Fatalf("unknown CSI sidecar %q", name)
	}
	goBin, err := goTool()
	Require(t, err == nil, "go toolchain to build %s: %v", name, err)
	_, file, _, _ := runtime.Caller(0)
	modDir := filepath.Join(filepath.Dir(file), "..", "..", sc.module)
	sum, err := os.ReadFile(filepath.Join(modDir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "bonsai", "csi-sidecars", fmt.Sprintf("%x", sha256.Sum256(sum))[:12])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin+".tmp", sc.pkg)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s in %s: %v\n%s", name, modDir, err, tail(out, 2000))
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s (%s) in %v", name, strings.TrimPrefix(sc.pkg, "github.com/"), time.Since(start).Round(time.Second))
	return bin
}
