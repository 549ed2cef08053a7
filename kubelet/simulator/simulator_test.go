package simulator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
)

const testInterval = 200 * time.Millisecond

// env is a real API server in-process, a simulator on it with short
// intervals (as its own user), and an admin client.
type env struct {
	cfg *rest.Config
	cs  kubernetes.Interface
	ctx context.Context
}

func newEnv(t *testing.T) *env {
	t.Helper()
	// Node creation times are whole seconds: a shorter grace than the
	// default still makes a node without a pod CIDR wait up to a second.
	old := cidrGrace
	cidrGrace = 100 * time.Millisecond
	t.Cleanup(func() { cidrGrace = old })
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// Requests are authenticated (authn.Union{} refuses every
	// credential: only in-process users get in) and authorized, so the
	// simulator works with its own user's roles.
	srv, err := apiserver.New(apiserver.Config{Store: st, Authenticator: authn.Union{}})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cfg := srv.ClientConfig(&authn.User{Name: "system:bonsai-simulator", Groups: []string{authn.GroupAuthenticated}})
	admin := srv.ClientConfig(&authn.User{Name: "test-admin", Groups: []string{authn.GroupMasters, authn.GroupAuthenticated}})
	return &env{cfg: cfg, cs: kubernetes.NewForConfigOrDie(admin), ctx: ctx}
}

