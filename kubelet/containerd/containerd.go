// Package containerd is the node agent's real runtime: cri.Runtime over
// containerd's client API. A pod sandbox is a task-less containerd
// container that records the pod's network namespace; containers join that
// namespace. Everything the kubelet must find again after a restart (which
// sandbox a container belongs to, when it started, how it ended) is kept in
// containerd's own labels, so bonsai keeps no runtime state of its own and
// re-adopts running containers as they are. It must not talk to the API
// server: that is the kubelet's job.
package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/contrib/apparmor"
	"github.com/containerd/containerd/contrib/seccomp"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"bonsai.dev/bonsai/kubelet/cri"
)

// Labels bonsai keeps on containerd containers.
const (
	labelKind     = "io.bonsai.kind" // "sandbox" or "container"
	labelSandbox  = "io.bonsai.sandbox"
	labelConfig   = "io.bonsai.config" // the sandbox's config, JSON
	labelName     = "io.bonsai.name"
	labelAttempt  = "io.bonsai.attempt"
	labelImage    = "io.bonsai.image"
	labelLogPath  = "io.bonsai.log"
	labelStdin    = "io.bonsai.stdin"
	labelTTY      = "io.bonsai.tty"
	labelStarted  = "io.bonsai.started"
	labelFinished = "io.bonsai.finished"
	labelExit     = "io.bonsai.exit"
	labelReason   = "io.bonsai.reason"
	labelCgroup   = "io.bonsai.cgroup"
	labelStopSig  = "io.bonsai.stopsignal"
	labelImageRef = "io.bonsai.imageref"
)

// MinVersion is the oldest containerd bonsai drives.
const MinVersion = "1.6"

// Config says where containerd is and where bonsai keeps its stream FIFOs.
type Config struct {
	Endpoint    string // unix socket
	Namespace   string // containerd namespace, "k8s.io"
	StateDir    string // FIFOs for container streams
	Snapshotter string // "" = overlayfs
	LogMaxSize  int64
	LogMaxFiles int
	Logger      *slog.Logger
	// Hosts configures registries (mirrors, credentials); nil = defaults.
	Hosts *Registries
	// NoDefaultEndpoint: a registry Hosts lists mirrors for is pulled
	// from those mirrors only, never from the registry itself (k3s's
	// --disable-default-registry-endpoint), so an air-gapped box never
	// sends a pull (or a name lookup) out of the site.
	NoDefaultEndpoint bool
	// CDISpecDirs are where CDI specs are looked up for device plugins'
	// CDI devices; nil = DefaultCDISpecDirs.
	CDISpecDirs []string
}

// Runtime is a connected containerd.
type Runtime struct {
	client *containerd.Client
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // namespaced, lives as long as the Runtime
	cancel context.CancelFunc
	events chan string

	mu   sync.Mutex
	ios  map[string]*containerIO // by container id, for running tasks
	wait map[string]bool         // exit watchers started
}

// containerIO is the reading side of a running container's streams.
type containerIO struct {
	dio  *cio.DirectIO
	log  *logFile
	done chan struct{} // closed when stdout and stderr hit EOF
}

