// Package pluginregistry is the kubelet's plugin registry: plugins put a
// registration socket in <kubelet-root>/plugins_registry, speaking
// upstream's registration API (k8s.io/kubelet/pkg/apis/pluginregistration/v1),
// and the registry hands each to the handler of its type (DRAPlugin,
// CSIPlugin), as the kubelet's plugin manager does. It owns the watch of
// the directory and the GetInfo / NotifyRegistrationStatus exchange; what
// a registered plugin is used for belongs to its handler (kubelet/dra,
// kubelet/csi).
package pluginregistry

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"bonsai.dev/bonsai/deviceplugin"
)

// DirName is the registry's directory under the kubelet root.
const DirName = "plugins_registry"

// scanInterval is how often the registry directory is read for sockets
// that came or went. A read of a directory of a few entries is cheap; the
// kubelet's inotify watch would add a dependency for the same effect.
const scanInterval = 200 * time.Millisecond

// Handler takes the plugins of one type, as the kubelet's
// PluginHandler: Validate refuses a plugin before it is registered (its
// error goes back to the plugin), Register makes it usable, Deregister
// drops it when its registration socket goes or is replaced.
type Handler interface {
	ValidatePlugin(name, endpoint string, versions []string) error
	RegisterPlugin(ctx context.Context, name, endpoint string, versions []string) error
	DeRegisterPlugin(name, endpoint string)
}

// Registry watches one registry directory for the handlers added to it.
type Registry struct {
	dir string
	log *slog.Logger

	mu       sync.Mutex
	handlers map[string]Handler // by plugin type
}

// New makes a registry on dir; Run watches it.
func New(dir string, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.Default()
	}
	return &Registry{dir: dir, log: log, handlers: map[string]Handler{}}
}

// Dir is where plugins put their registration sockets.
func (r *Registry) Dir() string { return r.dir }

// AddHandler sets the handler of a plugin type. Plugins of a type with no
// handler are told they are not supported (and asked again when their
// socket changes).
func (r *Registry) AddHandler(pluginType string, h Handler) {
	r.mu.Lock()
	r.handlers[pluginType] = h
	r.mu.Unlock()
}

func (r *Registry) handler(pluginType string) Handler {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handlers[pluginType]
}

// supported names the types with a handler, for a refused plugin.
func (r *Registry) supported() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for t := range r.handlers {
		out = append(out, t)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// registration is a registration socket seen in the directory.
type registration struct {
	mod      time.Time // of the socket file: a new file is a new registration
	typ      string    // "" when registration failed (retried when the file changes)
	name     string
	endpoint string
}

// Start makes the directory and watches it until ctx ends; at the end
// every registered plugin is deregistered.
func (r *Registry) Start(ctx context.Context) error {
	if err := os.MkdirAll(r.dir, 0o750); err != nil {
		return err
	}
	go r.run(ctx)
	return nil
}

func (r *Registry) run(ctx context.Context) {
	seen := map[string]*registration{}
	t := time.NewTicker(scanInterval)
	defer t.Stop()
	for {
		r.scan(ctx, seen)
		select {
		case <-ctx.Done():
			for _, s := range seen {
				r.drop(s)
			}
			return
		case <-t.C:
		}
	}
}

func (r *Registry) scan(ctx context.Context, seen map[string]*registration) {
	entries, _ := os.ReadDir(r.dir)
	now := map[string]bool{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.Type()&os.ModeSocket == 0 {
			continue
		}
		path := filepath.Join(r.dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue
		}
		now[path] = true
		if s := seen[path]; s != nil && s.mod.Equal(fi.ModTime()) {
			continue
		}
		if s := seen[path]; s != nil {
			r.drop(s)
		}
		reg, err := r.register(ctx, path)
		if err != nil {
			r.log.Warn("plugin registration failed", "socket", path, "err", err)
		}
		reg.mod = fi.ModTime()
		seen[path] = reg
	}
	for path, s := range seen {
		if !now[path] {
			delete(seen, path)
			r.drop(s)
		}
	}
}

func (r *Registry) drop(s *registration) {
	if s.typ == "" {
		return
	}
	if h := r.handler(s.typ); h != nil {
		h.DeRegisterPlugin(s.name, s.endpoint)
	}
}

// register asks the plugin behind a registration socket what it is
// (GetInfo), has its type's handler validate and register it and tells
// it the outcome (NotifyRegistrationStatus).
func (r *Registry) register(ctx context.Context, socket string) (*registration, error) {
	reg := &registration{}
	conn, err := deviceplugin.DialUnix(socket)
	if err != nil {
		return reg, err
	}
	defer conn.Close()
	rc := registerapi.NewRegistrationClient(conn)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := rc.GetInfo(cctx, &registerapi.InfoRequest{})
	if err != nil {
		return reg, fmt.Errorf("GetInfo: %w", err)
	}
	fail := func(err error) (*registration, error) {
		rc.NotifyRegistrationStatus(cctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: err.Error()})
		return reg, err
	}
	h := r.handler(info.Type)
	if h == nil {
		return fail(fmt.Errorf("plugin type %q is not supported by bonsai's plugin registry (only %s)", info.Type, r.supported()))
	}
	if info.Name == "" {
		return fail(fmt.Errorf("%s plugin with an empty name", info.Type))
	}
	if err := h.ValidatePlugin(info.Name, info.Endpoint, info.SupportedVersions); err != nil {
		return fail(err)
	}
	if err := h.RegisterPlugin(cctx, info.Name, info.Endpoint, info.SupportedVersions); err != nil {
		return fail(err)
	}
	*reg = registration{typ: info.Type, name: info.Name, endpoint: info.Endpoint}
	if _, err := rc.NotifyRegistrationStatus(cctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		r.log.Warn("plugin registered but not told so", "type", info.Type, "name", info.Name, "err", err)
	}
	return reg, nil
}
