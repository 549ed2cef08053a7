package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"bonsai.dev/bonsai/netplugin"
	"bonsai.dev/bonsai/netplugin/netpol"
	"bonsai.dev/bonsai/netplugin/proxy"
)

// cleanupHost is `bonsai server --cleanup`, for an uninstall: what
// bonsai leaves on the host while stopped goes. The service proxy's and
// the network policy enforcer's tables (kube-proxy --cleanup's part), the
// pod network's table and bridge, and, with the data dir, the containers
// bonsai's own containerd still runs (their shims outlive it), the mounts
// under the data dir (pods' volumes) and the pods' network namespaces.
// Pods of a containerd bonsai did not start are left to it.
func cleanupHost(cfg *serverConfig, log *slog.Logger) error {
	_, statErr := os.Stat(cfg.DataDir)
	haveDataDir := statErr == nil
	if haveDataDir {
		// A running server would put the rules back, and its pods would
		// lose their volumes under it.
		lock, err := tryLockDir(cfg.DataDir)
		if errors.Is(err, errDirBusy) {
			return fmt.Errorf("data dir %s is in use by a running bonsai: stop it before --cleanup", cfg.DataDir)
		}
		if err != nil {
			return err
		}
		defer lock.Close()
	}
	if err := proxy.Cleanup(cfg.PodBridge); err != nil {
		return err
	}
	log.Info("deleted the service proxy's nftables table", "table", "ip "+proxy.TableName(cfg.PodBridge))
	if err := netpol.Cleanup(cfg.PodBridge); err != nil {
		return err
	}
	log.Info("deleted the network policy enforcer's nftables tables", "tables", "ip and bridge "+netpol.TableName(cfg.PodBridge))
	if !haveDataDir {
		return nil
	}
	ctd := filepath.Join(cfg.DataDir, "containerd")
	if n := stopContainers(ctd); n > 0 {
		log.Info("stopped the containers bonsai's own containerd left running", "processes", n)
	}
	n, err := unmountUnder(cfg.DataDir, filepath.Dir(netnsDir(cfg)))
	if err != nil {
		return err
	}
	log.Info("unmounted pods' volumes and network namespaces", "mounts", n)
	if err := netplugin.Cleanup(cfg.PodBridge, cfg.PodBridge, localLinkName(cfg.PodBridge)); err != nil {
		return err
	}
	log.Info("deleted the pod network's bridge and nftables table", "bridge", cfg.PodBridge, "table", "ip "+cfg.PodBridge)
	return nil
}

// stopContainers kills the containers whose root file system is under
// dir (bonsai's own containerd's), then that containerd's shims, and says
// how many processes it killed.
func stopContainers(dir string) int {
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
	time.Sleep(100 * time.Millisecond)
	for _, pid := range pids() {
		cmd, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, dir+"/") }) {
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

// unmountUnder detaches every mount at or under the given dirs, deepest
// first, and says how many.
func unmountUnder(dirs ...string) (int, error) {
	raw, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return 0, err
	}
	var points []string
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		p := unescapeMount(f[1])
		for _, d := range dirs {
			if p == d || strings.HasPrefix(p, d+"/") {
				points = append(points, p)
				break
			}
		}
	}
	// Later mounts first: a mount on top of another, or inside it.
	slices.Reverse(points)
	n := 0
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			return n, fmt.Errorf("unmount %s: %w", p, err)
		}
		n++
	}
	return n, nil
}

// unescapeMount undoes /proc/mounts' octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
