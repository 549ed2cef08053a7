// Package kubelet is bonsai's node agent: it registers its Node, keeps the
// node's Lease fresh, reports node status and capacity, and runs a worker
// per pod bound to the node that drives the runtime (kubelet/cri) toward the
// pod's spec: the sandbox and its network (netplugin's built-in network, or
// CNI plugins through netplugin/cni), images, init containers, containers
// with restarts and probes, volumes, env, devices (deviceplugin), cgroup
// limits and graceful termination. It also runs static pods and their
// mirrors, service-account token refresh, image garbage collection, routes
// to other nodes' pod CIDRs and graceful node shutdown, and serves the
// kubelet API (logs, exec, attach, port-forward) that the API server calls.
// It owns the node's pod directories and container logs under its root dir.
//
// It talks to the API server only through client-go, exactly as a remote
// kubelet would; it never touches the store. Containers are the runtime
// backend's (kubelet/containerd); a simulated node is registered here and
// then left to kubelet/simulator.
package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/deviceplugin"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/kubelet/csi"
	"bonsai.dev/bonsai/kubelet/dra"
	"bonsai.dev/bonsai/kubelet/eviction"
	"bonsai.dev/bonsai/kubelet/simulator"
	"bonsai.dev/bonsai/netplugin"
	"bonsai.dev/bonsai/netplugin/cni"
)

// statusInterval is how often node status is posted when nothing changed.
const statusInterval = 5 * time.Minute

// Config is what the node agent needs.
type Config struct {
	NodeName string
	// Client is what the agent uses of the API: the core and coordination
	// groups only, so the binary links no other group's client.
	Client *Client
	// Labels are added to the well-known ones; Taints are set when the
	// Node is first registered only, as --register-with-taints does.
	Labels  map[string]string
	Taints  []corev1.Taint
	MaxPods int
	Address netip.Addr
	DataDir string // its file system is the node's ephemeral storage
	// Port is where the kubelet API (logs, exec, port-forward) listens,
	// reported in status.daemonEndpoints for the API server to call.
	Port int32
	// RuntimeVersion is reported in nodeInfo ("simulated://..." for the
	// simulated runtime); KubeletVersion is the Kubernetes version served.
	RuntimeVersion string
	KubeletVersion string
	Clock          clock.Clock
	Logger         *slog.Logger

	// Runtime runs the node's pods; nil registers the node only.
	Runtime cri.Runtime
	// Network is the pod network's configuration; the kubelet fills in
	// the pod CIDR the server allocated to the node and starts it.
	Network *netplugin.Config
	// CNI, when set, networks pods with CNI plugins (netplugin/cni)
	// instead of the built-in network; the node is not Ready while it has
	// no valid network configuration.
	CNI *cni.Config
	// WrapNetwork, when set, wraps the pod network once it is up: the
	// network policy enforcer polices each sandbox before Setup returns.
	WrapNetwork func(netplugin.PodNetwork) netplugin.PodNetwork
	// RootDir holds pod dirs (volumes) and container logs.
	RootDir       string
	ClusterDNS    string
	ClusterDomain string
	// PodManifestPath holds static pod manifests ("" = none).
	PodManifestPath string
	// Devices is the node's device manager (device plugins); nil = none.
	// Its resources appear in node status and pods get their devices
	// through it.
	Devices *deviceplugin.Manager
	// DRA prepares pods' ResourceClaims through DRA drivers' kubelet
	// plugins; nil = claims are not prepared.
	DRA *dra.Manager
	// CSI mounts pods' CSI volumes through the drivers registered in the
	// plugin registry; nil = CSI volumes do not mount on this node.
	CSI *csi.Manager
	// States, when set, is where the kubelet API finds the agent's pods
	// once it runs (see PodStates).
	States *PodStates
	// SeccompDir holds the Localhost seccomp profiles pods name
	// (<kubelet-root-dir>/seccomp); "" is <RootDir>/seccomp.
	SeccompDir string
	// PodMaxPids caps the processes of each pod (its pod cgroup's
	// pids.max, as --pod-max-pids); 0 or less: no cap.
	PodMaxPids int64
	// ImageFS is a path on the file system the runtime keeps images on,
	// watched by image garbage collection ("" = no collection).
	ImageFS string

	// ShutdownGroups turns on graceful node shutdown (ShutdownGroups
	// makes them; nil = off): the node holds a logind delay lock and stops
	// its pods in these phases when the host shuts down.
	ShutdownGroups []ShutdownGroup
	// LogindConfDir is where InhibitDelayMaxSec is raised when logind's is
	// shorter than the shutdown ("" = /etc/systemd/logind.conf.d).
	LogindConfDir string

	// Eviction is the node-pressure eviction policy; nil: the kubelet's
	// default hard thresholds. SystemReserved and KubeReserved are
	// left out of allocatable (--system-reserved, --kube-reserved).
	Eviction                     *eviction.Config
	SystemReserved, KubeReserved corev1.ResourceList
	// Stats is the node's stats sampler, which eviction reads; nil: no
	// eviction (the pressure conditions then follow the hard thresholds
	// at each status post).
	Stats *StatsSampler
	// Metrics is where the agent's own metrics (evictions) go; nil: not
	// kept.
	Metrics prometheus.Registerer
	// MemoryCapacity, when above 0, is the node's memory capacity in
	// place of the host's (see StatsConfig.MemoryCapacity).
	MemoryCapacity int64

	nodeMemory      int64
	nodeAllocatable corev1.ResourceList

	// Simulated hands the node to the simulator (kubelet/simulator): it
	// is registered with the bonsai.dev/simulated annotation and the
	// host's status, and from then on the simulator alone renews its
	// Lease and posts its status, so Run returns once it is registered.
	Simulated bool
}

