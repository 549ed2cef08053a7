package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/store"
)

const gpu corev1.ResourceName = "vendor.example/gpu"

// testAPI is a real API server in-process over a badger store in a temp dir.
type testAPI struct {
	cfg *rest.Config
	cs  kubernetes.Interface
}

func newTestAPI(t testing.TB) *testAPI {
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
	cfg := srv.ClientConfig(&authn.User{Name: "system:kube-scheduler", Groups: []string{authn.GroupAuthenticated}})
	cs := kubernetes.NewForConfigOrDie(rest.CopyConfig(cfg))
	return &testAPI{cfg: cfg, cs: cs}
}

// startScheduler runs a scheduler until the test ends.
func (a *testAPI) startScheduler(t testing.TB, opts Options) {
	t.Helper()
	a.run(t, Config{RESTConfig: a.cfg, Options: opts})
}

func (a *testAPI) run(t testing.TB, cfg Config) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && err != context.Canceled {
				t.Errorf("scheduler: %v", err)
			}
		})
	})
}

func node(name string, alloc corev1.ResourceList, mod ...func(*corev1.Node)) *corev1.Node {
	full := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	for k, v := range alloc {
		full[k] = v
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status:     corev1.NodeStatus{Capacity: full, Allocatable: full},
	}
	for _, m := range mod {
		m(n)
	}
	return n
}

func (a *testAPI) createNode(t testing.TB, n *corev1.Node) {
	t.Helper()
	if _, err := a.cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func pod(name string, req corev1.ResourceList, mod ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "test"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: req, Limits: extendedOnly(req)},
		}}},
	}
	for _, m := range mod {
		m(p)
	}
	return p
}

// extendedOnly is the limits an extended resource must have (equal to
// its request); cpu and memory stay request-only.
func extendedOnly(req corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for k, v := range req {
		if strings.Contains(string(k), "/") {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[k] = v
		}
	}
	return out
}

func (a *testAPI) createPod(t testing.TB, p *corev1.Pod) {
	t.Helper()
	if _, err := a.cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPods polls the pods until cond holds for the list, or fails.
func (a *testAPI) waitPods(t testing.TB, what string, cond func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := a.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cond(list.Items) {
			return list.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; pods: %s", what, summary(list.Items))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func summary(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "\n  %s node=%q", p.Name, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				fmt.Fprintf(&b, " %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
	return b.String()
}

func scheduledCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodScheduled {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func unschedulableWith(p *corev1.Pod, msg string) bool {
	c := scheduledCondition(p)
	return p.Spec.NodeName == "" && c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && c.Message == msg
}

// TestDeviceBurst: 100 pods each wanting one GPU onto 10 nodes with 4
// each. The cache counts every pod from the moment it is placed, so
// exactly 40 bind, no node gets a fifth, and 60 wait with Kubernetes'
// message.
func TestDeviceBurst(t *testing.T) {
	a := newTestAPI(t)
	for i := range 10 {
		a.createNode(t, node(fmt.Sprintf("n%d", i), corev1.ResourceList{gpu: resource.MustParse("4")}))
	}
	a.startScheduler(t, Options{})
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * 10; i < w*10+10; i++ {
				a.createPod(t, pod(fmt.Sprintf("p%03d", i), corev1.ResourceList{gpu: resource.MustParse("1")}))
			}
		}()
	}
	wg.Wait()
	const msg = "0/10 nodes are available: 10 Insufficient vendor.example/gpu."
	pods := a.waitPods(t, "40 bound and 60 unschedulable", func(ps []corev1.Pod) bool {
		bound, pending := 0, 0
		for i := range ps {
			switch {
			case ps[i].Spec.NodeName != "":
				bound++
			case unschedulableWith(&ps[i], msg):
				pending++
			}
		}
		return bound == 40 && pending == 60
	})
	perNode := map[string]int{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			perNode[p.Spec.NodeName]++
		}
	}
	for n, c := range perNode {
		if c != 4 {
			t.Errorf("node %s has %d GPU pods, want 4", n, c)
		}
	}
	// It stays that way: nothing books a fifth device later.
	time.Sleep(1500 * time.Millisecond)
	list, _ := a.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	bound := 0
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	if bound != 40 {
		t.Errorf("%d pods bound after settling, want 40", bound)
	}
	// The FailedScheduling event carries the same message.
	waitEvent(t, a, "FailedScheduling", msg)
}

func waitEvent(t testing.TB, a *testAPI, reason, msg string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs, err := a.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == reason && e.Message == msg && e.Source.Component == DefaultSchedulerName && e.InvolvedObject.Kind == "Pod" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event %q among %d events", reason, msg, len(evs.Items))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFailureMessageShape: reasons from different filters are counted
// and sorted the way Kubernetes prints them.
func TestFailureMessageShape(t *testing.T) {
	a := newTestAPI(t)
	a.createNode(t, node("small", corev1.ResourceList{gpu: resource.MustParse("0")}))
	for _, name := range []string{"gone-1", "gone-2"} {
		a.createNode(t, node(name, corev1.ResourceList{gpu: resource.MustParse("8")}, func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}}
		}))
	}
	a.startScheduler(t, Options{})
	a.createPod(t, pod("want-gpu", corev1.ResourceList{gpu: resource.MustParse("1")}))
	const msg = "0/3 nodes are available: 1 Insufficient vendor.example/gpu, 2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."
	a.waitPods(t, "the pod unschedulable", func(ps []corev1.Pod) bool { return len(ps) == 1 && unschedulableWith(&ps[0], msg) })
	waitEvent(t, a, "FailedScheduling", msg)
}

