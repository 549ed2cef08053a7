// Package deviceplugin is the node's device manager: the Kubernetes device
// plugin API v1beta1 on <root>/device-plugins/kubelet.sock, a client per
// registered plugin that consumes its ListAndWatch stream, the choice of
// devices for containers (GetPreferredAllocation, Allocate,
// PreStartContainer), the checkpoint that keeps those choices across
// restarts, and the pod-resources API v1 for monitoring agents. The
// built-in generic plugin lives in deviceplugin/generic and talks to this
// package only over the same sockets as any external plugin.
//
// It owns the device-plugin and pod-resources sockets and the checkpoint
// file; it must not talk to the API server or the container runtime: the
// kubelet asks it for allocations and reports what it says.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Names under the kubelet root dir, as the real kubelet lays them out.
const (
	PluginsDir      = "device-plugins"
	KubeletSocket   = "kubelet.sock"
	PodResourcesDir = "pod-resources"
	checkpointFile  = "kubelet_internal_checkpoint"
)

// DefaultStopGracePeriod is how long a resource whose plugin went away
// stays on the node (with no allocatable devices) waiting for the plugin
// to come back, as the kubelet's endpointStopGracePeriod.
const DefaultStopGracePeriod = 5 * time.Minute

// Config says where the manager lives.
type Config struct {
	// RootDir is the kubelet root dir (--kubelet-root-dir): sockets go in
	// its device-plugins and pod-resources directories.
	RootDir string
	// StopGracePeriod is how long a stopped plugin's resource is kept;
	// zero means DefaultStopGracePeriod.
	StopGracePeriod time.Duration
	Logger          *slog.Logger
}

// Manager is a running device manager.
type Manager struct {
	cfg     Config
	dir     string
	log     *slog.Logger
	metrics *metrics
	ctx     context.Context

	mu        sync.Mutex
	resources map[string]*resourceState
	// allocs is what each pod's containers hold, by pod UID, container
	// name and resource name.
	allocs map[types.UID]*podAllocation
	// allocMu serialises allocations: a device is chosen and recorded
	// before the next container looks at what is free.
	allocMu sync.Mutex

	changed chan struct{}
	servers []*grpc.Server
	// activePods lists the node's pods for the pod-resources API; nil
	// lists the pods holding devices.
	activePods func() []ActivePod

	// The checkpoint is written by one goroutine (persistLoop), which
	// folds a burst of changes into one write.
	persistMu   sync.Mutex
	wantGen     uint64
	doneGen     uint64
	persisted   chan struct{} // closed and replaced at each write
	persistKick chan struct{}
	// stopped is closed when persistLoop has returned, its last write
	// done, after Start's context ended.
	stopped chan struct{}
}

// resourceState is one extended resource and the plugin serving it.
type resourceState struct {
	name    string
	devices map[string]*pluginapi.Device
	ep      *endpoint // nil when no plugin serves it (restored, or stopped)
	// removeAt is when a resource without a plugin is dropped.
	removeTimer *time.Timer
}

type podAllocation struct {
	// gen is the checkpoint generation that holds the allocation;
	// admitTook is how long it took, observed with the wait for gen at
	// the first container.
	gen       uint64
	admitTook time.Duration
	observed  bool

	Namespace, Name string
	// containers by name, then resources by name.
	containers map[string]map[string]*allocation
}

type allocation struct {
	DeviceIDs []string
	Response  *pluginapi.ContainerAllocateResponse
}

