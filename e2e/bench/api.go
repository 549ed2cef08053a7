package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// apiParams size the API workload; -quick shrinks it. The whole suite is
// meant to stay under about 2.5 minutes.
type apiParams struct {
	starts      int
	idle        time.Duration
	valueSize   int
	latOps      int // per operation
	latRate     int // requests per second
	listSmall   int // objects in the namespace the latency phase lists
	tputClients []int
	tputFor     time.Duration
	bigObjects  int
	loadClients int
	listRuns    int
	watchers    int
	watchRate   int
	watchWrites int
}

func apiParamsFor(quick bool) apiParams {
	p := apiParams{
		starts:      5,
		idle:        5 * time.Second,
		valueSize:   1000,
		latOps:      400,
		latRate:     20,
		listSmall:   100,
		tputClients: []int{8, 64},
		tputFor:     5 * time.Second,
		bigObjects:  10000,
		loadClients: 32,
		listRuns:    5,
		watchers:    100,
		watchRate:   200,
		watchWrites: 1000,
	}
	if quick {
		p.starts = 3
		p.idle = 4 * time.Second // the start-up page-out runs at 2 s
		p.latOps = 100
		p.tputFor = 2 * time.Second
		p.listRuns = 3
		p.watchWrites = 300
	}
	return p
}

// apiResults are the suite's figures; nil ones could not be measured.
type apiResults struct {
	sizeMB, idleRSS, bigRSS, startup *float64
	lat                              map[string][2]*float64 // op -> p50, p99
	tput                             map[int]*float64
	// tputCPU is the server's CPU time per acknowledged create: steadier
	// than creates/s on a machine whose other tenants take CPU.
	tputCPU map[int]*float64
	// clientCPU is the bench's own (the clients') CPU time per create:
	// with the server it shares the machine's cores, so together they
	// bound the creates/s this machine can reach.
	clientCPU          map[int]*float64
	bigList            *float64
	watchP50, watchP99 *float64
}

// apiSuite runs a real `bonsai server` binary and drives it with client-go
// over TLS, as kubectl and controllers would.
func apiSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := apiParamsFor(b.quick)
	res := &apiResults{lat: map[string][2]*float64{}, tput: map[int]*float64{}, tputCPU: map[int]*float64{}, clientCPU: map[int]*float64{}}
	rows := func() []Row { return apiRows(p, res) }
	b.noteOnce("k3s", "k3s control plane for comparison (figures the project lead measured on a machine like this, not in this run): "+
		"3.5 s to ready, 396 MB idle RSS, 1,500 ConfigMap creates/s from 64 client-go clients, p99 5 ms at 20 creates/s")

	b.logf("api: building bonsai")
	bin, err := buildBonsai(ctx, b)
	if err != nil {
		return rows(), err
	}
	if st, err := os.Stat(bin); err == nil {
		res.sizeMB = num(float64(st.Size()) / (1 << 20))
		b.note("bonsai binary: %s bytes (CGO_ENABLED=0 go build -trimpath -ldflags \"-s -w\")", fmtNum(float64(st.Size())))
	}
	cfgFile := filepath.Join(b.dir, "api-empty-config.yaml")
	if err := os.WriteFile(cfgFile, nil, 0o600); err != nil {
		return rows(), err
	}

	b.logf("api: %d fresh starts to /readyz", p.starts)
	var starts []time.Duration
	for i := 0; i < p.starts; i++ {
		dir := filepath.Join(b.dir, fmt.Sprintf("api-start-%d", i))
		srv, took, err := startBonsai(ctx, b, bin, cfgFile, dir)
		if err != nil {
			return rows(), fmt.Errorf("start %d: %w", i, err)
		}
		starts = append(starts, took)
		srv.stop()
		os.RemoveAll(dir)
	}
	res.startup = ms(percentile(starts, 0.5))

	srv, _, err := startBonsai(ctx, b, bin, cfgFile, filepath.Join(b.dir, "api-server"))
	if err != nil {
		return rows(), err
	}
	defer srv.stop()
	b.logf("api: idle RSS")
	if err := sleep(ctx, p.idle); err != nil {
		return rows(), err
	}
	if res.idleRSS, err = srv.rssMB(); err != nil {
		return rows(), err
	}

	ac := &apiClients{kubeconfig: filepath.Join(srv.dir, "kubeconfig.yaml")}
	defer ac.closeAll()
	admin, err := ac.client()
	if err != nil {
		return rows(), err
	}
	for _, ns := range []string{"bench-big", "bench-lat", "bench-list", "bench-tput", "bench-watch"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return rows(), err
		}
	}

	phases := []struct {
		name string
		run  func() error
	}{
		{fmt.Sprintf("%s ConfigMaps, RSS and lists", fmtNum(float64(p.bigObjects))), func() error { return apiBig(ctx, b, p, srv, ac, res) }},
		{fmt.Sprintf("latency at %d requests/s", p.latRate), func() error { return apiLatency(ctx, p, ac, res) }},
		{"create throughput", func() error { return apiThroughput(ctx, p, srv, ac, res) }},
		{fmt.Sprintf("watch delivery to %d watchers", p.watchers), func() error { return apiWatch(ctx, p, ac, res) }},
	}
	for _, ph := range phases {
		if err := ctx.Err(); err != nil {
			return rows(), err
		}
		b.logf("api: %s", ph.name)
		if err := ph.run(); err != nil {
			return rows(), fmt.Errorf("%s: %w", ph.name, err)
		}
		ac.closeAll()
	}
	return rows(), nil
}

