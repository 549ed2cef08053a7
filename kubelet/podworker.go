package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/netplugin"
)

// resyncPeriod is how often a quiet pod is looked at anyway.
const resyncPeriod = 10 * time.Second

// podWorker drives one pod. Only its run goroutine touches the fields
// below mu's.
type podWorker struct {
	m   *podManager
	uid types.UID

	mu      sync.Mutex
	pod     *corev1.Pod
	deleted bool
	kick    chan struct{}
	// apiUID is the UID of the API object status goes to when it is not
	// the pod's own: a static pod's mirror.
	apiUID types.UID

	sandbox   *cri.Sandbox
	podIPs    []string
	waiting   map[string]corev1.ContainerStateWaiting // by container name
	probes    map[string]*probeState                  // by container name
	startTime *metav1.Time
	// sandboxRetryAt is when a sandbox that failed may be tried again.
	sandboxRetryAt time.Time
	deadline       bool // activeDeadlineSeconds passed
	events         map[string]time.Time
	// pullRetryAt is when an image that failed to pull (by container
	// name) may be pulled again: the worker sleeps until then rather
	// than waking every second to find the back-off still on.
	pullRetryAt map[string]time.Time
	// claimMounts are the pod's claim volumes, resolved once (by volume
	// name).
	claimMounts map[string]claimMount
	// devicesAdmitted: the pod got its devices; devicesWaiting: for
	// devices deleted pods still hold (kubelet/devices.go).
	devicesAdmitted, devicesWaiting bool
	// claimsPrepared: the pod's ResourceClaims are prepared
	// (kubelet/resourceclaims.go).
	claimsPrepared bool
	// shutdownPeriod and shutdownDone (under mu) are a graceful node
	// shutdown's order to stop the pod within the period; shutdownDone
	// closes once it has stopped. shutdownStopped: it was stopped so,
	// and stays Failed.
	shutdownPeriod  time.Duration
	shutdownDone    chan struct{}
	shutdownClosed  bool
	shutdownStopped bool
	// evictOrder (under mu) is node-pressure eviction's order to stop
	// the pod; evicted: it was stopped so, and stays Failed with
	// evictOrder's message.
	evictOrder *evictOrder
	evicted    bool
	// measured (under mu) is what the stats sampler measures of the pod:
	// its sandbox and running containers at the last listing, nil
	// without a sandbox.
	measured *StatsPod
}

// shutdown orders the pod stopped within period for a node shutdown; the
// channel closes when it has stopped (or had nothing to stop).
func (w *podWorker) shutdown(period time.Duration) <-chan struct{} {
	w.mu.Lock()
	if w.shutdownDone == nil {
		w.shutdownDone, w.shutdownPeriod = make(chan struct{}), period
	}
	done := w.shutdownDone
	w.mu.Unlock()
	w.wake()
	return done
}

func (w *podWorker) shutdownOrder() (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shutdownPeriod, w.shutdownDone != nil
}

func (w *podWorker) shutdownFinished() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shutdownDone != nil && !w.shutdownClosed {
		close(w.shutdownDone)
		w.shutdownClosed = true
	}
}

// syncShutdown stops the pod for a node shutdown, as the kubelet's
// shutdown manager kills it: within the lesser of the phase's period and
// the pod's own grace, then Failed with reason Terminated and a
// DisruptionTarget condition. handled means the sync ends here.
func (w *podWorker) syncShutdown(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus) (time.Duration, bool) {
	period, ordered := w.shutdownOrder()
	if !ordered && !w.shutdownStopped {
		return 0, false
	}
	if !w.shutdownStopped && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		w.stopAll(ctx, pod, inst, min(containerGrace(pod), period))
		w.shutdownStopped = true
		inst, _ = w.instances(ctx)
	}
	if !w.shutdownStopped {
		w.shutdownFinished()
		return 0, false
	}
	w.postStatus(ctx, pod, w.status(pod, inst))
	w.shutdownFinished()
	w.releaseNetwork(ctx)
	w.releaseDevices()
	w.unprepareClaims(ctx) // a failure is retried by housekeeping
	return time.Minute, true
}

