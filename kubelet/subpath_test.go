package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// subPathFixture is a fake host (a dir with a file the pod must never
// reach), a volume beside it, and a pod dir for the binds.
func subPathFixture(t *testing.T) (host, vol, pod string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	top := t.TempDir()
	host, vol, pod = filepath.Join(top, "host"), filepath.Join(top, "vol"), filepath.Join(top, "pod")
	for _, d := range []string{host, vol, pod} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountUnder(top) })
	return host, vol, pod
}

// A container that plants symlinks in its volume cannot make a later
// subPath mount, or the directories the kubelet creates for it, reach
// outside the volume.
func TestSubPathSymlinkEscape(t *testing.T) {
	host, vol, pod := subPathFixture(t)
	for name, target := range map[string]string{
		"abs":      "/",
		"abshost":  host,
		"relative": "../host",
		"loop":     "loop",
	} {
		if err := os.Symlink(target, filepath.Join(vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{"abs", "abs/tmp", "abshost", "abshost/secret", "relative", "relative/secret", "relative/newdir/deeper", "loop"} {
		target := filepath.Join(pod, "volume-subpaths", "v", "c", strings.ReplaceAll(sub, "/", "_"))
		err := bindSubPath(vol, sub, target)
		if err == nil || !strings.Contains(err.Error(), "not within volume path") {
			t.Errorf("subPath %q: err %v, want not within volume path", sub, err)
		}
		if mountedAt(target) {
			t.Errorf("subPath %q: something was mounted at %s", sub, target)
		}
	}
	if _, err := os.Stat(filepath.Join(host, "newdir")); !os.IsNotExist(err) {
		t.Fatalf("a directory was created outside the volume: %v", err)
	}
	// Paths the API would refuse, for objects stored before it did.
	for _, sub := range []string{"../host", "/etc", "a/../../host"} {
		if err := bindSubPath(vol, sub, filepath.Join(pod, "x")); err == nil {
			t.Errorf("subPath %q accepted", sub)
		}
	}
}

// Symlinks that stay inside the volume work, missing directories are
// made inside it, and a file is bound as a file.
func TestSubPathInsideVolume(t *testing.T) {
	_, vol, pod := subPathFixture(t)
	if err := os.MkdirAll(filepath.Join(vol, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "data", "f"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data", filepath.Join(vol, "link")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(pod, "volume-subpaths", "v", "c", "0")
	if err := bindSubPath(vol, "link", dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "inside" {
		t.Fatalf("bound dir reads %q, %v", b, err)
	}
	file := filepath.Join(pod, "volume-subpaths", "v", "c", "1")
	if err := bindSubPath(vol, "link/f", file); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "inside" {
		t.Fatalf("bound file reads %q, %v", b, err)
	}
	made := filepath.Join(pod, "volume-subpaths", "v", "c", "2")
	if err := bindSubPath(vol, "new/dir", made); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(vol, "new", "dir")); err != nil || !st.IsDir() {
		t.Fatalf("missing subPath not created inside the volume: %v", err)
	}
	// A second attempt of the container replaces the bind.
	if err := bindSubPath(vol, "link", dir); err != nil {
		t.Fatal(err)
	}
	if m, _ := mountsUnder(dir); len(m) != 1 {
		t.Fatalf("mounts at %s after a second bind: %v", dir, m)
	}
}

// Removing a pod's dir never deletes what a subPath bind shows: the
// binds go first, and a dir with a mount left is kept.
func TestRemovePodDirKeepsBoundFiles(t *testing.T) {
	host, _, pod := subPathFixture(t)
	target := filepath.Join(pod, "volume-subpaths", "v", "c", "0")
	if err := bindSubPath(filepath.Dir(host), "host", target); err != nil {
		t.Fatal(err)
	}
	if err := removePodDir(pod); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(host, "secret")); err != nil {
		t.Fatalf("the bound dir's file is gone: %v", err)
	}
	if _, err := os.Stat(pod); !os.IsNotExist(err) {
		t.Fatalf("pod dir left: %v", err)
	}

}

func TestExpandSubPath(t *testing.T) {
	vars := map[string]string{"POD": "web-0", "NS": "default", "EMPTY": ""}
	for _, tc := range []struct{ expr, want, err string }{
		{"$(NS)/$(POD)", "default/web-0", ""},
		{"logs/$$(POD)", "logs/$(POD)", ""},
		{"$(MISSING)/$(EMPTY)", "", "missing value for EMPTY, MISSING"},
		{"$(POD)/..", "", "must not contain '..'"},
	} {
		got, err := expandSubPath(tc.expr, vars)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.expr, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q = %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
}

// The kubelet writes no file of a configMap, secret or projected volume
// outside it, whatever path an old stored object names.
func TestWriteAtomicRefusesEscapingPaths(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"../x", "/tmp/x", "a/../../x", "..data", ""} {
		if err := writeAtomic(filepath.Join(dir, "vol"), map[string]volumeFile{p: {data: []byte("x"), mode: 0o644}}); err == nil {
			t.Errorf("path %q written", p)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("a file was written outside the volume")
	}
}

// Secret volumes live on a tmpfs of their own, grown when an update
// needs more room, and go with the pod dir.
func TestWriteVolumeOnTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("tmpfs mounts need root")
	}
	pod := t.TempDir()
	dir := filepath.Join(pod, "volumes", "secret", "s")
	t.Cleanup(func() { unmountUnder(pod) })
	if err := writeVolume(dir, map[string]volumeFile{"k": {data: []byte("v"), mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("secret volume is not on tmpfs: type %x, %v", st.Type, err)
	}
	big := make([]byte, 3<<20)
	if err := writeVolume(dir, map[string]volumeFile{"k": {data: big, mode: 0o600}}); err != nil {
		t.Fatalf("update larger than the first tmpfs: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "k")); err != nil || len(b) != len(big) {
		t.Fatalf("read back %d bytes, %v", len(b), err)
	}
	if err := removePodDir(pod); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pod); !os.IsNotExist(err) {
		t.Fatalf("pod dir left: %v", err)
	}
}

// kubeletRootDir is a temp dir for a kubelet root whose pods' mounts
// (tmpfs volumes, subPath binds) go before the dir is removed.
func kubeletRootDir(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() {
		if err := unmountUnder(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}
