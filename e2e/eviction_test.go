package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// evictionBudget is the memory the node gets above what bonsai's pod
// cgroup already holds (--node-memory-capacity stands in for the host's
// size, so the test presses on a real budget without filling the shared
// host); the default hard threshold memory.available<100Mi is met when
// the pods' working set grows past 300Mi of it.
const evictionBudget = 400 << 20

// A best-effort pod that grows its memory past the hard eviction
// threshold is evicted (Failed, reason Evicted, the kubelet's message,
// DisruptionTarget, an Evicted event) within 10 s of the node crossing
// the threshold, while a guaranteed pod stays Running; the node reports
// MemoryPressure with its NoSchedule taint and the EvictionThresholdMet
// event. Allocatable is the budget less the reservations and the hard
// threshold.
func TestNodePressureEviction(t *testing.T) {
	base, err := testenv.PodsMemoryWorkingSet()
	if err != nil {
		t.Fatal(err)
	}
	budget := base + evictionBudget
	e := startPodEnv(t, fmt.Sprintf("--node-memory-capacity=%d", budget), "--system-reserved=memory=10Mi,cpu=100m", "--kube-reserved=memory=20Mi")

	node, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := node.Status.Capacity.Memory().Value(), int64(budget); got != want {
		t.Errorf("memory capacity %d, want the budget %d", got, want)
	}
	if got, want := node.Status.Allocatable.Memory().Value(), int64(budget)-130<<20; got != want {
		t.Errorf("memory allocatable %d, want the budget less 10Mi system-reserved, 20Mi kube-reserved and the 100Mi hard threshold, %d", got, want)
	}
	cpuCap, cpuAlloc := node.Status.Capacity[corev1.ResourceCPU], node.Status.Allocatable[corev1.ResourceCPU]
	if cpuCap.MilliValue()-cpuAlloc.MilliValue() != 100 {
		t.Errorf("cpu allocatable %s of capacity %s, want 100m system-reserved less", cpuAlloc.String(), cpuCap.String())
	}

	guaranteed := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guaranteed"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "main", Command: sh("sleep 100000"), Resources: corev1.ResourceRequirements{Requests: guaranteed, Limits: guaranteed},
	}}}})
	e.waitPod(t, "guaranteed", 60*time.Second, "Running", running)

	crossed, evicted := measureEviction(t, e, budget)
	if lat := evicted.Sub(crossed); lat > 10*time.Second {
		t.Errorf("evicted %v after the threshold was crossed, want at most 10s", lat)
	} else {
		t.Logf("threshold crossed to pod Failed/Evicted: %v", lat.Round(time.Millisecond))
	}

	hog, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "hog", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hog.Status.Phase != corev1.PodFailed || hog.Status.Reason != "Evicted" {
		t.Errorf("hog: phase %s reason %q, want Failed Evicted", hog.Status.Phase, hog.Status.Reason)
	}
	prefix := "The node was low on resource: memory. Threshold quantity: 100Mi, available: "
	if !strings.HasPrefix(hog.Status.Message, prefix) || !strings.Contains(hog.Status.Message, ". Container hog was using ") ||
		!strings.HasSuffix(hog.Status.Message, ", request is 0, has larger consumption of memory. ") {
		t.Errorf("hog's message: %q", hog.Status.Message)
	}
	var dt *corev1.PodCondition
	for i, c := range hog.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			dt = &hog.Status.Conditions[i]
		}
	}
	if dt == nil || dt.Status != corev1.ConditionTrue || dt.Reason != corev1.PodReasonTerminationByKubelet || dt.Message != hog.Status.Message {
		t.Errorf("hog's DisruptionTarget condition: %+v", dt)
	}
	found := false
	for _, ev := range e.events(t, "hog") {
		if ev.Reason == "Evicted" && ev.Type == corev1.EventTypeWarning && ev.Message == hog.Status.Message && ev.Annotations["starved_resource"] == "memory" && ev.Annotations["offending_containers"] == "hog" {
			found = true
		}
	}
	if !found {
		t.Errorf("no Evicted event with the message and annotations on the pod: %+v", e.events(t, "hog"))
	}

	// The node under pressure: condition, taint, event.
	deadline := time.Now().Add(20 * time.Second)
	for {
		node, err = e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if nodeCondition(node, corev1.NodeMemoryPressure) == corev1.ConditionTrue && hasNoSchedule(node, corev1.TaintNodeMemoryPressure) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node: no MemoryPressure=True with its taint: conditions %+v taints %+v", node.Status.Conditions, node.Spec.Taints)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeMemoryPressure && (c.Reason != "KubeletHasInsufficientMemory" || c.Message != "kubelet has insufficient memory available") {
			t.Errorf("MemoryPressure: reason %q message %q", c.Reason, c.Message)
		}
	}
	evs, err := e.cs.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,reason=EvictionThresholdMet"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) == 0 || evs.Items[0].Message != "Attempting to reclaim memory" {
		t.Errorf("node events EvictionThresholdMet: %+v", evs.Items)
	}

	// The guaranteed pod stays: nothing else is evicted once the hog is
	// gone.
	time.Sleep(3 * time.Second)
	g := e.waitPod(t, "guaranteed", time.Second, "Running", running)
	if g.Status.Reason != "" {
		t.Errorf("guaranteed pod: reason %q", g.Status.Reason)
	}
}

