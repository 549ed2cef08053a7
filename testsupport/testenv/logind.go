package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// Logind is a real systemd-logind on a system bus of the test's own (a
// real dbus-daemon on a socket in a temp dir). logind runs in a mount
// namespace of its own, where /etc/systemd is the test's Etc dir and
// /run/systemd a tmpfs, so it reads the test's configuration and leaves
// the host's alone.
//
// systemd itself (PID 1, which would power the machine off) is the one
// part played by the test: it owns org.freedesktop.systemd1 on that bus
// and answers the calls logind makes of it (a unit's LoadState,
// StartUnit, KillUnit, Subscribe), records them, and shuts nothing down.
type Logind struct {
	// Address is the bus address, for DBUS_SYSTEM_BUS_ADDRESS.
	Address string
	// Etc is what logind sees as /etc/systemd; logind.conf.d is in it.
	Etc string
	// PID is logind's process.
	PID int

	conn   *dbus.Conn
	daemon *exec.Cmd
	logind *exec.Cmd
	log    string

	mu          sync.Mutex
	started     []StartedUnit
	failStart   bool
	noKillUnit  bool
	killedUnits []string
}

// StartedUnit is a StartUnit call logind made: what a real systemd would
// have started (poweroff.target: the machine goes down).
type StartedUnit struct {
	Name string
	At   time.Time
}