func apiRows(p apiParams, r *apiResults) []Row {
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: "api: " + name, Unit: unit, Bonsai: v, Target: t}
	}
	kb := fmtNum(float64(p.valueSize) / 1000)
	rows := []Row{
		row("binary size (stripped)", "MB", r.sizeMB, nil),
		row("RSS idle after start (--disable-agent)", "MB", r.idleRSS, atMost(40, "MB")),
		row(fmt.Sprintf("RSS after %s x %s KB ConfigMaps", fmtNum(float64(p.bigObjects)), kb), "MB", r.bigRSS, nil),
		row(fmt.Sprintf("exec to /readyz 200 (median of %d fresh starts)", p.starts), "ms", r.startup, atMost(300, "ms")),
	}
	for _, op := range []string{"create", "get", "update", "list"} {
		what := fmt.Sprintf("%s latency", op)
		if op == "list" {
			what = fmt.Sprintf("list latency (%d objects)", p.listSmall)
		}
		var t *Target
		if op == "create" {
			t = atMost(10, "ms")
		}
		rows = append(rows,
			row(fmt.Sprintf("%s p50 (%d req/s)", what, p.latRate), "ms", r.lat[op][0], nil),
			row(fmt.Sprintf("%s p99 (%d req/s)", what, p.latRate), "ms", r.lat[op][1], t))
	}
	for _, n := range p.tputClients {
		var t *Target
		if n == 64 {
			t = atLeast(3000, "creates/s")
		}
		rows = append(rows, row(fmt.Sprintf("creates/s, %d client-go %s", n, plural(n, "client")), "creates/s", r.tput[n], t),
			row(fmt.Sprintf("server CPU per create, %d %s", n, plural(n, "client")), "ms", r.tputCPU[n], nil),
			row(fmt.Sprintf("client CPU per create, %d %s", n, plural(n, "client")), "ms", r.clientCPU[n], nil))
	}
	rows = append(rows,
		row(fmt.Sprintf("list %s ConfigMaps (median of %d)", fmtNum(float64(p.bigObjects)), p.listRuns), "ms", r.bigList, nil),
		row(fmt.Sprintf("watch delivery p50 (%d watchers, %d writes/s)", p.watchers, p.watchRate), "ms", r.watchP50, nil),
		row(fmt.Sprintf("watch delivery p99 (%d watchers, %d writes/s)", p.watchers, p.watchRate), "ms", r.watchP99, atMost(10, "ms")),
	)
	return rows
}