// rejectForShutdown fails a pod that arrives while the node shuts down,
// before anything of it runs, as the kubelet's admission does.
func (w *podWorker) rejectForShutdown(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus) bool {
	if !w.m.shutdown.isShuttingDown() || len(inst) > 0 || w.sandbox != nil {
		return false
	}
	w.event(ctx, pod, "", corev1.EventTypeWarning, shutdownRejectReason, shutdownRejectMessage)
	st := pod.Status.DeepCopy()
	st.Phase, st.Reason, st.Message = corev1.PodFailed, shutdownRejectReason, "Pod was rejected: "+shutdownRejectMessage
	w.postStatus(ctx, pod, *st)
	return true
}

func newPodWorker(m *podManager, pod *corev1.Pod) *podWorker {
	return &podWorker{m: m, uid: pod.UID, pod: pod, kick: make(chan struct{}, 1),
		waiting: map[string]corev1.ContainerStateWaiting{}, probes: map[string]*probeState{}, events: map[string]time.Time{}, pullRetryAt: map[string]time.Time{}}
}

func (w *podWorker) update(pod *corev1.Pod, deleted bool) {
	w.mu.Lock()
	w.pod, w.deleted = pod, w.deleted || deleted
	w.mu.Unlock()
	w.wake()
}

func (w *podWorker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *podWorker) snapshot() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.deleted
}

func (w *podWorker) run() {
	ctx := w.m.ctx
	next := time.Duration(0)
	for {
		timer := time.NewTimer(next)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-w.kick:
		case <-timer.C:
		}
		timer.Stop()
		var done bool
		next, done = w.sync(ctx)
		if done {
			w.m.workerDone(w.uid)
			return
		}
		if next <= 0 || next > resyncPeriod {
			next = resyncPeriod
		}
	}
}

// instances groups the pod's containers in the runtime by container name,
// newest attempt first.
func (w *podWorker) instances(ctx context.Context) (map[string][]cri.ContainerStatus, error) {
	all, err := w.m.rt.PodContainers(ctx, string(w.uid))
	if err != nil {
		return nil, err
	}
	out := map[string][]cri.ContainerStatus{}
	for _, c := range all {
		name := c.Labels[cri.LabelContainerName]
		out[name] = append(out[name], c)
	}
	for _, cs := range out {
		sort.Slice(cs, func(i, j int) bool { return cs[i].Attempt > cs[j].Attempt })
	}
	w.setMeasured(all)
	return out, nil
}

// measuredVolumes are the pod's volumes the kubelet writes and measures,
// with what the kubelet counts as ephemeral storage: emptyDir on disk and
// configMap (secrets, downward API and projected volumes are in memory).
func (w *podWorker) measuredVolumes(pod *corev1.Pod) []StatsVolume {
	var out []StatsVolume
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if kind := volumeKind(v); kind != "" {
			ephemeral := v.ConfigMap != nil || (v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumDefault)
			out = append(out, StatsVolume{Name: v.Name, Path: w.volumeDir(kind, v.Name), Ephemeral: ephemeral})
		}
	}
	return out
}

// setMeasured records the sandbox and the running ones of containers for
// the stats sampler, which so never lists the runtime itself.
func (w *podWorker) setMeasured(containers []cri.ContainerStatus) {
	var p *StatsPod
	if sb := w.sandbox; sb != nil {
		pods := statsPods([]cri.Sandbox{*sb}, containers)
		p = &pods[0]
		if pod, _ := w.snapshot(); pod != nil {
			p.Volumes = w.measuredVolumes(pod)
		}
	}
	w.mu.Lock()
	w.measured = p
	w.mu.Unlock()
}

