// Command bench measures bonsai against its targets and, where a peer runs
// on this machine (etcd for the store), against that peer under the same
// load in the same run. It prints one table; `make bench` runs it.
//
// Each suite returns rows; a new group of rows is a new entry in suites.
// Data dirs live under -dir, on a real disk: disk-write figures taken on
// tmpfs would mean nothing. Everything the bench starts (etcd, child
// processes) and every dir it makes is removed at the end, on Ctrl-C too.
//
// The exit code is 0 even when a target is missed (the table says MISS);
// it is non-zero only when something could not be measured.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// suite is one group of rows.
type suite struct {
	name  string
	about string
	run   func(ctx context.Context, b *bench) ([]Row, error)
	// optIn suites run only when -only names them: they take too long
	// for every `make bench`.
	optIn bool
}

var suites = []suite{
	{name: "store", about: "the store (badger) against etcd under the same workload", run: storeSuite},
	{name: "api", about: "a real `bonsai server` driven by client-go over TLS", run: apiSuite},
	{name: "snapshot", about: "`bonsai snapshot save` from a running server holding 10,000 objects, the file's size, and its restore", run: snapshotSuite},
	{name: "pods", about: "a real node: bonsai with its own containerd running busybox pods", run: podSuite},
	{name: "deviceplugin", about: "device plugins on a real node: registration to Node capacity, Allocate's cost at admission, a burst of pods for few devices", run: devicePluginSuite},
	{name: "agent", about: "`bonsai agent` joining a running server with a join token (simulated runtime): exec to Node Ready, idle RSS", run: agentSuite},
	{name: "csi", about: "CSI on a real node with the test CSI driver and the real external-provisioner: claim create to pod Running, RSS of the CSI machinery", run: csiSuite},
	{name: "simnodes", about: "`bonsai server --simulated-nodes N`: time to Ready, memory and lease writes", run: simNodesSuite},
	{name: "nodelifecycle", about: "the node lifecycle controller's CPU on a steady cluster of simulated nodes", run: nodeLifecycleSuite},
	{name: "workloads", about: "the workload controllers on simulated nodes: a 1,000-replica Deployment, its rollout, a namespace deletion", run: workloadsSuite},
	{name: "deploy", about: "the manifests directory: a file's edit to the object changed", run: deploySuite},
	{name: "crd", about: "CustomResourceDefinitions: create to served, custom object creates with and without a CEL rule", run: crdSuite},
	{name: "services", about: "a real node's service path: proxy syncs, pod Ready → rule, cluster DNS under load", run: servicesSuite},
	{name: "services-dualstack", about: "the services suite on a dual-stack cluster: PreferDualStack Services with an EndpointSlice of each family", run: servicesDualStackSuite},
	{name: "rbac", about: "authorization: the API server's handler chain under RBAC with 1,000 RoleBindings against AlwaysAllow", run: rbacSuite},
	{name: "webhook", about: "admission webhooks: a no-op webhook's round trip per create, by URL and through a Service", run: webhookSuite},
	{name: "scheduler", about: "the built-in scheduler on simulated nodes: pods/s and create-to-bound latency", run: schedulerSuite},
	{name: "flood", about: "overload: Lease renewals of 100 nodes while 200 clients flood creates", run: floodSuite},
	{name: "netpol", about: "network policies on a real node: a write to enforcement, a full sync of many, their cost to a pod's throughput", run: netpolSuite},
	{name: "ingress", about: "the built-in Ingress controller on a real node against Debian's nginx as a reverse proxy to the same pod: requests/s and added p99, HTTP and TLS; Ingress change to served; RSS of 100 Ingresses", run: ingressSuite},
	{name: "metrics", about: "the kubelet's figures on a real node with 30 pods: CPU per sample and at the 10 s interval, RssAnon when sampling 10x as often", run: metricsSuite},
	{name: "eviction", about: "node-pressure eviction on a real node: a pod growing its memory past memory.available<100Mi, threshold crossed to pod Failed/Evicted", run: evictionSuite},
	{name: "cni", about: "pod sandbox network setup and teardown: the CNI host (Debian's reference plugins) against the built-in network", run: cniSuite},
	{name: "wear", about: "flash wear: bytes an idle real node writes per hour with 0 and 30 pods (-wear-window each, 15 min by default; `-only wear`)", run: wearSuite, optIn: true},
}

// bench is what every suite gets: the run's settings and its housekeeping.
type bench struct {
	quick bool
	// dir is this run's own dir under -dir; removed at the end.
	dir string
	// notes are printed under the table (peer versions, file system).
	notes    []string
	noteKeys map[string]bool

	mu       sync.Mutex
	cleanups []func()
}

// logf reports progress on stderr, keeping stdout for the table.
func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// noteOnce adds a note the first time key is seen.
func (b *bench) noteOnce(key, format string, args ...any) {
	b.mu.Lock()
	seen := b.noteKeys[key]
	if b.noteKeys == nil {
		b.noteKeys = map[string]bool{}
	}
	b.noteKeys[key] = true
	b.mu.Unlock()
	if !seen {
		b.note(format, args...)
	}
}

