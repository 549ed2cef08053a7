// Package dra is the node side of dynamic resource allocation: DRA
// drivers' kubelet plugins register through the plugin registry
// directory, and the manager prepares a pod's allocated ResourceClaims
// (NodePrepareResources) before its containers start, hands the CDI
// devices the drivers return to the containers that name the claims, and
// unprepares the claims (NodeUnprepareResources) once no pod of the node
// uses them. What is prepared is checkpointed, so a restart of bonsai
// calls no driver twice for the same claim.
package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"bonsai.dev/bonsai/kubelet/pluginregistry"
)

// RegistryDirName and StateFileName are the kubelet's names under its
// root directory.
const (
	RegistryDirName = pluginregistry.DirName
	StateFileName   = "dra_manager_state"
)

// callTimeout bounds one NodePrepareResources or NodeUnprepareResources
// call, as the kubelet's does.
const callTimeout = 45 * time.Second

// ClaimGetter reads a ResourceClaim from the API.
type ClaimGetter func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)

// Config configures a Manager.
type Config struct {
	// RootDir is the kubelet root (--kubelet-root-dir): plugins register
	// in RootDir/plugins_registry, the checkpoint is RootDir/dra_manager_state.
	RootDir  string
	GetClaim ClaimGetter
	Logger   *slog.Logger
	// Registry is the node's plugin registry, shared with the other
	// plugin types (CSI); nil: the manager watches RootDir/plugins_registry
	// itself, for DRA plugins only.
	Registry *pluginregistry.Registry
}

// Manager registers DRA drivers and prepares pods' claims.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex // drivers
	drivers map[string]*driver

	opMu  sync.Mutex // state and the driver calls that change it
	state state
}

// state is the checkpoint: the claims prepared on this node and the pods
// using them.
type state struct {
	Claims []*claimState `json:"claims"`
}

type claimState struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	// Drivers are the drivers of the claim's allocated devices; Prepared
	// those whose NodePrepareResources succeeded.
	Drivers  []string         `json:"drivers"`
	Prepared []string         `json:"prepared,omitempty"`
	Pods     []types.UID      `json:"pods,omitempty"`
	Devices  []preparedDevice `json:"devices,omitempty"`
}

type preparedDevice struct {
	Driver       string   `json:"driver"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	Requests     []string `json:"requests,omitempty"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
}

func (c *claimState) ready() bool {
	for _, d := range c.Drivers {
		if !slices.Contains(c.Prepared, d) {
			return false
		}
	}
	return true
}

// New makes a manager; Start loads its checkpoint and watches the registry.
func New(cfg Config) *Manager {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Manager{cfg: cfg, log: log, drivers: map[string]*driver{}}
}

func (m *Manager) registryDir() string {
	if m.cfg.Registry != nil {
		return m.cfg.Registry.Dir()
	}
	return filepath.Join(m.cfg.RootDir, RegistryDirName)
}
func (m *Manager) statePath() string { return filepath.Join(m.cfg.RootDir, StateFileName) }

// RegistryDir is where plugins put their registration sockets.
func (m *Manager) RegistryDir() string { return m.registryDir() }

// Start loads the checkpoint and registers plugins until ctx ends.
func (m *Manager) Start(ctx context.Context) error {
	if err := os.MkdirAll(m.registryDir(), 0o750); err != nil {
		return err
	}
	b, err := os.ReadFile(m.statePath())
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(b, &m.state); err != nil {
			// A torn or foreign checkpoint must not stop the node: its
			// claims are prepared again (drivers' prepare is idempotent).
			m.log.Warn("DRA checkpoint unreadable; starting empty", "file", m.statePath(), "err", err)
			m.state = state{}
		}
	}
	if m.cfg.Registry != nil {
		m.cfg.Registry.AddHandler(registerapi.DRAPlugin, m)
		return nil
	}
	r := pluginregistry.New(m.registryDir(), m.log)
	r.AddHandler(registerapi.DRAPlugin, m)
	return r.Start(ctx)
}

func (m *Manager) save() error {
	b, err := json.Marshal(&m.state)
	if err != nil {
		return err
	}
	tmp := m.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, m.statePath())
}