// startSimulator runs a simulator until the test ends or stop is called.
func (e *env) startSimulator(t *testing.T, tweaks ...func(*Config)) (stop func()) {
	t.Helper()
	cfg := Config{RESTConfig: e.cfg, Version: "test", KubeletVersion: "v1.37.2",
		LeaseInterval: testInterval, LeaseDuration: time.Second, StatusInterval: time.Minute}
	for _, f := range tweaks {
		f(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && err != context.Canceled {
				t.Errorf("simulator: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func simNode(name, podCIDR string, annotations ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{AnnotationSimulated: "true"}}}
	for i := 0; i+1 < len(annotations); i += 2 {
		n.Annotations[annotations[i]] = annotations[i+1]
	}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	return n
}

func (e *env) createNode(t *testing.T, n *corev1.Node) *corev1.Node {
	t.Helper()
	out, err := e.cs.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) createPod(t *testing.T, name, node string, annotations map[string]string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: "setup", Image: "busybox:1.36"}},
			Containers:     []corev1.Container{{Name: "app", Image: "nginx:1.27"}, {Name: "log", Image: "busybox:1.36"}},
		},
	}
	if _, err := e.cs.CoreV1().Pods("default").Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitFor[T any](t *testing.T, what string, f func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, ok := f()
		if ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s; last: %+v", what, v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (e *env) waitNodeReady(t *testing.T, name string) *corev1.Node {
	t.Helper()
	return waitFor(t, "node "+name+" Ready", func() (*corev1.Node, bool) {
		n, err := e.cs.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
		return n, err == nil && nodeReady(n)
	})
}

func (e *env) renewTime(t *testing.T, name string) time.Time {
	t.Helper()
	l, err := e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

func TestAnnotatedNodeIsReadyWithRenewedLease(t *testing.T) {
	e := newEnv(t)
	e.startSimulator(t)
	sim := e.createNode(t, simNode("sim-a", "10.42.7.0/24"))
	e.createNode(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real"}})

	n := e.waitNodeReady(t, "sim-a")
	want := map[corev1.NodeConditionType]string{
		corev1.NodeMemoryPressure: "False/KubeletHasSufficientMemory", corev1.NodeDiskPressure: "False/KubeletHasNoDiskPressure",
		corev1.NodePIDPressure: "False/KubeletHasSufficientPID", corev1.NodeReady: "True/KubeletReady",
	}
	for _, c := range n.Status.Conditions {
		if got := string(c.Status) + "/" + c.Reason; want[c.Type] != got {
			t.Errorf("condition %s: %s, want %s", c.Type, got, want[c.Type])
		}
		delete(want, c.Type)
	}
	if len(want) > 0 {
		t.Errorf("missing conditions %v", want)
	}
	for k, v := range DefaultCapacity {
		if got := n.Status.Capacity[k]; got.Cmp(v) != 0 {
			t.Errorf("capacity %s: %s, want %s", k, got.String(), v.String())
		}
		if got := n.Status.Allocatable[k]; got.Cmp(v) != 0 {
			t.Errorf("allocatable %s: %s, want %s", k, got.String(), v.String())
		}
	}
	if ni := n.Status.NodeInfo; ni.ContainerRuntimeVersion != "simulated://test" || ni.KubeletVersion != "v1.37.2" || ni.OperatingSystem == "" {
		t.Errorf("node info %+v", ni)
	}
	if internalIP(n) != "10.42.7.1" {
		t.Errorf("addresses %+v, want InternalIP 10.42.7.1 (first of the pod CIDR)", n.Status.Addresses)
	}

	first := waitFor(t, "lease", func() (time.Time, bool) { r := e.renewTime(t, "sim-a"); return r, !r.IsZero() })
	lease, err := e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(e.ctx, "sim-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity != "sim-a" || *lease.Spec.LeaseDurationSeconds != 1 ||
		len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != sim.UID || lease.OwnerReferences[0].Kind != "Node" {
		t.Errorf("lease %+v owners %+v", lease.Spec, lease.OwnerReferences)
	}
	waitFor(t, "lease renewal", func() (time.Time, bool) { r := e.renewTime(t, "sim-a"); return r, r.After(first) })

	// Renewals touch the Lease, not the Node: its status is written again
	// only when something changes or StatusInterval passes.
	n1, _ := e.cs.CoreV1().Nodes().Get(e.ctx, "sim-a", metav1.GetOptions{})
	time.Sleep(5 * testInterval)
	if n2, _ := e.cs.CoreV1().Nodes().Get(e.ctx, "sim-a", metav1.GetOptions{}); n2.ResourceVersion != n1.ResourceVersion {
		t.Errorf("node rewritten while nothing changed: %s became %s", n1.ResourceVersion, n2.ResourceVersion)
	}

	// A node without the annotation is a real kubelet's: untouched.
	real, err := e.cs.CoreV1().Nodes().Get(e.ctx, "real", metav1.GetOptions{})
	if err != nil || len(real.Status.Conditions) != 0 || !e.renewTime(t, "real").IsZero() {
		t.Errorf("node without the annotation was touched: %+v %v", real.Status, err)
	}
}

func TestNodeKeepsItsOwnCapacity(t *testing.T) {
	e := newEnv(t)
	e.startSimulator(t)
	n := simNode("small", "")
	n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("20")}
	n.Status.NodeInfo.ContainerRuntimeVersion = "containerd://2.0.0"
	e.createNode(t, n)
	got := e.waitNodeReady(t, "small")
	for k, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: "4", corev1.ResourcePods: "20", corev1.ResourceMemory: "256Gi"} {
		if q := got.Status.Capacity[k]; q.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("capacity %s = %s, want %s", k, q.String(), v)
		}
		if q := got.Status.Allocatable[k]; q.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("allocatable %s = %s, want %s", k, q.String(), v)
		}
	}
	if got.Status.NodeInfo.ContainerRuntimeVersion != "containerd://2.0.0" {
		t.Errorf("runtime version %q: the node's own was replaced", got.Status.NodeInfo.ContainerRuntimeVersion)
	}
}

