package nodeipam

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
)

// testAPI is a real API server in-process over a badger store in a temp dir.
type testAPI struct {
	cfg *rest.Config
	cs  kubernetes.Interface
}

func newTestAPI(t *testing.T) *testAPI {
	t.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.New(apiserver.Config{Store: st})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); st.Close() })
	cfg := srv.ClientConfig(&authn.User{Name: "system:kube-controller-manager", Groups: []string{authn.GroupAuthenticated}})
	return &testAPI{cfg: cfg, cs: kubernetes.NewForConfigOrDie(cfg)}
}

// start runs a controller until the test ends or stop is called.
func (a *testAPI) start(t *testing.T, cluster string, mask int) (stop func()) {
	t.Helper()
	c, err := New(Config{RESTConfig: a.cfg, ClusterCIDR: netip.MustParsePrefix(cluster), NodeMaskSize: mask, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && err != context.Canceled {
				t.Errorf("controller: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (a *testAPI) createNodes(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := a.cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitCIDRs waits until every named node has a pod CIDR and returns them.
func (a *testAPI) waitCIDRs(t *testing.T, names ...string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := map[string]string{}
		list, err := a.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range list.Items {
			if n.Spec.PodCIDR != "" {
				if len(n.Spec.PodCIDRs) != 1 || n.Spec.PodCIDRs[0] != n.Spec.PodCIDR {
					t.Fatalf("node %s: podCIDR %q podCIDRs %v", n.Name, n.Spec.PodCIDR, n.Spec.PodCIDRs)
				}
				got[n.Name] = n.Spec.PodCIDR
			}
		}
		all := true
		for _, n := range names {
			all = all && got[n] != ""
		}
		if all {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes without a pod CIDR after 20s; have %v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func distinct(t *testing.T, cidrs map[string]string, within string, bits int) {
	t.Helper()
	cluster := netip.MustParsePrefix(within)
	seen := map[string]string{}
	for node, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Bits() != bits || !cluster.Contains(p.Addr()) || p.Masked() != p {
			t.Errorf("node %s: pod CIDR %q is not a /%d of %s", node, c, bits, within)
		}
		if other, dup := seen[c]; dup {
			t.Errorf("nodes %s and %s share pod CIDR %s", other, node, c)
		}
		seen[c] = node
	}
}

func TestNodesGetDistinctCIDRs(t *testing.T) {
	a := newTestAPI(t)
	// One node exists before the controller starts, one is added after.
	a.createNodes(t, "early")
	a.start(t, "10.42.0.0/16", 24)
	a.createNodes(t, "late-1", "late-2")
	got := a.waitCIDRs(t, "early", "late-1", "late-2")
	distinct(t, got, "10.42.0.0/16", 24)
}

func TestRestartKeepsAssignments(t *testing.T) {
	a := newTestAPI(t)
	stop := a.start(t, "10.42.0.0/16", 24)
	a.createNodes(t, "a", "b", "c")
	before := a.waitCIDRs(t, "a", "b", "c")
	stop()

	// A node with a pod CIDR set by hand is respected too.
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "manual"}, Spec: corev1.NodeSpec{PodCIDR: "10.42.3.0/24", PodCIDRs: []string{"10.42.3.0/24"}}}
	if _, err := a.cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nodes created while the controller was down, listed before the
	// others: without the marking at start they would get a's CIDR.
	a.createNodes(t, "0-new-1", "0-new-2")
	a.start(t, "10.42.0.0/16", 24)
	a.createNodes(t, "d", "e")
	after := a.waitCIDRs(t, "a", "b", "c", "d", "e", "manual", "0-new-1", "0-new-2")
	for _, name := range []string{"a", "b", "c"} {
		if after[name] != before[name] {
			t.Errorf("node %s: pod CIDR %s became %s", name, before[name], after[name])
		}
	}
	distinct(t, after, "10.42.0.0/16", 24)
}

func TestDeleteReleasesAndExhaustionWaits(t *testing.T) {
	a := newTestAPI(t)
	// Two /24s in a /23.
	a.start(t, "10.42.0.0/23", 24)
	a.createNodes(t, "a", "b")
	got := a.waitCIDRs(t, "a", "b")
	a.createNodes(t, "c")

	// c gets a CIDRNotAvailable event and no CIDR.
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": "c", "reason": "CIDRNotAvailable"}.AsSelector().String()
	deadline := time.Now().Add(10 * time.Second)
	var ev corev1.Event
	for {
		list, err := a.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > 0 {
			ev = list.Items[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no CIDRNotAvailable event for node c")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ev.Type != corev1.EventTypeWarning || ev.Source.Component != "node-ipam-controller" {
		t.Errorf("event: type %s source %+v message %q", ev.Type, ev.Source, ev.Message)
	}
	t.Logf("event: %s", ev.Message)
	if c, _ := a.cs.CoreV1().Nodes().Get(context.Background(), "c", metav1.GetOptions{}); c.Spec.PodCIDR != "" {
		t.Fatalf("node c got %s from an exhausted pool", c.Spec.PodCIDR)
	}

	// Deleting a hands its CIDR to c.
	if err := a.cs.CoreV1().Nodes().Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	after := a.waitCIDRs(t, "b", "c")
	if after["c"] != got["a"] {
		t.Errorf("node c got %s, want a's released %s", after["c"], got["a"])
	}
	distinct(t, after, "10.42.0.0/23", 24)
}

func TestConcurrentCreatesGetDistinctCIDRs(t *testing.T) {
	a := newTestAPI(t)
	a.start(t, "10.42.0.0/16", 24)
	const n = 200
	names := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%03d", i)
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			_, err := a.cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			errs <- err
		}(names[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := a.waitCIDRs(t, names...)
	if len(got) != n {
		t.Fatalf("%d nodes have a CIDR, want %d", len(got), n)
	}
	distinct(t, got, "10.42.0.0/16", 24)
}
