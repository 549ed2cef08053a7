package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// podParams size the pod workload; -quick shrinks it.
type podParams struct {
	single int // pods created one at a time
	burst  int // pods created at once
	bursts int
	idle   time.Duration
}

func podParamsFor(quick bool) podParams {
	if quick {
		return podParams{single: 5, burst: 30, bursts: 1, idle: 3 * time.Second}
	}
	return podParams{single: 20, burst: 30, bursts: 3, idle: 10 * time.Second}
}

type podResults struct {
	nodeReady                        *float64
	oneP50, oneP99                   *float64
	burstP50, burstP99, burstAll     *float64
	rss0, rss30                      *float64
	containerd0, containerd30, shims *float64
}

func podRows(r *podResults, p podParams) []Row {
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: "pods: " + name, Unit: unit, Bonsai: v, Target: t}
	}
	burst := strconv.Itoa(p.burst)
	return []Row{
		row("node Ready after exec (own containerd started)", "ms", r.nodeReady, atMost(2000, "ms")),
		row("one pod create to Running p50", "ms", r.oneP50, nil),
		row("one pod create to Running p99", "ms", r.oneP99, atMost(1000, "ms")),
		row(burst+" pods at once: create to Running p50", "ms", r.burstP50, nil),
		row(burst+" pods at once: create to Running p99", "ms", r.burstP99, nil),
		row(burst+" pods at once: all Running", "ms", r.burstAll, atMost(5000, "ms")),
		row("bonsai RSS, 0 pods", "MB", r.rss0, atMost(60, "MB")),
		row("bonsai RSS, "+burst+" pods running", "MB", r.rss30, atMost(100, "MB")),
		row("containerd RSS, 0 pods (reported apart)", "MB", r.containerd0, nil),
		row("containerd RSS, "+burst+" pods (reported apart)", "MB", r.containerd30, nil),
		row("shims RSS, "+burst+" pods (reported apart)", "MB", r.shims, nil),
	}
}

// realNode is a bonsai server with its agent and its own containerd.
type realNode struct {
	srv          *bonsaiProc
	cs           *kubernetes.Clientset
	ac           *apiClients
	name, bridge string
	dir          string
	bin, cfgFile string
	args         []string
	// readyAfter is the last start's time from exec to node Ready.
	readyAfter time.Duration
}

// startRealNode starts bonsai with its own containerd, the busybox image
// imported from <data-dir>/images (pods use imagePullPolicy Never), on
// a bridge and pod network of its own, and waits for the node to be
// Ready. extra are more server flags.
func startRealNode(ctx context.Context, b *bench, name, clusterCIDR string, extra ...string) (*realNode, error) {
	bb, err := testenv.BusyboxPath()
	if err != nil {
		return nil, err
	}
	img, err := testenv.BuildBusyboxImage(bb, "bonsai.test/busybox:1")
	if err != nil {
		return nil, err
	}
	bin, err := buildBonsai(ctx, b)
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(b.dir, name+"-empty-config.yaml")
	if err := os.WriteFile(cfgFile, nil, 0o600); err != nil {
		return nil, err
	}
	dir := filepath.Join(b.dir, name)
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "images"), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(data, "images", "busybox.tar"), img, 0o644); err != nil {
		return nil, err
	}
	suffix := make([]byte, 3)
	rand.Read(suffix)
	n := &realNode{bridge: "bb" + hex.EncodeToString(suffix), name: "bench-" + hex.EncodeToString(suffix), dir: dir, bin: bin, cfgFile: cfgFile}
	b.onCleanup(func() { cleanupNode(dir, n.bridge) })
	// Not the default kubelet port: another bench or a real kubelet may
	// hold it.
	kport, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	n.args = append([]string{"--runtime=containerd", "--node-name=" + n.name, "--pod-bridge=" + n.bridge,
		"--cluster-cidr=" + clusterCIDR, "--container-runtime-endpoint=" + filepath.Join(dir, "none.sock"),
		"--kubelet-port=" + strconv.Itoa(kport)}, extra...)
	if err := n.start(ctx, b); err != nil {
		return nil, err
	}
	return n, nil
}