func atLeast(limit float64, unit string) *Target {
	return &Target{
		Text:  fmt.Sprintf(">= %s %s", fmtNum(limit), unit),
		check: func(v float64, _ *float64) (bool, bool) { return v >= limit, true },
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// buildBonsai builds the binary the way a release is built, so its size
// is the one users download.
func buildBonsai(ctx context.Context, b *bench) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run the bench from inside the bonsai module: it builds ./cmd/bonsai")
	}
	bin := filepath.Join(b.dir, "bonsai")
	cmd := execCommand(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/bonsai")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/bonsai: %w", err)
	}
	// An installed binary is on disk, not 70 MB of dirty page cache
	// whose writeback lands in the middle of a measurement.
	if err := syncFile(bin); err != nil {
		return "", err
	}
	return bin, nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// bonsaiProc is one running `bonsai server`.
type bonsaiProc struct {
	cmd  *exec.Cmd
	dir  string
	log  string
	done chan struct{}
	once sync.Once
}

// startSuiteServer builds bonsai and starts it, with an empty config file
// and extra flags, on a fresh dir named name under the run's dir; stop
// stops it and removes the dir.
func startSuiteServer(ctx context.Context, b *bench, name string, extra ...string) (*bonsaiProc, func(), error) {
	bin, err := buildBonsai(ctx, b)
	if err != nil {
		return nil, nil, err
	}
	cfgFile := filepath.Join(b.dir, name+"-empty-config.yaml")
	if err := os.WriteFile(cfgFile, nil, 0o600); err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(b.dir, name)
	srv, _, err := startBonsai(ctx, b, bin, cfgFile, dir, extra...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() { srv.stop(); os.RemoveAll(dir) }, nil
}

// restConfig is a client configuration for the server's admin
// kubeconfig, unthrottled, with the given user agent.
func (p *bonsaiProc) restConfig(userAgent string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(p.dir, "kubeconfig.yaml"))
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.UserAgent = -1, userAgent
	return cfg, nil
}

// startBonsai starts a server on dir and a free port and returns once
// /readyz answers 200, with the time from exec to that answer. A port
// taken between picking and binding is retried on another.
// extra flags are appended; without a --runtime flag among them the server
// runs the control plane only.
func startBonsai(ctx context.Context, b *bench, bin, cfgFile, dir string, extra ...string) (*bonsaiProc, time.Duration, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, err
	}
	for attempt := 0; ; attempt++ {
		port, err := testenv.FreePort()
		if err != nil {
			return nil, 0, err
		}
		logf, err := os.Create(filepath.Join(filepath.Dir(dir), filepath.Base(dir)+".log"))
		if err != nil {
			return nil, 0, err
		}
		args := []string{"server",
			"--data-dir", filepath.Join(dir, "data"),
			"--https-listen-port", strconv.Itoa(port),
			"--bind-address", "127.0.0.1",
			"--config", cfgFile}
		agent, rootDir, ingress := false, false, false
		for _, a := range extra {
			agent = agent || strings.HasPrefix(a, "--runtime")
			rootDir = rootDir || strings.HasPrefix(a, "--kubelet-root-dir")
			ingress = ingress || strings.HasPrefix(a, "--ingress-") || strings.HasPrefix(a, "--disable-ingress")
		}
		if !agent {
			args = append(args, "--disable-agent")
		} else if !rootDir {
			// Not /var/lib/kubelet: the device manager empties its
			// device-plugins directory of sockets.
			args = append(args, "--kubelet-root-dir", filepath.Join(dir, "kubelet"))
		}
		if agent && !ingress {
			// Not 80 and 443, which the host or another bonsai may
			// have; the ingress rows give free ports.
			args = append(args, "--disable-ingress")
		}
		cmd := execCommand(ctx, bin, append(args, extra...)...)
		cmd.Stdout, cmd.Stderr = logf, logf
		p := &bonsaiProc{cmd: cmd, dir: filepath.Join(dir, "data"), log: logf.Name(), done: make(chan struct{})}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, 0, err
		}
		go func() { cmd.Wait(); logf.Close(); close(p.done) }()
		b.onCleanup(p.stop)
		took, err := p.waitReady(ctx, start, port)
		if err == nil {
			return p, took, nil
		}
		p.stop()
		if attempt < 2 && strings.Contains(p.logTail(), "already in use") {
			continue
		}
		return nil, 0, err
	}
}

