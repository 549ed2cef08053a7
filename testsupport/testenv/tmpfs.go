package testenv

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a directory of the test's and
// unmounts it at cleanup: a small file system a test may fill. It needs
// root (CI: mandatory).
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	Require(t, os.Geteuid() == 0, "mounting a tmpfs needs root")
	// A short path: unix sockets under it (containerd's) must fit 104
	// bytes.
	dir, err := os.MkdirTemp("", "bonsai-fs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		Require(t, false, "mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		// Lazily: a store the test failed to close may still hold files.
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FillDisk writes path until the file system holding it is full, or
// limit bytes (0: no limit), and returns how many bytes it wrote: what
// other writers (container logs, image layers) do to a disk.
func FillDisk(t testing.TB, path string, limit int64) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	var n int64
	for limit == 0 || n < limit {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			// The last pages: smaller writes take what is left.
			for _, sz := range []int{4096, 512, 1} {
				for {
					w, err := f.Write(buf[:sz])
					n += int64(w)
					if err != nil {
						break
					}
				}
			}
			return n
		}
		if err != nil {
			t.Fatalf("fill %s: %v", path, err)
		}
	}
	return n
}