// New connects to containerd, checks its version and re-attaches to the
// containers still running from before a restart.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = "k8s.io"
	}
	if cfg.Snapshotter == "" {
		cfg.Snapshotter = "overlayfs"
	}
	if cfg.LogMaxSize == 0 {
		cfg.LogMaxSize = DefaultLogMaxSize
	}
	if cfg.LogMaxFiles == 0 {
		cfg.LogMaxFiles = DefaultLogMaxFiles
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, err := os.Stat(cfg.Endpoint); err != nil {
		return nil, fmt.Errorf("container runtime: socket %s: %w", cfg.Endpoint, errors.Unwrap(err))
	}
	client, err := containerd.New(cfg.Endpoint, containerd.WithDefaultNamespace(cfg.Namespace), containerd.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("container runtime: connect to %s: %w", cfg.Endpoint, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Runtime{client: client, cfg: cfg, log: cfg.Logger, ctx: rctx, cancel: cancel,
		events: make(chan string, 256), ios: map[string]*containerIO{}, wait: map[string]bool{}}
	v, err := r.client.Version(ctx)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("container runtime: containerd at %s does not answer: %w", cfg.Endpoint, err)
	}
	if !versionAtLeast(v.Version, MinVersion) {
		r.Close()
		return nil, fmt.Errorf("container runtime: containerd %s at %s is too old; bonsai needs %s or newer", v.Version, cfg.Endpoint, MinVersion)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		r.Close()
		return nil, fmt.Errorf("container runtime: %w", err)
	}
	if err := r.reattach(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// versionAtLeast compares dotted versions such as "1.6.20~ds1" and "1.6".
func versionAtLeast(have, want string) bool {
	h := strings.FieldsFunc(strings.TrimPrefix(have, "v"), func(r rune) bool { return r == '.' || r == '-' || r == '~' || r == '+' })
	w := strings.Split(want, ".")
	for i := range w {
		wn, _ := strconv.Atoi(w[i])
		if i >= len(h) {
			return wn == 0
		}
		hn, err := strconv.Atoi(h[i])
		if err != nil {
			return false
		}
		if hn != wn {
			return hn > wn
		}
	}
	return true
}

func (r *Runtime) nsctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}

// Version implements cri.Runtime.
func (r *Runtime) Version(ctx context.Context) (string, error) {
	v, err := r.client.Version(r.nsctx(ctx))
	if err != nil {
		return "", err
	}
	return "containerd://" + v.Version, nil
}

// Events implements cri.Runtime.
func (r *Runtime) Events() <-chan string { return r.events }

// Close stops watching containers. Running containers keep running, and
// their FIFOs stay, so the next start re-attaches.
func (r *Runtime) Close() error {
	r.cancel()
	return r.client.Close()
}

func newID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// RunPodSandbox implements cri.Runtime.
func (r *Runtime) RunPodSandbox(ctx context.Context, cfg cri.SandboxConfig) (string, error) {
	ctx = r.nsctx(ctx)
	raw, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	id := newID()
	labels := map[string]string{labelKind: "sandbox", labelConfig: string(raw)}
	_, err = r.client.NewContainer(ctx, id, containerd.WithContainerLabels(labels), containerd.WithSpec(&specs.Spec{Version: specs.Version}))
	if err != nil {
		return "", fmt.Errorf("create sandbox for pod %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	return id, nil
}

// RemovePodSandbox implements cri.Runtime.
func (r *Runtime) RemovePodSandbox(ctx context.Context, id string) error {
	ctx = r.nsctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if err := c.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// listKind lists bonsai's containerd containers of one kind ("sandbox"
// or "container").
func (r *Runtime) listKind(ctx context.Context, kind string) ([]containers.Container, error) {
	return r.client.ContainerService().List(ctx, fmt.Sprintf("labels.%q==%s", labelKind, kind))
}

// ListPodSandboxes implements cri.Runtime.
func (r *Runtime) ListPodSandboxes(ctx context.Context) ([]cri.Sandbox, error) {
	ctx = r.nsctx(ctx)
	cs, err := r.listKind(ctx, "sandbox")
	if err != nil {
		return nil, err
	}
	out := make([]cri.Sandbox, 0, len(cs))
	for _, c := range cs {
		sb := cri.Sandbox{ID: c.ID, CreatedAt: c.CreatedAt}
		if err := json.Unmarshal([]byte(c.Labels[labelConfig]), &sb.Config); err != nil {
			r.log.Warn("sandbox with unreadable config", "id", c.ID, "err", err)
		}
		out = append(out, sb)
	}
	return out, nil
}

func (r *Runtime) sandbox(ctx context.Context, id string) (cri.SandboxConfig, error) {
	var cfg cri.SandboxConfig
	c, err := r.client.ContainerService().Get(ctx, id)
	if err != nil {
		return cfg, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return cfg, json.Unmarshal([]byte(c.Labels[labelConfig]), &cfg)
}

// CreateContainer implements cri.Runtime.
func (r *Runtime) CreateContainer(ctx context.Context, sandboxID string, cfg cri.ContainerConfig) (string, error) {
	ctx = r.nsctx(ctx)
	sb, err := r.sandbox(ctx, sandboxID)
	if err != nil {
		return "", err
	}
	img, err := r.getImage(ctx, cfg.Image)
	if err != nil {
		return "", err
	}
	if img == nil {
		return "", fmt.Errorf("image %q is not present", cfg.Image)
	}
	imgCfg, err := imageConfig(ctx, img)
	if err != nil {
		return "", err
	}
	id := newID()
	args := resolveArgs(imgCfg.Entrypoint, imgCfg.Cmd, cfg.Command, cfg.Args)
	if len(args) == 0 {
		return "", fmt.Errorf("container %s: no command given and image %s has none", cfg.Name, cfg.Image)
	}
	cgroup := filepath.Join(cgroupParent(cfg.CgroupParent), id)
	opts := []oci.SpecOpts{
		oci.WithDefaultSpec(), oci.WithDefaultUnixDevices,
		oci.WithImageConfig(img),
		oci.WithProcessArgs(args...),
		oci.WithEnv(cfg.Env),
		oci.WithHostname(sb.Hostname),
		oci.WithCgroup(cgroup),
		oci.WithMounts(ociMounts(cfg.Mounts)),
	}
	if cfg.WorkingDir != "" {
		opts = append(opts, oci.WithProcessCwd(cfg.WorkingDir))
	}
	if sb.NetnsPath != "" {
		opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: sb.NetnsPath}))
	} else {
		opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostHostsFile, oci.WithHostResolvconf)
	}
	if cfg.TTY {
		opts = append(opts, oci.WithTTY)
	}
	if cfg.RunAsUser != nil || cfg.RunAsGroup != nil {
		opts = append(opts, withUser(cfg.RunAsUser, cfg.RunAsGroup))
	}
	if len(cfg.SupplementalGroups) > 0 {
		opts = append(opts, withSupplementalGroups(cfg.SupplementalGroups))
	}
	if cfg.Privileged {
		opts = append(opts, oci.WithPrivileged, oci.WithAllDevicesAllowed, oci.WithHostDevices, oci.WithWriteableSysfs, oci.WithWriteableCgroupfs, withUnmaskedPaths)
	}
	if len(cfg.CapAdd) > 0 {
		opts = append(opts, oci.WithAddedCapabilities(capNames(cfg.CapAdd)))
	}
	if len(cfg.CapDrop) > 0 {
		opts = append(opts, oci.WithDroppedCapabilities(capNames(cfg.CapDrop)))
	}
	if cfg.ReadOnlyRootfs {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	if cfg.NoNewPrivileges {
		opts = append(opts, oci.WithNoNewPrivileges)
	}
	// After the capabilities: the default profile allows the syscalls of
	// the capabilities the container holds.
	switch cfg.AppArmor {
	case "":
	case cri.AppArmorRuntimeDefault:
		// containerd's CRI plugin loads and names its default the same
		// way.
		opts = append(opts, apparmor.WithDefaultProfile("cri-containerd.apparmor.d"))
	default:
		opts = append(opts, apparmor.WithProfile(cfg.AppArmor))
	}
	switch cfg.Seccomp.Type {
	case cri.SeccompRuntimeDefault:
		opts = append(opts, seccomp.WithDefaultProfile())
	case cri.SeccompLocalhost:
		opts = append(opts, seccomp.WithProfile(cfg.Seccomp.LocalhostPath))
	}
	if cfg.MemoryLimit > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(cfg.MemoryLimit)))
	}
	if cfg.CPUShares > 0 {
		opts = append(opts, oci.WithCPUShares(uint64(cfg.CPUShares)))
	}
	if cfg.CPUQuota > 0 {
		opts = append(opts, oci.WithCPUCFS(cfg.CPUQuota, uint64(cfg.CPUPeriod)))
	}
	if cfg.OOMScoreAdj != 0 {
		opts = append(opts, withOOMScoreAdj(cfg.OOMScoreAdj))
	}
	if len(cfg.Devices) > 0 {
		opts = append(opts, withDevices(cfg.Devices))
	}
	if len(cfg.CDIDevices) > 0 {
		opts = append(opts, withCDIDevices(r.cfg.CDISpecDirs, cfg.CDIDevices))
	}
	if len(cfg.Annotations) > 0 {
		opts = append(opts, oci.WithAnnotations(cfg.Annotations))
	}
	labels := map[string]string{
		labelKind: "container", labelSandbox: sandboxID, labelName: cfg.Name,
		labelAttempt: strconv.FormatUint(uint64(cfg.Attempt), 10), labelImage: cfg.Image,
		labelLogPath: cfg.LogPath, labelStdin: strconv.FormatBool(cfg.Stdin), labelTTY: strconv.FormatBool(cfg.TTY),
		labelCgroup: cgroup, labelStopSig: cfg.StopSignal,
	}
	if desc, err := img.Config(ctx); err == nil {
		labels[labelImageRef] = desc.Digest.String()
	}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	_, err = r.client.NewContainer(ctx, id,
		containerd.WithImage(img),
		containerd.WithSnapshotter(r.cfg.Snapshotter),
		containerd.WithNewSnapshot(id, img),
		containerd.WithNewSpec(opts...),
		containerd.WithContainerLabels(labels),
	)
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", cfg.Name, err)
	}
	return id, nil
}

