package kubelet

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

func TestLeaseRetryBackoff(t *testing.T) {
	// After a renewal at the normal interval, failures back off from 200 ms
	// doubling to a 7 s cap.
	var got []time.Duration
	d := leaseRenewInterval
	for i := 0; i < 8; i++ {
		d = nextRetry(d)
		got = append(got, d)
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 7 * time.Second, 7 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("back-off (-want +got):\n%s", diff)
	}
	if nextRetry(0) != leaseRetryFirst {
		t.Fatal("a failure of the first renewal does not start at 200 ms")
	}
}

func TestRegistersNodeAndRenewsLease(t *testing.T) {
	ctx, cs, clk, stop := fakeClockAgent(t, Config{
		Labels: map[string]string{"site": "edge"},
		Taints: []corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}},
	})
	node := waitFor(t, func() (*corev1.Node, bool) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		return n, err == nil && len(n.Status.Conditions) > 0
	})
	wantLabels := map[string]string{
		"kubernetes.io/hostname": "n1", "kubernetes.io/os": runtime.GOOS, "kubernetes.io/arch": runtime.GOARCH,
		"beta.kubernetes.io/os": runtime.GOOS, "beta.kubernetes.io/arch": runtime.GOARCH,
		"site": "edge",
	}
	if diff := cmp.Diff(wantLabels, node.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != "dedicated" {
		t.Errorf("taints: %+v", node.Spec.Taints)
	}
	if p := node.Status.Capacity[corev1.ResourcePods]; p.Value() != 110 {
		t.Errorf("pods capacity %s", p.String())
	}
	if c := node.Status.Capacity[corev1.ResourceCPU]; c.Value() != int64(runtime.NumCPU()) {
		t.Errorf("cpu capacity %s", c.String())
	}
	memCap, memAlloc := node.Status.Capacity[corev1.ResourceMemory], node.Status.Allocatable[corev1.ResourceMemory]
	memCap.Sub(resource.MustParse("100Mi"))
	if memCap.Cmp(memAlloc) != 0 || memAlloc.Sign() <= 0 {
		t.Errorf("allocatable memory %s, capacity less 100Mi is %s", memAlloc.String(), memCap.String())
	}
	var ready *corev1.NodeCondition
	for i, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = &node.Status.Conditions[i]
		}
	}
	if ready == nil || ready.Status != corev1.ConditionTrue || ready.Reason != "KubeletReady" || ready.Message != "kubelet is posting ready status" {
		t.Errorf("Ready condition: %+v", ready)
	}
	if ni := node.Status.NodeInfo; ni.ContainerRuntimeVersion != "simulated://0.1" || ni.KubeletVersion != "v1.37.2" || ni.KernelVersion == "" || ni.OperatingSystem != "linux" {
		t.Errorf("node info: %+v", ni)
	}

	// The lease: created on the first tick, renewed every 10 s.
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Millisecond)
	lease := waitForLease(t, cs, clk.Now())
	if *lease.Spec.HolderIdentity != "n1" || *lease.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("lease spec: %+v", lease.Spec)
	}
	if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != node.UID || lease.OwnerReferences[0].Kind != "Node" {
		t.Errorf("lease owner: %+v", lease.OwnerReferences)
	}
	clk.Step(leaseRenewInterval)
	waitForLease(t, cs, clk.Now())

	// The node lifecycle controller marks the node Unknown (its
	// heartbeats stalled): the next status check, 10 s on, puts Ready
	// back rather than waiting for the 5-minute report.
	node, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range node.Status.Conditions {
		node.Status.Conditions[i].Status, node.Status.Conditions[i].Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Both the lease renewer and the status loop wait on the clock.
	waitFor(t, func() (bool, bool) { return true, clk.Waiters() >= 2 })
	clk.Step(10 * time.Second)
	waitFor(t, func() (bool, bool) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			return false, false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return true, c.Status == corev1.ConditionTrue
			}
		}
		return false, false
	})
	stop()
}

