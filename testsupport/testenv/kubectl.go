package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// KubectlModuleVersion is the k8s.io/kubectl release built when the machine
// has no kubectl. The module's v0.X.Y is kubectl v1.X.Y.
const KubectlModuleVersion = "v0.37.2"

// Kubectl is one kubectl binary and the minor version it reports.
type Kubectl struct {
	Path    string
	Version string // "1.27"
	Minor   int
}

// sdkKubectls is where the Google Cloud SDK puts its versioned kubectls.
const sdkKubectls = "/usr/lib/google-cloud-sdk/bin/kubectl.1.*"

// Kubectls returns the oldest and the newest kubectl available (one when
// they are the same): the Cloud SDK's versioned binaries, else kubectl on
// PATH, else one built from the k8s.io/kubectl module into a cache dir.
// BONSAI_KUBECTL_BUILD=1 forces the build, to exercise the path a machine
// without kubectl takes.
func Kubectls(t testing.TB) []Kubectl {
	t.Helper()
	if force, _ := strconv.ParseBool(os.Getenv("BONSAI_KUBECTL_BUILD")); force {
		return []Kubectl{builtKubectl(t)}
	}
	var found []Kubectl
	paths, _ := filepath.Glob(sdkKubectls)
	for _, p := range paths {
		k, err := probeKubectl(p)
		if err != nil {
			t.Logf("ignoring %s: %v", p, err)
			continue
		}
		found = append(found, k)
	}
	if len(found) == 0 {
		if p, err := exec.LookPath("kubectl"); err == nil {
			k, err := probeKubectl(p)
			if err != nil {
				t.Fatalf("kubectl on PATH: %v", err)
			}
			found = append(found, k)
		}
	}
	if len(found) == 0 {
		return []Kubectl{builtKubectl(t)}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Minor < found[j].Minor })
	oldest, newest := found[0], found[len(found)-1]
	if oldest.Minor == newest.Minor {
		return []Kubectl{oldest}
	}
	return []Kubectl{oldest, newest}
}

// probeKubectl asks a binary its own version rather than trusting its file
// name: /usr/bin/kubectl of the Cloud SDK is a wrapper of any version.
func probeKubectl(path string) (Kubectl, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "version", "--client", "-o", "json")
	// A kubeconfig of the developer's must not make this slow or noisy.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.DevNull)
	out, err := cmd.Output()
	if err != nil {
		return Kubectl{}, fmt.Errorf("version --client: %v", err)
	}
	var v struct {
		ClientVersion struct {
			Major, Minor, GitVersion string
		} `json:"clientVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return Kubectl{}, fmt.Errorf("version --client -o json: %v in %q", err, out)
	}
	// Vendor builds say "27+"; the number is what matters.
	minor, err := strconv.Atoi(strings.TrimRight(v.ClientVersion.Minor, "+"))
	if err != nil || v.ClientVersion.Major != "1" {
		return Kubectl{}, fmt.Errorf("version %+v is not 1.<minor>", v.ClientVersion)
	}
	return Kubectl{Path: path, Version: fmt.Sprintf("1.%d", minor), Minor: minor}, nil
}

// KubectlCacheDir is where the fallback kubectl is built: BONSAI_KUBECTL_CACHE,
// else <user cache dir>/bonsai/kubectl-<module version>.
func KubectlCacheDir() (string, error) {
	if d := os.Getenv("BONSAI_KUBECTL_CACHE"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "bonsai", "kubectl-"+KubectlModuleVersion), nil
}

func builtKubectl(t testing.TB) Kubectl {
	t.Helper()
	goBin, err := goTool()
	Require(t, err == nil, "go toolchain to build kubectl: %v", err)
	dir, err := KubectlCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	path, took, err := BuildKubectl(goBin, dir)
	if err != nil {
		t.Fatal(err)
	}
	if took > 0 {
		t.Logf("built kubectl %s into %s in %v", KubectlModuleVersion, path, took.Round(time.Second))
	}
	k, err := probeKubectl(path)
	if err != nil {
		t.Fatalf("kubectl built in %s: %v", dir, err)
	}
	return k
}

func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("go not on PATH nor in GOROOT")
	}
	return p, nil
}

const kubectlMain = `// Command kubectl is kubectl built from the k8s.io/kubectl module, for
// bonsai's tests on machines without one.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
`

// BuildKubectl builds kubectl into dir/kubectl unless it is there already,
// and returns its path and how long a build took (0 when reused). A lock
// file serialises test packages that want it at the same time: the build
// takes minutes and the second one would only waste them.
func BuildKubectl(goBin, dir string) (string, time.Duration, error) {
	bin := filepath.Join(dir, "kubectl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", 0, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", 0, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, 0, nil
	}

	start := time.Now()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", 0, err
	}
	goMod := "module bonsai.dev/kubectl-for-tests\n\ngo 1.24\n\nrequire k8s.io/kubectl " + KubectlModuleVersion + "\n"
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(goMod), 0o644); err != nil {
		return "", 0, err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(kubectlMain), 0o644); err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// kubectl tells its version from ldflags, as upstream's release build
	// sets them; without them it reports v0.0.0 and no minor.
	minor := strings.Split(strings.TrimPrefix(KubectlModuleVersion, "v0."), ".")[0]
	gitVersion := "v1." + strings.TrimPrefix(KubectlModuleVersion, "v0.")
	ldflags := fmt.Sprintf("-s -w -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=%s -X k8s.io/component-base/version.gitVersion=%s", minor, gitVersion)
	tmp := bin + ".tmp"
	for _, args := range [][]string{
		{"mod", "tidy"},
		{"build", "-trimpath", "-ldflags", ldflags, "-o", tmp, "."},
	} {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = src
		// The build is its own module, whatever workspace the tests run in.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", 0, fmt.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), src, err, tail(out, 2000))
		}
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", 0, err
	}
	return bin, time.Since(start), nil
}