// resolveArgs applies Kubernetes' rule for command and args over the
// image's entrypoint and cmd.
func resolveArgs(entrypoint, cmd, command, args []string) []string {
	if len(command) > 0 {
		entrypoint, cmd = command, nil
	}
	if len(args) > 0 {
		cmd = args
	}
	return append(append([]string(nil), entrypoint...), cmd...)
}

func cgroupParent(p string) string {
	if p == "" {
		return "/bonsai"
	}
	return p
}

func ociMounts(ms []cri.Mount) []specs.Mount {
	out := make([]specs.Mount, 0, len(ms))
	for _, m := range ms {
		opts := []string{"rbind", "rprivate"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		out = append(out, specs.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: "bind", Options: opts})
	}
	return out
}

func capNames(caps []string) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		c = strings.ToUpper(c)
		if c == "ALL" {
			out = append(out, c)
			continue
		}
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		out = append(out, c)
	}
	return out
}

func withUser(uid, gid *int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if uid != nil {
			s.Process.User.UID = uint32(*uid)
		}
		if gid != nil {
			s.Process.User.GID = uint32(*gid)
		}
		return nil
	}
}

func withSupplementalGroups(groups []int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		for _, g := range groups {
			s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, uint32(g))
		}
		return nil
	}
}

func withOOMScoreAdj(adj int) oci.SpecOpts {
	adj = restrictOOMScoreAdj(adj, ownOOMScoreAdj(), canLowerOOMScoreAdj())
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		s.Process.OOMScoreAdj = &adj
		return nil
	}
}

