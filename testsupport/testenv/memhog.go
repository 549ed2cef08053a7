package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// MemoryHogScript is a busybox sh command that grows its anonymous memory
// by stepMiB every stepSeconds up to maxMiB, then holds it: a pod that
// runs past a node's memory eviction threshold at a known pace, and that
// never takes more than maxMiB of the shared host should eviction fail.
// (busybox awk copies a string on every assignment, so each array element
// is its own stepMiB of memory.)
func MemoryHogScript(stepMiB, maxMiB int, stepSeconds float64) string {
	return fmt.Sprintf(`awk 'BEGIN { s = sprintf("%%%ds", ""); for (i = 0; i < %d; i++) { a[i] = s; system("sleep %g") } system("sleep 100000") }'`,
		stepMiB<<20, maxMiB/stepMiB, stepSeconds)
}

// PodsMemoryWorkingSet is the working set of bonsai's pod cgroup (/bonsai,
// where every pod of every bonsai on this host runs): its usage less its
// inactive file cache, from cgroup v2 or v1's memory hierarchy, as the
// kubelet counts a working set.
func PodsMemoryWorkingSet() (uint64, error) {
	root := "/sys/fs/cgroup"
	var usage, inactive uint64
	if b, err := os.ReadFile(filepath.Join(root, "bonsai", "memory.current")); err == nil {
		usage, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		inactive = statField(filepath.Join(root, "bonsai", "memory.stat"), "inactive_file")
	} else {
		b, err := os.ReadFile(filepath.Join(root, "memory", "bonsai", "memory.usage_in_bytes"))
		if os.IsNotExist(err) {
			return 0, nil // no pod has run yet
		}
		if err != nil {
			return 0, err
		}
		usage, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		inactive = statField(filepath.Join(root, "memory", "bonsai", "memory.stat"), "total_inactive_file")
	}
	if inactive > usage {
		return 0, nil
	}
	return usage - inactive, nil
}

func statField(path, key string) uint64 {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// WatchMemoryCrossing reads the pods' working set every 20 ms until stop
// and records when budget less it first fell below margin: the moment a
// memory.available<margin threshold was met on a node of that capacity.
// crossedAt is zero until then.
func WatchMemoryCrossing(budget, margin uint64) (crossedAt func() time.Time, stop func()) {
	var at atomic.Int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if ws, err := PodsMemoryWorkingSet(); err == nil && int64(budget)-int64(ws) < int64(margin) {
				at.CompareAndSwap(0, time.Now().UnixNano())
			}
		}
	}()
	return func() time.Time {
		if n := at.Load(); n != 0 {
			return time.Unix(0, n)
		}
		return time.Time{}
	}, func() { close(done) }
}
