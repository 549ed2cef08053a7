package cni

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"bonsai.dev/bonsai/netplugin"
)

// debianPluginDir is where Debian's containernetworking-plugins installs
// the reference plugins.
const debianPluginDir = "/usr/lib/cni"

// requirePlugins skips (fails in CI) a test that runs real CNI plugins
// when it cannot: it needs root and the reference plugins.
func requirePlugins(t *testing.T) {
	t.Helper()
	var reason string
	switch {
	case os.Geteuid() != 0:
		reason = "needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) to create network namespaces and run CNI plugins"
	default:
		for _, p := range []string{"bridge", "host-local", "loopback", "portmap", "bandwidth"} {
			if _, err := os.Stat(filepath.Join(debianPluginDir, p)); err != nil {
				reason = "needs the CNI reference plugins in " + debianPluginDir + " (Debian package containernetworking-plugins)"
			}
		}
	}
	if reason == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(reason)
	}
	t.Skip(reason)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// testNet is a CNI host on temp dirs with a bridge + host-local network
// of its own; cleanup removes the bridge and every namespace left.
type testNet struct {
	t        *testing.T
	h        *Host
	cfg      Config
	bridge   string
	subnet   netip.Prefix
	ipamDir  string
	confDir  string
	extraBin string // a bin dir for the tests' own fake plugins
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	requirePlugins(t)
	dir := t.TempDir()
	b := make([]byte, 1)
	rand.Read(b)
	tn := &testNet{
		t: t, bridge: "cnit" + randomHex(8),
		subnet:   netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 201, b[0], 0}), 24),
		ipamDir:  filepath.Join(dir, "ipam"),
		confDir:  filepath.Join(dir, "net.d"),
		extraBin: filepath.Join(dir, "bin"),
	}
	os.MkdirAll(tn.confDir, 0o755)
	os.MkdirAll(tn.extraBin, 0o755)
	tn.cfg = Config{
		ConfDir: tn.confDir, BinDirs: []string{tn.extraBin, debianPluginDir},
		NetnsDir: filepath.Join("/run/bonsai-test", "cni-"+randomHex(8), "netns"),
		CacheDir: filepath.Join(dir, "cache"), Timeout: 5 * time.Second,
	}
	tn.h = tn.newHost()
	t.Cleanup(func() {
		entries, _ := os.ReadDir(tn.cfg.NetnsDir)
		for _, e := range entries {
			netplugin.RemoveNetns(filepath.Join(tn.cfg.NetnsDir, e.Name()))
		}
		exec.Command("umount", "-l", tn.cfg.NetnsDir).Run()
		os.RemoveAll(filepath.Dir(tn.cfg.NetnsDir))
		os.Remove(filepath.Dir(filepath.Dir(tn.cfg.NetnsDir))) // /run/bonsai-test, once empty
		if l, err := netlink.LinkByName(tn.bridge); err == nil {
			netlink.LinkDel(l)
		}
	})
	return tn
}

func (tn *testNet) newHost() *Host {
	h, err := New(tn.cfg)
	if err != nil {
		tn.t.Fatal(err)
	}
	return h
}