// restrictOOMScoreAdj keeps adj at or above bonsai's own score when the
// process may not lower it (no CAP_SYS_RESOURCE: inside an unprivileged
// container or a restricted VM), as containerd's restrict_oom_score_adj
// does: otherwise runc fails to write a Guaranteed pod's -997 and the pod
// never starts ("can't get final child's PID from pipe").
func restrictOOMScoreAdj(adj, own int, canLower bool) int {
	if !canLower && adj < own {
		return own
	}
	return adj
}

func ownOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// canLowerOOMScoreAdj says whether the process holds CAP_SYS_RESOURCE.
func canLowerOOMScoreAdj() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return true
	}
	return data[unix.CAP_SYS_RESOURCE/32].Effective&(1<<(unix.CAP_SYS_RESOURCE%32)) != 0
}

// withUnmaskedPaths lifts the masked and read-only /proc paths, as
// privileged containers get on Kubernetes.
func withUnmaskedPaths(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
	if s.Linux != nil {
		s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = nil, nil
	}
	return nil
}

// StartContainer implements cri.Runtime.
func (r *Runtime) StartContainer(ctx context.Context, id string) error {
	ctx = r.nsctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return err
	}
	tty := labels[labelTTY] == "true"
	fifos, err := cio.NewFIFOSetInDir(r.cfg.StateDir, id, tty)
	if err != nil {
		return err
	}
	if labels[labelStdin] != "true" {
		fifos.Stdin = ""
	}
	cio, err := r.openIO(id, labels[labelLogPath], fifos)
	if err != nil {
		return err
	}
	task, err := c.NewTask(ctx, func(string) (cioIO, error) { return cio.dio, nil })
	if err != nil {
		r.dropIO(id)
		return fmt.Errorf("start container: %w", err)
	}
	exitC, err := task.Wait(r.ctx)
	if err != nil {
		return err
	}
	started := time.Now()
	if err := task.Start(ctx); err != nil {
		task.Delete(ctx, containerd.WithProcessKill)
		r.dropIO(id)
		return fmt.Errorf("start container: %w", err)
	}
	// Watch before recording the start: a started container nobody
	// watches reads as lost.
	r.watchExit(id, task, exitC)
	if _, err := c.SetLabels(ctx, map[string]string{labelStarted: started.UTC().Format(time.RFC3339Nano)}); err != nil {
		r.log.Warn("recording container start", "id", id, "err", err)
	}
	return nil
}