// TestOtherSchedulerLeftAlone: a pod naming another scheduler is not
// this one's to place.
func TestOtherSchedulerLeftAlone(t *testing.T) {
	a := newTestAPI(t)
	a.createNode(t, node("n0", nil))
	a.startScheduler(t, Options{})
	a.createPod(t, pod("theirs", nil, func(p *corev1.Pod) { p.Spec.SchedulerName = "my-scheduler" }))
	a.createPod(t, pod("ours", nil))
	a.waitPods(t, "ours bound", func(ps []corev1.Pod) bool {
		for _, p := range ps {
			if p.Name == "ours" && p.Spec.NodeName == "n0" {
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond)
	p, err := a.cs.CoreV1().Pods("default").Get(context.Background(), "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || scheduledCondition(p) != nil {
		t.Errorf("pod of another scheduler touched: node %q, conditions %v", p.Spec.NodeName, p.Status.Conditions)
	}
}

// TestUnschedulableRetriedOnEvents: a pod that fits nowhere is retried
// when a node is added, when a node's allocatable grows, and when a pod
// holding the resource goes.
func TestUnschedulableRetriedOnEvents(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	a.startScheduler(t, Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})

	// No nodes yet.
	a.createPod(t, pod("edge", nil, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"site": "edge"} }))
	a.waitPods(t, "no nodes", func(ps []corev1.Pod) bool {
		return unschedulableWith(&ps[0], "no nodes available to schedule pods")
	})
	a.createNode(t, node("core", nil))
	a.waitPods(t, "selector unmatched", func(ps []corev1.Pod) bool {
		return unschedulableWith(&ps[0], "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.")
	})
	// A node added with the label.
	a.createNode(t, node("edge-1", corev1.ResourceList{gpu: resource.MustParse("1")}, func(n *corev1.Node) { n.Labels["site"] = "edge" }))
	a.waitPods(t, "edge bound", func(ps []corev1.Pod) bool { return ps[0].Spec.NodeName == "edge-1" })

	// A GPU pod takes the only GPU; the next waits until it is deleted.
	a.createPod(t, pod("gpu-a", corev1.ResourceList{gpu: resource.MustParse("1")}))
	a.waitPods(t, "gpu-a bound", func(ps []corev1.Pod) bool { return byName(ps, "gpu-a").Spec.NodeName == "edge-1" })
	a.createPod(t, pod("gpu-b", corev1.ResourceList{gpu: resource.MustParse("1")}))
	a.waitPods(t, "gpu-b unschedulable", func(ps []corev1.Pod) bool {
		return unschedulableWith(byName(ps, "gpu-b"), "0/2 nodes are available: 2 Insufficient vendor.example/gpu.")
	})
	if err := a.cs.CoreV1().Pods("default").Delete(ctx, "gpu-a", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	a.waitPods(t, "gpu-b bound", func(ps []corev1.Pod) bool { return byName(ps, "gpu-b").Spec.NodeName == "edge-1" })

	// A third waits; the core node's allocatable gains two GPUs.
	a.createPod(t, pod("gpu-c", corev1.ResourceList{gpu: resource.MustParse("1")}))
	a.waitPods(t, "gpu-c unschedulable", func(ps []corev1.Pod) bool {
		return unschedulableWith(byName(ps, "gpu-c"), "0/2 nodes are available: 2 Insufficient vendor.example/gpu.")
	})
	setAllocatable(t, a, "core", gpu, "2")
	a.waitPods(t, "gpu-c bound", func(ps []corev1.Pod) bool { return byName(ps, "gpu-c").Spec.NodeName == "core" })
}

func setAllocatable(t testing.TB, a *testAPI, name string, res corev1.ResourceName, v string) {
	t.Helper()
	ctx := context.Background()
	n, err := a.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Allocatable[res] = resource.MustParse(v)
	n.Status.Capacity[res] = resource.MustParse(v)
	if _, err := a.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func byName(ps []corev1.Pod, name string) *corev1.Pod {
	for i := range ps {
		if ps[i].Name == name {
			return &ps[i]
		}
	}
	return &corev1.Pod{}
}

// TestAllocatableDropRespected: after a node's GPUs drop from 4 to 1 and
// its one pod... the next decisions see the lower figure.
func TestAllocatableDropRespected(t *testing.T) {
	a := newTestAPI(t)
	a.createNode(t, node("n0", corev1.ResourceList{gpu: resource.MustParse("4")}))
	a.startScheduler(t, Options{})
	a.createPod(t, pod("first", corev1.ResourceList{gpu: resource.MustParse("1")}))
	a.waitPods(t, "first bound", func(ps []corev1.Pod) bool { return ps[0].Spec.NodeName == "n0" })
	setAllocatable(t, a, "n0", gpu, "1")
	// Let the scheduler's informer see the drop before the next pod.
	time.Sleep(300 * time.Millisecond)
	a.createPod(t, pod("second", corev1.ResourceList{gpu: resource.MustParse("1")}))
	a.waitPods(t, "second unschedulable", func(ps []corev1.Pod) bool {
		return unschedulableWith(byName(ps, "second"), "0/1 nodes are available: 1 Insufficient vendor.example/gpu.")
	})
}

// TestScoringStrategyFromConfigFile: LeastAllocated spreads, MostAllocated
// (from a KubeSchedulerConfiguration file) packs.
func TestScoringStrategyFromConfigFile(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{name: "least allocated by default", want: "empty"},
		{name: "most allocated", want: "busy", file: `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: cpu
          weight: 1
        - name: memory
          weight: 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAPI(t)
			opts := Options{}
			if tc.file != "" {
				path := filepath.Join(t.TempDir(), "scheduler.yaml")
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				var err error
				if opts, err = LoadOptions(path); err != nil {
					t.Fatal(err)
				}
			}
			a.createNode(t, node("busy", nil))
			a.createNode(t, node("empty", nil))
			// A pod already bound to busy takes half of it.
			p := pod("resident", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")})
			p.Spec.NodeName = "busy"
			a.createPod(t, p)
			a.startScheduler(t, opts)
			a.createPod(t, pod("new", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}))
			a.waitPods(t, "new bound", func(ps []corev1.Pod) bool { return byName(ps, "new").Spec.NodeName != "" })
			ps, _ := a.cs.CoreV1().Pods("default").Get(context.Background(), "new", metav1.GetOptions{})
			if ps.Spec.NodeName != tc.want {
				t.Errorf("bound to %s, want %s", ps.Spec.NodeName, tc.want)
			}
		})
	}
}

// TestAntiAffinityBurst: pods that must not share a host, created at
// once: the assumed ones count, so no two land together, and the one too
// many waits with Kubernetes' message.
func TestAntiAffinityBurst(t *testing.T) {
	a := newTestAPI(t)
	for i := range 3 {
		a.createNode(t, node(fmt.Sprintf("n%d", i), nil))
	}
	a.startScheduler(t, Options{})
	for i := range 4 {
		a.createPod(t, pod(fmt.Sprintf("spread-%d", i), nil, func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "test"}}, TopologyKey: "kubernetes.io/hostname",
			}}}}
		}))
	}
	const msg = "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
	pods := a.waitPods(t, "3 spread and 1 unschedulable", func(ps []corev1.Pod) bool {
		bound, pending := 0, 0
		for i := range ps {
			switch {
			case ps[i].Spec.NodeName != "":
				bound++
			case unschedulableWith(&ps[i], msg):
				pending++
			}
		}
		return bound == 3 && pending == 1
	})
	seen := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName != "" && seen[p.Spec.NodeName] {
			t.Errorf("two pods on %s", p.Spec.NodeName)
		}
		seen[p.Spec.NodeName] = true
	}
}

// TestSharedInformersAlreadyRunning: a scheduler given the process'
// shared informers, already running and holding every node and pod, hears
// of them all: every device is taken by pods bound before it started, so
// the pods waiting then get none, with the usual message.
func TestSharedInformersAlreadyRunning(t *testing.T) {
	a := newTestAPI(t)
	for i := range 5 {
		a.createNode(t, node(fmt.Sprintf("n%d", i), corev1.ResourceList{gpu: resource.MustParse("4")}))
	}
	for i := range 20 {
		a.createPod(t, pod(fmt.Sprintf("bound-%02d", i), corev1.ResourceList{gpu: resource.MustParse("1")},
			func(p *corev1.Pod) { p.Spec.NodeName = fmt.Sprintf("n%d", i%5) }))
	}
	for i := range 10 {
		a.createPod(t, pod(fmt.Sprintf("waiting-%02d", i), corev1.ResourceList{gpu: resource.MustParse("1")}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := client.NewInformers(a.cfg)
	inf.For(&corev1.Pod{})
	inf.For(&corev1.Node{})
	inf.Start(ctx)
	if !inf.WaitForCacheSync(ctx) {
		t.Fatal("informers did not sync")
	}
	a.run(t, Config{RESTConfig: a.cfg, Informers: inf})
	const msg = "0/5 nodes are available: 5 Insufficient vendor.example/gpu."
	a.waitPods(t, "10 unschedulable", func(ps []corev1.Pod) bool {
		n := 0
		for i := range ps {
			if unschedulableWith(&ps[i], msg) {
				n++
			}
		}
		return n == 10
	})
	list, err := a.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if strings.HasPrefix(p.Name, "waiting-") && p.Spec.NodeName != "" {
			t.Errorf("%s bound to %s: the scheduler placed it before it knew the node was full", p.Name, p.Spec.NodeName)
		}
	}
}