// sync moves the pod one step and says when to look again; done means the
// pod is gone and the worker ends.
func (w *podWorker) sync(ctx context.Context) (time.Duration, bool) {
	pod, deleted := w.snapshot()
	inst, err := w.instances(ctx)
	if err != nil {
		w.m.log.Warn("listing containers", "pod", podKey(pod), "err", err)
		return time.Second, false
	}
	if deleted || pod.DeletionTimestamp != nil {
		w.shutdownFinished()
		return w.terminate(ctx, pod, deleted, inst)
	}
	if next, handled := w.syncEviction(ctx, pod, inst); handled {
		return next, false
	}
	if next, handled := w.syncShutdown(ctx, pod, inst); handled {
		return next, false
	}
	if w.startTime == nil {
		if pod.Status.StartTime != nil {
			w.startTime = pod.Status.StartTime.DeepCopy()
		} else {
			t := metav1.NewTime(time.Now().Truncate(time.Second))
			w.startTime = &t
		}
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		// Finished pods keep their containers (for logs) until deleted,
		// but nothing runs and the network goes.
		w.stopAll(ctx, pod, inst, 0)
		w.releaseNetwork(ctx)
		w.releaseDevices()
		if err := w.unprepareClaims(ctx); err != nil {
			w.m.log.Warn("unpreparing resource claims", "pod", podKey(pod), "err", err)
			return claimRetry, false
		}
		return time.Minute, false
	}
	if ads := pod.Spec.ActiveDeadlineSeconds; ads != nil && !w.deadline && time.Since(w.startTime.Time) > time.Duration(*ads)*time.Second {
		w.deadline = true
		w.event(ctx, pod, "", corev1.EventTypeNormal, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
	}
	if w.deadline {
		w.stopAll(ctx, pod, inst, gracePeriod(pod))
		inst, _ = w.instances(ctx)
		w.postStatus(ctx, pod, w.status(pod, inst))
		return time.Minute, false
	}
	if w.rejectForShutdown(ctx, pod, inst) || w.rejectForPressure(ctx, pod, inst) || w.rejectAppArmor(ctx, pod, inst) {
		return time.Minute, false
	}
	if !w.admitDevices(ctx, pod, inst) {
		if w.devicesWaiting {
			return 100 * time.Millisecond, false
		}
		return 5 * time.Second, false
	}
	if !w.prepareClaims(ctx, pod, inst) {
		return claimRetry, false
	}
	next := resyncPeriod
	if w.sandbox == nil && time.Now().Before(w.sandboxRetryAt) {
		// Woken early (a status write, a pod update): the back-off holds.
		return time.Until(w.sandboxRetryAt), false
	}
	if err := w.ensureSandbox(ctx, pod); err != nil {
		key := "sandbox/" + string(pod.UID)
		w.m.sandboxBackoff.Next(key, time.Now())
		w.sandboxRetryAt = time.Now().Add(w.m.sandboxBackoff.Get(key))
		w.event(ctx, pod, "", corev1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: "+err.Error())
		w.postStatus(ctx, pod, w.status(pod, inst))
		return time.Until(w.sandboxRetryAt), false
	}
	if !w.sandboxRetryAt.IsZero() {
		w.m.sandboxBackoff.Reset("sandbox/" + string(pod.UID))
		w.sandboxRetryAt = time.Time{}
	}
	if err := w.setupVolumes(ctx, pod); err != nil {
		w.event(ctx, pod, "", corev1.EventTypeWarning, "FailedMount", err.Error())
		w.postStatus(ctx, pod, w.status(pod, inst))
		return 5 * time.Second, false
	}
	w.writeDNSFiles(pod)
	if d, done := w.syncInitContainers(ctx, pod, inst); !done {
		next = min(next, d)
	} else {
		for i := range pod.Spec.Containers {
			d := w.syncContainer(ctx, pod, &pod.Spec.Containers[i], inst[pod.Spec.Containers[i].Name], false)
			next = min(next, d)
		}
	}
	inst, _ = w.instances(ctx)
	next = min(next, w.runProbes(ctx, pod, inst))
	if ads := pod.Spec.ActiveDeadlineSeconds; ads != nil {
		// Wake when the deadline passes, not at the next resync.
		next = min(next, max(time.Until(w.startTime.Add(time.Duration(*ads)*time.Second))+10*time.Millisecond, 10*time.Millisecond))
	}
	w.pruneOld(ctx, inst)
	w.postStatus(ctx, pod, w.status(pod, inst))
	return next, false
}

// syncInitContainers runs init containers one at a time, in order; done
// when all of them succeeded.
func (w *podWorker) syncInitContainers(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus) (time.Duration, bool) {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if isSidecar(c) {
			if d, done := w.syncSidecar(ctx, pod, c, inst); !done {
				return d, false
			}
			continue
		}
		cs := inst[c.Name]
		if len(cs) > 0 && cs[0].State == cri.ContainerExited && cs[0].ExitCode == 0 {
			continue
		}
		// Once the main containers ran, init containers are not re-run
		// (their records may have been pruned after a restart).
		if initDoneBefore(pod, inst) {
			continue
		}
		return w.syncContainer(ctx, pod, c, cs, true), false
	}
	return 0, true
}

func initDoneBefore(pod *corev1.Pod, inst map[string][]cri.ContainerStatus) bool {
	for _, c := range pod.Spec.Containers {
		if len(inst[c.Name]) > 0 {
			return true
		}
	}
	return false
}

// syncContainer starts a container that never ran, leaves a running one
// alone, and restarts an exited one when the restart policy says so,
// after its back-off.
func (w *podWorker) syncContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cs []cri.ContainerStatus, init bool) time.Duration {
	if len(cs) > 0 {
		latest := cs[0]
		switch latest.State {
		case cri.ContainerRunning:
			delete(w.waiting, c.Name)
			return resyncPeriod
		case cri.ContainerCreated:
			// Created but not started (a crash in between): start it over.
			w.m.rt.RemoveContainer(ctx, latest.ID)
			cs = cs[1:]
		case cri.ContainerExited:
			// A sidecar restarts whatever the pod's policy says.
			if !isSidecar(c) && !shouldRestart(pod, latest, init) {
				delete(w.waiting, c.Name)
				return resyncPeriod
			}
			key := backoffKey(pod, c.Name)
			if w.m.backoff.IsInBackOffSince(key, latest.FinishedAt) {
				wait := w.m.backoff.Get(key) - time.Since(latest.FinishedAt)
				w.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
					Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", w.m.backoff.Get(key), c.Name, pod.Name, pod.Namespace, pod.UID)}
				w.eventOnce(ctx, pod, c.Name, "BackOff", latest.ID, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container "+c.Name+" in pod "+pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")")
				return wait
			}
			w.m.backoff.Next(key, time.Now())
		}
	}
	attempt := uint32(0)
	if len(cs) > 0 {
		attempt = cs[0].Attempt + 1
	}
	if err := w.startContainer(ctx, pod, c, attempt); err != nil {
		w.m.log.Info("starting container failed", "pod", podKey(pod), "container", c.Name, "err", err)
		if d := time.Until(w.pullRetryAt[c.Name]); d > time.Second {
			return d
		}
		return time.Second
	}
	delete(w.waiting, c.Name)
	return resyncPeriod
}

