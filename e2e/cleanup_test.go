package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestCleanupFlag checks `bonsai server --cleanup` without a data dir:
// the service proxy's table, which stays in place while bonsai is
// stopped, goes; the command exits 0 without starting a server or
// writing a data dir, and says so again when there is nothing left to
// delete.
func TestCleanupFlag(t *testing.T) {
	requireBinary(t)
	testenv.Require(t, os.Geteuid() == 0, "cleanup test needs root (nftables)")
	b := make([]byte, 3)
	rand.Read(b)
	bridge := "bc" + hex.EncodeToString(b)
	table := &nftables.Table{Name: bridge + "-svc", Family: nftables.TableFamilyIPv4}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	c.AddTable(table)
	if err := c.Flush(); err != nil {
		t.Fatalf("create table %s: %v", table.Name, err)
	}
	t.Cleanup(func() { c.DelTable(table); c.Flush() })
	dataDir := filepath.Join(t.TempDir(), "data")

	for range 2 {
		out, err := exec.Command(bonsaiBin, "server", "--cleanup", "--pod-bridge="+bridge, "--data-dir="+dataDir).CombinedOutput()
		if err != nil {
			t.Fatalf("bonsai server --cleanup: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "deleted the service proxy's nftables table") {
			t.Errorf("output does not say what it deleted:\n%s", out)
		}
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range tables {
			if tb.Name == table.Name {
				t.Fatalf("table ip %s still there after --cleanup", table.Name)
			}
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("--cleanup touched the data dir %s (stat: %v)", dataDir, err)
		}
	}
}

// TestCleanupAfterPods checks the uninstall side of --cleanup on a real
// node: refused while the server runs; once it stopped (its pods keep
// running, as the kubelet's do), the containers of bonsai's containerd,
// the pods' volume and network namespace mounts, the bridge and every
// nftables table go, and the data dir can be removed.
func TestCleanupAfterPods(t *testing.T) {
	e := startPodEnv(t)
	e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stays"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: podImage, Command: sh("sleep 3600"),
			VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}},
	})
	e.waitPod(t, "stays", 60*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	dir := e.s.dataDir
	cleanup := func() (string, error) {
		out, err := exec.Command(bonsaiBin, "server", "--cleanup", "--pod-bridge="+e.bridge, "--data-dir="+dir).CombinedOutput()
		return string(out), err
	}
	out, err := cleanup()
	if err == nil || !strings.Contains(out, "is in use by a running bonsai") {
		t.Fatalf("--cleanup beside a running server: %v\n%s", err, out)
	}
	if code, _ := e.s.sigterm(t); code != 0 {
		t.Fatalf("bonsai exited %d on SIGTERM", code)
	}
	under := func() []string {
		raw, _ := os.ReadFile("/proc/self/mounts")
		var left []string
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) > 1 && (strings.HasPrefix(f[1], dir+"/") || strings.HasPrefix(f[1], "/run/bonsai/"+e.bridge)) {
				left = append(left, f[1])
			}
		}
		return left
	}
	if len(under()) == 0 {
		t.Fatal("no mounts under the data dir with a pod running: the test checks nothing")
	}
	if out, err = cleanup(); err != nil {
		t.Fatalf("bonsai server --cleanup: %v\n%s", err, out)
	}
	for _, want := range []string{"stopped the containers", "unmounted pods' volumes", "deleted the pod network's bridge"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	if left := under(); len(left) > 0 {
		t.Errorf("mounts left: %v", left)
	}
	if n := testenv.KillContainerProcesses(dir); n > 0 {
		t.Errorf("%d container processes left running", n)
	}
	if err := exec.Command("ip", "link", "show", e.bridge).Run(); err == nil {
		t.Errorf("bridge %s left", e.bridge)
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, _ := c.ListTables()
	for _, tb := range tables {
		if strings.HasPrefix(tb.Name, e.bridge) {
			t.Errorf("nftables table %s left", tb.Name)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("removing the data dir after --cleanup: %v", err)
	}
}
