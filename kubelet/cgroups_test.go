package kubelet

import (
	"os"
	"path/filepath"
	"testing"
)

// A pod's cgroup goes from every hierarchy with the container cgroups the
// runtime left under it (empty directories here, as empty cgroups are to
// rmdir), while a cgroup that still holds something stays.
func TestRemovePodCgroupTakesLeftContainers(t *testing.T) {
	root := t.TempDir()
	old := cgroupRoot
	cgroupRoot = root
	t.Cleanup(func() { cgroupRoot = old })
	pod := podCgroup("uid-1")
	for _, d := range []string{
		filepath.Join(root, "cpuacct", pod, "ctr-a"),
		filepath.Join(root, "memory", pod, "ctr-a", "nested"),
		filepath.Join(root, "pids", pod),
		filepath.Join(root, "memory", podCgroup("uid-2"), "ctr-b"),
	} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Something that is not an empty cgroup: it stays, and so does its pod.
	busy := filepath.Join(root, "blkio", pod, "ctr-c")
	if err := os.MkdirAll(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	removePodCgroup(pod)
	for _, h := range []string{"cpuacct", "memory", "pids"} {
		if _, err := os.Stat(filepath.Join(root, h, pod)); !os.IsNotExist(err) {
			t.Errorf("%s: pod cgroup left (%v)", h, err)
		}
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("a cgroup holding something was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "memory", podCgroup("uid-2"), "ctr-b")); err != nil {
		t.Errorf("another pod's cgroup was removed: %v", err)
	}
}
