package kubelet

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"bonsai.dev/bonsai/deviceplugin"
	"bonsai.dev/bonsai/kubelet/cri"
)

// reasonUnexpectedAdmission is the kubelet's reason for a pod whose
// devices could not be allocated at admission.
const reasonUnexpectedAdmission = "UnexpectedAdmissionError"

// admitDevices allocates the pod's devices before anything of it runs, as
// the kubelet's admission does. A pod that cannot get them fails with
// UnexpectedAdmissionError rather than run without them. A pod whose
// containers already exist (bonsai restarted) is not admitted again: it
// keeps what the checkpoint says it holds, and a running pod is never
// failed for a plugin that has not registered again yet.
func (w *podWorker) admitDevices(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus) bool {
	dm := w.m.cfg.Devices
	if dm == nil || w.devicesAdmitted {
		return true
	}
	if len(inst) > 0 {
		w.devicesAdmitted = true
		return true
	}
	err := dm.Allocate(ctx, pod)
	var ae *deviceplugin.AdmissionError
	if errors.As(err, &ae) && w.m.devicesFreeing(dm) {
		// Pods deleted from the API still hold devices until their
		// containers are gone: the scheduler already counts them free.
		// Wait for them rather than fail this pod or hand a device to
		// two containers.
		w.devicesWaiting = true
		return false
	}
	w.devicesWaiting = false
	if errors.As(err, &ae) {
		msg := ae.Error()
		w.m.log.Warn("pod rejected at admission", "pod", podKey(pod), "err", msg)
		w.event(ctx, pod, "", corev1.EventTypeWarning, reasonUnexpectedAdmission, msg)
		st := pod.Status.DeepCopy()
		st.Phase, st.Reason, st.Message = corev1.PodFailed, reasonUnexpectedAdmission, msg
		w.postStatus(ctx, pod, *st)
		return false
	}
	if err != nil {
		w.m.log.Warn("allocating devices", "pod", podKey(pod), "err", err)
		return false
	}
	w.devicesAdmitted = true
	return true
}

// applyDevices adds what the container's devices bring: the plugins'
// environment first (the container's own env wins), mounts, device nodes,
// annotations and CDI devices, after the CDI devices of the ResourceClaims
// the container names.
func (w *podWorker) applyDevices(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cfg *cri.ContainerConfig) error {
	cfg.CDIDevices = w.applyClaimDevices(pod, c)
	dm := w.m.cfg.Devices
	if dm == nil {
		return nil
	}
	opts, err := dm.ContainerOptions(ctx, pod.UID, c.Name)
	if err != nil || opts.Empty() {
		return err
	}
	cfg.Env = append(append([]string(nil), opts.Env...), cfg.Env...)
	for _, m := range opts.Mounts {
		cfg.Mounts = append(cfg.Mounts, cri.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range opts.Devices {
		cfg.Devices = append(cfg.Devices, cri.Device{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: d.Permissions})
	}
	if len(opts.Annotations) > 0 {
		cfg.Annotations = opts.Annotations
	}
	cfg.CDIDevices = append(cfg.CDIDevices, opts.CDIDevices...)
	return nil
}

// releaseDevices frees the pod's devices: it finished or is gone.
func (w *podWorker) releaseDevices() {
	if dm := w.m.cfg.Devices; dm != nil {
		dm.Release(w.uid)
	}
}

// retainDevices frees the devices of pods this node no longer runs
// (deleted while bonsai was down).
func (m *podManager) retainDevices() {
	if dm := m.cfg.Devices; dm != nil {
		dm.Retain(func(uid types.UID) bool { return m.known(string(uid)) })
	}
}

// activePods is the node's pods for the pod-resources API: those not
// deleted and not finished, with their containers.
func (m *podManager) activePods() []deviceplugin.ActivePod {
	m.mu.Lock()
	ws := make([]*podWorker, 0, len(m.workers))
	for _, w := range m.workers {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	var out []deviceplugin.ActivePod
	for _, w := range ws {
		pod, deleted := w.snapshot()
		if deleted || pod == nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		p := deviceplugin.ActivePod{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name}
		for _, c := range pod.Spec.InitContainers {
			p.Containers = append(p.Containers, c.Name)
		}
		for _, c := range pod.Spec.Containers {
			p.Containers = append(p.Containers, c.Name)
		}
		out = append(out, p)
	}
	return out
}

// devicesFreeing reports devices held by pods the API no longer has,
// whose workers are stopping them and will release the devices.
func (m *podManager) devicesFreeing(dm *deviceplugin.Manager) bool {
	for _, uid := range dm.Holders() {
		m.mu.Lock()
		w := m.workers[uid]
		m.mu.Unlock()
		if w == nil {
			continue // housekeeping's retainDevices frees it
		}
		if _, deleted := w.snapshot(); deleted {
			return true
		}
	}
	return false
}

// watchDevices posts node status as soon as a device plugin resource
// changes, so capacity and allocatable follow within a second.
func (a *Agent) watchDevices(ctx context.Context) {
	dm := a.cfg.Devices
	if dm == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-dm.Changes():
		}
		// A conflict (another writer of the Node) must not lose the
		// change: nothing else posts it until the next one.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return a.postStatus(ctx, true) })
		if err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("posting node status for devices; retrying", "node", a.cfg.NodeName, "err", err)
			time.AfterFunc(time.Second, dm.Notify)
		}
	}
}

// deviceResources adds device plugin resources to node status.
func (a *Agent) deviceResources(capacity, allocatable corev1.ResourceList) {
	dm := a.cfg.Devices
	if dm == nil {
		return
	}
	c, al := dm.Resources()
	for k, v := range c {
		capacity[k] = v
	}
	for k, v := range al {
		allocatable[k] = v
	}
}