func backoffKey(pod *corev1.Pod, container string) string {
	return string(pod.UID) + "/" + container
}

// shouldRestart applies the pod's restart policy to an exited container.
func shouldRestart(pod *corev1.Pod, c cri.ContainerStatus, init bool) bool {
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return c.ExitCode != 0
	}
	if init {
		return c.ExitCode != 0
	}
	return true
}

// startContainer pulls the image per policy, creates and starts one
// instance, and runs its postStart hook.
func (w *podWorker) startContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt uint32) error {
	if err := w.ensureImage(ctx, pod, c); err != nil {
		return err
	}
	cfg, err := w.containerConfig(ctx, pod, c, attempt)
	if err != nil {
		w.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}
		w.event(ctx, pod, c.Name, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return err
	}
	id, err := w.m.rt.CreateContainer(ctx, w.sandbox.ID, cfg)
	if err != nil {
		w.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}
		w.event(ctx, pod, c.Name, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return err
	}
	w.event(ctx, pod, c.Name, corev1.EventTypeNormal, "Created", "Created container: "+c.Name)
	if err := w.m.rt.StartContainer(ctx, id); err != nil {
		w.m.rt.RemoveContainer(ctx, id)
		w.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: "RunContainerError", Message: err.Error()}
		w.event(ctx, pod, c.Name, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return err
	}
	w.event(ctx, pod, c.Name, corev1.EventTypeNormal, "Started", "Started container "+c.Name)
	w.probes[c.Name] = newProbeState(id)
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		if msg, err := w.runHandler(ctx, pod, c, id, c.Lifecycle.PostStart); err != nil {
			w.event(ctx, pod, c.Name, corev1.EventTypeWarning, "FailedPostStartHook", fmt.Sprintf("PostStartHook failed: %v %s", err, msg))
			w.event(ctx, pod, c.Name, corev1.EventTypeNormal, "Killing", "FailedPostStartHook")
			w.m.rt.StopContainer(ctx, id, containerGrace(pod))
		}
	}
	return nil
}

