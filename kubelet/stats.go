package kubelet

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/netplugin"
)

// DefaultStatsInterval is how often the figures are sampled: the
// kubelet's cAdvisor housekeeping interval.
const DefaultStatsInterval = 10 * time.Second

// StatsConfig is what the stats sampler reads.
type StatsConfig struct {
	NodeName string
	// Runtime lists the pods and containers; nil for a node without any.
	Runtime cri.Runtime
	// RootDir is on the node's filesystem (nodefs: logs, volumes);
	// ImageFsDir on the runtime's image filesystem (RootDir if unset).
	RootDir, ImageFsDir string
	// Interval between samples; DefaultStatsInterval if unset.
	Interval time.Duration
	// MemoryCapacity, when above 0, stands in for the host's memory: the
	// node's memory is then what the pods use (bonsai's pod cgroup)
	// against this budget, not the host's. For tests and sandboxes that
	// must feel memory pressure without filling the host (as a cgroup
	// limit would), never for a real node.
	MemoryCapacity int64
	Logger         *slog.Logger
}

// StatsSampler samples the node's, its pods' and their containers' CPU,
// memory, network and filesystem figures every Interval, from cgroups
// (v2, or v1's cpuacct and memory hierarchies), /proc, the pods' network
// namespaces and statfs, as the kubelet's cAdvisor does: /stats/summary
// and /metrics/resource serve the last sample, so a request never costs
// a walk of the cgroups, and usageNanoCores is the rate between two
// samples.
type StatsSampler struct {
	cfg StatsConfig

	mu   sync.Mutex
	last *statsapi.Summary
	// prev is the last cumulative CPU figure of each node, pod and
	// container, for the next rate.
	prev map[string]cpuPoint
}

type cpuPoint struct {
	usageNs uint64
	at      time.Time
}

// NewStatsSampler builds a sampler; Run samples.
func NewStatsSampler(cfg StatsConfig) *StatsSampler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultStatsInterval
	}
	if cfg.ImageFsDir == "" {
		cfg.ImageFsDir = cfg.RootDir
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &StatsSampler{cfg: cfg, prev: map[string]cpuPoint{}}
}

// Run samples at once, then every Interval until ctx ends.
func (s *StatsSampler) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.Sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Summary is the last sample; nil before the first.
func (s *StatsSampler) Summary() *statsapi.Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Sample takes one sample now.
func (s *StatsSampler) Sample(ctx context.Context) {
	now := time.Now()
	sum := &statsapi.Summary{Node: statsapi.NodeStats{NodeName: s.cfg.NodeName, StartTime: metav1.NewTime(bootTime())}, Pods: []statsapi.PodStats{}}
	n := &sum.Node
	ts := metav1.NewTime(now)
	next := map[string]cpuPoint{}
	if usage, ok := nodeCPU(); ok {
		n.CPU = s.cpuStats("node", usage, now, next)
	}
	n.Memory = s.nodeMemory(ts)
	n.Rlimit = nodeRlimit(ts)
	n.Network = networkStats(ts, readNetDev("/proc/net/dev"), defaultInterface())
	n.Fs = fsStats(ts, s.cfg.RootDir)
	n.Runtime = &statsapi.RuntimeStats{ImageFs: fsStats(ts, s.cfg.ImageFsDir)}
	if cpu, mem, ok := cgroupStats("/bonsai", ts); ok {
		pods := statsapi.ContainerStats{Name: statsapi.SystemContainerPods, StartTime: n.StartTime, Memory: mem}
		pods.CPU = s.cpuStats("pods", cpu, now, next)
		n.SystemContainers = append(n.SystemContainers, pods)
	}
	if s.cfg.Runtime != nil {
		sum.Pods = s.podStats(ctx, now, next)
	}
	s.mu.Lock()
	s.last, s.prev = sum, next
	s.mu.Unlock()
}

