package kubelet

import (
	"bytes"
	"context"
	"log/slog"
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
	// Pods are the pods to measure, as the kubelet knows them; ok is
	// false while it knows nothing yet (before the agent starts), and
	// then Runtime is listed instead. Listing the runtime decodes every
	// container's whole OCI spec (containerd returns them), which made
	// most of a sample's garbage.
	Pods func() (pods []StatsPod, ok bool)
	// Runtime lists the pods and containers when Pods cannot; nil for a
	// node without any.
	Runtime cri.Runtime
	// RootDir is on the node's filesystem (nodefs: logs, volumes);
	// ImageFsDir on the runtime's image filesystem (RootDir if unset).
	RootDir, ImageFsDir string
	// Interval between samples; DefaultStatsInterval if unset.
	Interval time.Duration
	// VolumeStatsInterval is how often volumes and writable layers are
	// measured; DefaultVolumeStatsInterval if 0; negative: volumes are
	// not measured.
	VolumeStatsInterval time.Duration
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
	disk *diskUsage
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
	return &StatsSampler{cfg: cfg, prev: map[string]cpuPoint{}, disk: newDiskUsage(cfg.Runtime, cfg.VolumeStatsInterval)}
}

// Run samples at once, then every Interval until ctx ends; volumes and
// writable layers are measured on their own interval.
func (s *StatsSampler) Run(ctx context.Context) {
	go s.disk.run(ctx)
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
	if pods, ok := s.pods(ctx); ok {
		s.disk.track(pods)
		sum.Pods = s.podStats(pods, now, next)
	}
	s.mu.Lock()
	s.last, s.prev = sum, next
	s.mu.Unlock()
}

// StatsPod is a pod the sampler measures: its newest sandbox and the
// containers running in it.
type StatsPod struct {
	UID, Name, Namespace string
	Created              time.Time
	NetnsPath            string
	Containers           []StatsContainer
	Volumes              []StatsVolume
}

// StatsContainer is a running container of a StatsPod.
type StatsContainer struct {
	ID, Name, LogPath string
	StartedAt         time.Time
}

// pods are the pods to measure: from the kubelet's states, else listed
// from the runtime; false when there is nothing to ask.
func (s *StatsSampler) pods(ctx context.Context) ([]StatsPod, bool) {
	if s.cfg.Pods != nil {
		if pods, ok := s.cfg.Pods(); ok {
			return pods, true
		}
	}
	if s.cfg.Runtime == nil {
		return nil, false
	}
	sandboxes, err := s.cfg.Runtime.ListPodSandboxes(ctx)
	if err != nil {
		s.cfg.Logger.Debug("stats: list pod sandboxes", "err", err)
		return nil, true
	}
	containers, err := s.cfg.Runtime.ListContainers(ctx)
	if err != nil {
		s.cfg.Logger.Debug("stats: list containers", "err", err)
	}
	return statsPods(sandboxes, containers), true
}

// statsPods: the newest sandbox of each pod (an older one is going) with
// its running containers.
func statsPods(sandboxes []cri.Sandbox, containers []cri.ContainerStatus) []StatsPod {
	newest := map[string]cri.Sandbox{}
	for _, sb := range sandboxes {
		if o, ok := newest[sb.Config.PodUID]; !ok || sb.CreatedAt.After(o.CreatedAt) {
			newest[sb.Config.PodUID] = sb
		}
	}
	out := make([]StatsPod, 0, len(newest))
	for uid, sb := range newest {
		p := StatsPod{UID: uid, Name: sb.Config.Name, Namespace: sb.Config.Namespace, Created: sb.CreatedAt, NetnsPath: sb.Config.NetnsPath}
		for _, c := range containers {
			if c.SandboxID == sb.ID && c.State == cri.ContainerRunning {
				p.Containers = append(p.Containers, StatsContainer{ID: c.ID, Name: c.Name, LogPath: c.LogPath, StartedAt: c.StartedAt})
			}
		}
		out = append(out, p)
	}
	return out
}

