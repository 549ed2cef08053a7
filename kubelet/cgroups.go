package kubelet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupRoot is where the cgroup file systems are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// podCgroup is the cgroup every container of the pod runs under, relative
// to the hierarchy's root: the runtime puts container <id> in
// <podCgroup>/<id>.
func podCgroup(uid string) string { return "/bonsai/pod" + uid }

// setPodPidsLimit caps the processes of the whole pod in its pod cgroup,
// as the kubelet's --pod-max-pids does, so a fork bomb in one pod cannot
// take the box's pids (and with them bonsai's own threads). It works on
// cgroup v2 (enabling the pids controller down to the pod) and on v1's
// pids hierarchy.
func setPodPidsLimit(cgroup string, max int64) error {
	var dir string
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		// v2: a controller is usable in a cgroup only once each ancestor
		// lists it in cgroup.subtree_control.
		parts := strings.Split(strings.Trim(cgroup, "/"), "/")
		cur := cgroupRoot
		for _, p := range parts {
			ctl := filepath.Join(cur, "cgroup.subtree_control")
			if b, err := os.ReadFile(ctl); err != nil || !strings.Contains(" "+string(b)+" ", " pids ") {
				if err := os.WriteFile(ctl, []byte("+pids"), 0); err != nil {
					return fmt.Errorf("enable the pids controller in %s: %w", cur, err)
				}
			}
			cur = filepath.Join(cur, p)
			if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		}
		dir = cur
	} else {
		dir = filepath.Join(cgroupRoot, "pids", cgroup)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("pod pids cgroup: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(max, 10)), 0); err != nil {
		return fmt.Errorf("set pids.max of %s: %w", dir, err)
	}
	return nil
}

// removePodCgroup removes the pod cgroup's (empty) directories the
// runtime and setPodPidsLimit left in every hierarchy.
func removePodCgroup(cgroup string) {
	removeCgroupTree(filepath.Join(cgroupRoot, cgroup))
	hs, _ := os.ReadDir(cgroupRoot)
	for _, h := range hs {
		if h.IsDir() {
			removeCgroupTree(filepath.Join(cgroupRoot, h.Name(), cgroup))
		}
	}
}

// removeCgroupTree removes the cgroup at dir and the ones below it,
// deepest first: a container's cgroup that runc left behind (a container
// killed rather than deleted, one hierarchy of v1 missed) would otherwise
// keep the pod's for good, and the kernel keeps a removed pod's memory
// cgroup alive as long as one is there. rmdir takes only a cgroup
// without processes and children, so a live one stays.
func removeCgroupTree(dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i])
	}
}
