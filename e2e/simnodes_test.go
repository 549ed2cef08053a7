package e2e

import (
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestSimulatedNodesWithKubectl: bonsai server --simulated-nodes 20 with
// --runtime=simulated gives 21 Ready nodes, each with its own pod CIDR and
// Lease; a pod bound to one goes Ready with an IP from that node's CIDR and
// kubectl delete completes; a restart keeps nodes and CIDRs as they were.
func TestSimulatedNodesWithKubectl(t *testing.T) {
	requireBinary(t)
	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1]
	dir := t.TempDir()
	args := []string{"--runtime=simulated", "--node-name=edge-1", "--simulated-nodes=20"}
	s := startServer(t, dir, args...)
	k := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: filepath.Join(s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}

	cidrs := waitNodesReady(t, k, s, 21)
	if got := strings.Fields(k.must("get", "nodes", "-l", "type=simulated", "-o", "name")); len(got) != 20 {
		t.Fatalf("nodes labelled type=simulated: %v", got)
	}
	for i := 0; i < 20; i++ {
		if _, ok := cidrs["sim-"+strconv.Itoa(i)]; !ok {
			t.Fatalf("no node sim-%d: %v", i, cidrs)
		}
	}
	seen := map[string]string{}
	for node, c := range cidrs {
		if other, dup := seen[c]; dup {
			t.Errorf("nodes %s and %s share pod CIDR %s", node, other, c)
		}
		seen[c] = node
	}
	// Each node's first Lease is written at its own phase of the 10 s
	// renewal interval.
	for deadline := time.Now().Add(15 * time.Second); ; {
		got := strings.Fields(k.must("get", "leases", "-n", "kube-node-lease", "-o", "name"))
		if len(got) == 21 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leases after 15s: %d, want 21: %v", len(got), got)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if rt := k.must("get", "node", "sim-7", "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}"); !strings.HasPrefix(rt, "simulated://") {
		t.Errorf("sim-7 runtime %q", rt)
	}

	k.must("run", "web", "--image=nginx:1.27", `--overrides={"apiVersion":"v1","spec":{"nodeName":"sim-7"}}`)
	k.must("wait", "--for=condition=Ready", "pod/web", "--timeout=30s")
	ip, err := netip.ParseAddr(k.must("get", "pod", "web", "-o", "jsonpath={.status.podIP}"))
	if err != nil || !netip.MustParsePrefix(cidrs["sim-7"]).Contains(ip) {
		t.Errorf("pod IP %v (%v) not in sim-7's pod CIDR %s", ip, err, cidrs["sim-7"])
	}
	if phase := k.must("get", "pod", "web", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].ready}"); phase != "Running true" {
		t.Errorf("pod phase and readiness: %q", phase)
	}
	start := time.Now()
	k.must("delete", "pod", "web", "--timeout=30s")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("kubectl delete pod took %v", took)
	}

	// A DaemonSet puts one pod on each simulated node and none on
	// edge-1; a rolling update replaces every one.
	k.must("apply", "-f", writeFile(t, "ds.yaml", simDaemonSetYAML, 0o600))
	k.must("rollout", "status", "daemonset/agent", "--timeout=60s")
	if got := k.must("get", "daemonset/agent", "-o", "jsonpath={.status.desiredNumberScheduled} {.status.numberReady}"); got != "20 20" {
		t.Errorf("daemonset desired and ready: %q", got)
	}
	nodes := map[string]bool{}
	for _, n := range strings.Fields(k.must("get", "pods", "-l", "app=agent", "-o", "jsonpath={.items[*].spec.nodeName}")) {
		nodes[n] = true
	}
	if len(nodes) != 20 || nodes["edge-1"] {
		t.Errorf("daemon pods on %d distinct nodes (edge-1: %v), want the 20 simulated ones", len(nodes), nodes["edge-1"])
	}
	k.must("set", "env", "daemonset/agent", "LEVEL=2")
	k.must("rollout", "status", "daemonset/agent", "--timeout=60s")
	if got := k.must("get", "daemonset/agent", "-o", "jsonpath={.status.updatedNumberScheduled}"); got != "20" {
		t.Errorf("updated daemon pods: %q", got)
	}
	if hist := fieldsOf(k.must("rollout", "history", "daemonset/agent")); len(hist) < 3 {
		t.Errorf("daemonset history: %v", hist)
	}
	k.must("delete", "daemonset/agent", "--cascade=foreground", "--timeout=60s")

	// A restart finds every node and keeps every pod CIDR.
	if code, _ := s.sigterm(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, s.stderrText())
	}
	s = startServer(t, dir, args...)
	defer s.sigterm(t)
	after := waitNodesReady(t, k, s, 21)
	for node, c := range cidrs {
		if after[node] != c {
			t.Errorf("node %s: pod CIDR %s became %s after a restart", node, c, after[node])
		}
	}
}

// waitNodesReady waits until want nodes are Ready with a pod CIDR, and
// returns each node's CIDR.
func waitNodesReady(t *testing.T, k *kubectlRunner, s *server, want int) map[string]string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := k.must("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		cidrs := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[2] == "True" {
				cidrs[f[0]] = f[1]
			}
		}
		if len(cidrs) == want {
			return cidrs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes Ready with a pod CIDR after 60s:\n%s\n%s", len(cidrs), want, out, s.stderrText())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

const simDaemonSetYAML = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      nodeSelector: {type: simulated}
      containers:
      - name: main
        image: bonsai.test/agent:1
`
