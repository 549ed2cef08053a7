package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"bonsai.dev/bonsai/netplugin"
	"bonsai.dev/bonsai/netplugin/cni"
)

// cniPods is how many pod sandboxes each network sets up and tears down.
const cniPods = 30

// cniPluginDir is where Debian's containernetworking-plugins installs the
// reference plugins.
const cniPluginDir = "/usr/lib/cni"

// cniSuite times what the kubelet asks of its pod network for each
// sandbox, Setup and Teardown, one pod after the other: the CNI host
// running bridge + host-local + portmap (the usual chain), against the
// built-in network on its own bridge. Both run in this process on
// bridges, subnets and netns dirs of their own, removed at the end.
func cniSuite(ctx context.Context, b *bench) ([]Row, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the cni suite needs root (network namespaces, bridges)")
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniPluginDir, p)); err != nil {
			return nil, fmt.Errorf("the cni suite needs the CNI plugins in %s (Debian package containernetworking-plugins): %v", cniPluginDir, err)
		}
	}
	id := make([]byte, 3)
	rand.Read(id)
	tag := hex.EncodeToString(id)
	dir := filepath.Join(b.dir, "cni")

	builtinDir := filepath.Join("/run/bonsai-bench", "b"+tag, "netns")
	b.onCleanup(func() { unmountTree(filepath.Dir(builtinDir)) })
	builtin, err := netplugin.New(ctx, netplugin.Config{
		DataDir: filepath.Join(dir, "builtin"), NetnsDir: builtinDir, Bridge: "bbb" + tag, Table: "bbb" + tag,
		ClusterCIDR: netip.MustParsePrefix("10.205.0.0/16"), PodCIDR: netip.MustParsePrefix("10.205.1.0/24"),
	})
	if err != nil {
		return nil, fmt.Errorf("built-in network: %w", err)
	}
	b.onCleanup(func() {
		builtin.Destroy(context.Background())
		builtin.Close()
	})
	bSetup, bTeardown, err := timeSandboxes(ctx, builtin, "b")
	if err != nil {
		return nil, fmt.Errorf("built-in network: %w", err)
	}

	conf := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	bridge := "bbc" + tag
	b.onCleanup(func() {
		if l, err := netlink.LinkByName(bridge); err == nil {
			netlink.LinkDel(l)
		}
	})
	list := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench","plugins":[`+
		`{"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.206.1.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},`+
		`{"type":"portmap","capabilities":{"portMappings":true},"snat":true}]}`, bridge, filepath.Join(dir, "ipam"))
	if err := os.WriteFile(filepath.Join(conf, "10-bench.conflist"), []byte(list), 0o644); err != nil {
		return nil, err
	}
	cniDir := filepath.Join("/run/bonsai-bench", "c"+tag, "netns")
	b.onCleanup(func() { unmountTree(filepath.Dir(cniDir)) })
	host, err := cni.New(cni.Config{ConfDir: conf, BinDirs: []string{cniPluginDir}, NetnsDir: cniDir, CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		return nil, err
	}
	if err := host.Ready(ctx); err != nil {
		return nil, err
	}
	cSetup, cTeardown, err := timeSandboxes(ctx, host, "c")
	if err != nil {
		return nil, fmt.Errorf("CNI host: %w", err)
	}

	peer := "built-in network"
	row := func(name string, c, p []time.Duration, q float64, t *Target) Row {
		return Row{Name: "cni: " + name, Unit: "ms", Bonsai: ms(percentile(c, q)), PeerName: peer, Peer: ms(percentile(p, q)), Target: t}
	}
	n := fmt.Sprint(cniPods)
	b.noteOnce("cni", "cni: the CNI host runs Debian's reference plugins (bridge + host-local + portmap, plus loopback) per sandbox; the peer column is bonsai's built-in network; %s pods set up, then torn down, one at a time", n)
	return []Row{
		row("sandbox network setup p50 ("+n+" pods)", cSetup, bSetup, 0.5, nil),
		row("sandbox network setup p99 ("+n+" pods)", cSetup, bSetup, 0.99, atMost(500, "ms")),
		row("sandbox network teardown p50 ("+n+" pods)", cTeardown, bTeardown, 0.5, nil),
		row("sandbox network teardown p99 ("+n+" pods)", cTeardown, bTeardown, 0.99, atMost(500, "ms")),
	}, nil
}

// timeSandboxes sets up cniPods sandboxes one at a time, then tears them
// down one at a time, timing each call.
func timeSandboxes(ctx context.Context, n netplugin.PodNetwork, prefix string) (setup, teardown []time.Duration, err error) {
	for i := range cniPods {
		id := fmt.Sprintf("%s-bench-%02d", prefix, i)
		start := time.Now()
		if _, err := n.Setup(ctx, netplugin.Pod{ID: id, Namespace: "bench", Name: id, UID: id}); err != nil {
			return nil, nil, err
		}
		setup = append(setup, time.Since(start))
	}
	for i := range cniPods {
		id := fmt.Sprintf("%s-bench-%02d", prefix, i)
		start := time.Now()
		if err := n.Teardown(ctx, id); err != nil {
			return nil, nil, err
		}
		teardown = append(teardown, time.Since(start))
	}
	return setup, teardown, nil
}

// unmountTree unmounts a netns dir's mounts and removes the tree.
func unmountTree(dir string) {
	entries, _ := os.ReadDir(filepath.Join(dir, "netns"))
	for _, e := range entries {
		unix.Unmount(filepath.Join(dir, "netns", e.Name()), unix.MNT_DETACH)
	}
	unix.Unmount(filepath.Join(dir, "netns"), unix.MNT_DETACH)
	os.RemoveAll(dir)
	os.Remove(filepath.Dir(dir)) // /run/bonsai-bench, once empty
}
