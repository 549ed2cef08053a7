package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"bonsai.dev/bonsai/kubelet"
	"bonsai.dev/bonsai/kubelet/containerd/orphans"
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
	if n := orphans.Kill(ctd); n > 0 {
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
		p := kubelet.UnescapeMountPath(f[1])
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