func TestHeartbeatFalseStopsRenewals(t *testing.T) {
	e := newEnv(t)
	e.startSimulator(t)
	e.createNode(t, simNode("flaky", ""))
	e.waitNodeReady(t, "flaky")
	waitFor(t, "lease", func() (time.Time, bool) { r := e.renewTime(t, "flaky"); return r, !r.IsZero() })

	patch := func(v string) {
		t.Helper()
		body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationHeartbeat, v)
		if _, err := e.cs.CoreV1().Nodes().Patch(e.ctx, "flaky", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch("false")
	// A renewal already under way may land; after that, none.
	time.Sleep(2 * testInterval)
	stopped := e.renewTime(t, "flaky")
	time.Sleep(5 * testInterval)
	if got := e.renewTime(t, "flaky"); !got.Equal(stopped) {
		t.Fatalf("lease renewed at %v after heartbeats stopped at %v", got, stopped)
	}

	patch("true")
	waitFor(t, "renewals after heartbeats restart", func() (time.Time, bool) { r := e.renewTime(t, "flaky"); return r, r.After(stopped) })
}

func TestInvalidNodeAnnotationGetsAnEvent(t *testing.T) {
	e := newEnv(t)
	e.startSimulator(t)
	e.createNode(t, simNode("typo", "", AnnotationSimulated, "yes"))
	e.createNode(t, simNode("beat", "", AnnotationHeartbeat, "sometimes"))

	ev := e.waitEvent(t, "Node", "typo", "InvalidAnnotation")
	if !strings.Contains(ev.Message, `"yes"`) || !strings.Contains(ev.Message, "not simulated") {
		t.Errorf("event message %q", ev.Message)
	}
	ev = e.waitEvent(t, "Node", "beat", "InvalidAnnotation")
	if !strings.Contains(ev.Message, AnnotationHeartbeat) || !strings.Contains(ev.Message, "heartbeats go on") {
		t.Errorf("event message %q", ev.Message)
	}
	// The fallback: heartbeats on.
	e.waitNodeReady(t, "beat")
	if n, _ := e.cs.CoreV1().Nodes().Get(e.ctx, "typo", metav1.GetOptions{}); len(n.Status.Conditions) != 0 {
		t.Errorf("node with an invalid annotation was simulated")
	}
}

func (e *env) waitEvent(t *testing.T, kind, name, reason string) corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason}.AsSelector().String()
	return waitFor(t, reason+" event for "+name, func() (corev1.Event, bool) {
		list, err := e.cs.CoreV1().Events("").List(e.ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil || len(list.Items) == 0 {
			return corev1.Event{}, false
		}
		return list.Items[0], true
	})
}

func (e *env) getPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := e.cs.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (e *env) waitPodReady(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	return waitFor(t, "pod "+name+" Ready", func() (*corev1.Pod, bool) {
		p, err := e.cs.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
		return p, err == nil && podReady(p)
	})
}

// checkRunning checks everything a kubelet reports for a running pod.
func checkRunning(t *testing.T, p *corev1.Pod, cidr netip.Prefix) netip.Addr {
	t.Helper()
	st := p.Status
	if st.Phase != corev1.PodRunning || st.StartTime == nil || st.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("pod %s: phase %s startTime %v qos %q", p.Name, st.Phase, st.StartTime, st.QOSClass)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		found := false
		for _, c := range st.Conditions {
			if c.Type == ct {
				found = true
				if c.Status != corev1.ConditionTrue {
					t.Errorf("pod %s: condition %s is %s", p.Name, ct, c.Status)
				}
			}
		}
		if !found {
			t.Errorf("pod %s: no %s condition", p.Name, ct)
		}
	}
	if len(st.ContainerStatuses) != 2 || len(st.InitContainerStatuses) != 1 {
		t.Fatalf("pod %s: container statuses %+v init %+v", p.Name, st.ContainerStatuses, st.InitContainerStatuses)
	}
	for i, cs := range st.ContainerStatuses {
		if cs.Name != p.Spec.Containers[i].Name || cs.Image != p.Spec.Containers[i].Image || cs.State.Running == nil || !cs.Ready ||
			cs.Started == nil || !*cs.Started || !strings.HasPrefix(cs.ContainerID, "simulated://") || !strings.Contains(cs.ImageID, "@sha256:") {
			t.Errorf("pod %s: container status %+v", p.Name, cs)
		}
	}
	if ic := st.InitContainerStatuses[0]; ic.State.Terminated == nil || ic.State.Terminated.ExitCode != 0 || ic.State.Terminated.Reason != "Completed" {
		t.Errorf("pod %s: init container status %+v", p.Name, ic)
	}
	ip, err := netip.ParseAddr(st.PodIP)
	if err != nil || !cidr.Contains(ip) || len(st.PodIPs) != 1 || st.PodIPs[0].IP != st.PodIP {
		t.Errorf("pod %s: pod IP %q (%v) not in %s", p.Name, st.PodIP, st.PodIPs, cidr)
	}
	if first := cidr.Addr().Next(); st.HostIP != first.String() || ip == first || ip == cidr.Addr() {
		t.Errorf("pod %s: host IP %s pod IP %s", p.Name, st.HostIP, ip)
	}
	return ip
}