func (s *StatsSampler) podStats(ctx context.Context, now time.Time, next map[string]cpuPoint) []statsapi.PodStats {
	ts := metav1.NewTime(now)
	sandboxes, err := s.cfg.Runtime.ListPodSandboxes(ctx)
	if err != nil {
		s.cfg.Logger.Debug("stats: list pod sandboxes", "err", err)
		return []statsapi.PodStats{}
	}
	containers, err := s.cfg.Runtime.ListContainers(ctx)
	if err != nil {
		s.cfg.Logger.Debug("stats: list containers", "err", err)
	}
	// The newest sandbox of each pod: an older one is going.
	newest := map[string]cri.Sandbox{}
	for _, sb := range sandboxes {
		if o, ok := newest[sb.Config.PodUID]; !ok || sb.CreatedAt.After(o.CreatedAt) {
			newest[sb.Config.PodUID] = sb
		}
	}
	nodeFs, imageFs := fsStats(ts, s.cfg.RootDir), fsStats(ts, s.cfg.ImageFsDir)
	out := []statsapi.PodStats{}
	for uid, sb := range newest {
		ps := statsapi.PodStats{
			PodRef:     statsapi.PodReference{Name: sb.Config.Name, Namespace: sb.Config.Namespace, UID: uid},
			StartTime:  metav1.NewTime(sb.CreatedAt),
			Containers: []statsapi.ContainerStats{},
		}
		if cpu, mem, ok := cgroupStats(podCgroup(uid), ts); ok {
			ps.CPU, ps.Memory = s.cpuStats("pod/"+uid, cpu, now, next), mem
		}
		if n, ok := cgroupPids(podCgroup(uid)); ok {
			ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: &n}
		}
		if sb.Config.NetnsPath != "" {
			var devs []netDev
			if err := netplugin.InNetns(sb.Config.NetnsPath, func() error {
				devs = readNetDev("/proc/thread-self/net/dev")
				return nil
			}); err == nil {
				ps.Network = networkStats(ts, devs, "eth0")
			}
		}
		var logsUsed uint64
		for _, c := range containers {
			if c.SandboxID != sb.ID || c.State != cri.ContainerRunning {
				continue
			}
			cs := statsapi.ContainerStats{Name: c.Name, StartTime: metav1.NewTime(c.StartedAt)}
			if cpu, mem, ok := cgroupStats(podCgroup(uid)+"/"+c.ID, ts); ok {
				cs.CPU, cs.Memory = s.cpuStats("container/"+c.ID, cpu, now, next), mem
			}
			if imageFs != nil {
				rootfs := *imageFs
				rootfs.UsedBytes = nil // the snapshot's own usage is not measured
				cs.Rootfs = &rootfs
			}
			if nodeFs != nil && c.LogPath != "" {
				logs := *nodeFs
				if fi, err := os.Stat(c.LogPath); err == nil {
					used := uint64(fi.Size())
					logs.UsedBytes, logsUsed = &used, logsUsed+used
				}
				cs.Logs = &logs
			}
			ps.Containers = append(ps.Containers, cs)
		}
		if nodeFs != nil {
			eph := *nodeFs
			eph.UsedBytes = &logsUsed
			ps.EphemeralStorage = &eph
		}
		out = append(out, ps)
	}
	return out
}

// cpuStats is the CPU figure of key: cumulative usage, and the rate
// since key's previous sample.
func (s *StatsSampler) cpuStats(key string, usageNs uint64, now time.Time, next map[string]cpuPoint) *statsapi.CPUStats {
	st := &statsapi.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: ptrTo(usageNs)}
	next[key] = cpuPoint{usageNs, now}
	s.mu.Lock()
	prev, ok := s.prev[key]
	s.mu.Unlock()
	if ok && usageNs >= prev.usageNs && now.After(prev.at) {
		rate := float64(usageNs-prev.usageNs) / now.Sub(prev.at).Seconds()
		st.UsageNanoCores = ptrTo(uint64(rate))
	}
	return st
}

func ptrTo[T any](v T) *T { return &v }

