package dra

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"bonsai.dev/bonsai/deviceplugin"
)

// driver is a registered DRA driver's kubelet plugin.
type driver struct {
	name, endpoint string
	conn           *grpc.ClientConn
	client         drapb.DRAPluginClient
}

// ValidatePlugin accepts a DRA plugin that serves the DRA service
// version bonsai speaks at an endpoint (pluginregistry.Handler).
func (m *Manager) ValidatePlugin(name, endpoint string, versions []string) error {
	if !slices.Contains(versions, drapb.DRAPluginService) {
		return fmt.Errorf("DRA plugin %s supports %v, bonsai needs %s", name, versions, drapb.DRAPluginService)
	}
	if endpoint == "" {
		return fmt.Errorf("DRA plugin %s has no endpoint", name)
	}
	return nil
}

// RegisterPlugin connects to a DRA driver's kubelet plugin.
func (m *Manager) RegisterPlugin(_ context.Context, name, endpoint string, _ []string) error {
	dc, err := deviceplugin.DialUnix(endpoint)
	if err != nil {
		return fmt.Errorf("DRA plugin %s endpoint %s: %v", name, endpoint, err)
	}
	d := &driver{name: name, endpoint: endpoint, conn: dc, client: drapb.NewDRAPluginClient(dc)}
	m.mu.Lock()
	old := m.drivers[name]
	m.drivers[name] = d
	m.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
	m.log.Info("DRA driver registered", "driver", name, "endpoint", endpoint)
	return nil
}

// DeRegisterPlugin drops a driver whose registration socket went, unless
// another registration of the same name replaced it since.
func (m *Manager) DeRegisterPlugin(name, endpoint string) {
	m.mu.Lock()
	d := m.drivers[name]
	if d == nil || d.endpoint != endpoint {
		m.mu.Unlock()
		return
	}
	delete(m.drivers, name)
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