func (s *StatsSampler) podStats(pods []StatsPod, now time.Time, next map[string]cpuPoint) []statsapi.PodStats {
	ts := metav1.NewTime(now)
	nodeFs, imageFs := fsStats(ts, s.cfg.RootDir), fsStats(ts, s.cfg.ImageFsDir)
	out := make([]statsapi.PodStats, 0, len(pods))
	for _, p := range pods {
		uid := p.UID
		ps := statsapi.PodStats{
			PodRef:     statsapi.PodReference{Name: p.Name, Namespace: p.Namespace, UID: uid},
			StartTime:  metav1.NewTime(p.Created),
			Containers: []statsapi.ContainerStats{},
		}
		if cpu, mem, ok := cgroupStats(podCgroup(uid), ts); ok {
			ps.CPU, ps.Memory = s.cpuStats("pod/"+uid, cpu, now, next), mem
		}
		if n, ok := cgroupPids(podCgroup(uid)); ok {
			ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: &n}
		}
		if p.NetnsPath != "" {
			var devs []netDev
			if err := netplugin.InNetns(p.NetnsPath, func() error {
				devs = readNetDev("/proc/thread-self/net/dev")
				return nil
			}); err == nil {
				ps.Network = networkStats(ts, devs, "eth0")
			}
		}
		vols, layers := s.disk.figures(&p)
		var ephUsed, ephInodes uint64
		for _, c := range p.Containers {
			cs := statsapi.ContainerStats{Name: c.Name, StartTime: metav1.NewTime(c.StartedAt)}
			if cpu, mem, ok := cgroupStats(podCgroup(uid)+"/"+c.ID, ts); ok {
				cs.CPU, cs.Memory = s.cpuStats("container/"+c.ID, cpu, now, next), mem
			}
			if imageFs != nil {
				rootfs := *imageFs
				rootfs.UsedBytes, rootfs.InodesUsed = nil, nil
				if l, ok := layers[c.ID]; ok && l.measured {
					rootfs.Time = metav1.NewTime(l.at)
					rootfs.UsedBytes, rootfs.InodesUsed = ptrTo(l.used), ptrTo(l.inodesUsed)
					ephUsed, ephInodes = ephUsed+l.used, ephInodes+l.inodesUsed
				}
				cs.Rootfs = &rootfs
			}
			if nodeFs != nil && c.LogPath != "" {
				logs := *nodeFs
				logs.UsedBytes, logs.InodesUsed = nil, nil
				var st unix.Stat_t
				if unix.Stat(c.LogPath, &st) == nil {
					used := uint64(st.Blocks) * 512
					logs.UsedBytes, logs.InodesUsed = &used, ptrTo(uint64(1))
					ephUsed, ephInodes = ephUsed+used, ephInodes+1
				}
				cs.Logs = &logs
			}
			ps.Containers = append(ps.Containers, cs)
		}
		for i, v := range p.Volumes {
			f := vols[i]
			if !f.measured {
				continue
			}
			vs := statsapi.VolumeStats{Name: v.Name}
			if f.fs != nil {
				vs.FsStats = *f.fs
			}
			vs.Time = metav1.NewTime(f.at)
			vs.UsedBytes, vs.InodesUsed = ptrTo(f.used), ptrTo(f.inodesUsed)
			ps.VolumeStats = append(ps.VolumeStats, vs)
			if f.ephemeral {
				ephUsed, ephInodes = ephUsed+f.used, ephInodes+f.inodesUsed
			}
		}
		if nodeFs != nil {
			eph := *nodeFs
			eph.UsedBytes, eph.InodesUsed = &ephUsed, &ephInodes
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
	return unix.Access(cgroupRoot+"/cgroup.controllers", unix.F_OK) == nil
}

// The memory.stat keys cgroupStats reads: the inactive file cache, rss,
// page faults and major faults, in v2's and in v1's (hierarchical) names.
var (
	memStatKeysV2 = []string{"inactive_file", "anon", "pgfault", "pgmajfault"}
	memStatKeysV1 = []string{"total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"}
	cpuStatKeysV2 = []string{"usage_usec"}
)

// cgroupStats reads a cgroup's cumulative CPU usage and its memory, from
// cgroup v2's cpu.stat and memory.* files, or v1's cpuacct and memory
// hierarchies; ok is false when the cgroup does not exist.
func cgroupStats(cgroup string, ts metav1.Time) (cpuNs uint64, mem *statsapi.MemoryStats, ok bool) {
	var usage, limit uint64
	var stat [4]uint64
	if cgroupV2() {
		dir := cgroupRoot + cgroup + "/"
		var us [1]uint64
		if n, _ := readKeys(dir+"cpu.stat", cpuStatKeysV2, us[:]); n == 0 {
			return 0, nil, false
		}
		cpuNs = us[0] * 1000
		usage, _ = readUint(dir + "memory.current")
		limit, _ = readUint(dir + "memory.max") // "max": 0
		readKeys(dir+"memory.stat", memStatKeysV2, stat[:])
	} else {
		var err error
		if cpuNs, err = readUint(cgroupRoot + "/cpuacct" + cgroup + "/cpuacct.usage"); err != nil {
			return 0, nil, false
		}
		dir := cgroupRoot + "/memory" + cgroup + "/"
		usage, _ = readUint(dir + "memory.usage_in_bytes")
		limit, _ = readUint(dir + "memory.limit_in_bytes")
		if limit >= 1<<62 { // v1's "no limit"
			limit = 0
		}
		readKeys(dir+"memory.stat", memStatKeysV1, stat[:])
	}
	mem = memoryStats(ts, usage, stat[0], limit)
	mem.RSSBytes, mem.PageFaults, mem.MajorPageFaults = ptrTo(stat[1]), ptrTo(stat[2]), ptrTo(stat[3])
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
	bp, err := readSmall("/proc/stat")
	if err != nil {
		return 0, false
	}
	defer putBuf(bp)
	line, _ := nextLine(*bp)
	name, rest := nextField(line)
	if string(name) != "cpu" {
		return 0, false
	}
	var jiffies uint64
	// user nice system idle iowait irq softirq steal: all but idle and
	// iowait are use.
	for i := 0; i < 8; i++ {
		var f []byte
		f, rest = nextField(rest)
		n, ok := parseUint(f)
		if !ok {
			return 0, false
		}
		if i != 3 && i != 4 {
			jiffies += n
		}
	}
	return jiffies * uint64(time.Second/userHZ), true
}

// userHZ is the unit of /proc/stat's times, 100 on every Linux ABI.
const userHZ = 100

var btimeKey = []string{"btime"}

// bootTime is when the node started, from /proc/stat's btime.
func bootTime() time.Time {
	var btime [1]uint64
	if n, _ := readKeys("/proc/stat", btimeKey, btime[:]); n == 0 {
		return time.Time{}
	}
	return time.Unix(int64(btime[0]), 0)
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
	var stat [4]uint64
	if cgroupV2() {
		dir := cgroupRoot + "/bonsai/"
		usage, _ = readUint(dir + "memory.current")
		readKeys(dir+"memory.stat", memStatKeysV2, stat[:])
		return usage, stat[0]
	}
	dir := cgroupRoot + "/memory/bonsai/"
	usage, _ = readUint(dir + "memory.usage_in_bytes")
	readKeys(dir+"memory.stat", memStatKeysV1, stat[:])
	return usage, stat[0]
}

func nowMeta() metav1.Time { return metav1.NewTime(time.Now()) }

// cgroupPids is how many tasks a cgroup holds (pids.current of v2 or of
// v1's pids hierarchy); false when the pids controller does not count it.
func cgroupPids(cgroup string) (uint64, bool) {
	path := cgroupRoot + "/pids" + cgroup + "/pids.current"
	if cgroupV2() {
		path = cgroupRoot + cgroup + "/pids.current"
	}
	bp, err := readSmall(path)
	if err != nil {
		return 0, false
	}
	defer putBuf(bp)
	return parseUint(bytes.TrimSpace(*bp))
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
	bp, err := readSmall("/proc/loadavg")
	if err != nil {
		return nil
	}
	defer putBuf(bp)
	var f []byte
	rest := *bp
	for range 4 {
		f, rest = nextField(rest)
	}
	_, total, ok := bytes.Cut(f, []byte("/"))
	if !ok {
		return nil
	}
	n, ok := parseUint(total)
	if !ok {
		return nil
	}
	return &statsapi.RlimitStats{Time: ts, MaxPID: ptrTo(int64(maxPID)), NumOfRunningProcesses: ptrTo(int64(n))}
}

var (
	meminfoKeys = []string{"MemTotal:", "MemFree:", "Inactive(file):", "AnonPages:"}
	vmstatKeys  = []string{"pgfault", "pgmajfault"}
)

// hostMemory is the host's memory from /proc/meminfo.
func hostMemory(ts metav1.Time) *statsapi.MemoryStats {
	var mi [4]uint64 // kB
	readKeys("/proc/meminfo", meminfoKeys, mi[:])
	total, free := mi[0]*1024, mi[1]*1024
	if total == 0 {
		return nil
	}
	m := memoryStats(ts, total-free, mi[2]*1024, total)
	m.RSSBytes = ptrTo(mi[3] * 1024)
	var vm [2]uint64
	readKeys("/proc/vmstat", vmstatKeys, vm[:])
	m.PageFaults, m.MajorPageFaults = ptrTo(vm[0]), ptrTo(vm[1])
	return m
}

// netDev is one interface's counters from /proc/net/dev.
type netDev struct {
	name                             string
	rxBytes, rxErrs, txBytes, txErrs uint64
}

func readNetDev(path string) []netDev {
	bp, err := readSmall(path)
	if err != nil {
		return nil
	}
	defer putBuf(bp)
	var out []netDev
	b := *bp
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var f [11]uint64
		i := 0
		for ; i < len(f); i++ {
			var field []byte
			if field, rest = nextField(rest); len(field) == 0 {
				break
			}
			f[i], _ = parseUint(field)
		}
		if i < len(f) {
			continue
		}
		out = append(out, netDev{name: string(bytes.TrimSpace(name)), rxBytes: f[0], rxErrs: f[2], txBytes: f[8], txErrs: f[10]})
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
	bp, err := readSmall("/proc/net/route")
	if err != nil {
		return ""
	}
	defer putBuf(bp)
	b := *bp
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		name, rest := nextField(line)
		if dst, _ := nextField(rest); string(dst) == "00000000" {
			return string(name)
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
