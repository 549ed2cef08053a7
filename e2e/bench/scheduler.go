package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// schedParams size the scheduler suite; -quick: 100 nodes and 2,000 pods.
type schedParams struct {
	counts []int
	// pending pods wait for the scheduler; latency pods arrive one by one.
	pending, latency int
	// latencyRate is how many latency pods are created a second.
	latencyRate int
}

// schedCounts is -sched-nodes, parsed.
var schedCounts = []int{100, 1000}

func schedParamsFor(quick bool, counts []int) schedParams {
	if quick {
		return schedParams{counts: []int{100}, pending: 2000, latency: 200, latencyRate: 100}
	}
	return schedParams{counts: counts, pending: 10000, latency: 500, latencyRate: 100}
}

type schedResult struct {
	podsPerSec, p50, p99 *float64
	// cpuPerPod is the server's CPU time (ms) from the first binding of
	// the pending pods until all of them run, per pod: what binding and
	// starting a pod costs, which the machine's other load does not move
	// as it moves pods/s.
	cpuPerPod *float64
}

// schedVariant is a kind of pod: plain, or with required anti-affinity
// on kubernetes.io/hostname within groups of one pod per node.
type schedVariant struct {
	name         string
	antiAffinity bool
}

var schedVariants = []schedVariant{{name: "no affinity"}, {name: "anti-affinity", antiAffinity: true}}

type schedKey struct {
	nodes   int
	variant string
}

// schedulerSuite measures the built-in scheduler on simulated nodes.
// Throughput: 10,000 pods are created while the scheduler is off
// (--disable-scheduler), then the server restarts with it on and the
// figure is the pods bound over the time from the first binding to the
// last: the scheduler's rate, not the API's create rate. Latency: pods
// then arrive at a steady rate, each timed from its create call to its
// binding seen through a watch.
func schedulerSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := schedParamsFor(b.quick, schedCounts)
	res := map[schedKey]*schedResult{}
	rows := func() []Row { return schedRows(p, res) }
	bin, err := buildBonsai(ctx, b)
	if err != nil {
		return rows(), err
	}
	cfgFile := filepath.Join(b.dir, "sched-empty-config.yaml")
	if err := os.WriteFile(cfgFile, nil, 0o600); err != nil {
		return rows(), err
	}
	for _, n := range p.counts {
		for _, v := range schedVariants {
			r := &schedResult{}
			res[schedKey{n, v.name}] = r
			b.logf("sched: %s simulated nodes, %s pending pods, %s", fmtNum(float64(n)), fmtNum(float64(p.pending)), v.name)
			if err := schedRun(ctx, b, p, bin, cfgFile, n, v, r); err != nil {
				return rows(), fmt.Errorf("%d nodes, %s: %w", n, v.name, err)
			}
		}
	}
	return rows(), nil
}

func schedClient(srv *bonsaiProc) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(srv.dir, "kubeconfig.yaml"))
	if err != nil {
		return nil, err
	}
	cfg.QPS = -1
	cfg.UserAgent = "bonsai-bench"
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return kubernetes.NewForConfig(rest.CopyConfig(cfg))
}

// schedBenchPod is pod i; with anti-affinity it is in group i/nodes, whose
// pods must all be on different nodes.
func schedBenchPod(name string, i, nodes int, v schedVariant) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "sched-bench"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
			}},
		}}},
	}
	if v.antiAffinity {
		group := strconv.Itoa(i / nodes)
		p.Labels["group"] = group
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sched-bench", "group": group}},
				TopologyKey:   "kubernetes.io/hostname",
			}},
		}}
	}
	return p
}

