package deviceplugin

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// ContainerOptions is what a container's devices add to it, merged over
// the resources it holds.
type ContainerOptions struct {
	Env         []string // KEY=value
	Mounts      []Mount
	Devices     []DeviceSpec
	Annotations map[string]string
	// CDIDevices are fully qualified CDI names (vendor.com/class=name).
	CDIDevices []string
}

// Mount is a host path a plugin binds into the container.
type Mount struct {
	HostPath, ContainerPath string
	ReadOnly                bool
}

// DeviceSpec is a device node a plugin gives the container, with the
// cgroup access it needs ("rwm" or a subset).
type DeviceSpec struct {
	HostPath, ContainerPath, Permissions string
}

// Empty says the container gets nothing from device plugins.
func (o *ContainerOptions) Empty() bool {
	return o == nil || len(o.Env)+len(o.Mounts)+len(o.Devices)+len(o.Annotations)+len(o.CDIDevices) == 0
}

// AdmissionError is an allocation that cannot be made: the kubelet fails
// the pod with reason UnexpectedAdmissionError rather than run it without
// its devices.
type AdmissionError struct{ Err error }

func (e *AdmissionError) Error() string {
	return fmt.Sprintf("Allocate failed due to %v, which is unexpected", e.Err)
}

func (e *AdmissionError) Unwrap() error { return e.Err }

// requested is how many of a resource the container asks for: its limit,
// which for an extended resource equals its request.
func requested(c *corev1.Container, name string) int {
	if q, ok := c.Resources.Limits[corev1.ResourceName(name)]; ok {
		return int(q.Value())
	}
	if q, ok := c.Resources.Requests[corev1.ResourceName(name)]; ok {
		return int(q.Value())
	}
	return 0
}

// isRestartable reports a sidecar (an init container that keeps running):
// its devices are its own for the pod's life.
func isRestartable(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// Allocate gives every container of the pod the devices it asks for,
// calling the plugins' Allocate, and checkpoints the result. A pod that
// holds its devices already (a restart of bonsai) keeps them and no
// plugin is called. Devices of an ordinary init container are reused by
// the containers after it, as in Kubernetes.
func (m *Manager) Allocate(ctx context.Context, pod *corev1.Pod) error {
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	start := time.Now()
	reuse := map[string]map[string]bool{}
	changed := false
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		got, did, err := m.allocateContainer(ctx, pod, c, reuse)
		if err != nil {
			return err
		}
		changed = changed || did
		for res, ids := range got {
			if reuse[res] == nil {
				reuse[res] = map[string]bool{}
			}
			for _, id := range ids {
				if isRestartable(c) {
					delete(reuse[res], id)
				} else {
					reuse[res][id] = true
				}
			}
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		got, did, err := m.allocateContainer(ctx, pod, c, reuse)
		if err != nil {
			return err
		}
		changed = changed || did
		for res, ids := range got {
			for _, id := range ids {
				delete(reuse[res], id)
			}
		}
	}
	if changed {
		gen := m.persist()
		m.mu.Lock()
		if a := m.allocs[pod.UID]; a != nil {
			a.gen, a.admitTook = gen, time.Since(start)
		}
		m.mu.Unlock()
	}
	return nil
}

// allocateContainer allocates one container's device resources; got is
// what it holds afterwards, did whether anything new was allocated.
func (m *Manager) allocateContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, reuse map[string]map[string]bool) (got map[string][]string, did bool, err error) {
	got = map[string][]string{}
	for name := range c.Resources.Limits {
		res := string(name)
		if err := m.allocateResource(ctx, pod, c, res, reuse[res], got, &did); err != nil {
			return nil, false, err
		}
	}
	for name := range c.Resources.Requests {
		if _, ok := c.Resources.Limits[name]; ok {
			continue
		}
		res := string(name)
		if err := m.allocateResource(ctx, pod, c, res, reuse[res], got, &did); err != nil {
			return nil, false, err
		}
	}
	return got, did, nil
}

