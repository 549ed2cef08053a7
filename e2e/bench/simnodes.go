package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// simParams size the simulated-nodes suite; -quick runs only the smallest
// count and shorter steady phases.
type simParams struct {
	counts []int
	// settle is the wait after all nodes are Ready before the steady-state
	// window: the registration burst's garbage is collected, and every
	// node is into its renewal rhythm.
	settle time.Duration
	window time.Duration // lease rate and CPU are measured over it
	idle   time.Duration
}

func simParamsFor(quick bool, counts []int) simParams {
	p := simParams{counts: counts, settle: 20 * time.Second, window: 20 * time.Second, idle: 5 * time.Second}
	if quick {
		p.counts = counts[:1]
		p.settle = 10 * time.Second
		p.window = 10 * time.Second
	}
	return p
}

// simCounts is -sim-nodes, parsed.
var simCounts = []int{1000, 10000}

// simResult is one node count's figures; nil ones could not be measured.
type simResult struct {
	ready, rssMB, rssPerNodeKB, leaseRate, cpuPct *float64
}

// simClusterCIDR holds 32,768 /24s: room for 10,000 nodes (the default
// 10.42.0.0/16 holds 256), clear of the default service CIDR.
const simClusterCIDR = "10.128.0.0/9"

// simNodesSuite starts `bonsai server --simulated-nodes N` and measures the
// time from exec to every node Ready, the RSS each node adds over an idle
// server, and the steady lease renewal rate and CPU.
func simNodesSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := simParamsFor(b.quick, simCounts)
	res := map[int]*simResult{}
	var idleRSS *float64
	rows := func() []Row { return simRows(p, idleRSS, res) }

	bin, err := buildBonsai(ctx, b)
	if err != nil {
		return rows(), err
	}
	cfgFile := filepath.Join(b.dir, "sim-empty-config.yaml")
	if err := os.WriteFile(cfgFile, nil, 0o600); err != nil {
		return rows(), err
	}

	b.logf("sim: idle RSS without simulated nodes")
	dir := filepath.Join(b.dir, "sim-idle")
	srv, _, err := startBonsai(ctx, b, bin, cfgFile, dir, "--cluster-cidr", simClusterCIDR)
	if err != nil {
		return rows(), err
	}
	if err := sleep(ctx, p.idle); err != nil {
		return rows(), err
	}
	idleRSS, err = srv.rssMB()
	srv.stop()
	os.RemoveAll(dir)
	if err != nil {
		return rows(), err
	}

	for _, n := range p.counts {
		r := &simResult{}
		res[n] = r
		b.logf("sim: %s simulated nodes", fmtNum(float64(n)))
		if err := simRun(ctx, b, p, bin, cfgFile, n, *idleRSS, r); err != nil {
			return rows(), fmt.Errorf("%d nodes: %w", n, err)
		}
	}
	return rows(), nil
}

func simRun(ctx context.Context, b *bench, p simParams, bin, cfgFile string, n int, idleRSS float64, r *simResult) error {
	dir := filepath.Join(b.dir, fmt.Sprintf("sim-%d", n))
	defer os.RemoveAll(dir)
	start := time.Now()
	srv, _, err := startBonsai(ctx, b, bin, cfgFile, dir, "--cluster-cidr", simClusterCIDR, "--simulated-nodes", strconv.Itoa(n))
	if err != nil {
		return err
	}
	defer srv.stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(srv.dir, "kubeconfig.yaml"))
	if err != nil {
		return err
	}
	cfg.QPS = -1
	cfg.UserAgent = "bonsai-bench"
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	readyAt, err := waitSimReady(ctx, cs, n, 5*time.Minute)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, srv.logTail())
	}
	r.ready = num(readyAt.Sub(start).Seconds())
	b.logf("sim: %s nodes Ready %.1f s after exec", fmtNum(float64(n)), readyAt.Sub(start).Seconds())

	if err := sleep(ctx, p.settle); err != nil {
		return err
	}
	pid := strconv.Itoa(srv.cmd.Process.Pid)
	// Each sample is taken at the middle of its metrics scrape, which
	// takes a while on a busy server.
	sample := func() (leases float64, cpu uint64, at time.Time, err error) {
		before := time.Now()
		if leases, err = leaseWrites(ctx, cs); err != nil {
			return 0, 0, time.Time{}, err
		}
		at = before.Add(time.Since(before) / 2)
		cpu, err = cpuTicks(pid)
		return leases, cpu, at, err
	}
	leases0, cpu0, t0, err := sample()
	if err != nil {
		return err
	}
	if err := sleep(ctx, p.window); err != nil {
		return err
	}
	leases1, cpu1, t1, err := sample()
	if err != nil {
		return err
	}
	secs := t1.Sub(t0).Seconds()
	r.leaseRate = num((leases1 - leases0) / secs)
	// USER_HZ is 100 on every Linux this runs on.
	r.cpuPct = num(float64(cpu1-cpu0) / 100 / secs * 100)
	if r.rssMB, err = srv.rssMB(); err != nil {
		return err
	}
	r.rssPerNodeKB = num((*r.rssMB - idleRSS) * 1024 / float64(n))
	return nil
}

