package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// debianCNIDir is where Debian's containernetworking-plugins puts the
// reference plugins.
const debianCNIDir = "/usr/lib/cni"

// cniEnv is the CNI side of a pod test: a conf dir, a bin dir for the
// test's own plugins, and the bridge + host-local network they name.
type cniEnv struct {
	confDir, binDir, ipamDir string
	bridge                   string
	subnet                   netip.Prefix
}

func newCNIEnv(t *testing.T) *cniEnv {
	t.Helper()
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap", "bandwidth"} {
		_, err := os.Stat(filepath.Join(debianCNIDir, p))
		testenv.Require(t, err == nil, "CNI plugin %s (Debian package containernetworking-plugins): %v", p, err)
	}
	_, err := testenv.LookPath("iptables")
	testenv.Require(t, err == nil, "iptables, which the portmap plugin runs (Debian package iptables): %v", err)
	dir := t.TempDir()
	b := make([]byte, 4)
	rand.Read(b)
	c := &cniEnv{
		confDir: filepath.Join(dir, "net.d"), binDir: filepath.Join(dir, "bin"), ipamDir: filepath.Join(dir, "ipam"),
		bridge: "bc" + hex.EncodeToString(b)[:8],
		// Outside the other tests' 10.42/16, 10.100-199/16 and 10.199/16.
		subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 203, b[0], 0}), 24),
	}
	os.MkdirAll(c.confDir, 0o755)
	os.MkdirAll(c.binDir, 0o755)
	// portmap makes its chains in the iptables nat tables (nftables
	// tables ip nat and ip6 nat with iptables-nft) and leaves them, as it
	// does on every host; tables the test made go at the end.
	var natBefore []bool
	for _, fam := range []string{"ip", "ip6"} {
		natBefore = append(natBefore, exec.Command("nft", "list", "table", fam, "nat").Run() == nil)
	}
	t.Cleanup(func() {
		for i, fam := range []string{"ip", "ip6"} {
			if !natBefore[i] {
				exec.Command("nft", "delete", "table", fam, "nat").Run()
			}
		}
	})
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(c.bridge); err == nil {
			netlink.LinkDel(l)
		}
	})
	return c
}

// conflist is bridge + host-local + portmap + bandwidth, then extra.
func (c *cniEnv) conflist(extra ...string) string {
	plugins := []string{
		fmt.Sprintf(`{"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,"hairpinMode":true,`+
			`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}}`, c.bridge, c.ipamDir, c.subnet),
		`{"type":"portmap","capabilities":{"portMappings":true},"snat":true}`,
		`{"type":"bandwidth","capabilities":{"bandwidth":true}}`,
	}
	plugins = append(plugins, extra...)
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":"e2e-pods","plugins":[%s]}`, strings.Join(plugins, ","))
}

func (c *cniEnv) write(t *testing.T, file, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.confDir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (c *cniEnv) flags() []string {
	return []string{"--pod-network=cni", "--cni-conf-dir=" + c.confDir, "--cni-bin-dir=" + debianCNIDir, "--cni-bin-dir=" + c.binDir}
}

// reservedIPs lists host-local's reservations: files named by address.
func (c *cniEnv) reservedIPs() []string {
	var out []string
	filepath.Walk(c.ipamDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if _, perr := netip.ParseAddr(info.Name()); perr == nil {
				out = append(out, info.Name())
			}
		}
		return nil
	})
	return out
}

// netns lists the pod namespaces bonsai holds.
func (e *podEnv) netns() []string {
	entries, _ := os.ReadDir(filepath.Join("/run/bonsai", e.bridge, "netns"))
	var out []string
	for _, en := range entries {
		out = append(out, en.Name())
	}
	return out
}

