package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// cpuCounter samples a cgroup's own cumulative CPU counter (cgroup v2's
// cpu.stat usage_usec or v1's cpuacct.usage) with the time of each read.
type cpuCounter struct {
	mu      sync.Mutex
	at      []time.Time
	usageNs []uint64
}

func readCgroupCPU(cgroup string) (uint64, error) {
	if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", cgroup, "cpu.stat")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, err := strconv.ParseUint(v, 10, 64)
				return us * 1000, err
			}
		}
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", cgroup, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// at is the counter at t, interpolated between the reads around it.
func (c *cpuCounter) valueAt(t time.Time) (float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 1; i < len(c.at); i++ {
		if !c.at[i].Before(t) && !c.at[i-1].After(t) {
			span := c.at[i].Sub(c.at[i-1]).Seconds()
			f := 0.0
			if span > 0 {
				f = t.Sub(c.at[i-1]).Seconds() / span
			}
			return float64(c.usageNs[i-1]) + f*float64(c.usageNs[i]-c.usageNs[i-1]), true
		}
	}
	return 0, false
}

// kubectl top nodes and kubectl top pods --containers work out of the
// box: a pod burning CPU under a 200m limit shows what its cgroup's own
// counter says it used over the same window, within 20 %; a user with
// only the view role may run kubectl top pods.
func TestKubectlTop(t *testing.T) {
	e := startPodEnv(t, "--metric-resolution=10s")
	kcs := testenv.Kubectls(t)
	k := &kubectlRunner{t: t, bin: kcs[len(kcs)-1].Path, kubeconfig: filepath.Join(e.s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	limit := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "burn", Labels: map[string]string{"app": "burn"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "main", Command: sh("while :; do :; done"), Resources: corev1.ResourceRequirements{Limits: limit, Requests: limit},
	}}}})
	pod := e.waitPod(t, "burn", 60*time.Second, "Running", running)
	id := pod.Status.ContainerStatuses[0].ContainerID
	_, id, _ = strings.Cut(id, "://")
	cgroup := fmt.Sprintf("/bonsai/pod%s/%s", pod.UID, id)
	if _, err := readCgroupCPU(cgroup); err != nil {
		t.Fatalf("the container's cgroup %s: %v", cgroup, err)
	}
	var counter cpuCounter
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			before := time.Now()
			v, err := readCgroupCPU(cgroup)
			if err == nil {
				at := before.Add(time.Since(before) / 2)
				counter.mu.Lock()
				counter.at, counter.usageNs = append(counter.at, at), append(counter.usageNs, v)
				counter.mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-done }()

	// Two scrapes after the counter's first read: a window it covers.
	var pm metricsv1beta1.PodMetrics
	start := time.Now()
	waitFor(t, 45*time.Second, "PodMetrics of burn over a window after the test's first cgroup read", func() bool {
		r := k.run("get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/burn")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &pm) != nil {
			return false
		}
		_, ok := counter.valueAt(pm.Timestamp.Add(-pm.Window.Duration))
		return ok && pm.Timestamp.After(start)
	})
	// The point may be a moment ahead of the counter's last read.
	time.Sleep(500 * time.Millisecond)
	from, ok1 := counter.valueAt(pm.Timestamp.Add(-pm.Window.Duration))
	to, ok2 := counter.valueAt(pm.Timestamp.Time)
	if !ok1 || !ok2 || len(pm.Containers) != 1 || pm.Containers[0].Name != "main" {
		t.Fatalf("PodMetrics %+v; counter covers the window: %v %v", pm, ok1, ok2)
	}
	cgroupMilli := (to - from) / pm.Window.Seconds() / 1e6
	apiMilli := float64(pm.Containers[0].Usage.Cpu().MilliValue())
	t.Logf("burn over %v: metrics API %.0fm, cgroup %.0fm", pm.Window.Duration, apiMilli, cgroupMilli)
	if cgroupMilli < 100 || apiMilli < 0.8*cgroupMilli || apiMilli > 1.2*cgroupMilli {
		t.Errorf("burn's CPU: metrics API %.0fm, its cgroup %.0fm over the same %v: not within 20 %%", apiMilli, cgroupMilli, pm.Window.Duration)
	}
	if pm.Window.Duration < 5*time.Second || pm.Window.Duration > 25*time.Second || pm.Labels["app"] != "burn" || pm.Containers[0].Usage.Memory().IsZero() {
		t.Errorf("PodMetrics: %+v", pm)
	}

	// kubectl top shows the same figures.
	out := k.must("top", "pods", "--containers", "-l", "app=burn")
	fields := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[len(strings.Split(strings.TrimSpace(out), "\n"))-1])
	if len(fields) != 4 || fields[0] != "burn" || fields[1] != "main" || !strings.HasSuffix(fields[2], "m") || !strings.HasSuffix(fields[3], "Mi") {
		t.Fatalf("kubectl top pods --containers:\n%s", out)
	}
	if topMilli, err := strconv.ParseFloat(strings.TrimSuffix(fields[2], "m"), 64); err != nil || topMilli < 0.8*cgroupMilli || topMilli > 1.2*cgroupMilli {
		t.Errorf("kubectl top pods: %s, the cgroup %.0fm", fields[2], cgroupMilli)
	}
	out = k.must("top", "nodes")
	if !strings.Contains(out, "CPU(cores)") || !strings.Contains(out, e.node+" ") {
		t.Errorf("kubectl top nodes:\n%s", out)
	}
	if r := k.run("top", "node", "no-such-node"); r.code == 0 || !strings.Contains(r.stderr, `nodemetrics.metrics.k8s.io "no-such-node" not found`) {
		t.Errorf("kubectl top node no-such-node: %d %s %s", r.code, r.stdout, r.stderr)
	}

	// The view role includes metrics-server's aggregated-metrics-reader.
	if _, err := e.cs.RbacV1().RoleBindings("default").Create(t.Context(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "viewer"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "kubectl top pods as a viewer", func() bool {
		r := k.run("top", "pods", "--as=viewer")
		return r.code == 0 && strings.Contains(r.stdout, "burn")
	})
	if r := k.run("top", "nodes", "--as=viewer"); r.code == 0 || !strings.Contains(r.stderr, "Forbidden") {
		t.Errorf("kubectl top nodes as a viewer, who may not list nodes: %d %s %s", r.code, r.stdout, r.stderr)
	}
}
