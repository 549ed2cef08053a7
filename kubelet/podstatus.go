package kubelet

import (
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/kubelet/eviction"
)

// Termination messages are cut as the kubelet cuts them.
const (
	maxTerminationMessage = 4096
	fallbackLogLines      = 80
	fallbackLogBytes      = 2048
)

func mtime(t time.Time) metav1.Time {
	if t.IsZero() {
		return metav1.Time{}
	}
	// The API keeps seconds; compare what will round-trip.
	return metav1.NewTime(t.Truncate(time.Second))
}

// status computes the pod's status from the runtime's containers, the
// worker's waiting reasons and probe results.
func (w *podWorker) status(pod *corev1.Pod, inst map[string][]cri.ContainerStatus) corev1.PodStatus {
	st := corev1.PodStatus{QOSClass: pod.Status.QOSClass, StartTime: w.startTime, HostIP: w.m.cfg.Address.String(),
		HostIPs: []corev1.HostIP{{IP: w.m.cfg.Address.String()}}}
	for _, ip := range w.podIPs {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(w.podIPs) > 0 {
		st.PodIP = w.podIPs[0]
	}
	for i := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, w.containerStatus(pod, &pod.Spec.InitContainers[i], inst[pod.Spec.InitContainers[i].Name]))
	}
	for i := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, w.containerStatus(pod, &pod.Spec.Containers[i], inst[pod.Spec.Containers[i].Name]))
	}
	st.Phase = podPhase(pod, st.InitContainerStatuses, st.ContainerStatuses)
	if w.deadline {
		st.Phase, st.Reason, st.Message = corev1.PodFailed, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
	}
	if w.shutdownStopped {
		if st.Phase != corev1.PodSucceeded {
			st.Phase = corev1.PodFailed
		}
		st.Reason, st.Message = shutdownReason, shutdownMessage
	}
	if w.evicted {
		// As the kubelet's eviction manager: Failed whatever the
		// containers' exit codes.
		st.Phase, st.Reason = corev1.PodFailed, eviction.Reason
		st.Message, _ = w.evictMessage()
	}
	st.Conditions = w.conditions(pod, st)
	if w.shutdownStopped {
		st.Conditions = setDisruptionTarget(st.Conditions, pod.Status.Conditions, shutdownMessage)
	}
	if msg, disruption := w.evictMessage(); w.evicted && disruption {
		st.Conditions = setDisruptionTarget(st.Conditions, pod.Status.Conditions, msg)
	}
	return st
}

// setDisruptionTarget adds (or turns True) the DisruptionTarget condition
// of a pod the node's shutdown or eviction terminated, keeping its transition time
// once set.
func setDisruptionTarget(conds, old []corev1.PodCondition, msg string) []corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: corev1.PodReasonTerminationByKubelet, Message: msg,
		LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}
	for _, o := range old {
		if o.Type == c.Type && o.Status == c.Status {
			c.LastTransitionTime = o.LastTransitionTime
		}
	}
	for i := range conds {
		if conds[i].Type == c.Type {
			conds[i] = c
			return conds
		}
	}
	return append(conds, c)
}