// ensureSandbox creates the pod's network and sandbox once; after a
// restart it finds the existing ones.
func (w *podWorker) ensureSandbox(ctx context.Context, pod *corev1.Pod) error {
	if w.sandbox == nil {
		sbs, err := w.m.rt.ListPodSandboxes(ctx)
		if err != nil {
			return err
		}
		for i := range sbs {
			if sbs[i].Config.PodUID == string(pod.UID) {
				w.sandbox = &sbs[i]
				break
			}
		}
	}
	if w.sandbox != nil {
		if w.podIPs == nil {
			if w.sandbox.Config.IP != "" {
				w.podIPs = []string{w.sandbox.Config.IP}
			} else {
				w.podIPs = []string{w.m.cfg.Address.String()}
			}
		}
		return nil
	}
	if max := w.m.cfg.PodMaxPids; max > 0 {
		if err := setPodPidsLimit(podCgroup(string(pod.UID)), max); err != nil {
			return err
		}
	}
	cfg := cri.SandboxConfig{PodUID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Hostname: podHostname(pod), Labels: pod.Labels}
	var ips []string
	if !pod.Spec.HostNetwork {
		if w.m.net == nil {
			return errors.New("the pod network is not available on this node")
		}
		att, err := w.m.net.Setup(ctx, netplugin.Pod{
			ID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
			HostPorts: hostPorts(pod), Annotations: pod.Annotations, DNS: w.podDNS(pod),
		})
		if err != nil {
			return fmt.Errorf("failed to set up network for sandbox %q: %w", string(pod.UID), err)
		}
		cfg.NetnsPath, cfg.IP = att.NetnsPath, att.IP.String()
		for _, ip := range att.IPs {
			ips = append(ips, ip.String())
		}
	}
	id, err := w.m.rt.RunPodSandbox(ctx, cfg)
	if err != nil {
		if w.m.net != nil && !pod.Spec.HostNetwork {
			w.m.net.Teardown(ctx, string(pod.UID))
		}
		return err
	}
	w.sandbox = &cri.Sandbox{ID: id, Config: cfg, CreatedAt: time.Now()}
	if len(ips) > 0 {
		w.podIPs = ips
	} else {
		w.podIPs = []string{w.m.cfg.Address.String()}
	}
	return nil
}

func podHostname(pod *corev1.Pod) string {
	if pod.Spec.HostNetwork {
		h, _ := os.Hostname()
		return h
	}
	if pod.Spec.Hostname != "" {
		return pod.Spec.Hostname
	}
	if len(pod.Name) > 63 {
		return pod.Name[:63]
	}
	return pod.Name
}

func hostPorts(pod *corev1.Pod) []netplugin.HostPort {
	var out []netplugin.HostPort
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			out = append(out, netplugin.HostPort{Protocol: string(p.Protocol), HostIP: p.HostIP, HostPort: p.HostPort, ContainerPort: p.ContainerPort})
		}
	}
	return out
}