// waitReady polls often, so the figure is within a few milliseconds of
// the moment the server could first answer. Until the server serves, a
// TLS handshake waits in the listen backlog, so an attempt is answered as
// soon as serving starts.
func (p *bonsaiProc) waitReady(ctx context.Context, start time.Time, port int) (time.Duration, error) {
	// Only readiness is asked here, of a public path: the server's
	// certificate is checked by the client-go clients that follow.
	hc := &http.Client{
		Timeout:   time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	defer hc.CloseIdleConnections()
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", port)
	deadline := start.Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return 0, fmt.Errorf("bonsai exited before it was ready:\n%s", p.logTail())
		case <-ctx.Done():
			return 0, ctx.Err()
		default:
		}
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("bonsai not ready within 30s:\n%s", p.logTail())
}

func (p *bonsaiProc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// startupTrimmed is the line bonsai logs once it has handed its start-up
// memory back to the OS, two seconds after start (cmd/bonsai/memtrim.go):
// the code it runs after that faults its pages back in on first use, so
// steady-state timings start after it.
const startupTrimmed = "start-up memory handed back to the OS"

// waitLog waits until the server's log has a line with msg (started
// servers log to a file of their own, truncated at each start).
func (p *bonsaiProc) waitLog(ctx context.Context, msg string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(p.log); err == nil && bytes.Contains(b, []byte(msg)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q in the server's log %v after start\n%s", msg, timeout, p.logTail())
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// stop asks for a clean shutdown and kills the server if it takes too long.
func (p *bonsaiProc) stop() {
	p.once.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
}

func (p *bonsaiProc) rssMB() (*float64, error) {
	defer p.saveProfiles()
	rss, err := rssBytes(strconv.Itoa(p.cmd.Process.Pid))
	if err != nil {
		return nil, err
	}
	return num(float64(rss) / (1 << 20)), nil
}

// apiClients hands out client-go clientsets, each on its own connection
// as separate programs would have: client-go otherwise shares one HTTP/2
// connection among clients with the same credentials.
type apiClients struct {
	kubeconfig string
	mu         sync.Mutex
	open       []*http.Client
}

func (a *apiClients) client() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = -1 // no client-side throttling: the server's speed is measured
	cfg.UserAgent = "bonsai-bench"
	// A Dial of its own keeps client-go from reusing a cached transport.
	cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.open = append(a.open, hc)
	a.mu.Unlock()
	return cs, nil
}

func (a *apiClients) clients(n int) ([]*kubernetes.Clientset, error) {
	out := make([]*kubernetes.Clientset, n)
	for i := range out {
		var err error
		if out[i], err = a.client(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// closeAll drops the connections of the clients handed out so far, so
// that one phase's connections do not weigh on the next.
func (a *apiClients) closeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, hc := range a.open {
		hc.CloseIdleConnections()
	}
	a.open = nil
}

// payload is an incompressible-looking value of n characters.
func payload(seed uint64, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	r := rand.New(rand.NewPCG(seed, 0x617069))
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[r.IntN(len(letters))]
	}
	return string(b)
}

func configMap(name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}
}

// createMany creates n ConfigMaps prefix-NNNNNN in ns from clients clients.
func createMany(ctx context.Context, ac *apiClients, ns, prefix string, n, clients, size int) error {
	cs, err := ac.clients(clients)
	if err != nil {
		return err
	}
	return parallel(clients, func(w int) error {
		v := payload(uint64(w), size)
		for i := w; i < n; i += clients {
			if _, err := cs[w].CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("%s-%06d", prefix, i), v), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// apiBig fills the server with the big namespace, takes RSS once it has
// been idle, and then times full lists of it.
func apiBig(ctx context.Context, b *bench, p apiParams, srv *bonsaiProc, ac *apiClients, res *apiResults) error {
	if err := createMany(ctx, ac, "bench-big", "cm", p.bigObjects, p.loadClients, p.valueSize); err != nil {
		return err
	}
	ac.closeAll()
	if err := sleep(ctx, p.idle); err != nil {
		return err
	}
	var err error
	if res.bigRSS, err = srv.rssMB(); err != nil {
		return err
	}
	cs, err := ac.client()
	if err != nil {
		return err
	}
	var runs []time.Duration
	for i := 0; i < p.listRuns; i++ {
		t0 := time.Now()
		l, err := cs.CoreV1().ConfigMaps("bench-big").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		runs = append(runs, time.Since(t0))
		// Every namespace also gets kube-root-ca.crt from its
		// publisher, as on Kubernetes.
		if n := countPrefixed(l.Items, "cm-"); n != p.bigObjects {
			return fmt.Errorf("list returned %d of the bench's ConfigMaps, want %d", n, p.bigObjects)
		}
	}
	res.bigList = ms(percentile(runs, 0.5))
	return nil
}

// steady calls f n times, one call per tick at rate per second, and
// returns each call's latency. A call slower than a tick delays the next
// rather than overlapping it: one client, as in the k3s figure.
func steady(ctx context.Context, n, rate int, f func(i int) error) ([]time.Duration, error) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t0 := time.Now()
		if err := f(i); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}

func apiLatency(ctx context.Context, p apiParams, ac *apiClients, res *apiResults) error {
	if err := createMany(ctx, ac, "bench-list", "cm", p.listSmall, 8, p.valueSize); err != nil {
		return err
	}
	cs, err := ac.client()
	if err != nil {
		return err
	}
	cms := cs.CoreV1().ConfigMaps("bench-lat")
	v := payload(7, p.valueSize)
	// The first requests pay for the TLS handshake and warm caches; that
	// is not the steady state.
	for i := 0; i < 20; i++ {
		if _, err := cms.Create(ctx, configMap(fmt.Sprintf("warm-%02d", i), v), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	objs := make([]*corev1.ConfigMap, p.latOps)
	record := func(op string, lat []time.Duration) {
		res.lat[op] = [2]*float64{ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))}
	}
	lat, err := steady(ctx, p.latOps, p.latRate, func(i int) error {
		var err error
		objs[i], err = cms.Create(ctx, configMap(fmt.Sprintf("lat-%04d", i), v), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	record("create", lat)
	lat, err = steady(ctx, p.latOps, p.latRate, func(i int) error {
		_, err := cms.Get(ctx, objs[i].Name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	record("get", lat)
	lat, err = steady(ctx, p.latOps, p.latRate, func(i int) error {
		o := objs[i]
		o.Data["v"] = v[1:] + v[:1] // a real change, or the server skips the write
		_, err := cms.Update(ctx, o, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	record("update", lat)
	list := cs.CoreV1().ConfigMaps("bench-list")
	lat, err = steady(ctx, p.latOps, p.latRate, func(int) error {
		l, err := list.List(ctx, metav1.ListOptions{})
		if n := countPrefixed(l.Items, "cm-"); err == nil && n != p.listSmall {
			err = fmt.Errorf("listed %d of the bench's ConfigMaps, want %d", n, p.listSmall)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	record("list", lat)
	return nil
}

// apiThroughput counts acknowledged creates by n clients that each send
// their next create as soon as the previous one is answered.
func apiThroughput(ctx context.Context, p apiParams, srv *bonsaiProc, ac *apiClients, res *apiResults) error {
	pid := strconv.Itoa(srv.cmd.Process.Pid)
	for _, n := range p.tputClients {
		cs, err := ac.clients(n)
		if err != nil {
			return err
		}
		// Connections are set up before the clock starts.
		err = parallel(n, func(w int) error {
			_, err := cs[w].CoreV1().ConfigMaps("bench-tput").Create(ctx, configMap(fmt.Sprintf("c%d-w%02d-warm", n, w), "x"), metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return err
		}
		var acked atomic.Int64
		cpu0, err := cpuTicks(pid)
		if err != nil {
			return err
		}
		own0, err := cpuTicks("self")
		if err != nil {
			return err
		}
		profiled := srv.cpuProfile(fmt.Sprintf("creates-%d-clients", n), p.tputFor)
		start := time.Now()
		deadline := start.Add(p.tputFor)
		err = parallel(n, func(w int) error {
			v := payload(uint64(1000+w), p.valueSize)
			cms := cs[w].CoreV1().ConfigMaps("bench-tput")
			for j := 0; time.Now().Before(deadline); j++ {
				if _, err := cms.Create(ctx, configMap(fmt.Sprintf("c%d-w%02d-%07d", n, w, j), v), metav1.CreateOptions{}); err != nil {
					return err
				}
				acked.Add(1)
			}
			return nil
		})
		if err != nil {
			return err
		}
		res.tput[n] = num(float64(acked.Load()) / time.Since(start).Seconds())
		profiled()
		cpu1, err := cpuTicks(pid)
		if err != nil {
			return err
		}
		own1, err := cpuTicks("self")
		if err != nil {
			return err
		}
		if acked.Load() > 0 {
			res.tputCPU[n] = num(float64(cpu1-cpu0) * 10 / float64(acked.Load())) // 100 Hz ticks to ms
			res.clientCPU[n] = num(float64(own1-own0) * 10 / float64(acked.Load()))
		}
		ac.closeAll()
	}
	return nil
}

// apiWatch times delivery to many watchers of one namespace: the writer
// stamps each object with the time just before its create is sent, and
// each watcher takes the difference when client-go hands it the event.
// The delay therefore includes the create itself, as a controller sees it.
func apiWatch(ctx context.Context, p apiParams, ac *apiClients, res *apiResults) error {
	const ns = "bench-watch"
	writer, err := ac.client()
	if err != nil {
		return err
	}
	cms := writer.CoreV1().ConfigMaps(ns)
	l, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	clients, err := ac.clients(p.watchers)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lats := make([][]time.Duration, p.watchers)
	var received sync.WaitGroup
	errs := make(chan error, p.watchers)
	for i, cs := range clients {
		w, err := cs.CoreV1().ConfigMaps(ns).Watch(wctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		if err != nil {
			return err
		}
		defer w.Stop()
		received.Add(1)
		go func() {
			defer received.Done()
			got := make([]time.Duration, 0, p.watchWrites)
			for len(got) < p.watchWrites {
				ev, ok := <-w.ResultChan()
				if !ok {
					errs <- fmt.Errorf("watch ended after %d of %d events", len(got), p.watchWrites)
					return
				}
				now := time.Now()
				if ev.Type == watch.Error {
					errs <- fmt.Errorf("watch error event: %v", ev.Object)
					return
				}
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok || ev.Type != watch.Added {
					continue
				}
				sent, err := strconv.ParseInt(cm.Data["sent"], 10, 64)
				if err != nil {
					errs <- fmt.Errorf("event for %s without a send time", cm.Name)
					return
				}
				got = append(got, now.Sub(time.Unix(0, sent)))
			}
			lats[i] = got
		}()
	}
	v := payload(9, p.valueSize)
	tick := time.NewTicker(time.Second / time.Duration(p.watchRate))
	defer tick.Stop()
	for i := 0; i < p.watchWrites; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		}
		c := configMap(fmt.Sprintf("w-%06d", i), v)
		c.Data["sent"] = strconv.FormatInt(time.Now().UnixNano(), 10)
		if _, err := cms.Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	res.watchP50, res.watchP99, err = watchLatencies(ctx, &received, errs, lats, p.watchWrites)
	return err
}

func countPrefixed(cms []corev1.ConfigMap, prefix string) int {
	n := 0
	for _, c := range cms {
		if strings.HasPrefix(c.Name, prefix) {
			n++
		}
	}
	return n
}