func (w *podWorker) containerStatus(pod *corev1.Pod, c *corev1.Container, cs []cri.ContainerStatus) corev1.ContainerStatus {
	out := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
	f := false
	out.Started = &f
	if len(cs) == 0 {
		// A reason the worker recorded (an image pull, a refused config)
		// comes after the init containers, so it wins over
		// PodInitializing.
		wt := corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		if r, ok := w.waiting[c.Name]; ok {
			wt = r
		} else if w.initPending(pod, c) {
			wt = corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		} else if pod.DeletionTimestamp != nil {
			wt.Reason = ""
		}
		out.State.Waiting = &wt
		return out
	}
	latest := cs[0]
	out.ContainerID = "containerd://" + latest.ID
	out.ImageID = latest.ImageRef
	out.RestartCount = int32(latest.Attempt)
	switch latest.State {
	case cri.ContainerRunning:
		out.State.Running = &corev1.ContainerStateRunning{StartedAt: mtime(latest.StartedAt)}
		ps := w.probes[c.Name]
		started := ps == nil || ps.id != latest.ID || c.StartupProbe == nil || ps.started
		out.Started = &started
		out.Ready = started && (c.ReadinessProbe == nil || (ps != nil && ps.id == latest.ID && ps.ready))
		if len(cs) > 1 {
			out.LastTerminationState.Terminated = w.terminated(pod, c, cs[1])
		}
	case cri.ContainerExited:
		term := w.terminated(pod, c, latest)
		if r, ok := w.waiting[c.Name]; ok && pod.DeletionTimestamp == nil {
			out.State.Waiting = &r
			out.LastTerminationState.Terminated = term
		} else {
			out.State.Terminated = term
			if len(cs) > 1 {
				out.LastTerminationState.Terminated = w.terminated(pod, c, cs[1])
			}
		}
	default:
		out.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	return out
}

// initPending reports whether c is a main container still waiting for
// init containers.
func (w *podWorker) initPending(pod *corev1.Pod, c *corev1.Container) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return false
	}
	for _, ic := range pod.Spec.InitContainers {
		if ic.Name == c.Name {
			return false
		}
	}
	return true
}

func (w *podWorker) terminated(pod *corev1.Pod, c *corev1.Container, cs cri.ContainerStatus) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{ExitCode: cs.ExitCode, Reason: cs.Reason, StartedAt: mtime(cs.StartedAt), FinishedAt: mtime(cs.FinishedAt), ContainerID: "containerd://" + cs.ID}
	t.Message = w.terminationMessage(c, cs)
	return t
}

// terminationMessage reads what the container wrote to its termination
// log, or with FallbackToLogsOnError the tail of its log after a failure.
func (w *podWorker) terminationMessage(c *corev1.Container, cs cri.ContainerStatus) string {
	b, _ := os.ReadFile(w.terminationLogPath(c.Name, cs.Attempt))
	if len(b) > maxTerminationMessage {
		b = b[:maxTerminationMessage]
	}
	if len(b) == 0 && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError && cs.ExitCode != 0 {
		return tailLog(cs.LogPath, fallbackLogLines, fallbackLogBytes)
	}
	return string(b)
}

// tailLog returns the text of the last lines of a CRI-format log.
func tailLog(path string, lines, maxBytes int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	var out strings.Builder
	for _, l := range all {
		parts := strings.SplitN(l, " ", 4)
		if len(parts) != 4 {
			continue
		}
		out.WriteString(parts[3])
		if parts[2] == "F" {
			out.WriteByte('\n')
		}
	}
	s := out.String()
	if len(s) > maxBytes {
		s = s[len(s)-maxBytes:]
	}
	return s
}

// podPhase follows the kubelet's rules for a pod's phase.
func podPhase(pod *corev1.Pod, initStatuses, statuses []corev1.ContainerStatus) corev1.PodPhase {
	mainRan := mainContainersRan(statuses)
	for i, s := range initStatuses {
		if t := s.State.Terminated; t != nil && t.ExitCode != 0 && pod.Spec.RestartPolicy == corev1.RestartPolicyNever && !isSidecar(initSpec(pod, i)) {
			return corev1.PodFailed
		}
	}
	for i, s := range initStatuses {
		if !initStatusDone(initSpec(pod, i), s, mainRan) {
			return corev1.PodPending
		}
	}
	var pending, running, stopped, succeeded int
	for _, s := range statuses {
		switch {
		case s.State.Running != nil:
			running++
		case s.State.Terminated != nil:
			stopped++
			if s.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case s.State.Waiting != nil:
			if s.LastTerminationState.Terminated != nil {
				stopped++
				if s.LastTerminationState.Terminated.ExitCode == 0 {
					succeeded++
				}
			} else {
				pending++
			}
		}
	}
	switch {
	case pending > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped > 0:
		if pod.Spec.RestartPolicy == corev1.RestartPolicyAlways {
			return corev1.PodRunning
		}
		if stopped == succeeded {
			return corev1.PodSucceeded
		}
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			return corev1.PodFailed
		}
		return corev1.PodRunning
	}
	return corev1.PodPending
}

