// Package orphans ends what a containerd leaves running after it stops:
// its shims outlive it, and the containers outlive a killed shim. An
// uninstall (bonsai server --cleanup) and tests that tear their own
// containerd down need both gone.
package orphans

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KillContainers SIGKILLs every process whose root file system lives
// under dir: the containers of a containerd rooted there. It says how
// many it killed.
func KillContainers(dir string) int {
	killed := 0
	for _, pid := range pids() {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "mountinfo"))
		if err != nil {
			continue
		}
		// The root mount's line: "... / / ... - overlay overlay ...lowerdir=<dir>/..."
		first, _, _ := strings.Cut(string(b), "\n")
		if f := strings.Fields(first); len(f) > 4 && f[3] == "/" && f[4] == "/" && strings.Contains(first, dir+"/") {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
	}
	return killed
}

// Kill ends the containers of the containerd whose state is under dir,
// then its shims, and says how many processes it killed.
func Kill(dir string) int {
	killed := KillContainers(dir)
	if killed > 0 {
		time.Sleep(100 * time.Millisecond) // the shims reap them
	}
	for _, pid := range pids() {
		cmd, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if strings.Contains(args[0], "containerd-shim") && strings.Contains(string(cmd), dir+"/") {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
	}
	return killed
}

func pids() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}
