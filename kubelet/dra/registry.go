package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"bonsai.dev/bonsai/deviceplugin"
)

// scanInterval is how often the registry directory is read for sockets
// that came or went. A read of a directory of a few entries is cheap; the
// kubelet's inotify watch would add a dependency for the same effect.
const scanInterval = 200 * time.Millisecond

// regSocket is a registration socket seen in the registry directory.
type regSocket struct {
	mod    time.Time // of the socket file: a new file is a new registration
	driver string    // "" when registration failed (retried when the file changes)
}

// driver is a registered DRA driver's kubelet plugin.
type driver struct {
	name, endpoint string
	conn           *grpc.ClientConn
	client         drapb.DRAPluginClient
}

// watchRegistry registers the plugins whose registration sockets appear
// in the registry directory and drops those whose sockets go, as the
// kubelet's plugin manager does.
func (m *Manager) watchRegistry(ctx context.Context) {
	seen := map[string]*regSocket{}
	t := time.NewTicker(scanInterval)
	defer t.Stop()
	for {
		m.scanRegistry(ctx, seen)
		select {
		case <-ctx.Done():
			m.mu.Lock()
			for _, d := range m.drivers {
				d.conn.Close()
			}
			m.drivers = map[string]*driver{}
			m.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

func (m *Manager) scanRegistry(ctx context.Context, seen map[string]*regSocket) {
	entries, _ := os.ReadDir(m.registryDir())
	now := map[string]bool{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.Type()&os.ModeSocket == 0 {
			continue
		}
		path := filepath.Join(m.registryDir(), e.Name())
		fi, err := e.Info()
		if err != nil {
			continue
		}
		now[path] = true
		if s := seen[path]; s != nil && s.mod.Equal(fi.ModTime()) {
			continue
		}
		if s := seen[path]; s != nil && s.driver != "" {
			m.deregister(s.driver, path)
		}
		name, err := m.register(ctx, path)
		if err != nil {
			m.log.Warn("DRA plugin registration failed", "socket", path, "err", err)
		}
		seen[path] = &regSocket{mod: fi.ModTime(), driver: name}
	}
	for path, s := range seen {
		if !now[path] {
			delete(seen, path)
			if s.driver != "" {
				m.deregister(s.driver, path)
			}
		}
	}
}

// register asks the plugin behind a registration socket what it is
// (GetInfo), connects to its DRA service and tells it the outcome
// (NotifyRegistrationStatus). Plugins of other types (CSI, device plugins
// registering this way) are told they are not supported here.
func (m *Manager) register(ctx context.Context, socket string) (string, error) {
	conn, err := deviceplugin.DialUnix(socket)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	rc := registerapi.NewRegistrationClient(conn)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := rc.GetInfo(cctx, &registerapi.InfoRequest{})
	if err != nil {
		return "", fmt.Errorf("GetInfo: %w", err)
	}
	fail := func(format string, args ...any) (string, error) {
		err := fmt.Errorf(format, args...)
		rc.NotifyRegistrationStatus(cctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: err.Error()})
		return "", err
	}
	if info.Type != registerapi.DRAPlugin {
		return fail("plugin type %q is not supported by bonsai's plugin registry (only %s)", info.Type, registerapi.DRAPlugin)
	}
	if info.Name == "" {
		return fail("DRA plugin with an empty driver name")
	}
	if !slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
		return fail("DRA plugin %s supports %v, bonsai needs %s", info.Name, info.SupportedVersions, drapb.DRAPluginService)
	}
	endpoint := info.Endpoint
	if endpoint == "" {
		return fail("DRA plugin %s has no endpoint", info.Name)
	}
	dc, err := deviceplugin.DialUnix(endpoint)
	if err != nil {
		return fail("DRA plugin %s endpoint %s: %v", info.Name, endpoint, err)
	}
	d := &driver{name: info.Name, endpoint: endpoint, conn: dc, client: drapb.NewDRAPluginClient(dc)}
	m.mu.Lock()
	old := m.drivers[info.Name]
	m.drivers[info.Name] = d
	m.regSockets[info.Name] = socket
	m.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
	if _, err := rc.NotifyRegistrationStatus(cctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		m.log.Warn("DRA plugin registered but not told so", "driver", info.Name, "err", err)
	}
	m.log.Info("DRA driver registered", "driver", info.Name, "endpoint", endpoint)
	return info.Name, nil
}

// deregister drops a driver whose registration socket went, unless
// another socket registered the same name since.
func (m *Manager) deregister(name, socket string) {
	m.mu.Lock()
	d := m.drivers[name]
	if d == nil || m.regSockets[name] != socket {
		m.mu.Unlock()
		return
	}
	delete(m.drivers, name)
	delete(m.regSockets, name)
	m.mu.Unlock()
	d.conn.Close()
	m.log.Info("DRA driver deregistered", "driver", name)
}

// Drivers are the registered DRA drivers' names, sorted.
func (m *Manager) Drivers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.drivers))
	for n := range m.drivers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