func (e *podEnv) waitNodeCondition(t *testing.T, ready bool, msg string) {
	t.Helper()
	var last corev1.NodeCondition
	waitFor(t, 60*time.Second, fmt.Sprintf("node Ready=%v with %q", ready, msg), func() bool {
		n, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = c
				return (c.Status == corev1.ConditionTrue) == ready && strings.Contains(c.Message, msg)
			}
		}
		return false
	})
	t.Logf("node Ready=%s: %s", last.Status, last.Message)
}

func (e *podEnv) waitEvent(t *testing.T, pod, reason, contains string, count int) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%d %s events on %s with %q", count, reason, pod, contains), func() bool {
		n := 0
		for _, ev := range e.events(t, pod) {
			// A repeat raises the count of one Event (the kubelet's
			// event correlator) rather than adding another.
			if ev.Reason == reason && strings.Contains(ev.Message, contains) {
				n += max(int(ev.Count), 1)
			}
		}
		return n >= count
	})
}

func (e *podEnv) deletePods(t *testing.T, names ...string) {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("pods %v deleted in %s", names, time.Since(start).Round(time.Millisecond)) }()
	one := int64(1)
	for _, n := range names {
		e.cs.CoreV1().Pods("default").Delete(t.Context(), n, metav1.DeleteOptions{GracePeriodSeconds: &one})
	}
	waitFor(t, 60*time.Second, fmt.Sprintf("pods %v gone", names), func() bool {
		for _, n := range names {
			if _, err := e.cs.CoreV1().Pods("default").Get(t.Context(), n, metav1.GetOptions{}); err == nil {
				return false
			}
		}
		return true
	})
}