func (m *Manager) allocateResource(ctx context.Context, pod *corev1.Pod, c *corev1.Container, res string, reuse map[string]bool, got map[string][]string, did *bool) error {
	need := requested(c, res)
	m.mu.Lock()
	r := m.resources[res]
	if r == nil || need <= 0 {
		// Not a device plugin resource: another kind of extended
		// resource, or none at all.
		m.mu.Unlock()
		return nil
	}
	if a := m.allocs[pod.UID]; a != nil {
		if held := a.containers[c.Name][res]; held != nil {
			m.mu.Unlock()
			got[res] = held.DeviceIDs
			return nil
		}
	}
	ep := r.ep
	inUse := m.inUseLocked()
	var mustInclude []string
	for id := range reuse {
		if len(mustInclude) < need {
			mustInclude = append(mustInclude, id)
		}
	}
	sort.Strings(mustInclude)
	var available []string
	topo := map[string]int64{}
	for id, d := range r.devices {
		if d.Health != pluginapi.Healthy || (inUse[res][id] && !reuse[id]) {
			continue
		}
		available = append(available, id)
		topo[id] = numaOf(d)
	}
	sort.Strings(available)
	m.mu.Unlock()

	if ep == nil {
		m.metrics.allocErr(res)
		return &AdmissionError{fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", res, need, 0)}
	}
	if len(available) < need {
		m.metrics.allocErr(res)
		return &AdmissionError{fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", res, need, len(available))}
	}
	start := time.Now()
	chosen := mustInclude
	if len(chosen) < need {
		if ep.opts.GetPreferredAllocationAvailable {
			pref, err := ep.preferred(ctx, available, mustInclude, need)
			if err != nil {
				m.metrics.pluginErr(res, "preferredallocation")
				m.log.Warn("GetPreferredAllocation failed; choosing devices without it", "resource", res, "err", err)
			} else {
				chosen = validPreference(pref, available, mustInclude, need)
			}
		}
		if len(chosen) < need {
			chosen = pickByNUMA(available, mustInclude, topo, need)
		}
	}
	resp, err := ep.allocate(ctx, chosen)
	m.metrics.allocDuration(res, time.Since(start))
	if err != nil {
		m.metrics.allocErr(res)
		return &AdmissionError{fmt.Errorf("device plugin %s Allocate: %v", res, err)}
	}
	m.mu.Lock()
	a := m.allocs[pod.UID]
	if a == nil {
		a = &podAllocation{Namespace: pod.Namespace, Name: pod.Name, containers: map[string]map[string]*allocation{}}
		m.allocs[pod.UID] = a
	}
	if a.containers[c.Name] == nil {
		a.containers[c.Name] = map[string]*allocation{}
	}
	a.containers[c.Name][res] = &allocation{DeviceIDs: chosen, Response: resp}
	m.mu.Unlock()
	got[res] = chosen
	*did = true
	return nil
}

// validPreference keeps a plugin's preferred set only if it is made of
// available devices, includes what it must and has the right size; the
// answer is advice, not an order.
func validPreference(pref, available, mustInclude []string, need int) []string {
	if len(pref) != need {
		return nil
	}
	avail := map[string]bool{}
	for _, id := range available {
		avail[id] = true
	}
	seen := map[string]bool{}
	for _, id := range pref {
		if !avail[id] || seen[id] {
			return nil
		}
		seen[id] = true
	}
	for _, id := range mustInclude {
		if !seen[id] {
			return nil
		}
	}
	return pref
}

// numaOf is a device's first NUMA node, -1 without topology.
func numaOf(d *pluginapi.Device) int64 {
	if d.Topology == nil || len(d.Topology.Nodes) == 0 {
		return -1
	}
	return d.Topology.Nodes[0].ID
}

// pickByNUMA takes the devices that must be included, then fills up from
// one NUMA node if one has enough free devices (the fullest such node),
// else from the nodes with the most free devices first.
func pickByNUMA(available, mustInclude []string, topo map[string]int64, need int) []string {
	chosen := append([]string(nil), mustInclude...)
	taken := map[string]bool{}
	for _, id := range chosen {
		taken[id] = true
	}
	byNode := map[int64][]string{}
	for _, id := range available {
		if !taken[id] {
			byNode[topo[id]] = append(byNode[topo[id]], id)
		}
	}
	nodes := make([]int64, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	left := need - len(chosen)
	// Nodes that can hold the rest alone come first, the smallest of
	// them (leaving big nodes whole for big requests); then the rest by
	// size, largest first.
	sort.Slice(nodes, func(i, j int) bool {
		a, b := len(byNode[nodes[i]]), len(byNode[nodes[j]])
		fa, fb := a >= left, b >= left
		if fa != fb {
			return fa
		}
		if fa && a != b {
			return a < b
		}
		if a != b {
			return a > b
		}
		return nodes[i] < nodes[j]
	})
	for _, n := range nodes {
		for _, id := range byNode[n] {
			if len(chosen) == need {
				return chosen
			}
			chosen = append(chosen, id)
		}
	}
	return chosen
}

// inUseLocked is every device held by a pod, by resource. m.mu is held.
func (m *Manager) inUseLocked() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, a := range m.allocs {
		for _, rs := range a.containers {
			for res, al := range rs {
				if out[res] == nil {
					out[res] = map[string]bool{}
				}
				for _, id := range al.DeviceIDs {
					out[res][id] = true
				}
			}
		}
	}
	return out
}

// ContainerOptions is what the container's devices add to it. When a
// plugin asked for PreStartContainer, it is called here, within 30 s,
// just before the container is created.
func (m *Manager) ContainerOptions(ctx context.Context, podUID types.UID, container string) (*ContainerOptions, error) {
	m.mu.Lock()
	var held map[string]*allocation
	var gen uint64
	var admitTook time.Duration
	a := m.allocs[podUID]
	if a != nil {
		held, gen = a.containers[container], a.gen
		if !a.observed {
			a.observed, admitTook = true, a.admitTook
		}
	}
	type preStart struct {
		ep  *endpoint
		ids []string
	}
	var calls []preStart
	names := make([]string, 0, len(held))
	for res := range held {
		names = append(names, res)
	}
	sort.Strings(names)
	for _, res := range names {
		if r := m.resources[res]; r != nil && r.ep != nil && r.ep.opts.PreStartRequired {
			calls = append(calls, preStart{r.ep, held[res].DeviceIDs})
		}
	}
	m.mu.Unlock()
	// The allocation is on disk before any container uses it, so a
	// crash never lets a device be handed out twice.
	waitStart := time.Now()
	if err := m.waitPersisted(ctx, gen); err != nil {
		return nil, err
	}
	if admitTook > 0 {
		m.metrics.admission.Observe((admitTook + time.Since(waitStart)).Seconds())
	}
	for _, c := range calls {
		if err := c.ep.preStart(ctx, c.ids); err != nil {
			m.metrics.pluginErr(c.ep.resource, "prestartcontainer")
			return nil, fmt.Errorf("device plugin %s PreStartContainer: %w", c.ep.resource, err)
		}
	}
	out := &ContainerOptions{}
	env := map[string]string{}
	var envOrder []string
	mounts := map[string]bool{}
	devs := map[string]bool{}
	cdi := map[string]bool{}
	for _, res := range names {
		resp := held[res].Response
		if resp == nil {
			continue
		}
		keys := make([]string, 0, len(resp.Envs))
		for k := range resp.Envs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if v, ok := env[k]; ok && v != resp.Envs[k] {
				return nil, fmt.Errorf("device plugins set environment variable %s to two values (%q, %q)", k, v, resp.Envs[k])
			}
			if _, ok := env[k]; !ok {
				envOrder = append(envOrder, k)
			}
			env[k] = resp.Envs[k]
		}
		for _, mt := range resp.Mounts {
			if mounts[mt.ContainerPath] {
				continue
			}
			mounts[mt.ContainerPath] = true
			out.Mounts = append(out.Mounts, Mount{HostPath: mt.HostPath, ContainerPath: mt.ContainerPath, ReadOnly: mt.ReadOnly})
		}
		for _, d := range resp.Devices {
			if devs[d.ContainerPath] {
				continue
			}
			devs[d.ContainerPath] = true
			perm := d.Permissions
			if perm == "" {
				perm = "rwm"
			}
			out.Devices = append(out.Devices, DeviceSpec{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: strings.ToLower(perm)})
		}
		for k, v := range resp.Annotations {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			if old, ok := out.Annotations[k]; ok && old != v {
				return nil, fmt.Errorf("device plugins set annotation %s to two values (%q, %q)", k, old, v)
			}
			out.Annotations[k] = v
		}
		for _, d := range resp.CdiDevices {
			if !cdi[d.Name] {
				cdi[d.Name] = true
				out.CDIDevices = append(out.CDIDevices, d.Name)
			}
		}
	}
	for _, k := range envOrder {
		out.Env = append(out.Env, k+"="+env[k])
	}
	return out, nil
}

// Release frees a pod's devices: it finished or is gone.
func (m *Manager) Release(uid types.UID) {
	m.mu.Lock()
	_, ok := m.allocs[uid]
	delete(m.allocs, uid)
	m.mu.Unlock()
	if ok {
		m.persist()
	}
}

// Retain frees the devices of every pod keep does not name: pods deleted
// while bonsai was down.
func (m *Manager) Retain(keep func(uid types.UID) bool) {
	m.mu.Lock()
	var gone []types.UID
	for uid := range m.allocs {
		if !keep(uid) {
			gone = append(gone, uid)
		}
	}
	m.mu.Unlock()
	for _, uid := range gone {
		m.Release(uid)
	}
}

// Holders are the pods that hold devices.
func (m *Manager) Holders() []types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]types.UID, 0, len(m.allocs))
	for uid := range m.allocs {
		out = append(out, uid)
	}
	return out
}

// Holds reports whether the pod holds devices.
func (m *Manager) Holds(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.allocs[uid]
	return ok
}