func TestPodsRunWithUniqueIPsAndDeleteCompletes(t *testing.T) {
	e := newEnv(t)
	stop := e.startSimulator(t)
	e.createNode(t, simNode("n1", "10.42.1.0/24"))
	e.createNode(t, simNode("n2", "10.42.2.0/24"))
	const perNode = 15
	for i := 0; i < perNode; i++ {
		e.createPod(t, fmt.Sprintf("a-%d", i), "n1", nil)
		e.createPod(t, fmt.Sprintf("b-%d", i), "n2", nil)
	}
	seen := map[netip.Addr]string{}
	check := func(prefix, node string, cidr netip.Prefix, n int) {
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("%s-%d", prefix, i)
			ip := checkRunning(t, e.waitPodReady(t, name), cidr)
			if other, dup := seen[ip]; dup {
				t.Errorf("pods %s and %s share IP %s", other, name, ip)
			}
			seen[ip] = name
		}
	}
	check("a", "n1", netip.MustParsePrefix("10.42.1.0/24"), perNode)
	check("b", "n2", netip.MustParsePrefix("10.42.2.0/24"), perNode)

	// A running pod is left alone: no status write without a change.
	rv := e.getPod(t, "a-1").ResourceVersion
	time.Sleep(5 * testInterval)
	if now := e.getPod(t, "a-1").ResourceVersion; now != rv {
		t.Errorf("pod a-1 rewritten while nothing changed: resourceVersion %s became %s", rv, now)
	}

	// kubectl delete pod: graceful deletion that the node completes.
	deletedIP := netip.MustParseAddr(e.getPod(t, "a-0").Status.PodIP)
	if err := e.cs.CoreV1().Pods("default").Delete(e.ctx, "a-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod a-0 gone", func() (string, bool) {
		_, err := e.cs.CoreV1().Pods("default").Get(e.ctx, "a-0", metav1.GetOptions{})
		return fmt.Sprint(err), err != nil && strings.Contains(err.Error(), "not found")
	})
	delete(seen, deletedIP)

	// After a restart, IPs in use are not handed out again, even to pods
	// created while the simulator was down and synced first.
	stop()
	for i := 0; i < 5; i++ {
		e.createPod(t, fmt.Sprintf("0-new-%d", i), "n1", nil)
	}
	e.startSimulator(t)
	check("0-new", "n1", netip.MustParsePrefix("10.42.1.0/24"), 5)
	for ip, name := range seen {
		if p := e.getPod(t, name); p.Status.PodIP != ip.String() {
			t.Errorf("pod %s: IP %s became %s after a restart", name, ip, p.Status.PodIP)
		}
	}
}