// bridgeConf is a conflist of bridge + host-local, then extra plugins.
func (tn *testNet) bridgeConf(name, version string, extra ...string) string {
	plugins := []string{fmt.Sprintf(`{"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,`+
		`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]]}}`, tn.bridge, tn.ipamDir, tn.subnet)}
	plugins = append(plugins, extra...)
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[%s]}`, version, name, strings.Join(plugins, ","))
}

func (tn *testNet) writeConf(file, content string) {
	tn.t.Helper()
	if err := os.WriteFile(filepath.Join(tn.confDir, file), []byte(content), 0o644); err != nil {
		tn.t.Fatal(err)
	}
}

// fakePlugin installs a shell-script plugin into the test's bin dir.
func (tn *testNet) fakePlugin(name, script string) {
	tn.t.Helper()
	if err := os.WriteFile(filepath.Join(tn.extraBin, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		tn.t.Fatal(err)
	}
}

// allocatedIPs lists host-local's reservations (files named by address).
func (tn *testNet) allocatedIPs() []string {
	var out []string
	filepath.Walk(tn.ipamDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if _, perr := netip.ParseAddr(info.Name()); perr == nil {
				out = append(out, info.Name())
			}
		}
		return nil
	})
	return out
}

func pod(id string) netplugin.Pod {
	return netplugin.Pod{ID: id, Namespace: "default", Name: "p-" + id, UID: "uid-" + id}
}

func linkUpIn(t *testing.T, nsPath, name string) bool {
	t.Helper()
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		t.Fatalf("open netns %s: %v", nsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("open netns %s: %v", nsPath, err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		return false
	}
	return l.Attrs().RawFlags&1 != 0 // IFF_UP
}

func TestNoConfigIsUninitialized(t *testing.T) {
	tn := newTestNet(t)
	ctx := context.Background()
	if err := tn.h.Ready(ctx); !errors.Is(err, ErrUninitialized) || !strings.Contains(err.Error(), "cni config uninitialized") {
		t.Fatalf("Ready with no config = %v, want cni config uninitialized", err)
	}
	_, err := tn.h.Setup(ctx, pod("a1"))
	if err == nil || !strings.Contains(err.Error(), "cni config uninitialized") {
		t.Fatalf("Setup with no config = %v, want cni config uninitialized", err)
	}
	if _, err := os.Stat(tn.h.netnsPath("a1")); !os.IsNotExist(err) {
		t.Fatalf("netns left after a refused Setup: %v", err)
	}
	tn.writeConf("10-bad.conflist", `{"cniVersion":"1.0.0","name":`)
	if err := tn.h.Ready(ctx); !errors.Is(err, ErrUninitialized) || !strings.Contains(err.Error(), "10-bad.conflist") {
		t.Fatalf("Ready with a broken config = %v, want uninitialized naming the file", err)
	}
	tn.writeConf("10-bad.conflist", `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"nosuchplugin"}]}`)
	if err := tn.h.Ready(ctx); !errors.Is(err, ErrUninitialized) || !strings.Contains(err.Error(), `failed to find plugin "nosuchplugin"`) {
		t.Fatalf("Ready with a missing plugin = %v", err)
	}
	tn.writeConf("10-bad.conflist", `{"cniVersion":"9.9.9","name":"x","plugins":[{"type":"bridge"}]}`)
	if err := tn.h.Ready(ctx); !errors.Is(err, ErrUninitialized) || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("Ready with an unknown cniVersion = %v", err)
	}
}

func TestFirstFileWins(t *testing.T) {
	tn := newTestNet(t)
	tn.writeConf("20-other.conflist", `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"nosuchplugin"}]}`)
	tn.writeConf("10-pods.conflist", tn.bridgeConf("pods", "1.0.0"))
	tn.writeConf("05-notes.txt", "not a config")
	nw, err := tn.h.network()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(nw.file) != "10-pods.conflist" || nw.list.Name != "pods" {
		t.Fatalf("chose %s (%s), want 10-pods.conflist", nw.file, nw.list.Name)
	}
	if err := tn.h.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if !HasConfig(tn.confDir) || HasConfig(t.TempDir()) {
		t.Fatal("HasConfig does not tell a conf dir with a config from an empty one")
	}
}

// TestSpecVersions adds and deletes a pod with every spec version the
// reference plugins speak, as a .conflist and as a single-plugin .conf.
func TestSpecVersions(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0"} {
		for _, form := range []string{"conflist", "conf"} {
			t.Run(v+"/"+form, func(t *testing.T) {
				tn := newTestNet(t)
				ctx := context.Background()
				if form == "conflist" {
					tn.writeConf("10-pods.conflist", tn.bridgeConf("pods", v))
				} else {
					tn.writeConf("10-pods.conf", fmt.Sprintf(`{"cniVersion":%q,"name":"pods","type":"bridge","bridge":%q,"isGateway":true,`+
						`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]]}}`, v, tn.bridge, tn.ipamDir, tn.subnet))
				}
				att, err := tn.h.Setup(ctx, pod("v1"))
				if err != nil {
					t.Fatal(err)
				}
				if !tn.subnet.Contains(att.IP) || att.IP != att.IPs[0] {
					t.Fatalf("pod IP %s (all %v) not in %s", att.IP, att.IPs, tn.subnet)
				}
				if !linkUpIn(t, att.NetnsPath, "lo") || !linkUpIn(t, att.NetnsPath, "eth0") {
					t.Fatal("lo or eth0 is not up in the pod's netns")
				}
				if got := tn.allocatedIPs(); len(got) != 1 || got[0] != att.IP.String() {
					t.Fatalf("host-local holds %v, want [%s]", got, att.IP)
				}
				again, err := tn.h.Setup(ctx, pod("v1"))
				if err != nil || again.IP != att.IP {
					t.Fatalf("second Setup = %v, %v; want the same attachment", again, err)
				}
				if err := tn.h.Teardown(ctx, "v1"); err != nil {
					t.Fatal(err)
				}
				if got := tn.allocatedIPs(); len(got) != 0 {
					t.Fatalf("host-local still holds %v after Teardown", got)
				}
				if _, err := os.Stat(att.NetnsPath); !os.IsNotExist(err) {
					t.Fatalf("netns %s left after Teardown: %v", att.NetnsPath, err)
				}
				if err := tn.h.Teardown(ctx, "v1"); err != nil {
					t.Fatalf("Teardown of a pod with no network: %v", err)
				}
			})
		}
	}
}

// TestPluginFailures: every way a plugin can fail fails Setup with the
// plugin's message, and leaves no namespace and no address behind.
func TestPluginFailures(t *testing.T) {
	cases := []struct {
		name, plugin, script, want string
	}{
		{"exits non-zero", "failer", `if [ "$CNI_COMMAND" = ADD ]; then echo '{"cniVersion":"1.0.0","code":7,"msg":"uplink vlan 42 is down"}'; exit 1; fi; exit 0`, "uplink vlan 42 is down"},
		{"invalid JSON", "garbler", `if [ "$CNI_COMMAND" = ADD ]; then cat >/dev/null; echo 'this is not json'; exit 0; fi; exit 0`, "garbler"},
		{"hangs", "sleeper", `if [ "$CNI_COMMAND" = ADD ]; then exec sleep 60; fi; exit 0`, "timed out after 1s"},
		{"missing binary", "", "", `failed to find plugin "nosuchplugin"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTestNet(t)
			tn.cfg.Timeout = time.Second
			tn.h = tn.newHost()
			ctx := context.Background()
			typ := tc.plugin
			if typ == "" {
				typ = "nosuchplugin"
			} else {
				tn.fakePlugin(tc.plugin, tc.script)
			}
			tn.writeConf("10-pods.conflist", tn.bridgeConf("pods", "1.0.0", fmt.Sprintf(`{"type":%q}`, typ)))
			if tc.plugin == "" {
				// A binary that goes missing after the config was read.
				if _, err := tn.h.network(); err == nil {
					t.Fatal("a config naming a missing plugin loaded")
				}
			}
			start := time.Now()
			_, err := tn.h.Setup(ctx, pod("f1"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Setup = %v, want an error containing %q", err, tc.want)
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("Setup took %s", time.Since(start))
			}
			if _, err := os.Stat(tn.h.netnsPath("f1")); !os.IsNotExist(err) {
				t.Fatalf("netns left after a failed Setup: %v", err)
			}
			if got := tn.allocatedIPs(); len(got) != 0 {
				t.Fatalf("host-local still holds %v after a failed Setup", got)
			}
		})
	}
}