// cgroupV2 says whether the unified hierarchy is mounted at cgroupRoot.
func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// cgroupStats reads a cgroup's cumulative CPU usage and its memory, from
// cgroup v2's cpu.stat and memory.* files, or v1's cpuacct and memory
// hierarchies; ok is false when the cgroup does not exist.
func cgroupStats(cgroup string, ts metav1.Time) (cpuNs uint64, mem *statsapi.MemoryStats, ok bool) {
	var usage, limit uint64
	var stat map[string]uint64
	var inactiveKey, rssKey, faultKey, majorKey string
	if cgroupV2() {
		dir := filepath.Join(cgroupRoot, cgroup)
		cpu := readKeyed(filepath.Join(dir, "cpu.stat"))
		us, found := cpu["usage_usec"]
		if !found {
			return 0, nil, false
		}
		cpuNs = us * 1000
		usage, _ = readUint(filepath.Join(dir, "memory.current"))
		limit, _ = readUint(filepath.Join(dir, "memory.max")) // "max": 0
		stat = readKeyed(filepath.Join(dir, "memory.stat"))
		inactiveKey, rssKey, faultKey, majorKey = "inactive_file", "anon", "pgfault", "pgmajfault"
	} else {
		var err error
		if cpuNs, err = readUint(filepath.Join(cgroupRoot, "cpuacct", cgroup, "cpuacct.usage")); err != nil {
			return 0, nil, false
		}
		dir := filepath.Join(cgroupRoot, "memory", cgroup)
		usage, _ = readUint(filepath.Join(dir, "memory.usage_in_bytes"))
		limit, _ = readUint(filepath.Join(dir, "memory.limit_in_bytes"))
		if limit >= 1<<62 { // v1's "no limit"
			limit = 0
		}
		stat = readKeyed(filepath.Join(dir, "memory.stat"))
		inactiveKey, rssKey, faultKey, majorKey = "total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"
	}
	mem = memoryStats(ts, usage, stat[inactiveKey], limit)
	mem.RSSBytes, mem.PageFaults, mem.MajorPageFaults = ptrTo(stat[rssKey]), ptrTo(stat[faultKey]), ptrTo(stat[majorKey])
	return cpuNs, mem, true
}

// memoryStats: the working set is what is in use less the inactive file
// cache the kernel can drop, as the kubelet counts it; what is available
// is the limit (the node's memory for the node) less the working set.
func memoryStats(ts metav1.Time, usage, inactiveFile, limit uint64) *statsapi.MemoryStats {
	ws := usage
	if inactiveFile < ws {
		ws -= inactiveFile
	} else {
		ws = 0
	}
	m := &statsapi.MemoryStats{Time: ts, UsageBytes: ptrTo(usage), WorkingSetBytes: ptrTo(ws)}
	if limit > 0 {
		avail := uint64(0)
		if limit > ws {
			avail = limit - ws
		}
		m.AvailableBytes = ptrTo(avail)
	}
	return m
}

// nodeCPU is the node's cumulative CPU time from /proc/stat, in ns.
func nodeCPU() (uint64, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 || fields[0] != "cpu" {
			continue
		}
		var jiffies uint64
		// user nice system idle iowait irq softirq steal: all but idle
		// and iowait are use.
		for i, v := range fields[1:9] {
			if i == 3 || i == 4 {
				continue
			}
			n, _ := strconv.ParseUint(v, 10, 64)
			jiffies += n
		}
		return jiffies * uint64(time.Second/userHZ), true
	}
	return 0, false
}

// userHZ is the unit of /proc/stat's times, 100 on every Linux ABI.
const userHZ = 100

// bootTime is when the node started, from /proc/stat's btime.
func bootTime() time.Time {
	for k, v := range readKeyed("/proc/stat") {
		if k == "btime" {
			return time.Unix(int64(v), 0)
		}
	}
	return time.Time{}
}

// nodeMemory is the node's memory: the host's, or the pods' against
// MemoryCapacity when that is set.
func (s *StatsSampler) nodeMemory(ts metav1.Time) *statsapi.MemoryStats {
	if s.cfg.MemoryCapacity <= 0 {
		return hostMemory(ts)
	}
	usage, inactive := podsMemory()
	return memoryStats(ts, usage, inactive, uint64(s.cfg.MemoryCapacity))
}

// podsMemory is the usage and inactive file cache of bonsai's pod cgroup.
func podsMemory() (usage, inactiveFile uint64) {
	if cgroupV2() {
		dir := filepath.Join(cgroupRoot, "bonsai")
		usage, _ = readUint(filepath.Join(dir, "memory.current"))
		return usage, readKeyed(filepath.Join(dir, "memory.stat"))["inactive_file"]
	}
	dir := filepath.Join(cgroupRoot, "memory", "bonsai")
	usage, _ = readUint(filepath.Join(dir, "memory.usage_in_bytes"))
	return usage, readKeyed(filepath.Join(dir, "memory.stat"))["total_inactive_file"]
}

func nowMeta() metav1.Time { return metav1.NewTime(time.Now()) }