// start starts (or starts again) the server and waits for its node.
func (n *realNode) start(ctx context.Context, b *bench) error {
	execAt := time.Now()
	srv, _, err := startBonsai(ctx, b, n.bin, n.cfgFile, n.dir, n.args...)
	if err != nil {
		return err
	}
	n.srv = srv
	n.ac = &apiClients{kubeconfig: filepath.Join(srv.dir, "kubeconfig.yaml")}
	if n.cs, err = n.ac.client(); err != nil {
		n.close()
		return err
	}
	if err := waitNodeReady(ctx, n.cs, n.name, 60*time.Second); err != nil {
		n.close()
		return fmt.Errorf("%w\n%s", err, srv.logTail())
	}
	n.readyAfter = time.Since(execAt)
	return nil
}

func (n *realNode) close() {
	n.ac.closeAll()
	n.srv.stop()
}

// podSuite runs a real node: bonsai with its own containerd, the busybox
// image imported from <data-dir>/images, pods with imagePullPolicy Never.
func podSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := podParamsFor(b.quick)
	res := &podResults{}
	rows := func() []Row { return podRows(res, p) }
	if os.Geteuid() != 0 {
		return rows(), errors.New("the pod suite needs root (network namespaces, containerd)")
	}
	for _, bin := range []string{"containerd", "runc"} {
		if _, err := testenv.LookPath(bin); err != nil {
			return rows(), fmt.Errorf("%s (Debian package %s): %w", bin, bin, err)
		}
	}
	b.logf("pods: starting bonsai with its own containerd")
	n, err := startRealNode(ctx, b, "pods", "10.250.0.0/16")
	if err != nil {
		return rows(), err
	}
	defer n.close()
	srv, cs, node, dir := n.srv, n.cs, n.name, n.dir
	res.nodeReady = ms(n.readyAfter)

	if err := sleep(ctx, p.idle); err != nil {
		return rows(), err
	}
	ctdPID := childNamed(srv.cmd.Process.Pid, "containerd")
	res.rss0, _ = srv.rssMB()
	res.containerd0 = rssOf(ctdPID)

	b.logf("pods: %d pods one at a time", p.single)
	var one []time.Duration
	for i := 0; i < p.single; i++ {
		d, err := podsToRunning(ctx, cs, fmt.Sprintf("one-%d", i), 1, func(name string) *corev1.Pod { return benchPod(name, node) })
		if err != nil {
			return rows(), err
		}
		one = append(one, d...)
		if err := deletePods(ctx, cs); err != nil {
			return rows(), err
		}
	}
	res.oneP50, res.oneP99 = ms(percentile(one, 0.5)), ms(percentile(one, 0.99))

	b.logf("pods: %d × %d pods at once", p.bursts, p.burst)
	var each []time.Duration
	var all []time.Duration
	for r := 0; r < p.bursts; r++ {
		t0 := time.Now()
		d, err := podsToRunning(ctx, cs, fmt.Sprintf("burst%d", r), p.burst, func(name string) *corev1.Pod { return benchPod(name, node) })
		if err != nil {
			return rows(), err
		}
		all = append(all, time.Since(t0))
		each = append(each, d...)
		if r == p.bursts-1 {
			if err := sleep(ctx, p.idle); err != nil {
				return rows(), err
			}
			res.rss30, _ = srv.rssMB()
			res.containerd30 = rssOf(ctdPID)
			res.shims = shimsRSS(dir)
		}
		if err := deletePods(ctx, cs); err != nil {
			return rows(), err
		}
	}
	res.burstP50, res.burstP99 = ms(percentile(each, 0.5)), ms(percentile(each, 0.99))
	res.burstAll = ms(percentile(all, 0.5))
	return rows(), nil
}

func waitNodeReady(ctx context.Context, cs kubernetes.Interface, node string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("node %s not Ready within %v", node, timeout)
}

