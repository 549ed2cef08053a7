package kubelet

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"bonsai.dev/bonsai/kubelet/cri"
)

// statsRuntime lists one pod with one running and one exited container.
type statsRuntime struct {
	cri.Runtime
	logPath string
}

func (r statsRuntime) ListPodSandboxes(context.Context) ([]cri.Sandbox, error) {
	return []cri.Sandbox{
		{ID: "sb-old", Config: cri.SandboxConfig{PodUID: "uid-1", Namespace: "ns", Name: "web"}, CreatedAt: time.Unix(100, 0)},
		{ID: "sb", Config: cri.SandboxConfig{PodUID: "uid-1", Namespace: "ns", Name: "web"}, CreatedAt: time.Unix(200, 0)},
	}, nil
}

func (r statsRuntime) ListContainers(context.Context) ([]cri.ContainerStatus, error) {
	return []cri.ContainerStatus{
		{ID: "c1", SandboxID: "sb", Name: "main", State: cri.ContainerRunning, StartedAt: time.Unix(300, 0), LogPath: r.logPath},
		{ID: "c0", SandboxID: "sb", Name: "done", State: cri.ContainerExited},
	}, nil
}

// writeCgroup writes a cgroup v2 directory's figures under root.
func writeCgroup(t *testing.T, root, cgroup string, usageUsec, current, inactiveFile, anon uint64, max string) {
	t.Helper()
	dir := filepath.Join(root, cgroup)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"cpu.stat":       "usage_usec " + itoa(usageUsec) + "\nuser_usec 1\nsystem_usec 1\n",
		"memory.current": itoa(current) + "\n",
		"memory.max":     max + "\n",
		"memory.stat":    "anon " + itoa(anon) + "\nfile 100\ninactive_file " + itoa(inactiveFile) + "\npgfault 7\npgmajfault 2\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeCgroupV2 points the kubelet's cgroup root at a temporary cgroup v2
// hierarchy for the test, and returns it.
func fakeCgroupV2(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	old := cgroupRoot
	cgroupRoot = root
	t.Cleanup(func() { cgroupRoot = old })
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// The sampler reads cgroup v2 figures of the pods' and containers'
// cgroups: cumulative CPU, a rate between two samples, the working set
// (usage less inactive file cache), rss and the limit's headroom; an
// exited container and an older sandbox of the pod are left out; the
// Summary API and /metrics/resource serve the last sample.
func TestStatsSampler(t *testing.T) {
	root := fakeCgroupV2(t)
	logPath := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(logPath, []byte("twelve bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeCgroup(t, root, "/bonsai", 5_000_000, 4000, 1000, 2000, "max")
	writeCgroup(t, root, podCgroup("uid-1"), 2_000_000, 3000, 1000, 1500, "max")
	writeCgroup(t, root, podCgroup("uid-1")+"/c1", 1_000_000, 2500, 500, 1200, "10000")
	s := NewStatsSampler(StatsConfig{NodeName: "edge", Runtime: statsRuntime{logPath: logPath}, RootDir: t.TempDir()})
	s.Sample(context.Background())
	first := s.Summary()
	if first == nil || len(first.Pods) != 1 || first.Pods[0].Containers[0].CPU.UsageNanoCores != nil {
		t.Fatalf("first sample: %+v; want one pod and no rate yet", first)
	}
	// 0.5 s of CPU more in the container.
	writeCgroup(t, root, podCgroup("uid-1")+"/c1", 1_500_000, 2500, 500, 1200, "10000")
	time.Sleep(100 * time.Millisecond)
	s.Sample(context.Background())
	sum := s.Summary()

	if sum.Node.NodeName != "edge" || sum.Node.CPU == nil || *sum.Node.CPU.UsageCoreNanoSeconds == 0 || sum.Node.Memory == nil || *sum.Node.Memory.WorkingSetBytes == 0 || sum.Node.Fs == nil || *sum.Node.Fs.CapacityBytes == 0 {
		t.Errorf("node figures missing: %+v", sum.Node)
	}
	if len(sum.Node.SystemContainers) != 1 || sum.Node.SystemContainers[0].Name != "pods" || *sum.Node.SystemContainers[0].CPU.UsageCoreNanoSeconds != 5_000_000_000 {
		t.Errorf("pods system container: %+v", sum.Node.SystemContainers)
	}
	p := sum.Pods[0]
	if p.PodRef != (statsapi.PodReference{Name: "web", Namespace: "ns", UID: "uid-1"}) || !p.StartTime.Time.Equal(time.Unix(200, 0)) {
		t.Errorf("pod %+v started %v, want ns/web uid-1 of the newest sandbox", p.PodRef, p.StartTime)
	}
	if *p.CPU.UsageCoreNanoSeconds != 2_000_000_000 || *p.Memory.UsageBytes != 3000 || *p.Memory.WorkingSetBytes != 2000 || p.Memory.AvailableBytes != nil {
		t.Errorf("pod cpu %+v memory %+v", p.CPU, p.Memory)
	}
	if len(p.Containers) != 1 {
		t.Fatalf("containers %+v, want main only", p.Containers)
	}
	c := p.Containers[0]
	if c.Name != "main" || *c.CPU.UsageCoreNanoSeconds != 1_500_000_000 || c.CPU.UsageNanoCores == nil || *c.CPU.UsageNanoCores < 1_000_000_000 {
		t.Errorf("container cpu %+v (rate %v), want 1.5 s and a rate of several cores", c.CPU, c.CPU.UsageNanoCores)
	}
	if *c.Memory.WorkingSetBytes != 2000 || *c.Memory.RSSBytes != 1200 || *c.Memory.AvailableBytes != 8000 || *c.Memory.PageFaults != 7 || *c.Memory.MajorPageFaults != 2 {
		t.Errorf("container memory %+v", c.Memory)
	}
	// A log's usage is its blocks, as du counts it.
	var st syscall.Stat_t
	if err := syscall.Stat(logPath, &st); err != nil {
		t.Fatal(err)
	}
	if blocks := uint64(st.Blocks) * 512; c.Logs == nil || *c.Logs.UsedBytes != blocks || blocks == 0 || p.EphemeralStorage == nil || *p.EphemeralStorage.UsedBytes != blocks {
		t.Errorf("logs %+v ephemeral storage %+v, want %d bytes used", c.Logs, p.EphemeralStorage, blocks)
	}

	srv := NewServer(ServerConfig{Stats: s})
	rec := httptest.NewRecorder()
	srv.mux.ServeHTTP(rec, httptest.NewRequest("GET", "/stats/summary?only_cpu_and_memory=true", nil))
	var got statsapi.Summary
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
		t.Fatalf("/stats/summary: %d %s %v", rec.Code, rec.Body, err)
	}
	if got.Node.Fs != nil || len(got.Pods) != 1 || got.Pods[0].Containers[0].Logs != nil || got.Pods[0].Containers[0].CPU == nil {
		t.Errorf("only_cpu_and_memory: %+v", got)
	}
	rec = httptest.NewRecorder()
	srv.mux.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics/resource", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`container_cpu_usage_seconds_total{container="main",namespace="ns",pod="web"} 1.5 `,
		`container_memory_working_set_bytes{container="main",namespace="ns",pod="web"} 2000 `,
		`container_start_time_seconds{container="main",namespace="ns",pod="web"} 300 `,
		`pod_cpu_usage_seconds_total{namespace="ns",pod="web"} 2 `,
		`pod_memory_working_set_bytes{namespace="ns",pod="web"} 2000 `,
		"node_cpu_usage_seconds_total ",
		"node_memory_working_set_bytes ",
		"scrape_error 0\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics/resource lacks %q:\n%s", want, body)
		}
	}
}