func (c *Config) allocatable(name corev1.ResourceName) resource.Quantity {
	return c.nodeAllocatable[name]
}

// Agent is a running node agent.
type Agent struct {
	cfg     Config
	mu      sync.Mutex
	uid     types.UID
	lastSet []corev1.NodeCondition
	lastAt  time.Time
	// pressure are the conditions the eviction manager reports; nil
	// before its first round.
	pressure map[corev1.NodeConditionType]bool
	// net is the pod network once it is up.
	net netplugin.PodNetwork
	// shutdown is graceful node shutdown; nil when off.
	shutdown *shutdownManager
}

func (a *Agent) setNetwork(n netplugin.PodNetwork) {
	a.mu.Lock()
	a.net = n
	a.mu.Unlock()
}

// networkNotReady is why pods cannot be networked now, in the words of
// the kubelet's NetworkReady runtime condition; nil when they can. Only
// the CNI host can be not ready: the built-in network is ready once up.
func (a *Agent) networkNotReady() error {
	if a.cfg.CNI == nil {
		return nil
	}
	a.mu.Lock()
	n := a.net
	a.mu.Unlock()
	if n == nil {
		return cni.ErrUninitialized
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Ready(ctx)
}

// Run registers the node and keeps its heartbeats going until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxPods <= 0 {
		cfg.MaxPods = 110
	}
	if cfg.Eviction == nil {
		ts, err := eviction.Parse(eviction.DefaultHard, nil, nil, nil)
		if err != nil {
			return err
		}
		cfg.Eviction = &eviction.Config{Thresholds: ts}
	}
	a := &Agent{cfg: cfg}
	if err := a.register(ctx); err != nil {
		return err
	}
	if cfg.Simulated {
		return nil
	}
	l := &leaseRenewer{client: cfg.Client, nodeName: cfg.NodeName, nodeUID: a.nodeUID, clock: cfg.Clock, log: cfg.Logger}
	go l.run(ctx)
	go a.watchDevices(ctx)
	if len(cfg.ShutdownGroups) > 0 {
		dir := cfg.LogindConfDir
		if dir == "" {
			dir = logindDropInDir
		}
		a.shutdown = &shutdownManager{groups: cfg.ShutdownGroups, dropInDir: dir, agent: a,
			log: cfg.Logger.Info, warn: cfg.Logger.Warn}
		go a.shutdown.run(ctx)
	}
	if cfg.Runtime != nil {
		go func() {
			if err := a.runPods(ctx); err != nil && ctx.Err() == nil {
				cfg.Logger.Error("the node cannot run pods", "node", cfg.NodeName, "err", err)
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-cfg.Clock.After(10 * time.Second):
		}
		if err := a.postStatus(ctx, false); err != nil {
			cfg.Logger.Warn("posting node status failed", "node", cfg.NodeName, "err", err)
		}
	}
}

func (a *Agent) nodeUID() (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return string(a.uid), a.uid != ""
}

