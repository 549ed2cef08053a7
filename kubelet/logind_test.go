package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestLogind runs bonsai's side of graceful node shutdown against a real
// systemd-logind on a bus of the test's own: reading and raising
// InhibitDelayMaxSec (through systemd, and by SIGHUP where there is none),
// the delay lock, and PrepareForShutdown as logind sends it when a
// shutdown starts and when it is cancelled.
func TestLogind(t *testing.T) {
	ld := testenv.StartLogind(t, 0)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", ld.Address)
	l, err := dialLogind()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	if d, err := l.inhibitDelay(); err != nil || d != 5*time.Second {
		t.Fatalf("logind's default InhibitDelayMaxSec read as %v, %v; want 5s", d, err)
	}
	dropIns := filepath.Join(ld.Etc, "logind.conf.d")
	waitDelay := func(want time.Duration) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			d, err := l.inhibitDelay()
			if err == nil && d == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("InhibitDelayMaxSec is %v (%v), want %v\n%s", d, err, want, ld.Log())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Through systemd's KillUnit, as the kubelet does it.
	if err := l.raiseInhibitDelay(dropIns, 17*time.Second); err != nil {
		t.Fatal(err)
	}
	waitDelay(17 * time.Second)
	if k := ld.KilledUnits(); len(k) != 1 || k[0] != "systemd-logind.service all 1" {
		t.Fatalf("KillUnit calls %q, want one SIGHUP to systemd-logind.service", k)
	}
	b, err := os.ReadFile(filepath.Join(dropIns, "99-kubelet.conf"))
	if err != nil || !strings.Contains(string(b), "[Login]\nInhibitDelayMaxSec=17\n") {
		t.Fatalf("drop-in %q, %v", b, err)
	}
	// Without systemd: SIGHUP straight to logind.
	ld.RefuseKillUnit(true)
	if err := l.raiseInhibitDelay(dropIns, 23*time.Second); err != nil {
		t.Fatal(err)
	}
	waitDelay(23 * time.Second)

	lock, err := l.inhibit()
	if err != nil {
		t.Fatal(err)
	}
	ins, err := ld.Inhibitors()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, in := range ins {
		if in.Who == "kubelet" && in.What == "shutdown" && in.Mode == "delay" && in.PID == uint32(os.Getpid()) &&
			in.Why == "Kubelet needs time to handle node shutdown" {
			found = true
		}
	}
	if !found {
		t.Fatalf("logind's inhibitors %+v hold no delay lock of ours", ins)
	}

	// A shutdown: announced at once, held back by the lock until it is
	// released, then handed to systemd. The stand-in refuses the job, so
	// logind announces the shutdown cancelled.
	ld.FailStartUnit(true)
	if err := ld.PowerOff(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	next := func() (bool, bool) {
		t.Helper()
		type r struct{ starting, ok bool }
		c := make(chan r, 1)
		go func() { s, ok := l.next(done); c <- r{s, ok} }()
		select {
		case v := <-c:
			return v.starting, v.ok
		case <-time.After(10 * time.Second):
			t.Fatalf("no PrepareForShutdown within 10 s\n%s", ld.Log())
		}
		return false, false
	}
	if starting, ok := next(); !ok || !starting {
		t.Fatalf("PrepareForShutdown(%v), ok %v; want true", starting, ok)
	}
	time.Sleep(300 * time.Millisecond)
	if s := ld.Started(); len(s) != 0 {
		t.Fatalf("logind started %v while our delay lock was held", s)
	}
	released := time.Now()
	lock.Close()
	if starting, ok := next(); !ok || starting {
		t.Fatalf("PrepareForShutdown(%v), ok %v; want false after the refused job", starting, ok)
	}
	s := ld.Started()
	if len(s) != 1 || s[0].Name != "poweroff.target" || s[0].At.Sub(released) > 2*time.Second {
		t.Fatalf("StartUnit calls %+v after the lock was released at %v; want poweroff.target at once", s, released.Format(time.StampMilli))
	}

	// The connection going away is seen.
	l.Close()
	if _, ok := l.next(done); ok {
		t.Fatal("next reported a signal after the connection was closed")
	}
}