// fakeClockAgent runs the agent of node n1, on a fake clock, against a
// test API server, with cfg's labels and taints; stop ends it and fails
// the test if Run failed.
func fakeClockAgent(t *testing.T, cfg Config) (ctx context.Context, cs kubernetes.Interface, clk *clocktesting.FakeClock, stop func()) {
	t.Helper()
	api := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true})
	restCfg := api.ConfigFor(&authn.User{Name: "system:node:n1", Groups: []string{"system:nodes"}})
	cs = kubernetes.NewForConfigOrDie(restCfg)
	agentClient, err := NewClient(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	clk = clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.NodeName, cfg.Client, cfg.Clock = "n1", agentClient, clk
	cfg.Address, cfg.DataDir = netip.MustParseAddr("127.0.0.1"), t.TempDir()
	cfg.RuntimeVersion, cfg.KubeletVersion = "simulated://0.1", "v1.37.2"
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	return ctx, cs, clk, func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func waitFor[T any](t *testing.T, f func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, ok := f()
		if ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitForLease(t *testing.T, cs kubernetes.Interface, renewed time.Time) *coordinationv1.Lease {
	t.Helper()
	return waitFor(t, func() (*coordinationv1.Lease, bool) {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), "n1", metav1.GetOptions{})
		return l, err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Equal(renewed)
	})
}

// TestSimulatedRuntimeHandsNodeToSimulator: with Simulated the agent
// registers the node with the annotation and the host's status, and leaves
// heartbeats to the simulator: it starts no lease renewer of its own. A
// later start with a real runtime takes the node back.
func TestSimulatedRuntimeHandsNodeToSimulator(t *testing.T) {
	api := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true})
	restCfg := api.ConfigFor(&authn.User{Name: "system:node:n1", Groups: []string{"system:nodes"}})
	cs := kubernetes.NewForConfigOrDie(restCfg)
	agentClient, err := NewClient(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{NodeName: "n1", Client: agentClient, DataDir: t.TempDir(), RuntimeVersion: "simulated://0.1", Simulated: true}
	for start := 0; start < 2; start++ { // a fresh registration, then a restart
		if err := Run(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Annotations["bonsai.dev/simulated"] != "true" {
			t.Errorf("start %d: annotations %v", start, node.Annotations)
		}
		if c := node.Status.Capacity[corev1.ResourceCPU]; c.Value() != int64(runtime.NumCPU()) {
			t.Errorf("start %d: cpu capacity %s, want the host's", start, c.String())
		}
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "n1", metav1.GetOptions{}); err == nil {
		t.Error("the agent renewed the lease of a simulated node")
	}

	cfg.Simulated = false
	go Run(ctx, cfg)
	waitFor(t, func() (*corev1.Node, bool) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		_, annotated := n.Annotations["bonsai.dev/simulated"]
		return n, err == nil && !annotated
	})
}

// TestIdleNodeStatusWritesOnlyEveryReport: on flash storage every write
// wears the card, so an idle node whose status does not change writes its
// Node only at the 5-minute report; the 10 s checks in between read and
// write nothing, and the Lease alone carries the heartbeat.
func TestIdleNodeStatusWritesOnlyEveryReport(t *testing.T) {
	ctx, cs, clk, stop := fakeClockAgent(t, Config{})
	node := waitFor(t, func() (*corev1.Node, bool) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		return n, err == nil && len(n.Status.Conditions) > 0
	})
	rv := node.ResourceVersion
	// step moves the clock by 10 s once the lease renewer and the status
	// loop both wait on it, and returns once both wait again: their work
	// for that tick is done.
	step := func() {
		waitFor(t, func() (bool, bool) { return true, clk.Waiters() >= 2 })
		clk.Step(10 * time.Second)
		waitFor(t, func() (bool, bool) { return true, clk.Waiters() >= 2 })
	}
	nodeRV := func() string {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.ResourceVersion
	}
	elapsed := time.Duration(0)
	for elapsed+10*time.Second < statusInterval {
		step()
		elapsed += 10 * time.Second
		if got := nodeRV(); got != rv {
			t.Fatalf("%v after registration, with nothing changed, the Node was written (resourceVersion %s -> %s); want no write before %v", elapsed, rv, got, statusInterval)
		}
	}
	// The lease carried the heartbeat all along.
	waitForLease(t, cs, clk.Now())
	// The report is due: one write, with a fresh heartbeat time.
	step()
	n := waitFor(t, func() (*corev1.Node, bool) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		return n, err == nil && n.ResourceVersion != rv
	})
	for _, c := range n.Status.Conditions {
		if !c.LastHeartbeatTime.Time.Equal(clk.Now()) {
			t.Errorf("condition %s: heartbeat %v after the %v report, want %v", c.Type, c.LastHeartbeatTime.Time, statusInterval, clk.Now())
		}
	}
	stop()
}