func (b *bench) note(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.notes = append(b.notes, fmt.Sprintf(format, args...))
}

// onCleanup registers f to run at the end of the run (last registered,
// first run), including after Ctrl-C.
func (b *bench) onCleanup(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cleanups = append(b.cleanups, f)
}

func (b *bench) cleanup() {
	b.mu.Lock()
	fs := b.cleanups
	b.cleanups = nil
	b.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func main() { os.Exit(run()) }

func run() int {
	var (
		only    = flag.String("only", "", "comma-separated suites to run (default: all): "+suiteNames())
		quick   = flag.Bool("quick", false, "short run: fewer samples, shorter phases")
		baseDir = flag.String("dir", "/var/tmp/bonsai-bench", "base dir for data dirs; must be on a real disk")
		asJSON  = flag.Bool("json", false, "print the rows as JSON instead of a table")
		churn   = flag.Duration("churn", 0, "instead of the table: update 1,000 keys for this long and track the data dir's size")
		churnW  = flag.Int("churn-writers", 8, "concurrent writers in -churn mode")
		profs   = flag.String("profiles", "", "save bonsai's heap and goroutine profiles and /proc smaps into this dir wherever its RSS is read")
		simN    = flag.String("sim-nodes", "1000,10000", "comma-separated simulated node counts of the simnodes suite (-quick: the first only)")
		schedN  = flag.String("sched-nodes", "100,1000", "comma-separated simulated node counts of the scheduler suite (-quick: 100)")
	)
	flag.DurationVar(&wearWindow, "wear-window", 0, "each idle window of the wear suite (default 15m; -quick: 90s)")
	flag.Parse()
	profilesDir = *profs
	var err error
	if simCounts, err = parseNodeCounts(*simN); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -sim-nodes:", err)
		return 2
	}
	if schedCounts, err = parseNodeCounts(*schedN); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -sched-nodes:", err)
		return 2
	}
	// badger's warnings are worth seeing; its routine chatter is not.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

	selected, err := selectSuites(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if err := os.MkdirAll(*baseDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	runDir, err := os.MkdirTemp(*baseDir, "run-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	b := &bench{quick: *quick, dir: runDir}
	b.onCleanup(func() { os.RemoveAll(runDir) })
	defer b.cleanup()

	fsys, inMemory := fsName(runDir)
	if inMemory {
		b.logf("warning: %s is on %s: disk-write figures will be meaningless; use -dir on a real disk", *baseDir, fsys)
	}
	b.note("%d cores, %s/%s, %s, data dirs under %s (%s)", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), *baseDir, fsys)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		// Give the suites a moment to wind down through their own
		// cleanups; if one hangs, the processes and dirs still go.
		time.Sleep(15 * time.Second)
		b.cleanup()
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		os.Exit(130)
	}()

	if *churn > 0 {
		err := runChurn(ctx, b, *churn, *churnW)
		b.cleanup()
		return exitCode(ctx, err)
	}

	start := time.Now()
	var rows []Row
	var failed []string
	for _, s := range selected {
		b.logf("suite %s: %s", s.name, s.about)
		rs, err := s.run(ctx, b)
		rows = append(rows, rs...)
		if err != nil {
			b.logf("suite %s failed: %v", s.name, err)
			failed = append(failed, s.name)
		}
		if ctx.Err() != nil {
			break
		}
	}
	b.cleanup()
	b.note("run took %s", time.Since(start).Round(time.Second))
	for i := range rows {
		rows[i].verdict()
		if rows[i].Verdict == "ERR" {
			failed = append(failed, rows[i].Name)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(map[string]any{"rows": rows, "notes": b.notes}); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
	} else {
		writeTable(os.Stdout, rows)
		for _, n := range b.notes {
			fmt.Println("# " + n)
		}
	}
	if ctx.Err() != nil {
		return 130
	}
	if len(failed) > 0 {
		fmt.Fprintf(os.Stderr, "bench: could not measure: %s\n", strings.Join(failed, "; "))
		return 1
	}
	return 0
}

func exitCode(ctx context.Context, err error) int {
	switch {
	case ctx.Err() != nil:
		return 130
	case err != nil:
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

func suiteNames() string {
	var names []string
	for _, s := range suites {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

func selectSuites(only string) ([]suite, error) {
	if only == "" {
		var out []suite
		for _, s := range suites {
			if !s.optIn {
				out = append(out, s)
			}
		}
		return out, nil
	}
	var out []suite
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, s := range suites {
			if s.name == name {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown suite %q (have: %s)", name, suiteNames())
		}
	}
	return out, nil
}

// peerVersion is the first line of a peer's --version, for the notes.
func peerVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown version"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// execCommand runs a child of the bench: killed on Ctrl-C through ctx, and
// by the kernel should the bench itself die first.
func execCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func splitLines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }
