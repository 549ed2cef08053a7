package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestGracefulNodeShutdown shuts the node down through a real
// systemd-logind (on a bus of the test's own; only systemd's part, which
// would power the machine off, is played by the test) while real
// containers run: bonsai holds a delay lock, and when logind announces the
// shutdown the node goes not Ready, new pods are refused, regular pods stop
// within the first 5 s of the 8 s, critical pods after them, and the lock
// is released so the shutdown goes on. systemd then refuses the poweroff
// job, logind calls the shutdown off, and the node is Ready again, runs
// new pods and holds a new lock.
func TestGracefulNodeShutdown(t *testing.T) {
	ld := testenv.StartLogind(t, 30*time.Second)
	ld.FailStartUnit(true)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", ld.Address)
	e := startPodEnv(t, "--shutdown-grace-period=8s", "--shutdown-grace-period-critical-pods=3s")

	bonsaiLock := func() bool {
		ins, err := ld.Inhibitors()
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range ins {
			if in.Who == "kubelet" && in.What == "shutdown" && in.Mode == "delay" && int(in.PID) == e.s.cmd.Process.Pid {
				return true
			}
		}
		return false
	}
	waitFor(t, 10*time.Second, "bonsai's delay lock in logind", bonsaiLock)

	grace := int64(30)
	// Exits 1 s after SIGTERM.
	polite := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "polite"},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "c",
			Command: sh("trap 'sleep 1; exit 0' TERM; while true; do sleep 0.2; done")}}},
	})
	// Ignores SIGTERM: killed when the regular pods' 5 s are up, not after
	// its own 30 s.
	stubborn := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stubborn"},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "c",
			Command: sh("trap '' TERM; while true; do sleep 0.2; done")}}},
	})
	critical := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "critical"},
		Spec: corev1.PodSpec{PriorityClassName: "system-node-critical", TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "c", Command: sh("trap 'exit 0' TERM; while true; do sleep 0.2; done")}}},
	})
	for _, p := range []*corev1.Pod{polite, stubborn, critical} {
		e.waitPod(t, p.Name, 30*time.Second, "Running", running)
	}

	if err := ld.PowerOff(); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	waitFor(t, 5*time.Second, "the node not Ready: node is shutting down", func() bool {
		return nodeReady(t, e) == "False: node is shutting down"
	})
	// A pod arriving now is refused, as the kubelet's admission does.
	late := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "late"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Command: sh("sleep 3600")}}},
	})
	late = e.waitPod(t, late.Name, 10*time.Second, "rejected", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if late.Status.Reason != "NodeShutdown" || late.Status.Message != "Pod was rejected: Pod was rejected as the node is shutting down." || len(late.Status.ContainerStatuses) != 0 && late.Status.ContainerStatuses[0].ContainerID != "" {
		t.Fatalf("late pod: %s, message %q", statusSummary(late), late.Status.Message)
	}

	finished := map[string]time.Time{}
	for _, name := range []string{"polite", "stubborn", "critical"} {
		p := e.waitPod(t, name, 20*time.Second, "Failed by the shutdown", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if p.Status.Reason != "Terminated" || p.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Fatalf("%s: reason %q message %q", name, p.Status.Reason, p.Status.Message)
		}
		dt := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "TerminationByKubelet" && c.Message == p.Status.Message {
				dt = true
			}
		}
		if !dt {
			t.Fatalf("%s: no DisruptionTarget condition: %+v", name, p.Status.Conditions)
		}
		term := p.Status.ContainerStatuses[0].State.Terminated
		if term == nil {
			t.Fatalf("%s: container not terminated: %s", name, statusSummary(p))
		}
		want := int32(0)
		if name == "stubborn" {
			want = 137 // SIGKILL at the end of its phase
		}
		if term.ExitCode != want {
			t.Fatalf("%s: exit code %d, want %d", name, term.ExitCode, want)
		}
		finished[name] = term.FinishedAt.Time
	}
	// Times are whole seconds. polite ends ~1 s after SIGTERM, stubborn at
	// the end of the 5 s phase, critical after it.
	if d := finished["stubborn"].Sub(finished["polite"]); d < 2*time.Second || d > 6*time.Second {
		t.Errorf("stubborn killed %v after polite ended; want about 4 s (its phase is 5 s, not its own 30 s)", d)
	}
	if finished["critical"].Before(finished["stubborn"]) {
		t.Errorf("critical pod ended at %v, before the regular phase did (%v)", finished["critical"], finished["stubborn"])
	}

	// With every pod stopped bonsai lets go, long before logind's own 30 s:
	// logind hands poweroff.target to systemd, which refuses it here.
	waitFor(t, 15*time.Second, "logind to start poweroff.target", func() bool { return len(ld.Started()) > 0 })
	s := ld.Started()
	if s[0].Name != "poweroff.target" || s[0].At.Sub(asked) > 12*time.Second || s[0].At.Before(finished["critical"]) {
		t.Fatalf("StartUnit %+v (asked at %v, critical pod ended %v)", s, asked.Format(time.StampMilli), finished["critical"])
	}
	if evs, err := e.cs.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + e.node}); err != nil || !hasEvent(evs.Items, "Shutdown", "Shutdown manager detected shutdown event") {
		t.Fatalf("no Shutdown event on the node: %v %+v", err, evs)
	}

	// Cancelled: Ready again, a new lock, and new pods run.
	waitFor(t, 10*time.Second, "the node Ready after the shutdown was cancelled", func() bool {
		return strings.HasPrefix(nodeReady(t, e), "True")
	})
	waitFor(t, 10*time.Second, "a new delay lock after the cancellation", bonsaiLock)
	after := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "after"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Command: sh("sleep 3600")}}},
	})
	e.waitPod(t, after.Name, 30*time.Second, "Running", running)
	// The pods the shutdown stopped stay stopped.
	if p, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "polite", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodFailed {
		t.Fatalf("polite after the cancellation: %v %s", err, statusSummary(p))
	}
}

// nodeReady is the node's Ready condition as "Status: message".
func nodeReady(t *testing.T, e *podEnv) string {
	n, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status) + ": " + c.Message
		}
	}
	return "no Ready condition"
}