// stopAll stops every running container of the pod, in parallel, running
// preStop hooks within the grace period.
func (w *podWorker) stopAll(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus, grace time.Duration) {
	specs := map[string]*corev1.Container{}
	if pod != nil {
		for i := range pod.Spec.Containers {
			specs[pod.Spec.Containers[i].Name] = &pod.Spec.Containers[i]
		}
		for i := range pod.Spec.InitContainers {
			specs[pod.Spec.InitContainers[i].Name] = &pod.Spec.InitContainers[i]
		}
	}
	var wg sync.WaitGroup
	for name, cs := range inst {
		for _, c := range cs {
			if c.State != cri.ContainerRunning {
				continue
			}
			wg.Add(1)
			go func(name string, c cri.ContainerStatus) {
				defer wg.Done()
				deadline := time.Now().Add(grace)
				if spec := specs[name]; spec != nil && pod != nil {
					w.event(ctx, pod, name, corev1.EventTypeNormal, "Killing", "Stopping container "+name)
					if spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil && grace > 0 {
						hctx, cancel := context.WithDeadline(ctx, deadline)
						if msg, err := w.runHandler(hctx, pod, spec, c.ID, spec.Lifecycle.PreStop); err != nil {
							w.event(ctx, pod, name, corev1.EventTypeWarning, "FailedPreStopHook", fmt.Sprintf("PreStopHook failed: %v %s", err, msg))
						}
						cancel()
					}
				}
				left := time.Until(deadline)
				if left < 0 {
					left = 0
				}
				if err := w.m.rt.StopContainer(ctx, c.ID, left); err != nil {
					w.m.log.Warn("stopping container", "pod", podKey(pod), "container", name, "err", err)
				}
			}(name, c)
		}
	}
	wg.Wait()
}

// terminate kills a deleted pod's containers within its grace period,
// removes everything the node holds for it and completes the deletion in
// the API.
func (w *podWorker) terminate(ctx context.Context, pod *corev1.Pod, deleted bool, inst map[string][]cri.ContainerStatus) (time.Duration, bool) {
	grace := gracePeriod(pod)
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil {
		// The grace period counts from when deletion was asked.
		grace = time.Until(pod.DeletionTimestamp.Time)
		if grace < 0 {
			grace = 0
		}
	}
	w.stopAll(ctx, pod, inst, grace)
	if !deleted {
		inst, _ = w.instances(ctx)
		w.postStatus(ctx, pod, w.status(pod, inst))
	}
	for _, cs := range inst {
		for _, c := range cs {
			w.m.rt.StopContainer(ctx, c.ID, 0)
			if err := w.m.rt.RemoveContainer(ctx, c.ID); err != nil {
				w.m.log.Warn("removing container", "pod", podKey(pod), "err", err)
				return time.Second, false
			}
		}
	}
	w.releaseNetwork(ctx)
	if w.sandbox != nil {
		if err := w.m.rt.RemovePodSandbox(ctx, w.sandbox.ID); err != nil {
			return time.Second, false
		}
		w.sandbox = nil
		w.setMeasured(nil)
	} else if sbs, err := w.m.rt.ListPodSandboxes(ctx); err == nil {
		for _, sb := range sbs {
			if sb.Config.PodUID == string(pod.UID) {
				w.m.rt.RemovePodSandbox(ctx, sb.ID)
			}
		}
	}
	removePodCgroup(podCgroup(string(pod.UID)))
	// CSI volumes are unpublished by their drivers first: the pod waits
	// for that, as the kubelet keeps a pod until its volumes are
	// unmounted.
	if err := w.m.teardownCSI(ctx, w.podDir()); err != nil {
		w.m.log.Warn("unmounting CSI volumes", "pod", podKey(pod), "err", err)
		return time.Second, false
	}
	w.claimMounts = nil
	if err := removePodDir(w.podDir()); err != nil {
		w.m.log.Warn("removing pod dir", "pod", podKey(pod), "err", err)
	}
	w.releaseDevices()
	// The claims are unprepared before the pod leaves the API: once it
	// has, its claims are deallocated and their devices may go to
	// another pod.
	if err := w.unprepareClaims(ctx); err != nil {
		w.m.log.Warn("unpreparing resource claims", "pod", podKey(pod), "err", err)
		return claimRetry, false
	}
	if target := w.apiObject(pod); !deleted || target.UID != pod.UID {
		if err := w.m.client.deletePod(ctx, target); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			w.m.log.Warn("completing pod deletion", "pod", podKey(pod), "err", err)
			return time.Second, false
		}
	}
	return 0, true
}