type cioIO = cio.IO

// openIO opens a container's FIFOs and starts copying its output to its
// log file.
func (r *Runtime) openIO(id, logPath string, fifos *cio.FIFOSet) (*containerIO, error) {
	dio, err := cio.NewDirectIO(r.ctx, fifos)
	if err != nil {
		return nil, err
	}
	lf, err := openLogFile(logPath, r.cfg.LogMaxSize, r.cfg.LogMaxFiles)
	if err != nil {
		dio.Cancel()
		return nil, fmt.Errorf("open container log: %w", err)
	}
	cio := &containerIO{dio: dio, log: lf, done: make(chan struct{})}
	var wg sync.WaitGroup
	if dio.Stdout != nil {
		wg.Add(1)
		go func() { defer wg.Done(); lf.copyStream("stdout", dio.Stdout) }()
	}
	if dio.Stderr != nil {
		wg.Add(1)
		go func() { defer wg.Done(); lf.copyStream("stderr", dio.Stderr) }()
	}
	go func() { wg.Wait(); close(cio.done) }()
	r.mu.Lock()
	r.ios[id] = cio
	r.mu.Unlock()
	return cio, nil
}

func (r *Runtime) dropIO(id string) {
	r.mu.Lock()
	cio := r.ios[id]
	delete(r.ios, id)
	r.mu.Unlock()
	if cio != nil {
		cio.dio.Cancel()
		cio.dio.Close() // also removes the FIFOs
		cio.log.close()
	}
}