// register creates the Node, or takes over an existing one of the same
// name (a restart), then posts its status.
func (a *Agent) register(ctx context.Context) error {
	c := a.cfg.Client
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: a.labels()}, Spec: corev1.NodeSpec{Taints: a.cfg.Taints}}
	if a.cfg.Simulated {
		// Status goes in with the create: the simulator, which may see
		// the node at once, keeps the host's capacity rather than
		// posting its defaults first.
		node.Annotations = map[string]string{simulator.AnnotationSimulated: "true"}
		node.Status = a.status(a.cfg.Clock.Now())
	}
	created, err := c.createNode(ctx, node)
	fresh := err == nil
	switch {
	case apierrors.IsAlreadyExists(err):
		existing, err := c.getNode(ctx, a.cfg.NodeName)
		if err != nil {
			return fmt.Errorf("register node %s: %w", a.cfg.NodeName, err)
		}
		for k, v := range a.labels() {
			if existing.Labels == nil {
				existing.Labels = map[string]string{}
			}
			existing.Labels[k] = v
		}
		// The runtime may have changed since the last start: exactly one
		// of the simulator and this agent keeps the node alive.
		if a.cfg.Simulated {
			if existing.Annotations == nil {
				existing.Annotations = map[string]string{}
			}
			existing.Annotations[simulator.AnnotationSimulated] = "true"
		} else {
			delete(existing.Annotations, simulator.AnnotationSimulated)
		}
		if created, err = c.updateNode(ctx, existing); err != nil {
			return fmt.Errorf("register node %s: %w", a.cfg.NodeName, err)
		}
	case err != nil:
		return fmt.Errorf("register node %s: %w", a.cfg.NodeName, err)
	}
	a.mu.Lock()
	a.uid = created.UID
	a.mu.Unlock()
	a.cfg.Logger.Info("node registered", "node", a.cfg.NodeName, "runtime", a.cfg.RuntimeVersion)
	if a.cfg.Simulated {
		if fresh {
			return nil
		}
	}
	// The node IPAM controller (or the simulator) may write the Node
	// between this agent's read and write.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return a.postStatus(ctx, true) })
}

func (a *Agent) labels() map[string]string {
	l := map[string]string{
		corev1.LabelHostname:      a.cfg.NodeName,
		corev1.LabelOSStable:      runtime.GOOS,
		corev1.LabelArchStable:    runtime.GOARCH,
		"beta.kubernetes.io/os":   runtime.GOOS,
		"beta.kubernetes.io/arch": runtime.GOARCH,
	}
	for k, v := range a.cfg.Labels {
		l[k] = v
	}
	return l
}