// Inhibitor is one of logind's inhibitor locks (ListInhibitors).
type Inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// StartLogind starts dbus-daemon, logind (with InhibitDelayMaxSec =
// delay; 0 keeps logind's default of 5 s) and the systemd stand-in. They
// are stopped when the test ends.
func StartLogind(t testing.TB, delay time.Duration) *Logind {
	t.Helper()
	Require(t, os.Geteuid() == 0, "logind tests need root (a mount namespace for logind)")
	daemonBin, err := LookPath("dbus-daemon")
	Require(t, err == nil, "dbus-daemon (Debian package dbus-daemon): %v", err)
	logindBin := ""
	for _, p := range []string{"/usr/lib/systemd/systemd-logind", "/lib/systemd/systemd-logind"} {
		if _, err := os.Stat(p); err == nil {
			logindBin = p
			break
		}
	}
	Require(t, logindBin != "", "systemd-logind (Debian package systemd)")
	unshare, err := LookPath("unshare")
	Require(t, err == nil, "unshare (Debian package util-linux): %v", err)
	if _, err := os.Stat("/etc/systemd"); err != nil {
		Require(t, false, "/etc/systemd, where logind's configuration is mounted (Debian package systemd): %v", err)
	}

	dir, err := os.MkdirTemp("", "bonsai-logind-")
	if err != nil {
		t.Fatal(err)
	}
	l := &Logind{Etc: filepath.Join(dir, "etc-systemd"), log: filepath.Join(dir, "logind.log")}
	t.Cleanup(func() {
		l.stop()
		os.RemoveAll(dir)
	})
	if err := os.MkdirAll(filepath.Join(l.Etc, "logind.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "[Login]\n"
	if delay > 0 {
		conf += fmt.Sprintf("InhibitDelayMaxSec=%.0f\n", delay.Seconds())
	}
	if err := os.WriteFile(filepath.Join(l.Etc, "logind.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}

	sock := filepath.Join(dir, "system_bus_socket")
	busConf := fmt.Sprintf(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`, sock)
	confPath := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(confPath, []byte(busConf), 0o644); err != nil {
		t.Fatal(err)
	}
	l.Address = "unix:path=" + sock
	daemonLog, err := os.Create(filepath.Join(dir, "dbus-daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer daemonLog.Close()
	l.daemon = exec.Command(daemonBin, "--config-file="+confPath, "--nofork", "--nopidfile")
	l.daemon.Stdout, l.daemon.Stderr = daemonLog, daemonLog
	if err := l.daemon.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if l.conn, err = dbus.Connect(l.Address); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dbus-daemon did not come up on %s: %v", sock, err)
		}
	}
	if err := l.exportSystemd(); err != nil {
		t.Fatal(err)
	}

	logindLog, err := os.Create(l.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logindLog.Close()
	script := fmt.Sprintf("mount --bind %q /etc/systemd && mount -t tmpfs tmpfs /run/systemd && exec %q", l.Etc, logindBin)
	l.logind = exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script)
	l.logind.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+l.Address, "SYSTEMD_LOG_LEVEL=debug")
	l.logind.Stdout, l.logind.Stderr = logindLog, logindLog
	if err := l.logind.Start(); err != nil {
		t.Fatal(err)
	}
	l.PID = l.logind.Process.Pid
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var has bool
		if err := l.conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, "org.freedesktop.login1").Store(&has); err == nil && has {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd-logind did not take its name on the bus:\n%s", l.Log())
		}
	}
	return l
}

// Log is logind's output so far.
func (l *Logind) Log() string {
	b, _ := os.ReadFile(l.log)
	return string(b)
}

func (l *Logind) stop() {
	for _, c := range []*exec.Cmd{l.logind, l.daemon} {
		if c != nil && c.Process != nil {
			c.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				c.Process.Kill()
				<-done
			}
		}
	}
	if l.conn != nil {
		l.conn.Close()
	}
}

func (l *Logind) manager() dbus.BusObject {
	return l.conn.Object("org.freedesktop.login1", "/org/freedesktop/login1")
}

// PowerOff asks logind to power the machine off, as `systemctl poweroff`
// does: logind announces PrepareForShutdown, waits for delay locks, then
// asks systemd (the stand-in) to start poweroff.target.
func (l *Logind) PowerOff() error {
	return l.manager().Call("org.freedesktop.login1.Manager.PowerOff", 0, false).Err
}

// Inhibitors lists logind's inhibitor locks.
func (l *Logind) Inhibitors() ([]Inhibitor, error) {
	var raw [][]any
	if err := l.manager().Call("org.freedesktop.login1.Manager.ListInhibitors", 0).Store(&raw); err != nil {
		return nil, err
	}
	var out []Inhibitor
	for _, r := range raw {
		if len(r) != 6 {
			return nil, fmt.Errorf("inhibitor record %v", r)
		}
		in := Inhibitor{}
		in.What, _ = r[0].(string)
		in.Who, _ = r[1].(string)
		in.Why, _ = r[2].(string)
		in.Mode, _ = r[3].(string)
		in.UID, _ = r[4].(uint32)
		in.PID, _ = r[5].(uint32)
		out = append(out, in)
	}
	return out, nil
}

// InhibitDelay is logind's InhibitDelayMaxUSec.
func (l *Logind) InhibitDelay() (time.Duration, error) {
	v, err := l.manager().GetProperty("org.freedesktop.login1.Manager.InhibitDelayMaxUSec")
	if err != nil {
		return 0, err
	}
	us, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec is %v", v)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Started is every StartUnit logind called.
func (l *Logind) Started() []StartedUnit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]StartedUnit(nil), l.started...)
}

// FailStartUnit makes StartUnit fail, as when systemd refuses the job:
// logind then announces the shutdown cancelled (PrepareForShutdown false).
func (l *Logind) FailStartUnit(fail bool) {
	l.mu.Lock()
	l.failStart = fail
	l.mu.Unlock()
}

// RefuseKillUnit makes KillUnit fail, as on a host without systemd.
func (l *Logind) RefuseKillUnit(refuse bool) {
	l.mu.Lock()
	l.noKillUnit = refuse
	l.mu.Unlock()
}

// KilledUnits is every KillUnit call the stand-in carried out.
func (l *Logind) KilledUnits() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.killedUnits...)
}

// systemdManager is the stand-in's org.freedesktop.systemd1.Manager.
type systemdManager struct{ l *Logind }

func (m systemdManager) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	l := m.l
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started = append(l.started, StartedUnit{Name: name, At: time.Now()})
	if l.failStart {
		return "", dbus.NewError("org.freedesktop.systemd1.TransactionIsDestructive", []any{"the test refuses " + name})
	}
	return dbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", len(l.started))), nil
}

func (m systemdManager) KillUnit(name, who string, signal int32) *dbus.Error {
	l := m.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.noKillUnit {
		return dbus.NewError("org.freedesktop.DBus.Error.UnknownMethod", []any{"no systemd here"})
	}
	if name != "systemd-logind.service" {
		return dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"unit " + name + " not loaded"})
	}
	l.killedUnits = append(l.killedUnits, fmt.Sprintf("%s %s %d", name, who, signal))
	// logind runs as `sh -c 'mount ... && exec systemd-logind'`: after
	// the exec, the started process is logind itself.
	if err := syscall.Kill(l.PID, syscall.Signal(signal)); err != nil {
		return dbus.MakeFailedError(err)
	}
	return nil
}

func (m systemdManager) Subscribe() *dbus.Error { return nil }

// systemdUnit answers Properties.Get for a unit: every unit is loaded.
type systemdUnit struct{}

func (systemdUnit) Get(iface, prop string) (dbus.Variant, *dbus.Error) {
	if iface == "org.freedesktop.systemd1.Unit" && prop == "LoadState" {
		return dbus.MakeVariant("loaded"), nil
	}
	return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{iface + "." + prop})
}

func (l *Logind) exportSystemd() error {
	if err := l.conn.Export(systemdManager{l}, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		return err
	}
	for _, unit := range []string{"poweroff_2etarget", "reboot_2etarget", "halt_2etarget"} {
		if err := l.conn.Export(systemdUnit{}, dbus.ObjectPath("/org/freedesktop/systemd1/unit/"+unit), "org.freedesktop.DBus.Properties"); err != nil {
			return err
		}
	}
	reply, err := l.conn.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue)
	if err != nil {
		return err
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return fmt.Errorf("could not own org.freedesktop.systemd1 on the test bus (reply %d)", reply)
	}
	return nil
}