// watchExit records how a container ended, in its labels, once its task
// exits, then deletes the task (which frees its cgroup) and wakes the
// kubelet.
func (r *Runtime) watchExit(id string, task containerd.Task, exitC <-chan containerd.ExitStatus) {
	r.mu.Lock()
	if r.wait[id] {
		r.mu.Unlock()
		return
	}
	r.wait[id] = true
	r.mu.Unlock()
	go func() {
		var st containerd.ExitStatus
		select {
		case st = <-exitC:
		case <-r.ctx.Done():
			return
		}
		ctx := r.nsctx(r.ctx)
		code := int32(st.ExitCode())
		finished := st.ExitTime()
		if finished.IsZero() {
			finished = time.Now()
		}
		c, err := r.client.LoadContainer(ctx, id)
		if err == nil {
			labels, _ := c.Labels(ctx)
			reason := "Completed"
			if oomKilled(labels[labelCgroup]) {
				reason = "OOMKilled"
			} else if code != 0 {
				reason = "Error"
			}
			_, err = c.SetLabels(ctx, map[string]string{
				labelFinished: finished.UTC().Format(time.RFC3339Nano),
				labelExit:     strconv.Itoa(int(code)), labelReason: reason,
			})
			if err != nil {
				r.log.Warn("recording container exit", "id", id, "err", err)
			}
		}
		r.mu.Lock()
		cio := r.ios[id]
		r.mu.Unlock()
		if cio != nil {
			// Let the copiers drain what the container wrote last.
			select {
			case <-cio.done:
			case <-time.After(2 * time.Second):
			}
		}
		if _, err := task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
			r.log.Warn("deleting exited task", "id", id, "err", err)
		}
		r.dropIO(id)
		r.mu.Lock()
		delete(r.wait, id)
		r.mu.Unlock()
		select {
		case r.events <- id:
		default:
		}
	}()
}

// oomKilled reads the container's memory cgroup for an OOM kill; it must
// be called before the task is deleted, while the cgroup still exists.
func oomKilled(cgroup string) bool {
	if cgroup == "" {
		return false
	}
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup", cgroup, "memory.events"),             // v2
		filepath.Join("/sys/fs/cgroup/memory", cgroup, "memory.oom_control"), // v1
		filepath.Join("/sys/fs/cgroup/unified", cgroup, "memory.events"),     // hybrid
	} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if n, ok := strings.CutPrefix(line, "oom_kill "); ok && strings.TrimSpace(n) != "0" {
				return true
			}
		}
	}
	return false
}

// reattach picks up containers that kept running while bonsai was down:
// their FIFOs are re-opened for logging and their exits watched; those
// that ended meanwhile get their exit recorded.
func (r *Runtime) reattach(ctx context.Context) error {
	ctx = r.nsctx(ctx)
	cs, err := r.client.Containers(ctx, fmt.Sprintf("labels.%q==container", labelKind))
	if err != nil {
		return fmt.Errorf("container runtime: list containers: %w", err)
	}
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if err != nil {
			continue
		}
		id := c.ID()
		var cio *containerIO
		task, err := c.Task(ctx, func(f *cioFIFOSet) (cioIO, error) {
			if labels[labelStdin] != "true" {
				f.Stdin = ""
			}
			var err error
			cio, err = r.openIO(id, labels[labelLogPath], f)
			if err != nil {
				return nil, err
			}
			return cio.dio, nil
		})
		if errdefs.IsNotFound(err) {
			continue // never started, or its exit already recorded
		}
		if err != nil {
			r.log.Warn("re-attaching to container", "id", id, "err", err)
			continue
		}
		exitC, err := task.Wait(r.ctx)
		if err != nil {
			r.log.Warn("watching container", "id", id, "err", err)
			continue
		}
		r.watchExit(id, task, exitC)
	}
	return nil
}

type cioFIFOSet = cio.FIFOSet

