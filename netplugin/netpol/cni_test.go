package netpol

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/netplugin"
	"bonsai.dev/bonsai/netplugin/cni"
)

// cniPluginDir is where Debian's containernetworking-plugins installs
// the reference plugins.
const cniPluginDir = "/usr/lib/cni"

func requireCNIPlugins(t *testing.T, plugins ...string) {
	t.Helper()
	requireRoot(t)
	for _, p := range plugins {
		if _, err := os.Stat(filepath.Join(cniPluginDir, p)); err != nil {
			reason := "missing prerequisite: the CNI reference plugins in " + cniPluginDir + " (Debian package containernetworking-plugins)"
			if os.Getenv("CI") == "true" {
				t.Fatal(reason)
			}
			t.Skip(reason)
		}
	}
}

// cniNode is a test node whose pods the CNI host networks with the
// reference plugins, run in the node's namespace, and whose enforcer
// finds where each pod meets the node, as bonsai with --pod-network=cni
// does.
type cniNode struct {
	*testNode
	host    netplugin.PodNetwork // guarded
	pods    cache.Indexer
	cancel  context.CancelFunc
	done    chan error
	netns   string
	subnet  string
	gateway string
}

func newCNINode(t *testing.T, brnf, plugin string) *cniNode {
	t.Helper()
	requireCNIPlugins(t, plugin, "host-local", "loopback")
	n := &cniNode{testNode: newNodeBase(t, brnf), subnet: "10.42.0.0/24"}
	dir := t.TempDir()
	var conf string
	switch plugin {
	case "bridge":
		conf = fmt.Sprintf(`{"type":"bridge","bridge":"cnb0","isGateway":true,"ipMasq":false,"hairpinMode":true,`+
			`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}}`, filepath.Join(dir, "ipam"), n.subnet)
	case "ptp":
		conf = fmt.Sprintf(`{"type":"ptp","ipMasq":false,`+
			`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}}`, filepath.Join(dir, "ipam"), n.subnet)
	}
	must(t, "conf dir", os.MkdirAll(filepath.Join(dir, "net.d"), 0o755))
	must(t, "conflist", os.WriteFile(filepath.Join(dir, "net.d", "10-pods.conflist"),
		[]byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[`+conf+`]}`), 0o644))
	n.netns = filepath.Join(dir, "netns")
	cfg := cni.Config{ConfDir: filepath.Join(dir, "net.d"), BinDirs: []string{cniPluginDir}, NetnsDir: n.netns,
		CacheDir: filepath.Join(dir, "cache"), Timeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))}
	host, err := cni.New(cfg)
	must(t, "CNI host", err)
	t.Cleanup(func() {
		entries, _ := os.ReadDir(n.netns)
		for _, e := range entries {
			inNS(n.node, func() error { return host.Teardown(context.Background(), e.Name()) })
			netplugin.RemoveNetns(filepath.Join(n.netns, e.Name()))
		}
		unix.Unmount(n.netns, unix.MNT_DETACH) // the host made it a mount of its own
	})

	conn, err := openConn(int(n.node))
	must(t, "nftables connection", err)
	t.Cleanup(func() { conn.Close() })
	n.e = newEnforcer(Config{NodeName: testNodeName, NetnsDir: n.netns,
		Logger: slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))},
		newKernelTables(conn, "cni-netpol"))
	n.e.nl = handleIn(t, n.node)
	n.pods = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	n.e.podsIdx = n.pods
	tables := n.e.tables
	t.Cleanup(func() {
		if err := tables.delete(); err != nil {
			t.Errorf("delete tables: %v", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- n.e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-n.done })
	n.host = n.e.Guard(host)
	return n
}

// set hands objects to the running enforcer and waits until a sync has
// taken them in.
func (n *cniNode) set(t *testing.T, objs ...any) {
	t.Helper()
	for _, o := range objs {
		n.objs[objKey(o)] = o
	}
	feed(n.e, objs...)
	n.waitSynced(t)
}

func (n *cniNode) waitSynced(t *testing.T) {
	t.Helper()
	n.e.mu.Lock()
	target := n.e.queued
	n.e.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.e.mu.Lock()
		applied, done, lastErr := n.e.applied, n.e.done, n.e.lastErr
		n.e.mu.Unlock()
		if applied >= target {
			return
		}
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("no sync took the changes in within 10s (last error: %v)", lastErr)
		}
	}
}

// addPod sets a pod up through the guarded CNI host, in the node's
// namespace, as the kubelet would, and serves in it.
func (n *cniNode) addPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p = p.DeepCopy()
	p.Status.PodIP, p.Status.PodIPs = "", nil
	must(t, "index pod", n.pods.Add(p))
	n.set(t, p)
	var att netplugin.Attachment
	must(t, "set up "+p.Name, inNS(n.node, func() (err error) {
		att, err = n.host.Setup(context.Background(), netplugin.Pod{ID: string(p.UID), Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)})
		return err
	}))
	ns, err := netns.GetFromPath(att.NetnsPath)
	must(t, "open pod netns", err)
	t.Cleanup(func() { ns.Close() })
	noICMPLimits(t, ns)
	// The status shows the address later, as the kubelet writes it.
	p.Status.PodIP, p.Status.PodIPs = att.IP.String(), []corev1.PodIP{{IP: att.IP.String()}}
	must(t, "index pod", n.pods.Update(p))
	n.set(t, p)
	n.testNode.pods[p.Namespace+"/"+p.Name] = &testPod{ns: ns, ip: att.IP, obj: p}
	n.serve(t, ns, p.Namespace+"/"+p.Name)
}

// TestCNIChains polices pods that the reference plugins network: on the
// bridge plugin's bridge (frames between its pods sent through the
// node, with bridge-nf-call-iptables at 0 and 1) and on ptp's veths
// (routed), with the tables' bridge found from the pods.
func TestCNIChains(t *testing.T) {
	for _, tc := range []struct{ plugin, brnf string }{{"bridge", "0"}, {"bridge", "1"}, {"ptp", "0"}} {
		t.Run(tc.plugin+"/bridge-nf-call-iptables="+tc.brnf, func(t *testing.T) {
			n := newCNINode(t, tc.brnf, tc.plugin)
			n.set(t, testNamespaces()...)
			for _, p := range testCast() {
				n.addPod(t, p)
			}
			if tc.plugin == "bridge" && n.e.bridge != "cnb0" {
				t.Errorf("the enforcer polices bridge %q, want the plugin's cnb0", n.e.bridge)
			}
			for _, tc := range policyCases() {
				var objs []any
				for _, o := range n.objs {
					if np, ok := o.(*networkingv1.NetworkPolicy); ok {
						n.e.push(event{kind: policyEvent, namespace: np.Namespace, name: np.Name})
						delete(n.objs, objKey(np))
					}
				}
				for _, np := range tc.policies {
					objs = append(objs, np)
				}
				n.set(t, objs...)
				t.Run(tc.name, func(t *testing.T) {
					n.checkAgainstModel(t, "tcp/80", "udp/81")
				})
			}
		})
	}
}

// TestUnpolicedLinks: a pod whose interface is not a veth of the node's
// is found out, and said to be unpoliced.
func TestUnpolicedLinks(t *testing.T) {
	n := newNodeBase(t, "0")
	pod := newNetns(t)
	must(t, "parent veth", n.nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "mvp0"}, PeerName: "mvp1"}))
	parent, err := n.nl.LinkByName("mvp0")
	must(t, "parent", err)
	must(t, "macvlan", n.nl.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv0", ParentIndex: parent.Attrs().Index,
		Namespace: netlink.NsFd(int(pod))}, Mode: netlink.MACVLAN_MODE_BRIDGE}))
	h := handleIn(t, pod)
	addAddr(t, h, "mv0", "10.42.9.9/24")
	up(t, h, "mv0")
	path := filepath.Join(t.TempDir(), "pod")
	must(t, "bind the pod's netns", bindNetns(t, pod, path))
	l, err := findLink(n.nl, path, netip.MustParseAddr("10.42.9.9"))
	must(t, "find link", err)
	if l.kind != linkUnpoliced || !strings.Contains(l.why, "macvlan") {
		t.Errorf("a macvlan pod's link: %+v, want unpoliced for being a macvlan", l)
	}
}

// bindNetns bind-mounts ns at path, for what opens namespaces by path,
// until the test ends.
func bindNetns(t *testing.T, ns netns.NsHandle, path string) error {
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return err
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", int(ns)), path, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	t.Cleanup(func() { unix.Unmount(path, unix.MNT_DETACH) })
	return nil
}
