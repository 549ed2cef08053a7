package kubelet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
)

// logind's and systemd's names on the system bus.
const (
	logindService   = "org.freedesktop.login1"
	logindPath      = "/org/freedesktop/login1"
	logindManager   = "org.freedesktop.login1.Manager"
	systemdService  = "org.freedesktop.systemd1"
	systemdPath     = "/org/freedesktop/systemd1"
	systemdManager  = "org.freedesktop.systemd1.Manager"
	logindDropInDir = "/etc/systemd/logind.conf.d"
	// logindDropIn is the kubelet's own file name, so that a node moving
	// from a kubelet to bonsai keeps one setting, not two.
	logindDropIn = "99-kubelet.conf"
)

// logind is the node's login manager (systemd-logind or elogind) on the
// system bus: the inhibitor locks that let the kubelet delay a shutdown,
// and the PrepareForShutdown signal that announces one.
type logind struct {
	conn    *dbus.Conn
	signals chan *dbus.Signal
}

// dialLogind connects to the system bus (DBUS_SYSTEM_BUS_ADDRESS, else
// /run/dbus/system_bus_socket) and subscribes to PrepareForShutdown.
func dialLogind() (*logind, error) {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		return nil, fmt.Errorf("connect to the system bus: %w", err)
	}
	if err := conn.AddMatchSignal(dbus.WithMatchInterface(logindManager), dbus.WithMatchMember("PrepareForShutdown"),
		dbus.WithMatchObjectPath(logindPath)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("subscribe to logind's PrepareForShutdown: %w", err)
	}
	l := &logind{conn: conn, signals: make(chan *dbus.Signal, 8)}
	conn.Signal(l.signals)
	return l, nil
}

func (l *logind) Close() { l.conn.Close() }

func (l *logind) manager() dbus.BusObject { return l.conn.Object(logindService, logindPath) }

// inhibitDelay is logind's InhibitDelayMaxSec: the longest a delay lock
// holds a shutdown back.
func (l *logind) inhibitDelay() (time.Duration, error) {
	v, err := l.manager().GetProperty(logindManager + ".InhibitDelayMaxUSec")
	if err != nil {
		return 0, fmt.Errorf("read logind's InhibitDelayMaxUSec: %w", err)
	}
	us, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("logind's InhibitDelayMaxUSec is a %s, not a uint64", v.Signature())
	}
	return time.Duration(us) * time.Microsecond, nil
}

// raiseInhibitDelay writes InhibitDelayMaxSec = d into logind's drop-in
// dir (as the kubelet does) and asks logind to reload its configuration:
// through systemd when it runs, else with SIGHUP to the process that owns
// logind's name (elogind, or logind without systemd).
func (l *logind) raiseInhibitDelay(dir string, d time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	body := fmt.Sprintf("# Written by bonsai: the node's graceful shutdown needs this long.\n[Login]\nInhibitDelayMaxSec=%.0f\n", d.Seconds())
	tmp := filepath.Join(dir, "."+logindDropIn+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, logindDropIn)); err != nil {
		os.Remove(tmp)
		return err
	}
	call := l.conn.Object(systemdService, systemdPath).Call(systemdManager+".KillUnit", 0, "systemd-logind.service", "all", int32(syscall.SIGHUP))
	if call.Err == nil {
		return nil
	}
	var pid uint32
	if err := l.conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixProcessID", 0, logindService).Store(&pid); err != nil {
		return fmt.Errorf("reload logind: through systemd: %v; find its process: %w", call.Err, err)
	}
	if err := syscall.Kill(int(pid), syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload logind (pid %d): %w", pid, err)
	}
	return nil
}

// inhibit takes a delay lock on shutdown. Closing the file releases it.
func (l *logind) inhibit() (*os.File, error) {
	var fd dbus.UnixFD
	err := l.manager().Call(logindManager+".Inhibit", 0, "shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay").Store(&fd)
	if err != nil {
		return nil, fmt.Errorf("take logind's shutdown inhibitor lock: %w", err)
	}
	if fd < 0 {
		return nil, errors.New("take logind's shutdown inhibitor lock: no file descriptor returned")
	}
	return os.NewFile(uintptr(fd), "logind-inhibitor"), nil
}

// next waits for PrepareForShutdown: true when a shutdown starts, false
// when it was cancelled. ok is false once the bus connection is gone.
func (l *logind) next(done <-chan struct{}) (starting, ok bool) {
	for {
		select {
		case <-done:
			return false, false
		case s, open := <-l.signals:
			if !open {
				return false, false
			}
			if s.Name != logindManager+".PrepareForShutdown" || len(s.Body) != 1 {
				continue
			}
			b, isBool := s.Body[0].(bool)
			if !isBool {
				continue
			}
			return b, true
		}
	}
}