// StopContainer implements cri.Runtime.
func (r *Runtime) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	ctx = r.nsctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	st, err := task.Status(ctx)
	if err != nil || st.Status == containerd.Stopped {
		return nil
	}
	labels, _ := c.Labels(ctx)
	sig := syscall.SIGTERM
	if s := labels[labelStopSig]; s != "" {
		if parsed, err := parseSignal(s); err == nil {
			sig = parsed
		}
	}
	exitC, err := task.Wait(ctx)
	if err != nil {
		return err
	}
	if timeout > 0 {
		if err := task.Kill(ctx, sig); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		select {
		case <-exitC:
			return r.awaitRecorded(ctx, id)
		case <-time.After(timeout):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	select {
	case <-exitC:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.awaitRecorded(ctx, id)
}

// awaitRecorded waits until the exit watcher has written a container's
// exit into its labels, so the status read next is final.
func (r *Runtime) awaitRecorded(ctx context.Context, id string) error {
	for range 100 {
		r.mu.Lock()
		busy := r.wait[id]
		r.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func parseSignal(s string) (syscall.Signal, error) {
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

// RemoveContainer implements cri.Runtime.
func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	ctx = r.nsctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if task, err := c.Task(ctx, nil); err == nil {
		if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
	}
	r.dropIO(id)
	os.RemoveAll(filepath.Join(r.cfg.StateDir, id))
	if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// ContainerLayerUsage implements cri.LayerUsage: the snapshotter's usage
// of the container's active snapshot (its key is the container's id),
// which containerd measures by walking the upper directory.
func (r *Runtime) ContainerLayerUsage(ctx context.Context, id string) (bytes, inodes uint64, err error) {
	u, err := r.client.SnapshotService(r.cfg.Snapshotter).Usage(r.nsctx(ctx), id)
	if err != nil {
		return 0, 0, err
	}
	return uint64(max(u.Size, 0)), uint64(max(u.Inodes, 0)), nil
}

// ListContainers implements cri.Runtime.
func (r *Runtime) ListContainers(ctx context.Context) ([]cri.ContainerStatus, error) {
	return r.listContainers(ctx, fmt.Sprintf("labels.%q==container", labelKind))
}

// PodContainers implements cri.Runtime. containerd filters by label on its
// side, so a pod's sync decodes its own containers only (each one carries
// its whole OCI spec), not every container of the node.
func (r *Runtime) PodContainers(ctx context.Context, podUID string) ([]cri.ContainerStatus, error) {
	return r.listContainers(ctx, fmt.Sprintf("labels.%q==container,labels.%q==%q", labelKind, cri.LabelPodUID, podUID))
}

func (r *Runtime) listContainers(ctx context.Context, filter string) ([]cri.ContainerStatus, error) {
	ctx = r.nsctx(ctx)
	cs, err := r.client.ContainerService().List(ctx, filter)
	if err != nil {
		return nil, err
	}
	out := make([]cri.ContainerStatus, 0, len(cs))
	for _, c := range cs {
		out = append(out, r.statusOf(ctx, c))
	}
	return out, nil
}

// ContainerStatus implements cri.Runtime.
func (r *Runtime) ContainerStatus(ctx context.Context, id string) (cri.ContainerStatus, error) {
	ctx = r.nsctx(ctx)
	c, err := r.client.ContainerService().Get(ctx, id)
	if err != nil {
		return cri.ContainerStatus{}, err
	}
	return r.statusOf(ctx, c), nil
}

func (r *Runtime) statusOf(ctx context.Context, c containers.Container) cri.ContainerStatus {
	l := c.Labels
	attempt, _ := strconv.ParseUint(l[labelAttempt], 10, 32)
	st := cri.ContainerStatus{
		ID: c.ID, SandboxID: l[labelSandbox], Name: l[labelName], Attempt: uint32(attempt),
		Image: l[labelImage], Labels: l, CreatedAt: c.CreatedAt, LogPath: l[labelLogPath],
		State: cri.ContainerCreated,
	}
	st.ImageRef = l[labelImageRef]
	st.StartedAt, _ = time.Parse(time.RFC3339Nano, l[labelStarted])
	if fin, ok := l[labelFinished]; ok {
		st.State = cri.ContainerExited
		st.FinishedAt, _ = time.Parse(time.RFC3339Nano, fin)
		code, _ := strconv.Atoi(l[labelExit])
		st.ExitCode, st.Reason = int32(code), l[labelReason]
		return st
	}
	if !st.StartedAt.IsZero() {
		st.State = cri.ContainerRunning
		r.mu.Lock()
		watched := r.wait[c.ID]
		r.mu.Unlock()
		if !watched {
			// Started, no exit recorded, and nobody watching: the task
			// vanished (containerd lost it, e.g. the host rebooted).
			st.State, st.ExitCode, st.Reason, st.FinishedAt = cri.ContainerExited, 255, "Error", time.Now()
		}
	}
	return st
}