// TestDeleteWithCachedConfig: a pod added under one configuration is
// deleted with it after a restart, although the file now says another
// network.
func TestDeleteWithCachedConfig(t *testing.T) {
	tn := newTestNet(t)
	ctx := context.Background()
	tn.writeConf("10-pods.conflist", tn.bridgeConf("pods", "1.0.0"))
	att, err := tn.h.Setup(ctx, pod("c1"))
	if err != nil {
		t.Fatal(err)
	}
	tn.writeConf("10-pods.conflist", `{"cniVersion":"1.0.0","name":"renamed","plugins":[{"type":"nosuchplugin"}]}`)
	restarted := tn.newHost()
	if err := restarted.Teardown(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if got := tn.allocatedIPs(); len(got) != 0 {
		t.Fatalf("host-local still holds %v (pod had %s) after Teardown with a changed config", got, att.IP)
	}
	if _, err := os.Stat(att.NetnsPath); !os.IsNotExist(err) {
		t.Fatalf("netns left: %v", err)
	}
}

// TestReadoptAndGC: after a restart Setup takes the pod over (CHECK
// passes) with the same address, and GC deletes what is not live.
func TestReadoptAndGC(t *testing.T) {
	tn := newTestNet(t)
	ctx := context.Background()
	tn.writeConf("10-pods.conflist", tn.bridgeConf("pods", "1.0.0"))
	keep, err := tn.h.Setup(ctx, pod("keep"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.h.Setup(ctx, pod("gone")); err != nil {
		t.Fatal(err)
	}
	restarted := tn.newHost()
	again, err := restarted.Setup(ctx, pod("keep"))
	if err != nil || again.IP != keep.IP {
		t.Fatalf("Setup after restart = %v, %v; want %s again", again, err, keep.IP)
	}
	if err := restarted.GC(ctx, func(id string) bool { return id == "keep" }); err != nil {
		t.Fatal(err)
	}
	if got := tn.allocatedIPs(); len(got) != 1 || got[0] != keep.IP.String() {
		t.Fatalf("after GC host-local holds %v, want only %s", got, keep.IP)
	}
	if _, err := os.Stat(restarted.netnsPath("gone")); !os.IsNotExist(err) {
		t.Fatalf("netns of a dead pod left after GC: %v", err)
	}
	if !netplugin.IsNetnsMount(keep.NetnsPath) {
		t.Fatal("GC removed a live pod's netns")
	}
}

// TestRuntimeConfig: plugins get exactly the capabilities they declare,
// filled from the pod, and the CNI_ARGS of Kubernetes.
func TestRuntimeConfig(t *testing.T) {
	tn := newTestNet(t)
	ctx := context.Background()
	stdin := filepath.Join(tn.extraBin, "stdin.json")
	env := filepath.Join(tn.extraBin, "env.txt")
	// A plugin that records what it was given and hands out one address.
	tn.fakePlugin("recorder", fmt.Sprintf(`if [ "$CNI_COMMAND" = ADD ]; then cat > %s; env | grep ^CNI_ > %s; echo '{"cniVersion":"1.0.0","ips":[{"address":"10.250.0.9/24"}]}'; fi`, stdin, env))
	tn.writeConf("10-pods.conflist", `{"cniVersion":"1.0.0","name":"rec","plugins":[`+
		`{"type":"recorder","capabilities":{"portMappings":true,"bandwidth":true,"dns":true,"ips":true,"mac":true,"other":true}}]}`)
	p := pod("r1")
	p.HostPorts = []netplugin.HostPort{{HostPort: 8080, ContainerPort: 80}, {Protocol: "UDP", HostPort: 5353, ContainerPort: 53, HostIP: "127.0.0.1"}}
	p.Annotations = map[string]string{AnnotationIngressBandwidth: "1M", AnnotationEgressBandwidth: "2M"}
	p.DNS = netplugin.DNS{Servers: []string{"10.43.0.10"}, Searches: []string{"default.svc.cluster.local"}, Options: []string{"ndots:5"}}
	if _, err := tn.h.Setup(ctx, p); err != nil {
		t.Fatal(err)
	}
	defer tn.h.Teardown(ctx, "r1")
	b, err := os.ReadFile(stdin)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		`"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":5353,"containerPort":53,"protocol":"udp","hostIP":"127.0.0.1"}]`,
		`"bandwidth":{"ingressRate":1000000,"ingressBurst":2147483647,"egressRate":2000000,"egressBurst":2147483647}`,
		`"dns":{"servers":["10.43.0.10"],"searches":["default.svc.cluster.local"],"options":["ndots:5"]}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plugin stdin lacks %s:\n%s", want, got)
		}
	}
	_, rc, _ := strings.Cut(got, `"runtimeConfig":`)
	if strings.Contains(rc, `"ips":`) || strings.Contains(rc, `"mac":`) || strings.Contains(rc, `"other":`) {
		t.Errorf("plugin got runtime config the pod did not ask for:\n%s", got)
	}
	e, _ := os.ReadFile(env)
	for _, want := range []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=r1", "CNI_IFNAME=eth0", "CNI_NETNS=" + tn.h.netnsPath("r1"),
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p-r1;K8S_POD_INFRA_CONTAINER_ID=r1;K8S_POD_UID=uid-r1"} {
		if !strings.Contains(string(e), want+"\n") {
			t.Errorf("plugin env lacks %s:\n%s", want, e)
		}
	}
}

func TestBadAnnotations(t *testing.T) {
	for _, ann := range []map[string]string{
		{AnnotationIngressBandwidth: "fast"},
		{AnnotationEgressBandwidth: "10"},
		{AnnotationEgressBandwidth: "2P"},
		{AnnotationIPs: "10.0.0.300"},
		{AnnotationMAC: "zz:00"},
	} {
		p := pod("x")
		p.Annotations = ann
		if _, err := capabilityArgs(p); err == nil {
			t.Errorf("annotations %v accepted", ann)
		}
	}
	p := pod("x")
	p.Annotations = map[string]string{AnnotationIPs: "10.1.2.3/24, 10.1.2.4", AnnotationMAC: "02:00:00:00:00:01"}
	args, err := capabilityArgs(p)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(args["ips"]) != "[10.1.2.3/24 10.1.2.4]" || args["mac"] != "02:00:00:00:00:01" {
		t.Fatalf("ips/mac = %v %v", args["ips"], args["mac"])
	}
}

// TestStatusAndGCOfSpec110: a 1.1.0 network is asked STATUS for
// readiness and GC with the attachments still valid.
func TestStatusAndGCOfSpec110(t *testing.T) {
	tn := newTestNet(t)
	ctx := context.Background()
	log := filepath.Join(tn.extraBin, "calls")
	status := filepath.Join(tn.extraBin, "status-fails")
	tn.fakePlugin("spec110", fmt.Sprintf(`in=$(cat); echo "$CNI_COMMAND $CNI_CONTAINERID $(echo "$in" | grep -o 'valid-attachments":\[[^]]*\]')" >> %s
case "$CNI_COMMAND" in
ADD) echo '{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"'$CNI_NETNS'"}],"ips":[{"address":"10.250.0.5/24","interface":0}]}' ;;
STATUS) if [ -e %s ]; then echo '{"cniVersion":"1.1.0","code":50,"msg":"plugin not available"}'; exit 1; fi ;;
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}' ;;
esac
exit 0`, log, status))
	tn.writeConf("10-pods.conflist", `{"cniVersion":"1.1.0","name":"pods110","plugins":[{"type":"spec110"}]}`)
	if err := tn.h.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	os.WriteFile(status, nil, 0o644)
	if err := tn.h.Ready(ctx); err == nil || !strings.Contains(err.Error(), "plugin not available") {
		t.Fatalf("Ready with STATUS failing = %v", err)
	}
	os.Remove(status)
	att, err := tn.h.Setup(ctx, pod("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if att.IP != netip.MustParseAddr("10.250.0.5") {
		t.Fatalf("IP %s, want 10.250.0.5", att.IP)
	}
	if err := tn.h.GC(ctx, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(log)
	calls := string(b)
	for _, want := range []string{"STATUS ", "ADD s1", `GC  valid-attachments":[{"containerID":"s1","ifname":"eth0"}]`} {
		if !strings.Contains(calls, want) {
			t.Errorf("plugin calls lack %q:\n%s", want, calls)
		}
	}
	if err := tn.h.Teardown(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(log)
	if !strings.Contains(string(b), "DEL s1") {
		t.Errorf("no DEL on Teardown:\n%s", b)
	}
}