func schedRun(ctx context.Context, b *bench, p schedParams, bin, cfgFile string, n int, v schedVariant, r *schedResult) error {
	dir := filepath.Join(b.dir, fmt.Sprintf("sched-%d-%v", n, v.antiAffinity))
	defer os.RemoveAll(dir)
	flags := []string{"--cluster-cidr", simClusterCIDR, "--simulated-nodes", strconv.Itoa(n)}
	srv, _, err := startBonsai(ctx, b, bin, cfgFile, dir, append(flags, "--disable-scheduler")...)
	if err != nil {
		return err
	}
	cs, err := schedClient(srv)
	if err != nil {
		srv.stop()
		return err
	}
	if _, err := waitSimReady(ctx, cs, n, 5*time.Minute); err != nil {
		srv.stop()
		return fmt.Errorf("%w\n%s", err, srv.logTail())
	}
	// Every pending pod in place before the scheduler runs.
	if err := createPods(ctx, cs, p.pending, 32, func(i int) *corev1.Pod {
		return schedBenchPod(fmt.Sprintf("pending-%05d", i), i, n, v)
	}); err != nil {
		srv.stop()
		return err
	}
	srv.stop()

	srv, _, err = startBonsai(ctx, b, bin, cfgFile, dir, flags...)
	if err != nil {
		return err
	}
	defer srv.stop()
	if cs, err = schedClient(srv); err != nil {
		return err
	}
	w, err := newBindWatch(ctx, cs)
	if err != nil {
		return err
	}
	defer w.stop()
	// The profile covers the scheduling itself, from the first binding on.
	if _, _, err := w.waitBound(ctx, 1, 5*time.Minute); err != nil {
		return fmt.Errorf("%w\n%s", err, srv.logTail())
	}
	pid := strconv.Itoa(srv.cmd.Process.Pid)
	cpu0, err := cpuTicks(pid)
	if err != nil {
		return err
	}
	own0, err := cpuTicks("self")
	if err != nil {
		return err
	}
	burstStart := time.Now()
	profiled := srv.cpuProfile(fmt.Sprintf("sched-%d-nodes-%s", n, strings.ReplaceAll(v.name, " ", "-")), 4*time.Second)
	defer profiled()
	first, last, err := w.waitBound(ctx, p.pending, 5*time.Minute)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, srv.logTail())
	}
	if secs := last.Sub(first).Seconds(); secs > 0 {
		r.podsPerSec = num(float64(p.pending) / secs)
		b.logf("sched: %d pods bound in %.2f s: %.0f pods/s", p.pending, secs, float64(p.pending)/secs)
	}
	// Every pod bound and started: the simulated kubelets' status writes
	// may trail the bindings or not, so the CPU counts both.
	if err := w.waitRunning(ctx, p.pending, 5*time.Minute); err != nil {
		return fmt.Errorf("%w\n%s", err, srv.logTail())
	}
	cpu1, err := cpuTicks(pid)
	if err != nil {
		return err
	}
	own1, err := cpuTicks("self")
	if err != nil {
		return err
	}
	r.cpuPerPod = num(float64(cpu1-cpu0) * 10 / float64(p.pending)) // 100 Hz ticks to ms
	// Where the machine's cores went: the server, and this bench's own
	// watch of every pod, which shares them.
	secs := time.Since(burstStart).Seconds()
	b.logf("sched: until all Running (%.2f s): server %.2f cores, bench %.2f cores", secs, float64(cpu1-cpu0)/100/secs, float64(own1-own0)/100/secs)
	srv.saveProfiles() // its /metrics count the requests the scheduling cost

	// Latency: pods one at a time at a steady rate.
	created := make([]time.Time, p.latency)
	tick := time.NewTicker(time.Second / time.Duration(p.latencyRate))
	defer tick.Stop()
	var wg sync.WaitGroup
	var createErr atomic.Value
	for i := 0; i < p.latency; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("latency-%05d", i)
			created[i] = time.Now()
			if _, err := cs.CoreV1().Pods("default").Create(ctx, schedBenchPod(name, p.pending+i, n, v), metav1.CreateOptions{}); err != nil {
				createErr.Store(err)
			}
		}(i)
	}
	wg.Wait()
	if err, _ := createErr.Load().(error); err != nil {
		return err
	}
	if _, _, err := w.waitBound(ctx, p.pending+p.latency, time.Minute); err != nil {
		return err
	}
	lat := make([]time.Duration, 0, p.latency)
	for i := range created {
		at, ok := w.boundAt(fmt.Sprintf("latency-%05d", i))
		if !ok {
			return fmt.Errorf("latency-%05d: binding not seen", i)
		}
		lat = append(lat, at.Sub(created[i]))
	}
	r.p50, r.p99 = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99))
	return nil
}

