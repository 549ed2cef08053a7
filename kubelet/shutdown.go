package kubelet

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What graceful node shutdown writes, in the kubelet's words.
const (
	shutdownReason         = "Terminated"
	shutdownMessage        = "Pod was terminated in response to imminent node shutdown."
	shutdownRejectReason   = "NodeShutdown"
	shutdownRejectMessage  = "Pod was rejected as the node is shutting down."
	shutdownNodeMessage    = "node is shutting down"
	shutdownEventReason    = "Shutdown"
	systemCriticalPriority = int32(2000000000)
)

// ShutdownGroup is one phase of a graceful node shutdown: pods whose
// priority is at least Priority, and below the next group's, get Period
// to stop (shutdownGracePeriodByPodPriority's entries).
type ShutdownGroup struct {
	Priority int32
	Period   time.Duration
}

// ShutdownGroups checks the kubelet's graceful-shutdown settings and turns
// them into phases, lowest priority first. shutdownGracePeriod and
// shutdownGracePeriodCriticalPods make two: regular pods get the total
// less the critical pods' share, then pods of system-critical priority
// get their share. None (both 0, no byPriority) means the feature is off.
func ShutdownGroups(grace, critical time.Duration, byPriority []ShutdownGroup) ([]ShutdownGroup, error) {
	if grace < 0 || critical < 0 {
		return nil, fmt.Errorf("shutdownGracePeriod %v and shutdownGracePeriodCriticalPods %v must not be negative", grace, critical)
	}
	if len(byPriority) > 0 {
		if grace != 0 || critical != 0 {
			return nil, fmt.Errorf("shutdownGracePeriodByPodPriority cannot be set together with shutdownGracePeriod or shutdownGracePeriodCriticalPods")
		}
		out := append([]ShutdownGroup(nil), byPriority...)
		sort.Slice(out, func(i, j int) bool { return out[i].Priority < out[j].Priority })
		for i, g := range out {
			if g.Period < 0 {
				return nil, fmt.Errorf("shutdownGracePeriodByPodPriority: priority %d has a negative period %v", g.Priority, g.Period)
			}
			if i > 0 && out[i-1].Priority == g.Priority {
				return nil, fmt.Errorf("shutdownGracePeriodByPodPriority: priority %d is listed twice", g.Priority)
			}
		}
		return out, nil
	}
	if grace == 0 {
		if critical != 0 {
			return nil, fmt.Errorf("shutdownGracePeriodCriticalPods %v needs a shutdownGracePeriod", critical)
		}
		return nil, nil
	}
	if critical >= grace {
		return nil, fmt.Errorf("shutdownGracePeriodCriticalPods %v must be less than shutdownGracePeriod %v", critical, grace)
	}
	return []ShutdownGroup{{Priority: 0, Period: grace - critical}, {Priority: systemCriticalPriority, Period: critical}}, nil
}

// shutdownTotal is how long the whole shutdown may take: the time logind
// must be willing to wait.
func shutdownTotal(groups []ShutdownGroup) time.Duration {
	var d time.Duration
	for _, g := range groups {
		d += g.Period
	}
	return d
}

// groupOf is the index of the phase a pod of this priority belongs to:
// the group with the highest Priority not above it (the lowest group for
// a pod below every group).
func groupOf(groups []ShutdownGroup, priority int32) int {
	i := sort.Search(len(groups), func(i int) bool { return groups[i].Priority > priority }) - 1
	return max(i, 0)
}

func podPriority(pod *corev1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// shutdownManager is the kubelet's graceful node shutdown: it holds a
// logind delay lock on shutdown and, when one is announced, marks the node
// not Ready, refuses new pods, stops the running ones phase by phase
// (lowest priority first, each within its phase's period) and releases the
// lock so the shutdown can go on. A cancelled shutdown makes the node
// Ready again and takes the lock again.
type shutdownManager struct {
	groups []ShutdownGroup
	// dropInDir is where logind reads drop-in configuration.
	dropInDir string
	agent     *Agent
	log       func(msg string, args ...any)
	warn      func(msg string, args ...any)

	mu           sync.Mutex
	shuttingDown bool
	pods         *podManager // set once pods run
}

func (s *shutdownManager) isShuttingDown() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shuttingDown
}

func (s *shutdownManager) setPods(m *podManager) {
	s.mu.Lock()
	s.pods = m
	s.mu.Unlock()
}