// measureEviction starts the hog pod and returns when the pods' working
// set crossed the hard threshold (the test's own reading of the pod
// cgroup, every 20 ms) and when the hog was seen Failed (polled every
// 50 ms).
func measureEviction(t *testing.T, e *podEnv, budget uint64) (crossed, evicted time.Time) {
	t.Helper()
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hog"}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		// 8Mi every 0.2 s, never more than 800Mi however eviction fares.
		Containers: []corev1.Container{{Name: "hog", Command: sh(testenv.MemoryHogScript(8, 800, 0.2))}},
	}})
	crossedAt, stop := testenv.WatchMemoryCrossing(budget, 100<<20)
	defer stop()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "hog", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodFailed {
			evicted = time.Now()
			break
		}
		if time.Now().After(deadline) {
			ws, _ := testenv.PodsMemoryWorkingSet()
			t.Fatalf("hog not evicted within 2m (pods' working set %d of budget %d); last: %s\n%s", ws, budget, statusSummary(p), e.s.stderrText())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := crossedAt()
	if c.IsZero() {
		t.Fatalf("the hog was evicted before the pods crossed the threshold by the test's reading")
	}
	return c, evicted
}

func nodeCondition(n *corev1.Node, typ corev1.NodeConditionType) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func hasNoSchedule(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// pid.available is the host's pid limit (the lesser of pid_max and
// threads-max) less the tasks running: with a threshold above what is
// available, the node reports PIDPressure with its taint, evicts the
// running pod of lowest priority (the message names pids and the
// threshold), never a system-critical one, and refuses a new pod with the
// kubelet's admission message.
func TestPIDPressureEviction(t *testing.T) {
	e := startPodEnv(t)
	critical := "system-node-critical"
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "critical", Namespace: "kube-system"}, Spec: corev1.PodSpec{PriorityClassName: critical,
		Containers: []corev1.Container{{Name: "main", Command: sh("sleep 100000")}}}})
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "low"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "main", Command: sh("sleep 100000")}}}})
	e.waitPod(t, "low", 60*time.Second, "Running", running)

	maxPID := hostMaxPID(t)
	// Far above what is available however many tasks come and go.
	threshold := maxPID - runningTasks(t) + 100000
	e.args = append(e.args, fmt.Sprintf("--eviction-hard=pid.available<%d", threshold))
	e.restart(t)

	low := e.waitPod(t, "low", 60*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	prefix := fmt.Sprintf("The node was low on resource: pids. Threshold quantity: %d, available: ", threshold)
	if low.Status.Reason != "Evicted" || !strings.HasPrefix(low.Status.Message, prefix) {
		t.Errorf("low: reason %q message %q, want Evicted %q...", low.Status.Reason, low.Status.Message, prefix)
	}
	node, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodePIDPressure && (c.Status != corev1.ConditionTrue || c.Reason != "KubeletHasInsufficientPID" || c.Message != "kubelet has insufficient PID available") {
			t.Errorf("PIDPressure: %+v", c)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !hasNoSchedule(node, corev1.TaintNodePIDPressure) {
		if time.Now().After(deadline) {
			t.Fatalf("no pid-pressure taint: %+v", node.Spec.Taints)
		}
		time.Sleep(200 * time.Millisecond)
		if node, err = e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A new pod is refused, as the kubelet's eviction admission does.
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "main", Command: sh("sleep 100000")}}}})
	late := e.waitPod(t, "late", 30*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if late.Status.Reason != "Evicted" || late.Status.Message != "Pod was rejected: The node had condition: [PIDPressure]. " {
		t.Errorf("late: reason %q message %q", late.Status.Reason, late.Status.Message)
	}

	// The system-critical pod is never evicted.
	time.Sleep(2 * time.Second)
	crit, err := e.cs.CoreV1().Pods("kube-system").Get(t.Context(), "critical", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crit.Status.Phase != corev1.PodRunning {
		t.Errorf("critical pod: %s", statusSummary(crit))
	}
}

// hostMaxPID is the lesser of the host's pid_max and threads-max.
func hostMaxPID(t *testing.T) int64 {
	t.Helper()
	read := func(p string) int64 {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return min(read("/proc/sys/kernel/pid_max"), read("/proc/sys/kernel/threads-max"))
}

// runningTasks is /proc/loadavg's count of tasks.
func runningTasks(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	_, total, _ := strings.Cut(f[3], "/")
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nodefs.available below its threshold: the node reports DiskPressure
// with its taint and evicts a pod with the kubelet's ephemeral-storage
// message once reclaiming dead containers and unused images did not help.
func TestDiskPressureEviction(t *testing.T) {
	e := startPodEnv(t)
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "writer"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "main", Command: sh("while :; do echo log line; sleep 0.1; done")}}}})
	e.waitPod(t, "writer", 60*time.Second, "Running", running)
	var st syscall.Statfs_t
	if err := syscall.Statfs(e.s.dataDir, &st); err != nil {
		t.Fatal(err)
	}
	// Far above what is free on the data dir's disk.
	threshold := int64(st.Bavail)*st.Bsize + 10<<30
	e.args = append(e.args, fmt.Sprintf("--eviction-hard=nodefs.available<%d", threshold))
	e.restart(t)

	p := e.waitPod(t, "writer", 60*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	// The threshold as given on the command line, as the kubelet prints it.
	prefix := fmt.Sprintf("The node was low on resource: ephemeral-storage. Threshold quantity: %d, available: ", threshold)
	if p.Status.Reason != "Evicted" || !strings.HasPrefix(p.Status.Message, prefix) {
		t.Errorf("writer: reason %q message %q, want Evicted %q...", p.Status.Reason, p.Status.Message, prefix)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		node, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if nodeCondition(node, corev1.NodeDiskPressure) == corev1.ConditionTrue && hasNoSchedule(node, corev1.TaintNodeDiskPressure) {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeDiskPressure && (c.Reason != "KubeletHasDiskPressure" || c.Message != "kubelet has disk pressure") {
					t.Errorf("DiskPressure: %+v", c)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node: no DiskPressure=True with its taint: conditions %+v taints %+v", node.Status.Conditions, node.Spec.Taints)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A soft threshold evicts only after its grace period, and gives the pod
// SIGTERM with the lesser of its own grace and
// --eviction-max-pod-grace-period, not an immediate kill.
func TestSoftEviction(t *testing.T) {
	e := startPodEnv(t)
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "graceful"}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr(int64(30)),
		Containers:                    []corev1.Container{{Name: "main", Command: sh("trap 'echo got TERM > /dev/termination-log; exit 0' TERM; while :; do sleep 0.1; done")}}}})
	e.waitPod(t, "graceful", 60*time.Second, "Running", running)

	threshold := hostMaxPID(t) - runningTasks(t) + 100000
	e.args = append(e.args, fmt.Sprintf("--eviction-soft=pid.available<%d", threshold), "--eviction-soft-grace-period=pid.available=4s", "--eviction-max-pod-grace-period=10")
	e.restart(t)
	up := time.Now()

	p := e.waitPod(t, "graceful", 60*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if d := time.Since(up); d < 4*time.Second {
		t.Errorf("evicted %v after the start, before the 4s grace period of the soft threshold", d)
	}
	if p.Status.Reason != "Evicted" || !strings.HasPrefix(p.Status.Message, "The node was low on resource: pids. ") {
		t.Errorf("graceful: reason %q message %q", p.Status.Reason, p.Status.Message)
	}
	term := p.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 0 || strings.TrimSpace(term.Message) != "got TERM" {
		t.Errorf("the container should have stopped on SIGTERM within its grace: %s", statusSummary(p))
	}
}

// Local storage isolation: a pod writing past its emptyDir's sizeLimit or
// past its container's ephemeral-storage limit is evicted at once, with
// the kubelet's messages and no DisruptionTarget, whatever the node's
// pressure; a pod within its limits stays, and its volume's usage shows
// in /stats/summary. kubelet_evictions counts them by signal.
func TestLocalStorageLimitEviction(t *testing.T) {
	e := startPodEnv(t, "--volume-stats-agg-period=2s")
	limit := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse(q)}}
	}
	emptyDir := func(size string) []corev1.Volume {
		q := resource.MustParse(size)
		return []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &q}}}}
	}
	mount := []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	write := func(path string, mb int) []string {
		return sh(fmt.Sprintf("dd if=/dev/zero of=%s bs=1048576 count=%d && sync; while :; do sleep 1; done", path, mb))
	}
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "overfull"}, Spec: corev1.PodSpec{Volumes: emptyDir("1Mi"),
		Containers: []corev1.Container{{Name: "main", Command: write("/scratch/f", 4), VolumeMounts: mount}}}})
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "layer"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "main", Command: write("/big", 8), Resources: limit("2Mi")}}}})
	// An init container's larger limit raises the pod's, so the pod stays
	// within it and its container's own limit is what it crosses.
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "container"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Command: sh("true"), Resources: limit("50Mi")}},
		Containers:     []corev1.Container{{Name: "main", Command: write("/big", 8), Resources: limit("2Mi")}}}})
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "calm"}, Spec: corev1.PodSpec{Volumes: emptyDir("10Mi"),
		Containers: []corev1.Container{{Name: "main", Command: write("/scratch/f", 1), VolumeMounts: mount, Resources: limit("10Mi")}}}})

	for name, want := range map[string]string{
		"overfull":  `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `,
		"layer":     "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. ",
		"container": `Container main exceeded its local ephemeral storage limit "2Mi". `,
	} {
		p := e.waitPod(t, name, 90*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if p.Status.Reason != "Evicted" || p.Status.Message != want {
			t.Errorf("%s: reason %q message %q, want Evicted %q", name, p.Status.Reason, p.Status.Message, want)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget {
				t.Errorf("%s: a DisruptionTarget condition %+v; the kubelet sets none for its own limits", name, c)
			}
		}
	}
	p, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "calm", metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("calm: %v %s, want Running within its limits", err, statusSummary(p))
	}

	// The calm pod's volume as the Summary API reports it: its 1 MiB file.
	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", e.node, "proxy/stats/summary").DoRaw(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var sum statsapi.Summary
		if err := json.Unmarshal(raw, &sum); err != nil {
			t.Fatal(err)
		}
		var used uint64
		for _, ps := range sum.Pods {
			if ps.PodRef.Name != "calm" {
				continue
			}
			for _, v := range ps.VolumeStats {
				if v.Name == "scratch" && v.UsedBytes != nil {
					used = *v.UsedBytes
				}
			}
			if used >= 1<<20 && (ps.EphemeralStorage == nil || *ps.EphemeralStorage.UsedBytes < used) {
				t.Errorf("calm: ephemeral storage %+v below its volume's %d bytes", ps.EphemeralStorage, used)
			}
		}
		if used >= 1<<20 && used < 2<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calm's scratch volume: %d bytes used in /stats/summary, want its 1 MiB file", used)
		}
		time.Sleep(time.Second)
	}

	metrics, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`kubelet_evictions{eviction_signal="emptydirfs.limit"} 1`, `kubelet_evictions{eviction_signal="ephemeralpodfs.limit"} 1`, `kubelet_evictions{eviction_signal="ephemeralcontainerfs.limit"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