// TestLocalAddrs: the node's own addresses for pods go on a link of the
// host's, made again idempotently by a restarted host.
func TestLocalAddrs(t *testing.T) {
	tn := newTestNet(t)
	name := "cnil" + randomHex(8)
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	})
	b := make([]byte, 1)
	rand.Read(b)
	addr := netip.AddrFrom4([4]byte{10, 253, b[0], 10})
	addr6 := netip.AddrFrom16([16]byte{0xfd, 0, 0xbe, b[0], 14: 0, 15: 10})
	tn.cfg.LocalLink, tn.cfg.LocalAddrs = name, []netip.Addr{addr, addr6}
	for range 2 {
		if err := ensureLocalLink(name, tn.cfg.LocalAddrs); err != nil {
			t.Fatal(err)
		}
		tn.newHost()
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 1 || addrs[0].IPNet.String() != addr.String()+"/32" {
			t.Fatalf("addresses on %s: %v, want %s/32", name, addrs, addr)
		}
		// The IPv6 one (an IPv6-only cluster's DNS address) with no
		// duplicate address detection: bindable at once.
		addrs6, err := netlink.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, a := range addrs6 {
			if a.IPNet.String() == addr6.String()+"/128" {
				found = a.Flags&unix.IFA_F_TENTATIVE == 0
			}
		}
		if !found {
			t.Fatalf("IPv6 addresses on %s: %v, want %s/128, not tentative", name, addrs6, addr6)
		}
		netlink.LinkDel(l) // the second round makes it from scratch again
	}
}
