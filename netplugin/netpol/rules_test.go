package netpol

import (
	"flag"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var goldenMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}

// testPortName names a test pod's bridge port after its UID.
func testPortName(uid string) string {
	name := "v" + strings.TrimPrefix(uid, "uid-")
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

// newTestEnforcer is an enforcer with no kernel tables, for what only
// builds objects.
func newTestEnforcer(t *testing.T, tables *kernelTables) *Enforcer {
	t.Helper()
	return newEnforcer(Config{NodeName: testNodeName, Bridge: "br0", PortName: testPortName,
		Logger: slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}, tables)
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Helper()
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// feed hands objects to the enforcer's handlers, as the informers would
// on an add or update.
func feed(e *Enforcer, objs ...any) {
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Pod:
			e.podChanged(o, false)
		case *corev1.Namespace:
			e.namespaceChanged(o, false)
		case *networkingv1.NetworkPolicy:
			e.policyChanged(o, false)
		}
	}
}

// goldenTables renders what an enforcer fed objs programs whole.
func goldenTables(t *testing.T, objs ...any) string {
	t.Helper()
	e := newTestEnforcer(t, nil)
	feed(e, objs...)
	e.mu.Lock()
	events := e.events
	e.events = nil
	e.mu.Unlock()
	e.apply(events, true)
	units := e.rebuild(goldenMAC)
	all := make([]objects, 0, len(units))
	for _, k := range slices.Sorted(maps.Keys(units)) {
		all = append(all, units[k])
	}
	return renderTables(TableName("br0"), all)
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// TestGoldenTables pins the tables of the seed examples: the
// documentation's policies over a few pods.
func TestGoldenTables(t *testing.T) {
	namedWeb := newPolicy("default", "named", sel("app", "web"),
		ingressRules(ingressRule(ports(namedPortRef(tcp, "http"), port(udp, 53)), podPeer(sel("role", "frontend")))),
		egressRules(egressRule(ports(namedPortRef(tcp, "http")), bothPeer(sel(), sel("app", "web")))))
	tests := []struct {
		name string
		objs []any
	}{
		{"empty", nil},
		{"test-network-policy", []any{testNetworkPolicy()}},
		{"default-deny-ingress", []any{defaultDenyIngress("default")}},
		{"allow-all-ingress", []any{allowAllIngress("default")}},
		{"default-deny-egress", []any{defaultDenyEgress("default")}},
		{"allow-all-egress", []any{allowAllEgress("default")}},
		{"default-deny-all", []any{defaultDenyAll("default")}},
		{"endport", []any{multiPortEgress()}},
		{"named-ports", []any{namedWeb,
			newPod("default", "web-1", "10.42.0.40", map[string]string{"app": "web"}, withPort("http", tcp, 80)),
			newPod("plain", "web-2", "10.42.1.41", map[string]string{"app": "web"}, withPort("http", tcp, 8080), onNode("node-b"))}},
		{"two-policies-one-namespace", []any{defaultDenyIngress("default"), testNetworkPolicy()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGolden(t, tt.name, goldenTables(t, append(cast(), tt.objs...)...))
		})
	}
}

func TestGoldenNoBridge(t *testing.T) {
	e := newTestEnforcer(t, nil)
	got := renderTables(TableName("br0"), []objects{e.baseUnit(nil)})
	if strings.Contains(got, "ether daddr set") {
		t.Errorf("frames are sent to a bridge address before there is a bridge:\n%s", got)
	}
}

func TestChainNames(t *testing.T) {
	long := strings.Repeat("n", 253)
	got := chainName(ingress, "default", long)
	if len(got) >= 256 || !strings.HasPrefix(got, "ingress:default/") {
		t.Errorf("chain name of a 253-character policy: %q (%d bytes)", got, len(got))
	}
	if other := chainName(ingress, "default", long[:252]+"m"); other == got {
		t.Error("two long names share a chain")
	}
	if got := chainName(egress, "default", "p"); got != "egress:default/p" {
		t.Errorf("chain name %q", got)
	}
}