// run holds the lock and handles shutdowns until ctx ends, reconnecting
// to the bus when the connection is lost.
func (s *shutdownManager) run(ctx context.Context) {
	var lastErr string
	for ctx.Err() == nil {
		err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && err.Error() != lastErr {
			s.warn("graceful node shutdown is not armed; retrying every 5 s", "err", err)
			lastErr = err.Error()
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// session is one connection to logind: check its delay, take the lock,
// and follow PrepareForShutdown until the connection ends.
func (s *shutdownManager) session(ctx context.Context) error {
	l, err := dialLogind()
	if err != nil {
		return err
	}
	defer l.Close()
	stop := context.AfterFunc(ctx, l.Close)
	defer stop()

	want := shutdownTotal(s.groups)
	have, err := l.inhibitDelay()
	if err != nil {
		return err
	}
	if have < want {
		if err := l.raiseInhibitDelay(s.dropInDir, want); err != nil {
			return fmt.Errorf("raise logind's InhibitDelayMaxSec to %v: %w", want, err)
		}
		// The reload is asynchronous: give logind a moment to re-read.
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if have, err = l.inhibitDelay(); err != nil || have >= want {
				break
			}
		}
		if err != nil {
			return err
		}
		if have < want {
			return fmt.Errorf("unable to update logind InhibitDelayMaxSec to %v (shutdownGracePeriod), current value of InhibitDelayMaxSec (%v) is less than requested shutdownGracePeriod", want, have)
		}
		s.log("raised logind's InhibitDelayMaxSec for graceful node shutdown", "file", s.dropInDir+"/"+logindDropIn, "delay", want)
	}
	lock, err := l.inhibit()
	if err != nil {
		return err
	}
	release := func() {
		if lock != nil {
			lock.Close()
			lock = nil
		}
	}
	defer release()
	s.log("graceful node shutdown armed", "shutdownGracePeriod", want, "phases", len(s.groups))
	for {
		starting, ok := l.next(ctx.Done())
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			s.setShuttingDown(ctx, false)
			return fmt.Errorf("the system bus connection was closed")
		}
		if starting {
			if s.isShuttingDown() {
				continue
			}
			s.setShuttingDown(ctx, true)
			s.stopPods(ctx)
			release()
			s.log("graceful node shutdown: pods stopped, inhibitor lock released")
			continue
		}
		if !s.isShuttingDown() {
			continue
		}
		s.setShuttingDown(ctx, false)
		if lock, err = l.inhibit(); err != nil {
			return err
		}
	}
}

// setShuttingDown flips the node's state, posts node status and records
// the event on the Node, as the kubelet does.
func (s *shutdownManager) setShuttingDown(ctx context.Context, on bool) {
	s.mu.Lock()
	changed := s.shuttingDown != on
	s.shuttingDown = on
	s.mu.Unlock()
	if !changed {
		return
	}
	msg := "Shutdown manager detected shutdown cancellation"
	if on {
		msg = "Shutdown manager detected shutdown event"
	}
	s.log("graceful node shutdown: " + msg)
	a := s.agent
	if err := a.postStatus(ctx, true); err != nil {
		s.warn("posting node status", "err", err)
	}
	a.nodeEvent(ctx, corev1.EventTypeNormal, shutdownEventReason, msg)
}

// stopPods stops the node's pods phase by phase. A phase with no pods is
// skipped; a phase whose pods outlast its period is left behind.
func (s *shutdownManager) stopPods(ctx context.Context) {
	s.mu.Lock()
	m := s.pods
	s.mu.Unlock()
	if m == nil {
		return
	}
	byGroup := make([][]*podWorker, len(s.groups))
	for _, w := range m.liveWorkers() {
		pod, _ := w.snapshot()
		if pod == nil {
			continue
		}
		g := groupOf(s.groups, podPriority(pod))
		byGroup[g] = append(byGroup[g], w)
	}
	for i, g := range s.groups {
		ws := byGroup[i]
		if len(ws) == 0 {
			continue
		}
		s.log("graceful node shutdown: stopping pods", "priority", g.Priority, "period", g.Period, "pods", len(ws))
		var wg sync.WaitGroup
		for _, w := range ws {
			done := w.shutdown(g.Period)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-done
			}()
		}
		all := make(chan struct{})
		go func() { wg.Wait(); close(all) }()
		// The pods' own grace is capped at the period; allow a little for
		// the status writes after the last kill.
		select {
		case <-all:
		case <-time.After(g.Period + 2*time.Second):
			s.warn("graceful node shutdown: pods still stopping when their phase ended", "priority", g.Priority)
		case <-ctx.Done():
			return
		}
	}
}

// nodeEvent records an event on this node's Node.
func (a *Agent) nodeEvent(ctx context.Context, typ, reason, msg string) {
	uid, _ := a.nodeUID()
	ref := corev1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName, UID: typesUID(uid)}
	e := kubeletEvent(a.cfg.NodeName, metav1.NamespaceDefault, ref, typ, reason, msg)
	if err := a.cfg.Client.createEvent(ctx, e); err != nil {
		a.cfg.Logger.Debug("recording node event", "reason", reason, "err", err)
	}
}
