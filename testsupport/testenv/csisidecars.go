package testenv

import (
	"bytes"
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
	goBin, err := goTool()
	Require(t, err == nil, "go toolchain to build %s: %v", name, err)
	_, file, _, _ := runtime.Caller(0)
	bin, took, err := BuildCSISidecar(goBin, filepath.Join(filepath.Dir(file), "..", ".."), name)
	if err != nil {
		t.Fatal(err)
	}
	if took > 0 {
		t.Logf("built %s in %v", name, took.Round(time.Second))
	}
	return bin
}

// niceness is the priority of prebuilds (PrebuildCSISidecars): tests
// running meanwhile come first.
var niceness int

// PrebuildCSISidecars builds every sidecar the cache lacks, at a low
// priority, so that a test package can start the builds (minutes on a
// fresh machine) while its other tests run; CSISidecar then waits for
// the build it needs, if it is not done yet, on the cache's lock.
func PrebuildCSISidecars(goBin, repo string) {
	niceness = 10
	for name := range csiSidecars {
		BuildCSISidecar(goBin, repo, name) // a failure is the test's to report, when it builds again
	}
}

// BuildCSISidecar builds the sidecar name from the modules under the
// repository at repo unless the cache has it; took is 0 when reused.
func BuildCSISidecar(goBin, repo, name string) (bin string, took time.Duration, err error) {
	sc, ok := csiSidecars[name]
	if !ok {
		return "", 0, fmt.Errorf("unknown CSI sidecar %q", name)
	}
	modDir := filepath.Join(repo, sc.module)
	sum, err := os.ReadFile(filepath.Join(modDir, "go.sum"))
	if err != nil {
		return "", 0, err
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", 0, err
	}
	dir := filepath.Join(base, "bonsai", "csi-sidecars", fmt.Sprintf("%x", sha256.Sum256(sum))[:12])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	bin = filepath.Join(dir, name)
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", 0, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", 0, err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, 0, nil
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin+".tmp", sc.pkg)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	if err == nil {
		if niceness > 0 {
			// The compilers go build starts from now on inherit it.
			syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, niceness)
		}
		err = cmd.Wait()
	}
	if err != nil {
		return "", 0, fmt.Errorf("building %s (%s) in %s: %v\n%s", name, strings.TrimPrefix(sc.pkg, "github.com/"), modDir, err, tail(out.Bytes(), 2000))
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", 0, err
	}
	return bin, time.Since(start), nil
}