// postStatus writes node status when a condition changed (here or in the
// API), when forced, or when statusInterval has passed since the last post.
func (a *Agent) postStatus(ctx context.Context, force bool) error {
	now := a.cfg.Clock.Now()
	status := a.status(now)
	a.mu.Lock()
	changed := !sameConditions(a.lastSet, status.Conditions)
	due := force || changed || now.Sub(a.lastAt) >= statusInterval
	a.mu.Unlock()
	// Read back every time: the node lifecycle controller sets the
	// conditions Unknown when heartbeats stall (a suspend, a slow disk),
	// and the node stays tainted until they are put back, not for up to
	// statusInterval.
	node, err := a.cfg.Client.getNode(ctx, a.cfg.NodeName)
	if err != nil {
		return err
	}
	if !due && sameConditions(node.Status.Conditions, status.Conditions) {
		return nil
	}
	// Keep each condition's transition time unless its status changed.
	for i := range status.Conditions {
		c := &status.Conditions[i]
		for _, old := range node.Status.Conditions {
			if old.Type == c.Type && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	node.Status = status
	if _, err := a.cfg.Client.updateNodeStatus(ctx, node); err != nil {
		return err
	}
	a.mu.Lock()
	a.lastSet, a.lastAt = status.Conditions, now
	a.mu.Unlock()
	return nil
}

func sameConditions(a, b []corev1.NodeCondition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Status != b[i].Status || a[i].Reason != b[i].Reason || a[i].Message != b[i].Message {
			return false
		}
	}
	return true
}

// status reads the host: capacity and allocatable, addresses, node info
// and the pressure conditions.
func (a *Agent) status(now time.Time) corev1.NodeStatus {
	memTotal, memAvail := meminfo()
	if a.cfg.MemoryCapacity > 0 {
		usage, inactive := podsMemory()
		memTotal, memAvail = a.cfg.MemoryCapacity, a.cfg.MemoryCapacity-int64(usage-min(usage, inactive))
	}
	var fsTotal, fsFree int64
	var st syscall.Statfs_t
	if syscall.Statfs(a.cfg.DataDir, &st) == nil {
		fsTotal, fsFree = int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize
	}
	thresholds := a.cfg.Eviction.Thresholds
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(memTotal, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(int64(a.cfg.MaxPods), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(fsTotal, resource.BinarySI),
		"hugepages-1Gi":                 *resource.NewQuantity(0, resource.BinarySI),
		"hugepages-2Mi":                 *resource.NewQuantity(0, resource.BinarySI),
	}
	allocatable := eviction.Allocatable(capacity, a.cfg.SystemReserved, a.cfg.KubeReserved, thresholds)
	a.deviceResources(capacity, allocatable)

	hb := metav1.NewTime(now)
	cond := func(t corev1.NodeConditionType, pressure bool, reasonOK, msgOK, reasonBad, msgBad string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: reasonOK, Message: msgOK, LastHeartbeatTime: hb, LastTransitionTime: hb}
		if pressure {
			c.Status, c.Reason, c.Message = corev1.ConditionTrue, reasonBad, msgBad
		}
		return c
	}
	// The eviction manager's conditions once it runs; before (and on a
	// node without one) the hard thresholds against the host's figures.
	pressure := func(t corev1.NodeConditionType, now bool) bool {
		if p, ok := a.pressureOf(t); ok {
			return p
		}
		return now
	}
	memHard := eviction.HardQuantity(thresholds, eviction.SignalMemoryAvailable, memTotal)
	diskHard := eviction.HardQuantity(thresholds, eviction.SignalNodeFsAvailable, fsTotal)
	conditions := []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, pressure(corev1.NodeMemoryPressure, memAvail < memHard), "KubeletHasSufficientMemory", "kubelet has sufficient memory available", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
		cond(corev1.NodeDiskPressure, pressure(corev1.NodeDiskPressure, fsTotal > 0 && fsFree < diskHard), "KubeletHasNoDiskPressure", "kubelet has no disk pressure", "KubeletHasDiskPressure", "kubelet has disk pressure"),
		cond(corev1.NodePIDPressure, pressure(corev1.NodePIDPressure, false), "KubeletHasSufficientPID", "kubelet has sufficient PID available", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
		a.readyCondition(hb),
	}
	addresses := []corev1.NodeAddress{}
	if a.cfg.Address.IsValid() {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.cfg.Address.String()})
	}
	addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: a.cfg.NodeName})
	var uts syscall.Utsname
	syscall.Uname(&uts)
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: allocatable,
		Conditions:  conditions,
		Addresses:   addresses,
		NodeInfo: corev1.NodeSystemInfo{
			MachineID:               readTrim("/etc/machine-id"),
			BootID:                  readTrim("/proc/sys/kernel/random/boot_id"),
			KernelVersion:           utsString(uts.Release[:]),
			OSImage:                 osImage(),
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: a.cfg.RuntimeVersion,
			KubeletVersion:          a.cfg.KubeletVersion,
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: a.cfg.Port}},
	}
}

// readyCondition is Ready, or not Ready with the kubelet's message when
// the container runtime's network is not ready.
func (a *Agent) readyCondition(hb metav1.Time) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: hb, LastTransitionTime: hb}
	if a.shutdown.isShuttingDown() {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, "KubeletNotReady", shutdownNodeMessage
		return c
	}
	if err := a.networkNotReady(); err != nil {
		c.Status, c.Reason = corev1.ConditionFalse, "KubeletNotReady"
		c.Message = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: " + err.Error()
	}
	return c
}

// meminfo returns MemTotal and MemAvailable in bytes.
func meminfo() (total, avail int64) {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			total = kb << 10
		} else if _, err := fmt.Sscanf(line, "MemAvailable: %d kB", &kb); err == nil {
			avail = kb << 10
		}
	}
	return total, avail
}

func osImage() string {
	b, _ := os.ReadFile("/etc/os-release")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "Linux"
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

func utsString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func typesUID(s string) types.UID { return types.UID(s) }