// createPods creates pods 0 to count-1 from workers clients.
func createPods(ctx context.Context, cs kubernetes.Interface, count, workers int, pod func(i int) *corev1.Pod) error {
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= count || ctx.Err() != nil {
					return
				}
				if _, err := cs.CoreV1().Pods("default").Create(ctx, pod(i), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// bindWatch records when each pod was first seen bound, and which pods
// have been seen Running.
type bindWatch struct {
	mu      sync.Mutex
	bound   map[string]time.Time
	running map[string]bool
	first   time.Time
	last    time.Time
	// failed is the watch's error once it stopped on one.
	failed error
	cancel context.CancelFunc
}

func newBindWatch(ctx context.Context, cs kubernetes.Interface) (*bindWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &bindWatch{bound: map[string]time.Time{}, running: map[string]bool{}, cancel: cancel}
	seen := func(ev podEvent) {
		if ev.nodeName == "" {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if ev.phase == string(corev1.PodRunning) {
			w.running[ev.name] = true
		}
		if _, dup := w.bound[ev.name]; dup {
			return
		}
		w.bound[ev.name] = now
		if w.first.IsZero() {
			w.first = now
		}
		w.last = now
	}
	done, err := sinceList(ctx, cs, "default", seen)
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		if err := <-done; err != nil {
			w.mu.Lock()
			w.failed = fmt.Errorf("pod watch: %w", err)
			w.mu.Unlock()
		}
	}()
	return w, nil
}

func (w *bindWatch) stop() { w.cancel() }

// waitRunning waits until count pods have been seen Running.
func (w *bindWatch) waitRunning(ctx context.Context, count int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		n, failed := len(w.running), w.failed
		w.mu.Unlock()
		if n >= count {
			return nil
		}
		if failed != nil {
			return failed
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d pods Running after %v", n, count, timeout)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

func (w *bindWatch) boundAt(name string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.bound[name]
	return t, ok
}

// waitBound waits until count pods are bound and returns when the first
// and the last binding were seen.
func (w *bindWatch) waitBound(ctx context.Context, count int, timeout time.Duration) (first, last time.Time, err error) {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		n, first, last, failed := len(w.bound), w.first, w.last, w.failed
		w.mu.Unlock()
		if n >= count {
			return first, last, nil
		}
		if failed != nil {
			return first, last, failed
		}
		if time.Now().After(deadline) {
			return first, last, fmt.Errorf("%d of %d pods bound after %v", n, count, timeout)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return first, last, err
		}
	}
}

func schedRows(p schedParams, res map[schedKey]*schedResult) []Row {
	var rows []Row
	for _, n := range p.counts {
		for _, v := range schedVariants {
			r := res[schedKey{n, v.name}]
			if r == nil {
				r = &schedResult{}
			}
			what := fmt.Sprintf("%s nodes, %s", fmtNum(float64(n)), v.name)
			var tputTarget *Target
			if n == 1000 {
				tputTarget = atLeast(2000, "pods/s")
				if v.antiAffinity {
					tputTarget = atLeast(500, "pods/s")
				}
			}
			rows = append(rows,
				Row{Name: fmt.Sprintf("sched: pods/s, %s pending, %s", fmtNum(float64(p.pending)), what), Unit: "pods/s", Bonsai: r.podsPerSec, Target: tputTarget},
				Row{Name: fmt.Sprintf("sched: server CPU per pod bound and started, %s", what), Unit: "ms", Bonsai: r.cpuPerPod},
				Row{Name: fmt.Sprintf("sched: create to bound p50 (%d pods/s), %s", p.latencyRate, what), Unit: "ms", Bonsai: r.p50},
				Row{Name: fmt.Sprintf("sched: create to bound p99 (%d pods/s), %s", p.latencyRate, what), Unit: "ms", Bonsai: r.p99},
			)
		}
	}
	return rows
}