// podsToRunning creates n pods (made by mk) at once and returns each
// one's time from its create call to the first status with phase Running,
// seen through a watch.
func podsToRunning(ctx context.Context, cs kubernetes.Interface, prefix string, n int, mk func(name string) *corev1.Pod) ([]time.Duration, error) {
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var mu sync.Mutex
	started := map[string]time.Time{}
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		go func() {
			mu.Lock()
			started[name] = time.Now()
			mu.Unlock()
			_, err := cs.CoreV1().Pods("default").Create(ctx, mk(name), metav1.CreateOptions{})
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	var out []time.Duration
	done := map[string]bool{}
	timeout := time.After(2 * time.Minute)
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, errors.New("pod watch ended")
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || done[pod.Name] || pod.Status.Phase != corev1.PodRunning {
				continue
			}
			mu.Lock()
			t0, ok := started[pod.Name]
			mu.Unlock()
			if ok {
				done[pod.Name] = true
				out = append(out, time.Since(t0))
			}
		case <-timeout:
			return nil, fmt.Errorf("%d of %d pods Running after 2 minutes", len(out), n)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func benchPod(name, node string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{
			Name: "main", Image: "bonsai.test/busybox:1", ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
		}}},
	}
}

// deletePods deletes every pod in default and waits until they are gone.
func deletePods(ctx context.Context, cs kubernetes.Interface) error {
	zero := int64(0)
	if err := cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) == 0 {
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return errors.New("pods not gone 2 minutes after delete")
}

// childNamed finds a direct child process of pid by its command name.
func childNamed(pid int, name string) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(b)) {
		comm, _ := os.ReadFile("/proc/" + f + "/comm")
		if strings.TrimSpace(string(comm)) == name {
			n, _ := strconv.Atoi(f)
			return n
		}
	}
	// Children may hang off other threads of a Go process.
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, f := range strings.Fields(string(b)) {
			comm, _ := os.ReadFile("/proc/" + f + "/comm")
			if strings.TrimSpace(string(comm)) == name {
				n, _ := strconv.Atoi(f)
				return n
			}
		}
	}
	return 0
}

func rssOf(pid int) *float64 {
	if pid == 0 {
		return nil
	}
	rss, err := rssBytes(strconv.Itoa(pid))
	if err != nil {
		return nil
	}
	return num(float64(rss) / (1 << 20))
}

// shimsRSS sums the RSS of the containerd shims serving dir's containerd.
func shimsRSS(dir string) *float64 {
	out, _ := exec.Command("pgrep", "-f", "containerd-shim.*"+dir).Output()
	var total uint64
	for _, pid := range strings.Fields(string(out)) {
		if rss, err := rssBytes(pid); err == nil {
			total += rss
		}
	}
	return num(float64(total) / (1 << 20))
}

// cleanupNode removes what a bench node leaves once bonsai stopped: shims,
// mounts, the bridge and its nftables table.
func cleanupNode(dir, bridge string) {
	testenv.KillContainerProcesses(dir)
	out, _ := exec.Command("pgrep", "-f", "containerd-shim.*"+dir).Output()
	for _, pid := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(pid); err == nil {
			syscall.Kill(n, syscall.SIGKILL)
		}
	}
	time.Sleep(200 * time.Millisecond)
	mounts, _ := os.ReadFile("/proc/self/mounts")
	lines := strings.Split(string(mounts), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) > 1 && (strings.HasPrefix(f[1], dir) || strings.HasPrefix(f[1], "/run/bonsai/"+bridge)) {
			syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
	os.RemoveAll("/run/bonsai/" + bridge)
	exec.Command("ip", "link", "del", bridge).Run()
	exec.Command("nft", "delete", "table", "ip", bridge).Run()
	exec.Command("nft", "delete", "table", "ip6", bridge).Run()       // a dual-stack network's
	exec.Command("nft", "delete", "table", "ip", bridge+"-svc").Run() // the service proxy's
	// The network policy enforcer's.
	exec.Command("nft", "delete", "table", "ip", bridge+"-netpol").Run()
	exec.Command("nft", "delete", "table", "bridge", bridge+"-netpol").Run()
}