// TestCNI runs bonsai's pods on Debian's reference CNI plugins: bridge +
// host-local + portmap + bandwidth, with a later conf file that must be
// ignored, then the ways a network can be broken.
func TestCNI(t *testing.T) {
	c := newCNIEnv(t)
	c.write(t, "10-pods.conflist", c.conflist())
	// A later file, whose network would hand out other addresses.
	other := *c
	other.subnet = netip.MustParsePrefix("10.204.0.0/24")
	c.write(t, "20-other.conflist", strings.Replace(other.conflist(), `"e2e-pods"`, `"other"`, 1))
	e := startPodEnv(t, c.flags()...)
	if !strings.Contains(e.s.stderrText(), "10-pods.conflist") {
		t.Errorf("bonsai does not say which CNI configuration it chose:\n%s", e.s.stderrText())
	}

	hostPort := freePort(t)
	srv := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{
			"kubernetes.io/ingress-bandwidth": "1M", "kubernetes.io/egress-bandwidth": "2M"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "httpd",
			Command: sh("mkdir -p /www && echo served-by-web > /www/index.html && exec httpd -f -p 8080 -h /www"),
			Ports:   []corev1.ContainerPort{{ContainerPort: 8080, HostPort: int32(hostPort)}}}}},
	})
	srv = e.waitPod(t, srv.Name, 90*time.Second, "running", running)
	ip, err := netip.ParseAddr(srv.Status.PodIP)
	if err != nil || !c.subnet.Contains(ip) {
		t.Fatalf("pod IP %q is not from the first conf file's subnet %s (podIPs %v)", srv.Status.PodIP, c.subnet, srv.Status.PodIPs)
	}

	t.Run("pods talk to each other", func(t *testing.T) {
		cl := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "client"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
				Command: sh(fmt.Sprintf("until wget -q -O - http://%s:8080/ > /tmp/o; do sleep 1; done; cat /tmp/o; echo lo-flags-$(cat /sys/class/net/lo/flags); "+
					"until nslookup kubernetes.default.svc.cluster.local. > /tmp/dns 2>&1; do sleep 1; done; cat /tmp/dns; exec sleep 3600", ip))}}},
		})
		cl = e.waitPod(t, cl.Name, 90*time.Second, "running", running)
		var log string
		waitFor(t, 30*time.Second, "client's wget answer", func() bool {
			log = e.logText(t, cl, "main", 0)
			return strings.Contains(log, "served-by-web")
		})
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log, "10.43.0.1"); time.Sleep(250 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no cluster DNS answer in the client pod; its log:\n%s\nbonsai's:\n%s", log, e.s.stderrText())
			}
			log = e.logText(t, cl, "main", 0)
		}
		if !strings.Contains(log, "lo-flags-0x9") { // IFF_UP|IFF_LOOPBACK
			t.Errorf("lo is not up in the client pod: %q", log)
		}
	})

	t.Run("network policies are enforced on the bridge plugin's pods", func(t *testing.T) {
		if !strings.Contains(e.s.stderrText(), "network policies: enforced for CNI pods") {
			t.Errorf("bonsai does not say it enforces network policies for CNI pods:\n%s", e.s.stderrText())
		}
		deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-ingress"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
		if _, err := e.cs.NetworkingV1().NetworkPolicies("default").Create(t.Context(), deny, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer e.cs.NetworkingV1().NetworkPolicies("default").Delete(t.Context(), deny.Name, metav1.DeleteOptions{})
		// Pods of one bridge, which br_netfilter may not show the IP
		// hooks: the node must still stop the connection.
		prober := func(name string) *corev1.Pod {
			return &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
					Command: sh(fmt.Sprintf("if nc -w 3 %s 8080 </dev/null >/dev/null; then echo reached; else echo blocked; fi; exec sleep 3600", ip))}}},
			}
		}
		pr := e.create(t, prober("prober"))
		pr = e.waitPod(t, pr.Name, 90*time.Second, "running", running)
		var log string
		waitFor(t, 30*time.Second, "the prober's verdict", func() bool {
			log = e.logText(t, pr, "main", 0)
			return strings.Contains(log, "reached") || strings.Contains(log, "blocked")
		})
		if !strings.Contains(log, "blocked") {
			t.Errorf("a pod reached a pod that a policy isolates, through the bridge plugin's bridge: %q", log)
		}
		e.deletePods(t, pr.Name)
		// Without the policy the same probe goes through.
		if err := e.cs.NetworkingV1().NetworkPolicies("default").Delete(t.Context(), deny.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		pr = e.create(t, prober("prober-2"))
		pr = e.waitPod(t, pr.Name, 90*time.Second, "running", running)
		waitFor(t, 30*time.Second, "the prober's verdict", func() bool {
			log = e.logText(t, pr, "main", 0)
			return strings.Contains(log, "reached") || strings.Contains(log, "blocked")
		})
		if !strings.Contains(log, "reached") {
			t.Errorf("with no policy, a pod did not reach another: %q", log)
		}
		e.deletePods(t, pr.Name)
	})

	t.Run("hostPort on 127.0.0.1", func(t *testing.T) {
		var body string
		waitFor(t, 30*time.Second, "hostPort answer", func() bool {
			resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/", hostPort))
			if err != nil {
				return false
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			return strings.Contains(body, "served-by-web")
		})
	})

	t.Run("bandwidth annotation makes a tbf qdisc", func(t *testing.T) {
		br, err := netlink.LinkByName(c.bridge)
		if err != nil {
			t.Fatal(err)
		}
		links, err := netlink.LinkList()
		if err != nil {
			t.Fatal(err)
		}
		var rates []uint64
		for _, l := range links {
			// The pod's host-side veth (ingress) and the ifb the plugin
			// mirrors its egress to.
			if l.Attrs().MasterIndex != br.Attrs().Index && l.Type() != "ifb" {
				continue
			}
			qs, _ := netlink.QdiscList(l)
			for _, q := range qs {
				if tbf, ok := q.(*netlink.Tbf); ok {
					rates = append(rates, tbf.Rate*8)
				}
			}
		}
		want := map[uint64]bool{1_000_000: false, 2_000_000: false}
		for _, r := range rates {
			if _, ok := want[r]; ok {
				want[r] = true
			}
		}
		if !want[1_000_000] || !want[2_000_000] {
			t.Fatalf("tbf rates (bit/s) on the pod's links: %v; want 1000000 (ingress) and 2000000 (egress)", rates)
		}
	})

	t.Run("restart with a changed configuration", func(t *testing.T) {
		// Another network in the same file: running pods keep theirs, and
		// are later deleted with the configuration they were added with.
		v2 := *c
		v2.subnet = netip.MustParsePrefix("10.204.1.0/24")
		c.write(t, "10-pods.conflist", strings.Replace(v2.conflist(), `"e2e-pods"`, `"e2e-pods-v2"`, 1))
		e.restart(t)
		e.waitNodeReady(t)
		p := e.waitPod(t, "web", 30*time.Second, "running after the restart", running)
		if p.Status.PodIP != ip.String() {
			t.Errorf("pod IP after restart %s, want %s", p.Status.PodIP, ip)
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/", hostPort))
		if err != nil {
			t.Fatalf("hostPort after restart: %v", err)
		}
		resp.Body.Close()
	})

	t.Run("deleting pods releases their addresses", func(t *testing.T) {
		if got := c.reservedIPs(); len(got) != 2 {
			t.Errorf("host-local holds %v before deletion, want the 2 pods' addresses", got)
		}
		e.deletePods(t, "web", "client")
		start := time.Now()
		waitFor(t, 30*time.Second, "host-local state empty", func() bool { return len(c.reservedIPs()) == 0 })
		t.Logf("addresses released %s after the pods were gone", time.Since(start).Round(time.Millisecond))
		if ns := e.netns(); len(ns) != 0 {
			t.Errorf("netns left after deletion: %v", ns)
		}
		out, _ := exec.Command("iptables", "-t", "nat", "-S").Output()
		if strings.Contains(string(out), ip.String()) || strings.Contains(string(out), fmt.Sprint(hostPort)) {
			t.Errorf("iptables rules for the deleted pod are left:\n%s", out)
		}
	})

	t.Run("broken network configurations", func(t *testing.T) {
		c.write(t, "10-pods.conflist", `{"cniVersion":"1.0.0","name":"e2e-pods","plugins":[`)
		e.waitNodeCondition(t, false, "cni config uninitialized")
		e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "waits"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Command: sh("exec sleep 3600")}}}})
		e.waitEvent(t, "waits", "FailedCreatePodSandBox", "cni config uninitialized", 2)
		if ns := e.netns(); len(ns) != 0 {
			t.Errorf("netns left after a failed sandbox: %v", ns)
		}

		c.write(t, "10-pods.conflist", c.conflist(`{"type":"nosuchplugin"}`))
		e.waitNodeCondition(t, false, `failed to find plugin "nosuchplugin"`)
		e.waitEvent(t, "waits", "FailedCreatePodSandBox", `failed to find plugin "nosuchplugin"`, 1)

		script := "#!/bin/sh\nif [ \"$CNI_COMMAND\" = ADD ]; then echo '{\"cniVersion\":\"1.0.0\",\"code\":7,\"msg\":\"uplink vlan 42 is down\"}'; exit 1; fi\nexit 0\n"
		if err := os.WriteFile(filepath.Join(c.binDir, "failer"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		c.write(t, "10-pods.conflist", c.conflist(`{"type":"failer"}`))
		e.waitNodeCondition(t, true, "")
		e.waitEvent(t, "waits", "FailedCreatePodSandBox", "uplink vlan 42 is down", 1)
		if ns := e.netns(); len(ns) != 0 {
			t.Errorf("netns left after a plugin failed: %v", ns)
		}
		if got := c.reservedIPs(); len(got) != 0 {
			t.Errorf("host-local holds %v after the chain failed", got)
		}

		c.write(t, "10-pods.conflist", c.conflist())
		e.waitPod(t, "waits", 90*time.Second, "running once the network is fixed", running)
		e.deletePods(t, "waits")
		waitFor(t, 30*time.Second, "host-local state empty", func() bool { return len(c.reservedIPs()) == 0 })
	})
}