func TestPodDelaysAndBadDelay(t *testing.T) {
	e := newEnv(t)
	e.startSimulator(t)
	e.createNode(t, simNode("n1", "10.42.1.0/24"))
	created := time.Now()
	e.createPod(t, "slow-start", "n1", map[string]string{AnnotationStartDelay: "2s"})
	e.createPod(t, "slow-ready", "n1", map[string]string{AnnotationReadyDelay: "2s"})
	e.createPod(t, "typo", "n1", map[string]string{AnnotationStartDelay: "abc"})

	// Before the delay: Pending, containers creating, with an IP already.
	p := waitFor(t, "slow-start pending", func() (*corev1.Pod, bool) {
		p := e.getPod(t, "slow-start")
		return p, p.Status.StartTime != nil
	})
	if time.Since(created) < time.Second {
		if p.Status.Phase != corev1.PodPending || p.Status.PodIP == "" || len(p.Status.ContainerStatuses) != 2 ||
			p.Status.ContainerStatuses[0].State.Waiting == nil || p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("slow-start before its delay: %+v", p.Status)
		}
	}
	q := waitFor(t, "slow-ready running", func() (*corev1.Pod, bool) {
		p := e.getPod(t, "slow-ready")
		return p, p.Status.Phase == corev1.PodRunning
	})
	if time.Since(created) < time.Second && (podReady(q) || q.Status.ContainerStatuses[0].Ready) {
		t.Errorf("slow-ready ready before its delay: %+v", q.Status)
	}

	// A bad delay: an event, and no delay.
	checkRunning(t, e.waitPodReady(t, "typo"), netip.MustParsePrefix("10.42.1.0/24"))
	ev := e.waitEvent(t, "Pod", "typo", "InvalidAnnotation")
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, AnnotationStartDelay) || !strings.Contains(ev.Message, `"abc"`) {
		t.Errorf("event %s: %q", ev.Type, ev.Message)
	}

	for _, name := range []string{"slow-start", "slow-ready"} {
		checkRunning(t, e.waitPodReady(t, name), netip.MustParsePrefix("10.42.1.0/24"))
	}
	if took := time.Since(created); took < 2*time.Second-time.Second {
		// Timestamps are in whole seconds, so a delay may end up to a
		// second early; never earlier.
		t.Errorf("delayed pods ready after %v", took)
	}
}