func (m *Manager) driver(name string) *driver {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.drivers[name]
}

// ClaimName is the ResourceClaim a pod claim stands for: the one it
// names, or the one the resource-claim controller made from its template
// (pod.status.resourceClaimStatuses). needed is false when the controller
// decided no claim is needed.
func ClaimName(pod *corev1.Pod, podClaim string) (name string, needed bool, err error) {
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.Name != podClaim {
			continue
		}
		if pc.ResourceClaimName != nil {
			return *pc.ResourceClaimName, true, nil
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == podClaim {
				if st.ResourceClaimName == nil {
					return "", false, nil
				}
				return *st.ResourceClaimName, true, nil
			}
		}
		return "", false, fmt.Errorf("pod claim %s: no ResourceClaim was created for it yet", podClaim)
	}
	return "", false, fmt.Errorf("pod claim %s is not in spec.resourceClaims", podClaim)
}

func (m *Manager) find(uid types.UID) *claimState {
	for _, c := range m.state.Claims {
		if c.UID == uid {
			return c
		}
	}
	return nil
}

// Prepare prepares the pod's claims: each must be allocated and reserved
// for the pod; claims already prepared (for this pod or another, before
// a restart too) are not prepared again. An error means the pod must not
// start yet; Prepare is retried.
func (m *Manager) Prepare(ctx context.Context, pod *corev1.Pod) error {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	var claims []*resourceapi.ResourceClaim
	for _, pc := range pod.Spec.ResourceClaims {
		name, needed, err := ClaimName(pod, pc.Name)
		if err != nil {
			return err
		}
		if !needed {
			continue
		}
		claim, err := m.cfg.GetClaim(ctx, pod.Namespace, name)
		if err != nil {
			return fmt.Errorf("fetch ResourceClaim %s: %w", name, err)
		}
		if claim.Status.Allocation == nil {
			return fmt.Errorf("ResourceClaim %s is not allocated", name)
		}
		if !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID }) {
			return fmt.Errorf("ResourceClaim %s is not reserved for pod %s", name, pod.Name)
		}
		claims = append(claims, claim)
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	var errs []error
	for _, claim := range claims {
		cs := m.find(claim.UID)
		if cs == nil {
			cs = &claimState{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}
			for _, r := range claim.Status.Allocation.Devices.Results {
				if !slices.Contains(cs.Drivers, r.Driver) {
					cs.Drivers = append(cs.Drivers, r.Driver)
				}
			}
			m.state.Claims = append(m.state.Claims, cs)
		}
		if !slices.Contains(cs.Pods, pod.UID) {
			cs.Pods = append(cs.Pods, pod.UID)
		}
		for _, dn := range cs.Drivers {
			if slices.Contains(cs.Prepared, dn) {
				continue
			}
			devs, err := m.prepareOne(ctx, dn, claim)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			cs.Prepared = append(cs.Prepared, dn)
			cs.Devices = append(cs.Devices, devs...)
		}
	}
	if err := m.save(); err != nil {
		errs = append(errs, fmt.Errorf("writing the DRA checkpoint: %w", err))
	}
	return errors.Join(errs...)
}

func (m *Manager) prepareOne(ctx context.Context, driverName string, claim *resourceapi.ResourceClaim) ([]preparedDevice, error) {
	d := m.driver(driverName)
	if d == nil {
		return nil, fmt.Errorf("DRA driver %s is not registered", driverName)
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := d.client.NodePrepareResources(cctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: claim.Namespace, Uid: string(claim.UID), Name: claim.Name},
	}})
	if err != nil {
		return nil, fmt.Errorf("NodePrepareResources of %s for ResourceClaim %s: %w", driverName, claim.Name, err)
	}
	r := resp.Claims[string(claim.UID)]
	if r == nil {
		return nil, fmt.Errorf("NodePrepareResources of %s: no result for ResourceClaim %s", driverName, claim.Name)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("NodePrepareResources of %s for ResourceClaim %s: %s", driverName, claim.Name, r.Error)
	}
	var out []preparedDevice
	for _, dv := range r.Devices {
		out = append(out, preparedDevice{Driver: driverName, Pool: dv.PoolName, Device: dv.DeviceName, Requests: dv.RequestNames, CDIDeviceIDs: dv.CdiDeviceIds})
	}
	m.log.Info("DRA claim prepared", "driver", driverName, "claim", claim.Namespace+"/"+claim.Name, "devices", len(out))
	return out, nil
}