// waitSimReady watches nodes (protobuf, only names and Ready kept) until n
// of them named sim-* are Ready, and returns when that was seen.
func waitSimReady(ctx context.Context, cs kubernetes.Interface, n int, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		mu    sync.Mutex
		ready = map[string]bool{}
		done  = make(chan time.Time, 1)
	)
	update := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || !strings.HasPrefix(node.Name, "sim-") {
			return
		}
		ok = false
		for _, c := range node.Status.Conditions {
			ok = ok || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		mu.Lock()
		defer mu.Unlock()
		if ok {
			ready[node.Name] = true
		} else {
			delete(ready, node.Name)
		}
		if len(ready) == n {
			select {
			case done <- time.Now():
			default:
			}
		}
	}
	inf := cache.NewSharedInformer(cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "nodes", "", fields.Everything()), &corev1.Node{}, 0)
	inf.SetTransform(func(obj any) (any, error) {
		if node, ok := obj.(*corev1.Node); ok {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, ResourceVersion: node.ResourceVersion},
				Status: corev1.NodeStatus{Conditions: node.Status.Conditions}}, nil
		}
		return obj, nil
	})
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: update, UpdateFunc: func(_, obj any) { update(obj) }})
	go inf.RunWithContext(ctx)
	select {
	case t := <-done:
		return t, nil
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		return time.Time{}, fmt.Errorf("%d of %d simulated nodes Ready after %v", len(ready), n, timeout)
	}
}

// leaseWrites is the server's count of Lease creates and updates so far,
// from its own metrics.
func leaseWrites(ctx context.Context, cs kubernetes.Interface) (float64, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	var total float64
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="leases"`) ||
			!strings.Contains(line, `code="2`) || !(strings.Contains(line, `verb="PUT"`) || strings.Contains(line, `verb="POST"`)) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %v", line, err)
		}
		total += v
	}
	return total, sc.Err()
}

// cpuTicks is a process' user plus system time in clock ticks.
func cpuTicks(pid string) (uint64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields count from after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%s/stat: %v %v", pid, err1, err2)
	}
	return utime + stime, nil
}

func simRows(p simParams, idleRSS *float64, res map[int]*simResult) []Row {
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: "sim: " + name, Unit: unit, Bonsai: v, Target: t}
	}
	rows := []Row{row("RSS idle, no simulated nodes (--disable-agent)", "MB", idleRSS, nil)}
	for _, n := range p.counts {
		r := res[n]
		if r == nil {
			r = &simResult{}
		}
		nodes := fmtNum(float64(n)) + " nodes"
		var readyTarget *Target
		if n == 1000 {
			readyTarget = atMost(10, "s")
		}
		rows = append(rows,
			row(fmt.Sprintf("exec to all %s Ready", nodes), "s", r.ready, readyTarget),
			row(fmt.Sprintf("RSS with %s, steady", nodes), "MB", r.rssMB, nil),
			row(fmt.Sprintf("RSS per node ((RSS - idle) / N), %s", nodes), "KB", r.rssPerNodeKB, nil),
			// Every node renews every 10 s: N/10 a second, give or take
			// the window's edges.
			row(fmt.Sprintf("lease writes/s, %s", nodes), "writes/s", r.leaseRate, atLeast(0.95*float64(n)/10, "writes/s")),
			row(fmt.Sprintf("server CPU, steady, %s", nodes), "% of a core", r.cpuPct, nil),
		)
	}
	return rows
}

func parseNodeCounts(s string) ([]int, error) {
	var counts []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 100000 {
			return nil, fmt.Errorf("%q: want node counts between 1 and 100000, like 1000,10000", s)
		}
		counts = append(counts, n)
	}
	return counts, nil
}
