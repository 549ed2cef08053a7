package simulator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// adoptPodIPs marks the IPs pods already have, before any pod is synced:
// after a restart no IP in use is handed out again.
func (s *Simulator) adoptPodIPs() {
	for _, obj := range s.pods.GetStore().List() {
		p := obj.(*corev1.Pod)
		node, ok := s.simulatedNode(p.Spec.NodeName)
		if !ok || p.Spec.HostNetwork || p.Status.PodIP == "" {
			continue
		}
		cidr := node.podCIDR
		addr, err := netip.ParseAddr(p.Status.PodIP)
		if !cidr.IsValid() || err != nil || !cidr.Contains(addr) {
			continue
		}
		key, _ := cache.MetaNamespaceKeyFunc(p)
		if _, err := s.ips.assign(key, p.UID, node.Name, cidr, p.Status.PodIP); err != nil {
			s.log.Warn("cannot adopt pod IP", "pod", key, "ip", p.Status.PodIP, "err", err)
		}
	}
}

// ownEcho says whether an update of a pod is the simulator's own status
// write coming back through the watch, which needs no sync: the write was
// conditional on the version the simulator read (old), so the version
// right after it is that write. (A write that failed is retried anyway.)
func (s *Simulator) ownEcho(old, p *corev1.Pod) bool {
	key, err := cache.MetaNamespaceKeyFunc(p)
	if err != nil {
		return false
	}
	return s.ownWrites.CompareAndDelete(key, old.ResourceVersion)
}