// cgroupPids is how many tasks a cgroup holds (pids.current of v2 or of
// v1's pids hierarchy); false when the pids controller does not count it.
func cgroupPids(cgroup string) (uint64, bool) {
	path := filepath.Join(cgroupRoot, "pids", cgroup, "pids.current")
	if cgroupV2() {
		path = filepath.Join(cgroupRoot, cgroup, "pids.current")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// nodeRlimit is the node's process figures for pid.available: the most
// pids the kernel hands out (the lesser of pid_max and threads-max, as
// the kubelet reads them) and the tasks running now (/proc/loadavg's
// count of scheduling entities).
func nodeRlimit(ts metav1.Time) *statsapi.RlimitStats {
	pidMax, err1 := readUint("/proc/sys/kernel/pid_max")
	threadsMax, err2 := readUint("/proc/sys/kernel/threads-max")
	if err1 != nil && err2 != nil {
		return nil
	}
	maxPID := pidMax
	if err1 != nil || (err2 == nil && threadsMax < maxPID) {
		maxPID = threadsMax
	}
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return nil
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return nil
	}
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		return nil
	}
	return &statsapi.RlimitStats{Time: ts, MaxPID: ptrTo(int64(maxPID)), NumOfRunningProcesses: &n}
}

// hostMemory is the host's memory from /proc/meminfo.
func hostMemory(ts metav1.Time) *statsapi.MemoryStats {
	mi := readKeyed("/proc/meminfo") // kB
	total, free := mi["MemTotal:"]*1024, mi["MemFree:"]*1024
	if total == 0 {
		return nil
	}
	m := memoryStats(ts, total-free, mi["Inactive(file):"]*1024, total)
	m.RSSBytes = ptrTo(mi["AnonPages:"] * 1024)
	vm := readKeyed("/proc/vmstat")
	m.PageFaults, m.MajorPageFaults = ptrTo(vm["pgfault"]), ptrTo(vm["pgmajfault"])
	return m
}

// netDev is one interface's counters from /proc/net/dev.
type netDev struct {
	name                             string
	rxBytes, rxErrs, txBytes, txErrs uint64
}

func readNetDev(path string) []netDev {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []netDev
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			continue
		}
		u := func(i int) uint64 { n, _ := strconv.ParseUint(f[i], 10, 64); return n }
		out = append(out, netDev{name: strings.TrimSpace(name), rxBytes: u(0), rxErrs: u(2), txBytes: u(8), txErrs: u(10)})
	}
	return out
}

// networkStats: every interface but lo, the one named main as the
// default (else the first).
func networkStats(ts metav1.Time, devs []netDev, main string) *statsapi.NetworkStats {
	ns := &statsapi.NetworkStats{Time: ts}
	for _, d := range devs {
		if d.name == "lo" {
			continue
		}
		is := statsapi.InterfaceStats{Name: d.name, RxBytes: ptrTo(d.rxBytes), RxErrors: ptrTo(d.rxErrs), TxBytes: ptrTo(d.txBytes), TxErrors: ptrTo(d.txErrs)}
		ns.Interfaces = append(ns.Interfaces, is)
		if d.name == main || ns.InterfaceStats.Name == "" {
			ns.InterfaceStats = is
		}
	}
	if len(ns.Interfaces) == 0 {
		return nil
	}
	return ns
}

// defaultInterface is the interface of the default IPv4 route.
func defaultInterface() string {
	b, _ := os.ReadFile("/proc/net/route")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "00000000" {
			return f[0]
		}
	}
	return ""
}

// fsStats is the filesystem holding dir; nil if it cannot be read.
func fsStats(ts metav1.Time, dir string) *statsapi.FsStats {
	var st unix.Statfs_t
	if dir == "" || unix.Statfs(dir, &st) != nil {
		return nil
	}
	bs := uint64(st.Bsize)
	capacity, avail, free := st.Blocks*bs, st.Bavail*bs, st.Bfree*bs
	return &statsapi.FsStats{Time: ts, CapacityBytes: ptrTo(capacity), AvailableBytes: ptrTo(avail), UsedBytes: ptrTo(capacity - free),
		Inodes: ptrTo(st.Files), InodesFree: ptrTo(st.Ffree), InodesUsed: ptrTo(st.Files - st.Ffree)}
}

// readKeyed reads "key value" lines (cpu.stat, memory.stat, /proc/vmstat,
// /proc/meminfo with its "key:" and unit).
func readKeyed(path string) map[string]uint64 {
	out := map[string]uint64{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if n, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			out[f[0]] = n
		}
	}
	return out
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, nil // "max"
	}
	return n, nil
}