// CDIDevices are the CDI device IDs for the container: those of the
// devices of the claims (and requests) its resources.claims name.
func (m *Manager) CDIDevices(pod *corev1.Pod, c *corev1.Container) []string {
	if len(c.Resources.Claims) == 0 {
		return nil
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	var out []string
	for _, rc := range c.Resources.Claims {
		name, needed, err := ClaimName(pod, rc.Name)
		if err != nil || !needed {
			continue
		}
		for _, cs := range m.state.Claims {
			if cs.Namespace != pod.Namespace || cs.Name != name || !slices.Contains(cs.Pods, pod.UID) {
				continue
			}
			for _, d := range cs.Devices {
				if rc.Request != "" && len(d.Requests) > 0 && !slices.Contains(d.Requests, rc.Request) {
					continue
				}
				for _, id := range d.CDIDeviceIDs {
					if !slices.Contains(out, id) {
						out = append(out, id)
					}
				}
			}
		}
	}
	return out
}

// Unprepare drops the pod from its claims; a claim no pod uses any more
// is unprepared by its drivers. A failed call is retried by the next
// Unprepare or Retain; the claim stays in the checkpoint until then.
func (m *Manager) Unprepare(ctx context.Context, podUID types.UID) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	return m.release(ctx, func(uid types.UID) bool { return uid != podUID })
}

// Retain unprepares for the pods keep says this node no longer runs
// (deleted while bonsai was down) and retries failed unprepares.
func (m *Manager) Retain(ctx context.Context, keep func(types.UID) bool) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	return m.release(ctx, keep)
}

// Pods are the pods the checkpoint holds claims for.
func (m *Manager) Pods() []types.UID {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	var out []types.UID
	for _, cs := range m.state.Claims {
		for _, p := range cs.Pods {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

func (m *Manager) release(ctx context.Context, keep func(types.UID) bool) error {
	var errs []error
	changed := false
	kept := m.state.Claims[:0]
	for _, cs := range m.state.Claims {
		n := len(cs.Pods)
		cs.Pods = slices.DeleteFunc(cs.Pods, func(uid types.UID) bool { return !keep(uid) })
		changed = changed || n != len(cs.Pods)
		if len(cs.Pods) > 0 {
			kept = append(kept, cs)
			continue
		}
		for _, dn := range slices.Clone(cs.Prepared) {
			if err := m.unprepareOne(ctx, dn, cs); err != nil {
				errs = append(errs, err)
				continue
			}
			cs.Prepared = slices.DeleteFunc(cs.Prepared, func(s string) bool { return s == dn })
			changed = true
		}
		if len(cs.Prepared) > 0 {
			kept = append(kept, cs)
		} else {
			changed = true
		}
	}
	clear(m.state.Claims[len(kept):])
	m.state.Claims = kept
	if changed {
		if err := m.save(); err != nil {
			errs = append(errs, fmt.Errorf("writing the DRA checkpoint: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) unprepareOne(ctx context.Context, driverName string, cs *claimState) error {
	d := m.driver(driverName)
	if d == nil {
		return fmt.Errorf("DRA driver %s is not registered", driverName)
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := d.client.NodeUnprepareResources(cctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: cs.Namespace, Uid: string(cs.UID), Name: cs.Name},
	}})
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources of %s for ResourceClaim %s: %w", driverName, cs.Name, err)
	}
	if r := resp.Claims[string(cs.UID)]; r != nil && r.Error != "" {
		return fmt.Errorf("NodeUnprepareResources of %s for ResourceClaim %s: %s", driverName, cs.Name, r.Error)
	}
	m.log.Info("DRA claim unprepared", "driver", driverName, "claim", cs.Namespace+"/"+cs.Name)
	return nil
}