// New prepares a manager; Start opens its sockets.
func New(cfg Config) *Manager {
	if cfg.StopGracePeriod <= 0 {
		cfg.StopGracePeriod = DefaultStopGracePeriod
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Manager{
		cfg: cfg, dir: filepath.Join(cfg.RootDir, PluginsDir), log: cfg.Logger.With("component", "deviceplugin"),
		resources: map[string]*resourceState{}, allocs: map[types.UID]*podAllocation{},
		changed: make(chan struct{}, 1), persisted: make(chan struct{}), persistKick: make(chan struct{}, 1), stopped: make(chan struct{}),
	}
	m.metrics = newMetrics(m)
	return m
}

// Dir is the device-plugins directory plugins put their sockets in.
func (m *Manager) Dir() string { return m.dir }

// Changes is signalled whenever a resource's capacity or allocatable may
// have changed, so node status goes out at once.
func (m *Manager) Changes() <-chan struct{} { return m.changed }

// Notify signals Changes, as a change of a resource does: a caller that
// could not act on one asks for it again.
func (m *Manager) Notify() { m.notify() }

func (m *Manager) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Start restores the checkpoint, removes the sockets a previous run left
// (so plugins notice and re-register), and serves the Registration and
// pod-resources APIs until ctx ends.
func (m *Manager) Start(ctx context.Context) error {
	m.ctx = ctx
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return fmt.Errorf("device plugins: %w", err)
	}
	if err := m.restore(); err != nil {
		// As the kubelet does: go on without it rather than run no
		// devices at all; pods admitted before keep running.
		m.log.Error("device checkpoint not read; allocations before this start are forgotten", "err", err)
		m.mu.Lock()
		m.allocs, m.resources = map[types.UID]*podAllocation{}, map[string]*resourceState{}
		m.mu.Unlock()
	}
	if err := removeSockets(m.dir); err != nil {
		return fmt.Errorf("device plugins: %w", err)
	}
	reg, err := listenUnix(filepath.Join(m.dir, KubeletSocket))
	if err != nil {
		return fmt.Errorf("device plugins: %w", err)
	}
	prDir := filepath.Join(m.cfg.RootDir, PodResourcesDir)
	if err := os.MkdirAll(prDir, 0o750); err != nil {
		reg.Close()
		return fmt.Errorf("pod resources: %w", err)
	}
	pr, err := listenUnix(filepath.Join(prDir, KubeletSocket))
	if err != nil {
		reg.Close()
		return fmt.Errorf("pod resources: %w", err)
	}
	go func() {
		defer close(m.stopped)
		m.persistLoop(ctx)
	}()
	regSrv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(regSrv, &registrationServer{m: m})
	prSrv := grpc.NewServer()
	registerPodResources(prSrv, m)
	m.servers = []*grpc.Server{regSrv, prSrv}
	go regSrv.Serve(reg)
	go prSrv.Serve(pr)
	go func() {
		<-ctx.Done()
		regSrv.Stop()
		prSrv.Stop()
		m.mu.Lock()
		for _, r := range m.resources {
			if r.ep != nil {
				r.ep.stop()
			}
			if r.removeTimer != nil {
				r.removeTimer.Stop()
			}
		}
		m.mu.Unlock()
	}()
	m.log.Info("device plugin registration serving", "socket", filepath.Join(m.dir, KubeletSocket))
	return nil
}

// Stopped is closed once the manager has stopped after the context of
// Start ended, with its checkpoint written: nothing of it writes under the
// root dir any more.
func (m *Manager) Stopped() <-chan struct{} { return m.stopped }