func (w *podWorker) releaseNetwork(ctx context.Context) {
	if w.m.net == nil {
		return
	}
	if err := w.m.net.Teardown(ctx, string(w.uid)); err != nil {
		w.m.log.Warn("tearing down pod network", "pod", string(w.uid), "err", err)
	}
}

// pruneOld keeps, per container, the current instance and the one before
// it (for `kubectl logs --previous`).
func (w *podWorker) pruneOld(ctx context.Context, inst map[string][]cri.ContainerStatus) {
	for _, cs := range inst {
		for _, c := range cs[min(2, len(cs)):] {
			if c.State != cri.ContainerRunning {
				w.m.rt.RemoveContainer(ctx, c.ID)
			}
		}
	}
}

func gracePeriod(pod *corev1.Pod) time.Duration {
	if pod.DeletionGracePeriodSeconds != nil {
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	return containerGrace(pod)
}

func containerGrace(pod *corev1.Pod) time.Duration {
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// apiObject is the pod as the API knows it: for a static pod, its mirror.
func (w *podWorker) apiObject(pod *corev1.Pod) *corev1.Pod {
	w.mu.Lock()
	uid := w.apiUID
	w.mu.Unlock()
	if uid == "" || pod == nil {
		return pod
	}
	p := pod.DeepCopy()
	p.UID = uid
	return p
}

func rvOf(p *corev1.Pod) uint64 {
	rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
	return rv
}

func podKey(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	return pod.Namespace + "/" + pod.Name
}

// postStatus writes the pod's status when it differs from what the API
// has.
func (w *podWorker) postStatus(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) {
	if apiequality.Semantic.DeepEqual(pod.Status, st) {
		return
	}
	p := w.apiObject(pod).DeepCopy()
	p.Status = st
	updated, err := w.m.client.updatePodStatus(ctx, p)
	if apierrors.IsConflict(err) {
		fresh, gerr := w.m.client.getPod(ctx, pod.Namespace, pod.Name)
		if gerr != nil || fresh.UID != p.UID {
			return
		}
		fresh.Status = st
		updated, err = w.m.client.updatePodStatus(ctx, fresh)
	}
	if err != nil {
		if !apierrors.IsNotFound(err) {
			w.m.log.Warn("posting pod status", "pod", podKey(pod), "err", err)
		}
		return
	}
	// Keep the newer of what the informer delivered and what we wrote.
	w.mu.Lock()
	if w.pod != nil && w.apiUID == "" && w.pod.UID == updated.UID && rvOf(updated) > rvOf(w.pod) {
		w.pod = updated
	}
	w.mu.Unlock()
}

// event records an Event on the pod; container events name the container
// in fieldPath as the kubelet does.
func (w *podWorker) event(ctx context.Context, pod *corev1.Pod, container, typ, reason, msg string) {
	if pod == nil {
		return
	}
	ref := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion}
	if container != "" {
		ref.FieldPath = fmt.Sprintf("spec.containers{%s}", container)
		for _, c := range pod.Spec.InitContainers {
			if c.Name == container {
				ref.FieldPath = fmt.Sprintf("spec.initContainers{%s}", container)
			}
		}
	}
	w.m.recorder.Event(&ref, typ, reason, msg)
}

// kubeletEvent is an Event the kubelet of node reports about ref, in
// namespace ns, named as client-go's recorder names them.
func kubeletEvent(node, ns string, ref corev1.ObjectReference, typ, reason, msg string) *corev1.Event {
	now := metav1.NewTime(time.Now())
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()), Namespace: ns},
		InvolvedObject: ref, Reason: reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: "kubelet", Host: node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "kubelet", ReportingInstance: node,
	}
}

// eventOnce records an event once per key instance (a back-off for one
// container exit, say), not on every sync.
func (w *podWorker) eventOnce(ctx context.Context, pod *corev1.Pod, container, kind, instance, typ, reason, msg string) {
	k := kind + "/" + container + "/" + instance
	if _, ok := w.events[k]; ok {
		return
	}
	w.events[k] = time.Now()
	w.event(ctx, pod, container, typ, reason, msg)
}

func (w *podWorker) podDir() string { return filepath.Join(w.m.podsDir(), string(w.uid)) }