// conditions computes the kubelet-owned conditions and keeps the others
// (PodScheduled, readiness gates, DisruptionTarget) as they are.
func (w *podWorker) conditions(pod *corev1.Pod, st corev1.PodStatus) []corev1.PodCondition {
	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: msg}
		if ok {
			c.Status, c.Reason, c.Message = corev1.ConditionTrue, "", ""
		}
		return c
	}
	terminal := st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed
	var notInit, notReady []string
	mainRan := mainContainersRan(st.ContainerStatuses)
	for i, s := range st.InitContainerStatuses {
		c := initSpec(pod, i)
		if !initStatusDone(c, s, mainRan) {
			notInit = append(notInit, s.Name)
		}
		// A sidecar's readiness is the pod's too.
		if isSidecar(c) && !s.Ready {
			notReady = append(notReady, s.Name)
		}
	}
	for _, s := range st.ContainerStatuses {
		if !s.Ready {
			notReady = append(notReady, s.Name)
		}
	}
	initialized := cond(corev1.PodInitialized, len(notInit) == 0, "ContainersNotInitialized", "containers with incomplete status: ["+strings.Join(notInit, " ")+"]")
	containersReady := cond(corev1.ContainersReady, len(notReady) == 0, "ContainersNotReady", "containers with unready status: ["+strings.Join(notReady, " ")+"]")
	gatesOK := true
	for _, g := range pod.Spec.ReadinessGates {
		found := false
		for _, c := range pod.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				found = true
			}
		}
		gatesOK = gatesOK && found
	}
	ready := cond(corev1.PodReady, len(notReady) == 0 && gatesOK, "ContainersNotReady", containersReady.Message)
	if len(notReady) == 0 && !gatesOK {
		ready.Reason, ready.Message = "ReadinessGatesNotReady", "corresponding condition of pod readiness gate is not true"
	}
	if terminal {
		containersReady = cond(corev1.ContainersReady, false, "PodCompleted", "")
		ready = cond(corev1.PodReady, false, "PodCompleted", "")
	}
	sandboxReady := cond(corev1.PodReadyToStartContainers, w.sandbox != nil && !terminal, "", "")
	own := []corev1.PodCondition{sandboxReady, initialized, ready, containersReady}
	var out []corev1.PodCondition
	for _, c := range pod.Status.Conditions {
		mine := false
		for _, o := range own {
			if o.Type == c.Type {
				mine = true
			}
		}
		if !mine {
			out = append(out, c)
		}
	}
	if !hasCondition(out, corev1.PodScheduled) {
		out = append(out, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for _, o := range own {
		o.LastTransitionTime = now
		for _, old := range pod.Status.Conditions {
			if old.Type == o.Type && old.Status == o.Status {
				o.LastTransitionTime = old.LastTransitionTime
			}
		}
		out = append(out, o)
	}
	order := map[corev1.PodConditionType]int{corev1.PodReadyToStartContainers: 0, corev1.PodInitialized: 1, corev1.PodReady: 2, corev1.ContainersReady: 3, corev1.PodScheduled: 4}
	sort.SliceStable(out, func(i, j int) bool {
		oi, ok := order[out[i].Type]
		if !ok {
			oi = 5
		}
		oj, ok := order[out[j].Type]
		if !ok {
			oj = 5
		}
		return oi < oj
	})
	return out
}

func hasCondition(cs []corev1.PodCondition, t corev1.PodConditionType) bool {
	for _, c := range cs {
		if c.Type == t {
			return true
		}
	}
	return false
}