func listenUnix(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// removeSockets deletes every socket in dir, as a starting kubelet does:
// plugins watching theirs see it go and register again.
func removeSockets(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// ValidResourceName is Kubernetes' rule for an extended resource a device
// plugin may advertise: vendor-domain/resourcetype, outside kubernetes.io.
func ValidResourceName(name string) error {
	domain, _, ok := strings.Cut(name, "/")
	if !ok || domain == "" {
		return fmt.Errorf("resource name %q is invalid: want vendor-domain/resourcetype, e.g. vendor.example/gpu", name)
	}
	if domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") {
		return fmt.Errorf("resource name %q is invalid: the kubernetes.io domain is reserved for native resources", name)
	}
	if errs := validation.IsQualifiedName("requests." + name); len(errs) > 0 {
		return fmt.Errorf("resource name %q is invalid: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

type registrationServer struct {
	pluginapi.UnimplementedRegistrationServer
	m *Manager
}

// Register implements the Registration service. The plugin is dialled
// after the answer, as the kubelet does, so a plugin that registers
// before it serves still works.
func (s *registrationServer) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	m := s.m
	if !supportedVersion(r.Version) {
		m.metrics.registrationErr(r.ResourceName)
		err := fmt.Errorf("requested device plugin API version %q is not supported; supported versions: %s", r.Version, strings.Join(pluginapi.SupportedVersions[:], ", "))
		m.log.Warn("device plugin registration refused", "resource", r.ResourceName, "err", err)
		return nil, err
	}
	if err := ValidResourceName(r.ResourceName); err != nil {
		m.metrics.registrationErr(r.ResourceName)
		m.log.Warn("device plugin registration refused", "resource", r.ResourceName, "err", err)
		return nil, err
	}
	if r.Endpoint == "" || strings.Contains(r.Endpoint, "/") || r.Endpoint == KubeletSocket {
		m.metrics.registrationErr(r.ResourceName)
		return nil, fmt.Errorf("endpoint %q is invalid: want the file name of the plugin's socket in %s", r.Endpoint, m.dir)
	}
	m.metrics.registered(r.ResourceName)
	m.log.Info("device plugin registered", "resource", r.ResourceName, "endpoint", r.Endpoint)
	go m.connect(r.ResourceName, filepath.Join(m.dir, r.Endpoint), r.Options)
	return &pluginapi.Empty{}, nil
}

func supportedVersion(v string) bool {
	for _, s := range pluginapi.SupportedVersions {
		if v == s {
			return true
		}
	}
	return false
}

// connect dials a registered plugin, asks its options and makes it the
// resource's endpoint, replacing any earlier one.
func (m *Manager) connect(name, socket string, regOpts *pluginapi.DevicePluginOptions) {
	ctx := m.ctx
	ep, err := dial(ctx, name, socket)
	if err != nil {
		m.metrics.pluginErr(name, "dial")
		m.log.Warn("device plugin unreachable", "resource", name, "socket", socket, "err", err)
		return
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	opts, err := ep.client.GetDevicePluginOptions(octx, &pluginapi.Empty{})
	cancel()
	switch {
	case status.Code(err) == codes.Unimplemented:
		// It registered with its options; use those.
		opts = regOpts
	case err != nil:
		m.metrics.pluginErr(name, "options")
		m.log.Warn("device plugin does not answer; not using it", "resource", name, "socket", socket, "err", err)
		ep.stop()
		return
	}
	if opts == nil {
		opts = &pluginapi.DevicePluginOptions{}
	}
	ep.opts = opts
	m.mu.Lock()
	r := m.resource(name)
	old := r.ep
	r.ep = ep
	if r.removeTimer != nil {
		r.removeTimer.Stop()
		r.removeTimer = nil
	}
	m.mu.Unlock()
	if old != nil {
		old.stop()
	}
	go m.watch(ep)
}

// resource returns the named resource's state, making it. m.mu is held.
func (m *Manager) resource(name string) *resourceState {
	r := m.resources[name]
	if r == nil {
		r = &resourceState{name: name, devices: map[string]*pluginapi.Device{}}
		m.resources[name] = r
	}
	return r
}

// watch consumes a plugin's ListAndWatch stream. When it ends, the
// plugin's devices go unhealthy at once, and the resource goes after the
// grace period unless the plugin registers again.
func (m *Manager) watch(ep *endpoint) {
	err := ep.listAndWatch(func(devs []*pluginapi.Device) {
		m.mu.Lock()
		defer m.mu.Unlock()
		r := m.resources[ep.resource]
		if r == nil || r.ep != ep {
			return
		}
		r.devices = make(map[string]*pluginapi.Device, len(devs))
		for _, d := range devs {
			r.devices[d.ID] = d
		}
		m.notify()
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.resources[ep.resource]
	if r == nil || r.ep != ep {
		return // replaced by a new registration
	}
	if err != nil && m.ctx.Err() == nil {
		m.metrics.pluginErr(ep.resource, "listandwatch")
		m.log.Warn("device plugin stream ended; its devices are unhealthy until it registers again", "resource", ep.resource, "err", err)
	}
	r.ep = nil
	ep.stop()
	for id, d := range r.devices {
		r.devices[id] = &pluginapi.Device{ID: d.ID, Health: pluginapi.Unhealthy, Topology: d.Topology}
	}
	m.scheduleRemoval(r)
	m.notify()
}

// scheduleRemoval drops a resource without a plugin after the grace
// period. m.mu is held.
func (m *Manager) scheduleRemoval(r *resourceState) {
	if r.removeTimer != nil {
		r.removeTimer.Stop()
	}
	r.removeTimer = time.AfterFunc(m.cfg.StopGracePeriod, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.resources[r.name] != r || r.ep != nil {
			return
		}
		delete(m.resources, r.name)
		m.log.Info("device plugin resource removed: its plugin did not come back", "resource", r.name)
		m.notify()
	})
}

// Resources is what node status reports for device plugin resources:
// capacity counts every device, allocatable only the healthy ones.
func (m *Manager) Resources() (capacity, allocatable corev1.ResourceList) {
	m.mu.Lock()
	defer m.mu.Unlock()
	capacity, allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	for name, r := range m.resources {
		healthy := 0
		for _, d := range r.devices {
			if d.Health == pluginapi.Healthy {
				healthy++
			}
		}
		capacity[corev1.ResourceName(name)] = *resource.NewQuantity(int64(len(r.devices)), resource.DecimalSI)
		allocatable[corev1.ResourceName(name)] = *resource.NewQuantity(int64(healthy), resource.DecimalSI)
	}
	return capacity, allocatable
}

// sortedIDs returns a set's members in order, for stable answers.
func sortedIDs(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