// pid.available's figures come from the host: the lesser of pid_max and
// threads-max, and the tasks running now.
func TestNodeRlimit(t *testing.T) {
	r := nodeRlimit(nowMeta())
	if r == nil || r.MaxPID == nil || r.NumOfRunningProcesses == nil {
		t.Fatalf("nodeRlimit: %+v", r)
	}
	pidMax, err := readUint("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	threadsMax, err := readUint("/proc/sys/kernel/threads-max")
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(min(pidMax, threadsMax)); *r.MaxPID != want {
		t.Errorf("MaxPID %d, want min(pid_max %d, threads-max %d)", *r.MaxPID, pidMax, threadsMax)
	}
	// This test's own threads are running, and far fewer than the limit.
	if n := *r.NumOfRunningProcesses; n < int64(runtime.NumGoroutine()/100+1) || n >= *r.MaxPID {
		t.Errorf("NumOfRunningProcesses %d", n)
	}
}

// The sampler measures the pods the kubelet reports (StatsConfig.Pods)
// and lists the runtime only while the kubelet knows nothing yet.
func TestStatsSamplerPodsFromKubelet(t *testing.T) {
	root := fakeCgroupV2(t)
	writeCgroup(t, root, podCgroup("uid-2"), 3_000_000, 3000, 1000, 1500, "max")
	writeCgroup(t, root, podCgroup("uid-2")+"/c2", 2_000_000, 2500, 500, 1200, "max")
	known := false
	pods := func() ([]StatsPod, bool) {
		if !known {
			return nil, false
		}
		return []StatsPod{{UID: "uid-2", Name: "api", Namespace: "prod", Created: time.Unix(400, 0),
			Containers: []StatsContainer{{ID: "c2", Name: "srv", StartedAt: time.Unix(500, 0)}}}}, true
	}
	s := NewStatsSampler(StatsConfig{NodeName: "edge", Pods: pods, Runtime: statsRuntime{}, RootDir: t.TempDir()})
	s.Sample(context.Background())
	if got := s.Summary().Pods; len(got) != 1 || got[0].PodRef.Name != "web" {
		t.Fatalf("before the kubelet knows its pods: %+v, want the runtime's ns/web", got)
	}
	known = true
	s.Sample(context.Background())
	got := s.Summary().Pods
	if len(got) != 1 || got[0].PodRef != (statsapi.PodReference{Name: "api", Namespace: "prod", UID: "uid-2"}) || !got[0].StartTime.Time.Equal(time.Unix(400, 0)) {
		t.Fatalf("pods %+v, want the kubelet's prod/api", got)
	}
	if c := got[0].Containers; len(c) != 1 || c[0].Name != "srv" || *c[0].CPU.UsageCoreNanoSeconds != 2_000_000_000 || *got[0].CPU.UsageCoreNanoSeconds != 3_000_000_000 {
		t.Errorf("figures %+v of containers %+v", got[0].CPU, c)
	}
}

// The in-place parsers read what the kernel writes: "key value" lines
// with and without a unit or a colon, numbers too large or not numbers,
// and a last line without its newline.
func TestProcfsParsers(t *testing.T) {
	keys := []string{"MemTotal:", "usage_usec", "anon", "missing"}
	vals := make([]uint64, len(keys))
	in := "MemTotal:       16318564 kB\nusage_usec 123\nanon\t99999999999999999999\nother 5\nanon 7"
	if n := parseKeys([]byte(in), keys, vals); n != 3 || vals[0] != 16318564 || vals[1] != 123 || vals[2] != 7 || vals[3] != 0 {
		t.Errorf("parseKeys = %d %v, want 3 [16318564 123 7 0]", n, vals)
	}
	for in, want := range map[string]uint64{"0": 0, "18446744073709551615": 1<<64 - 1} {
		if n, ok := parseUint([]byte(in)); !ok || n != want {
			t.Errorf("parseUint(%q) = %d %v", in, n, ok)
		}
	}
	for _, in := range []string{"", "max", "18446744073709551616", "-1", "1 "} {
		if n, ok := parseUint([]byte(in)); ok {
			t.Errorf("parseUint(%q) = %d, want an error", in, n)
		}
	}
	dev := filepath.Join(t.TempDir(), "dev")
	os.WriteFile(dev, []byte("Inter-|   Receive |  Transmit\n face |bytes packets errs\n    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n  eth0: 1500 12 3 0 0 0 0 0 900 8 4 0 0 0 0 0\n bad: 1 2\n"), 0o644)
	got := readNetDev(dev)
	if len(got) != 2 || got[1] != (netDev{name: "eth0", rxBytes: 1500, rxErrs: 3, txBytes: 900, txErrs: 4}) {
		t.Errorf("readNetDev = %+v", got)
	}
	max := filepath.Join(t.TempDir(), "memory.max")
	os.WriteFile(max, []byte("max\n"), 0o644)
	if n, err := readUint(max); n != 0 || err != nil {
		t.Errorf("readUint(max) = %d %v, want 0 (no limit)", n, err)
	}
	if _, err := readUint(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("readUint of a missing file: no error")
	}
}

// A sample of pods reads its files without garbage proportional to them:
// per pod, the figures it keeps and little more.
func TestSampleAllocations(t *testing.T) {
	root := fakeCgroupV2(t)
	var pods []StatsPod
	for i := range 30 {
		uid := "uid-" + strconv.Itoa(i)
		writeCgroup(t, root, podCgroup(uid), 3_000_000, 3000, 1000, 1500, "max")
		writeCgroup(t, root, podCgroup(uid)+"/c", 2_000_000, 2500, 500, 1200, "max")
		pods = append(pods, StatsPod{UID: uid, Name: "p", Namespace: "ns", Containers: []StatsContainer{{ID: "c", Name: "c"}}})
	}
	s := NewStatsSampler(StatsConfig{NodeName: "edge", Pods: func() ([]StatsPod, bool) { return pods, true }, RootDir: t.TempDir()})
	ctx := context.Background()
	s.Sample(ctx)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s.Sample(ctx)
	runtime.ReadMemStats(&after)
	// What a sample keeps of 30 pods and 30 containers is about 40 KB of
	// Summary structs; reading the files with os.ReadFile and maps made
	// about 400 KB more.
	t.Logf("allocated %d KB", (after.TotalAlloc-before.TotalAlloc)>>10)
	if b := after.TotalAlloc - before.TotalAlloc; b > 150<<10 {
		t.Errorf("a sample of 30 pods allocated %d KB, want at most 150", b>>10)
	}
}

// layerRuntime measures writable layers as a runtime would: a fixed
// figure per container, an error for an unknown one.
type layerRuntime struct {
	cri.Runtime
	used map[string]uint64
}

func (r layerRuntime) ContainerLayerUsage(_ context.Context, id string) (uint64, uint64, error) {
	if u, ok := r.used[id]; ok {
		return u, 3, nil
	}
	return 0, 0, os.ErrNotExist
}

// Volumes and writable layers are measured on their own interval (at
// once for new ones) and reported in the summary: a volume's files by
// their blocks, each hard link once, symlinks not followed; a
// container's layer as the runtime measures it. The pod's ephemeral
// storage adds layers, logs and the ephemeral volumes (emptyDir on disk,
// configMap), not secrets.
func TestStatsVolumesAndLayers(t *testing.T) {
	fakeCgroupV2(t)
	vols := t.TempDir()
	empty, secret := filepath.Join(vols, "empty"), filepath.Join(vols, "secret")
	for _, d := range []string{filepath.Join(empty, "sub"), secret} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	big := filepath.Join(empty, "sub", "big")
	if err := os.WriteFile(big, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Link(big, filepath.Join(empty, "again"))     // counted once
	os.Symlink("/usr", filepath.Join(empty, "usr")) // not followed
	os.WriteFile(filepath.Join(secret, "token"), []byte("t"), 0o600)
	pods := []StatsPod{{UID: "u", Name: "p", Namespace: "ns",
		Containers: []StatsContainer{{ID: "c", Name: "c"}},
		Volumes:    []StatsVolume{{Name: "scratch", Path: empty, Ephemeral: true}, {Name: "creds", Path: secret}, {Name: "gone", Path: filepath.Join(vols, "none")}}}}
	s := NewStatsSampler(StatsConfig{NodeName: "n", Pods: func() ([]StatsPod, bool) { return pods, true },
		Runtime: layerRuntime{used: map[string]uint64{"c": 40960}}, RootDir: t.TempDir()})
	ctx := context.Background()
	s.Sample(ctx)
	if got := s.Summary().Pods[0]; len(got.VolumeStats) != 0 || got.Containers[0].Rootfs.UsedBytes != nil {
		t.Fatalf("figures before any measure: volumes %+v rootfs %+v", got.VolumeStats, got.Containers[0].Rootfs)
	}
	select {
	case <-s.disk.kick:
	default:
		t.Fatal("new volumes did not ask to be measured")
	}
	s.disk.measure(ctx, false)
	s.Sample(ctx)
	p := s.Summary().Pods[0]
	byName := map[string]statsapi.VolumeStats{}
	for _, v := range p.VolumeStats {
		byName[v.Name] = v
	}
	sc, cr := byName["scratch"], byName["creds"]
	if len(p.VolumeStats) != 2 || sc.UsedBytes == nil || cr.UsedBytes == nil {
		t.Fatalf("volume stats %+v, want scratch and creds (gone has none)", p.VolumeStats)
	}
	if u := *sc.UsedBytes; u < 1<<20 || u > 1<<20+64<<10 || *sc.InodesUsed != 4 || sc.CapacityBytes == nil {
		t.Errorf("scratch: %d bytes, %d inodes, capacity %v; want about 1 MiB once and 4 inodes (dir, sub, big with its second link, the symlink)", u, *sc.InodesUsed, sc.CapacityBytes)
	}
	c := p.Containers[0]
	if c.Rootfs == nil || c.Rootfs.UsedBytes == nil || *c.Rootfs.UsedBytes != 40960 || *c.Rootfs.InodesUsed != 3 {
		t.Errorf("rootfs %+v, want the runtime's 40960 bytes and 3 inodes", c.Rootfs)
	}
	if want := *sc.UsedBytes + 40960; p.EphemeralStorage == nil || *p.EphemeralStorage.UsedBytes != want {
		t.Errorf("ephemeral storage %v, want scratch + layer = %d (not the secret)", p.EphemeralStorage.UsedBytes, want)
	}
	// A pod that goes takes its figures with it.
	pods = nil
	s.Sample(ctx)
	s.disk.measure(ctx, true)
	if len(s.disk.volumes) != 0 || len(s.disk.layers) != 0 {
		t.Errorf("figures kept for a gone pod: %v %v", s.disk.volumes, s.disk.layers)
	}
}