func TestPodWaitsForNodeCIDR(t *testing.T) {
	e := newEnv(t)
	e.startSimulator(t)
	e.createNode(t, simNode("bare", ""))
	e.waitNodeReady(t, "bare")
	e.createPod(t, "p", "bare", nil)
	time.Sleep(3 * testInterval)
	if p := e.getPod(t, "p"); p.Status.Phase != corev1.PodPending || p.Status.PodIP != "" {
		t.Fatalf("pod on a node without a pod CIDR: %+v", p.Status)
	}
	body := `{"spec":{"podCIDR":"10.42.9.0/24","podCIDRs":["10.42.9.0/24"]}}`
	if _, err := e.cs.CoreV1().Nodes().Patch(e.ctx, "bare", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	checkRunning(t, e.waitPodReady(t, "p"), netip.MustParsePrefix("10.42.9.0/24"))
}

func TestNextRenewalSpreadsNodes(t *testing.T) {
	s := &Simulator{cfg: Config{LeaseInterval: 10 * time.Second}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	buckets := make([]int, 10)
	for i := 0; i < 10000; i++ {
		d := s.nextRenewal(fmt.Sprintf("sim-%d", i), now)
		if d < 5*time.Second || d >= 15*time.Second {
			t.Fatalf("sim-%d: next renewal in %v, want within [5s, 15s)", i, d)
		}
		buckets[now.Add(d).Second()%10]++
	}
	for sec, n := range buckets {
		if n < 800 || n > 1200 {
			t.Errorf("%d of 10,000 renewals fall in second %d of each ten: %v", n, sec, buckets)
		}
	}
	// The same node keeps its phase.
	a, b := s.nextRenewal("sim-1", now), s.nextRenewal("sim-1", now.Add(10*time.Second))
	if a != b {
		t.Errorf("phase moved: %v then %v", a, b)
	}
}

func readyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// TestStatusHeartbeatAndRepair: status is re-posted every StatusInterval
// with the transition times kept, and a condition someone else changed
// (a node lifecycle controller marking it NotReady) is set back.
func TestStatusHeartbeatAndRepair(t *testing.T) {
	e := newEnv(t)
	e.startSimulator(t, func(c *Config) { c.StatusInterval = 500 * time.Millisecond })
	e.createNode(t, simNode("n", ""))
	first := readyCondition(e.waitNodeReady(t, "n"))
	later := waitFor(t, "a later heartbeat", func() (corev1.NodeCondition, bool) {
		n, err := e.cs.CoreV1().Nodes().Get(e.ctx, "n", metav1.GetOptions{})
		c := readyCondition(n)
		return c, err == nil && c.LastHeartbeatTime.After(first.LastHeartbeatTime.Time)
	})
	if !later.LastTransitionTime.Equal(&first.LastTransitionTime) || later.Status != corev1.ConditionTrue {
		t.Errorf("heartbeat moved the transition time or the status: %+v then %+v", first, later)
	}

	body := `{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","message":"Kubelet stopped posting node status."}]}}`
	if _, err := e.cs.CoreV1().Nodes().Patch(e.ctx, "n", types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	fixed := readyCondition(e.waitNodeReady(t, "n"))
	if fixed.Reason != "KubeletReady" || fixed.Message != "kubelet is posting ready status" {
		t.Errorf("Ready after repair: %+v", fixed)
	}
}

// A server with no simulated node keeps no copy of the pods: the pod
// informer starts with the first simulated node, and pods bound to it
// before then are served.
func TestNoPodCacheUntilASimulatedNode(t *testing.T) {
	e := newEnv(t)
	e.createNode(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real"}})
	s, err := New(Config{RESTConfig: e.cfg, Version: "test", KubeletVersion: "v1.37.2",
		LeaseInterval: testInterval, LeaseDuration: time.Second, StatusInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && err != context.Canceled {
			t.Errorf("simulator: %v", err)
		}
	}()
	waitFor(t, "node informer synced", func() (bool, bool) { return s.nodes.HasSynced(), s.nodes.HasSynced() })
	// A pod bound to a node that is not simulated yet.
	e.createPod(t, "early", "late", nil)
	time.Sleep(5 * testInterval)
	if s.pods.HasSynced() {
		t.Fatal("the pod informer runs with no simulated node")
	}
	e.createNode(t, simNode("late", "10.42.9.0/24"))
	checkRunning(t, e.waitPodReady(t, "early"), netip.MustParsePrefix("10.42.9.0/24"))
}

// TestOwnStatusWriteNotSyncedAgainButOthersAre checks the echo rule: the
// update that brings back the simulator's own status write (conditional
// on the version it read) is not synced again; any other update of a
// running pod is, so a status someone else wrote is put right.
func TestOwnStatusWriteNotSyncedAgainButOthersAre(t *testing.T) {
	s := &Simulator{}
	read := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", ResourceVersion: "10"}}
	written := read.DeepCopy()
	written.ResourceVersion = "11"
	s.ownWrites.Store("default/p", "10")
	if !s.ownEcho(read, written) {
		t.Error("the own write's echo (10 -> 11) would be synced again")
	}
	other := written.DeepCopy()
	other.ResourceVersion = "12"
	if s.ownEcho(written, other) {
		t.Error("the update after the echo (11 -> 12) would be skipped")
	}
	s.ownWrites.Store("default/p", "12")
	if s.ownEcho(written, other) {
		t.Error("an update from 11 would be taken for a write made on 12")
	}

	e := newEnv(t)
	e.startSimulator(t)
	e.createNode(t, simNode("n1", "10.42.1.0/24"))
	e.createPod(t, "p", "n1", nil)
	p := e.waitPodReady(t, "p")
	ip := p.Status.PodIP
	p.Status.Phase = corev1.PodPending
	p.Status.PodIP, p.Status.PodIPs = "", nil
	if _, err := e.cs.CoreV1().Pods("default").UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the status someone else wrote put right", func() (string, bool) {
		q := e.getPod(t, "p")
		return fmt.Sprintf("%s %s", q.Status.Phase, q.Status.PodIP), q.Status.Phase == corev1.PodRunning && q.Status.PodIP == ip
	})
}

// leaseCalls counts the simulator's requests on Leases, by method and
// whether they name one Lease.
type leaseCalls struct {
	rt http.RoundTripper
	mu sync.Mutex
	n  map[string]int
}

func (c *leaseCalls) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, "/leases") {
		what := r.Method
		if !strings.HasSuffix(r.URL.Path, "/leases") {
			what += " one"
		}
		c.mu.Lock()
		c.n[what]++
		c.mu.Unlock()
	}
	return c.rt.RoundTrip(r)
}

func (c *leaseCalls) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// TestRestartAdoptsLeases restarts the simulator over the Leases its
// previous run kept: it lists them once, and each node's first renewal
// is one blind update, no create refused and no read. A Lease someone
// else holds is read before it is written.
func TestRestartAdoptsLeases(t *testing.T) {
	e := newEnv(t)
	stop := e.startSimulator(t)
	names := []string{"r-0", "r-1", "r-2"}
	for _, n := range names {
		e.createNode(t, simNode(n, ""))
	}
	for _, n := range names {
		waitFor(t, "lease of "+n, func() (time.Time, bool) { r := e.renewTime(t, n); return r, !r.IsZero() })
	}
	stop()
	// Someone else takes r-2's Lease while the simulator is down.
	l, err := e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(e.ctx, "r-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := "someone-else"
	l.Spec.HolderIdentity = &other
	if _, err := e.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(e.ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := map[string]time.Time{}
	for _, n := range names {
		before[n] = e.renewTime(t, n)
	}

	calls := &leaseCalls{n: map[string]int{}}
	e.startSimulator(t, func(c *Config) {
		c.RESTConfig = rest.CopyConfig(c.RESTConfig)
		c.RESTConfig.Wrap(func(rt http.RoundTripper) http.RoundTripper { calls.rt = rt; return calls })
	})
	for _, n := range names {
		waitFor(t, "renewal of "+n+" after the restart", func() (time.Time, bool) { r := e.renewTime(t, n); return r, r.After(before[n]) })
	}
	got := calls.counts()
	if got["GET"] != 1 || got["POST"] != 0 || got["GET one"] != 1 || got["PUT one"] < len(names) {
		t.Fatalf("lease requests after the restart: %v; want one list, one read (the Lease someone else held), no create, an update per node", got)
	}
}

// statusAnswers records what the server answers the simulator's pod
// status writes.
type statusAnswers struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	seen []string // each answer's content type and decoded kind
}

func (s *statusAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	if err != nil || r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/status") || !strings.Contains(r.URL.Path, "/pods/") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	sch := runtime.NewScheme()
	metav1.AddMetaToScheme(sch)
	corev1.AddToScheme(sch)
	kind := "undecodable"
	if obj, gvk, err := serializer.NewCodecFactory(sch).UniversalDeserializer().Decode(body, nil, nil); err == nil {
		kind = gvk.Kind
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok && m.Name == "" {
			kind += " without a name"
		}
	}
	s.mu.Lock()
	s.seen = append(s.seen, resp.Header.Get("Content-Type")+" "+kind)
	s.mu.Unlock()
	return resp, nil
}

// The simulator uses nothing of a status write's answer, so it asks for
// the pod's metadata alone and the server does not encode the whole pod.
func TestPodStatusWriteAnswersOnlyMetadata(t *testing.T) {
	e := newEnv(t)
	rec := &statusAnswers{}
	e.startSimulator(t, func(c *Config) {
		cfg := rest.CopyConfig(c.RESTConfig)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.rt = rt; return rec })
		c.RESTConfig = cfg
	})
	e.createNode(t, simNode("n1", "10.42.1.0/24"))
	e.createPod(t, "web", "n1", nil)
	e.waitPodReady(t, "web")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) == 0 {
		t.Fatal("no pod status write seen")
	}
	for _, s := range rec.seen {
		if s != "application/vnd.kubernetes.protobuf PartialObjectMetadata" {
			t.Errorf("a pod status write was answered with %q, want the pod's metadata in protobuf", s)
		}
	}
}