// syncPod drives one pod of a simulated node: Running and Ready (after the
// delays its annotations ask for), or gone once its deletion has begun.
func (s *Simulator) syncPod(ctx context.Context, key string) error {
	obj, exists, err := s.pods.GetIndexer().GetByKey(key)
	if err != nil {
		return err
	}
	if !exists {
		s.ownWrites.Delete(key)
		s.ips.release(key)
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		s.forgetBad(ns, name)
		return nil
	}
	pod := obj.(*corev1.Pod)
	node, ok := s.simulatedNode(pod.Spec.NodeName)
	if !ok {
		s.ips.release(key) // the node is no longer ours
		return nil
	}
	if !s.heartbeat(node) {
		// A dead node's kubelet does nothing: its pods stay as they are,
		// and deleting them waits, as on Kubernetes, for the node to come
		// back or for someone to force it.
		return nil
	}
	if pod.DeletionTimestamp != nil {
		// Simulated containers stop at once on SIGTERM: nothing to wait
		// for before the final delete.
		err := s.api.deletePod(ctx, pod)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // already gone, or replaced by a new pod of that name
		}
		return err
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	now := s.clock.Now()
	status, recheck, err := s.podStatus(key, pod, node, now)
	if errors.Is(err, errWaitForNode) {
		return nil // nodeChanged queues the pod again when the node has it
	}
	if err != nil {
		return err
	}
	if !apiequality.Semantic.DeepEqual(&pod.Status, status) {
		// The cached pod with the new status: the rest is only read (the
		// client encodes it), so it is shared, not copied.
		updated := *pod
		updated.Status = *status
		s.ownWrites.Store(key, pod.ResourceVersion)
		if err := s.api.updatePodStatus(ctx, &updated); err != nil {
			s.ownWrites.Delete(key)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
	}
	if recheck > 0 {
		s.podQ.AddAfter(key, recheck)
	}
	return nil
}

var errWaitForNode = errors.New("node has no pod CIDR or address yet")

// podStatus is the status a kubelet would report for a pod whose
// containers start startDelay after the pod is first seen (status.startTime)
// and turn ready readyDelay after they start. recheck is when the status
// next changes on its own.
func (s *Simulator) podStatus(key string, pod *corev1.Pod, node *nodeView, now time.Time) (*corev1.PodStatus, time.Duration, error) {
	hostIP := node.internalIP
	var podIP string
	if pod.Spec.HostNetwork {
		podIP = hostIP
	} else if cidr := node.podCIDR; cidr.IsValid() {
		addr, err := s.ips.assign(key, pod.UID, node.Name, cidr, pod.Status.PodIP)
		if err != nil {
			s.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", "no free pod IP in the node's pod CIDR %s", cidr)
			return nil, 0, fmt.Errorf("pod %s: %w in %s", key, err, cidr)
		}
		podIP = addr.String()
	}
	if podIP == "" || hostIP == "" {
		return nil, 0, errWaitForNode
	}

	st := pod.Status.DeepCopy()
	if st.StartTime == nil {
		t := metav1.NewTime(now)
		st.StartTime = &t
	}
	startDelay, readyDelay := s.delay(pod, AnnotationStartDelay), s.delay(pod, AnnotationReadyDelay)
	var recheck time.Duration
	startAt := st.StartTime.Add(startDelay)
	started := !now.Before(startAt)
	if !started {
		recheck = startAt.Sub(now)
	}
	// When the containers started: the earliest running container's
	// startedAt, else now.
	startedAt := metav1.NewTime(now)
	for _, cs := range st.ContainerStatuses {
		if r := cs.State.Running; r != nil && r.StartedAt.Before(&startedAt) {
			startedAt = r.StartedAt
		}
	}
	ready := false
	if started {
		readyAt := startedAt.Add(readyDelay)
		ready = !now.Before(readyAt)
		if !ready {
			recheck = readyAt.Sub(now)
		}
	}

	st.Phase = corev1.PodPending
	if started {
		st.Phase = corev1.PodRunning
	}
	st.HostIP, st.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	st.PodIP, st.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}

	byName := map[string]corev1.ContainerStatus{}
	for _, cs := range append(append([]corev1.ContainerStatus{}, st.InitContainerStatuses...), st.ContainerStatuses...) {
		byName[cs.Name] = cs
	}
	container := func(c corev1.Container, init bool) corev1.ContainerStatus {
		cs := corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image),
			ContainerID:  "simulated://" + hexID(string(pod.UID), c.Name),
			RestartCount: byName[c.Name].RestartCount,
		}
		sidecar := init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		switch {
		case init && !sidecar:
			// Init containers run to completion at once.
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: *st.StartTime, FinishedAt: *st.StartTime, ContainerID: cs.ContainerID}
			if old := byName[c.Name].State.Terminated; old != nil {
				cs.State.Terminated.StartedAt, cs.State.Terminated.FinishedAt = old.StartedAt, old.FinishedAt
			}
			cs.Ready = true
			cs.Started = ptr(false)
		case started:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: startedAt}
			if old := byName[c.Name].State.Running; old != nil {
				cs.State.Running.StartedAt = old.StartedAt
			}
			cs.Ready, cs.Started = ready, ptr(true)
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			cs.Started = ptr(false)
			cs.ContainerID = ""
		}
		return cs
	}
	st.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, container(c, true))
	}
	st.ContainerStatuses = nil
	var notReady []string
	for _, c := range pod.Spec.Containers {
		cs := container(c, false)
		if !cs.Ready {
			notReady = append(notReady, c.Name)
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}

	t := metav1.NewTime(now)
	setCondition(st, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, t)
	setCondition(st, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue}, t)
	setCondition(st, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}, t)
	containersReady := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}
	if len(notReady) > 0 {
		containersReady = corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady",
			Message: fmt.Sprintf("containers with unready status: [%s]", strings.Join(notReady, " "))}
	}
	setCondition(st, containersReady, t)
	podReady := containersReady
	podReady.Type = corev1.PodReady
	if podReady.Status == corev1.ConditionTrue {
		// Readiness gates are the kubelet's rule too: Ready waits for
		// every gate's condition to be True.
		var missing []string
		for _, g := range pod.Spec.ReadinessGates {
			if c := condition(st, g.ConditionType); c == nil || c.Status != corev1.ConditionTrue {
				missing = append(missing, string(g.ConditionType))
			}
		}
		if len(missing) > 0 {
			podReady = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady",
				Message: fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not True", strings.Join(missing, ", "))}
		}
	}
	setCondition(st, podReady, t)
	return st, recheck, nil
}

func condition(st *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setCondition sets c, keeping the transition time when the status stays.
func setCondition(st *corev1.PodStatus, c corev1.PodCondition, now metav1.Time) {
	c.LastTransitionTime = now
	if old := condition(st, c.Type); old != nil {
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		c.LastProbeTime = old.LastProbeTime
		*old = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

// imageID is what a runtime reports for an image: its name and a digest
// (here a digest of the name, since nothing is pulled).
func imageID(image string) string {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i] // the tag
	}
	sum := sha256.Sum256([]byte(image))
	return name + "@sha256:" + hex.EncodeToString(sum[:])
}

// hexID is a container ID stable for a pod and container name.
func hexID(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "/")))
	return hex.EncodeToString(sum[:])
}

func ptr[T any](v T) *T { return &v }
