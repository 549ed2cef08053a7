package generic

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"bonsai.dev/bonsai/deviceplugin"
)

// RescanInterval is how often device nodes are looked for besides the
// inotify wake-ups (watchDirs): hot-plugged ones appear, unplugged ones go
// unhealthy.
var RescanInterval = 2 * time.Second

// Run serves every resource of cfg as its own device plugin in pluginDir
// until ctx ends.
func Run(ctx context.Context, cfg *Config, pluginDir string, log *slog.Logger) {
	for _, r := range cfg.Resources {
		if r.DRA {
			continue // RunDRA serves it
		}
		p := &plugin{res: r, dir: pluginDir, log: log.With("component", "generic-device-plugin", "resource", r.Name),
			present: map[string]bool{}, paths: map[string][]string{}, updates: map[chan struct{}]bool{}}
		go p.run(ctx)
	}
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	res Resource
	dir string
	log *slog.Logger

	mu sync.Mutex
	// present is every device ever seen, and whether it is there now;
	// paths are its device nodes.
	present map[string]bool
	paths   map[string][]string
	updates map[chan struct{}]bool
}

// socketName is the plugin's socket in the device-plugins directory.
func (p *plugin) socketName() string {
	r := strings.NewReplacer("/", "_", ".", "_")
	return "bonsai-generic-" + r.Replace(p.res.Name) + ".sock"
}

// run serves and registers, and does both again whenever the socket is
// removed (the device manager restarted).
func (p *plugin) run(ctx context.Context) {
	p.scan()
	go p.rescan(ctx)
	sock := filepath.Join(p.dir, p.socketName())
	for ctx.Err() == nil {
		srv, err := p.serve(sock)
		if err == nil {
			err = p.register(ctx)
			if err != nil {
				srv.Stop()
			}
		}
		if err != nil {
			p.log.Error("generic device plugin not registered; retrying", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			continue
		}
		p.log.Info("generic device plugin registered", "socket", sock)
		for ctx.Err() == nil {
			if _, err := os.Stat(sock); err != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		srv.Stop()
	}
	os.Remove(sock)
}

func (p *plugin) serve(sock string) (*grpc.Server, error) {
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go srv.Serve(l)
	return srv, nil
}

func (p *plugin) register(ctx context.Context) error {
	kubelet := filepath.Join(p.dir, "kubelet.sock")
	conn, err := deviceplugin.DialUnix(kubelet)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: p.socketName(), ResourceName: p.res.Name,
		Options: &pluginapi.DevicePluginOptions{},
	})
	return err
}

func (p *plugin) rescan(ctx context.Context) {
	wake := make(chan struct{}, 1)
	go watchDirs(ctx, append(append([]string(nil), p.res.Devices...), p.res.Group...), func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(RescanInterval):
		}
		if p.scan() {
			p.mu.Lock()
			for ch := range p.updates {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
			p.mu.Unlock()
		}
	}
}

// isDeviceNode reports a character or block device (following links,
// as /dev/serial/by-id/... are).
func isDeviceNode(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&os.ModeDevice != 0
}

// scan looks for the resource's device nodes and reports a change.
func (p *plugin) scan() bool {
	found := map[string][]string{}
	if len(p.res.Devices) > 0 {
		for _, g := range p.res.Devices {
			matches, _ := filepath.Glob(g)
			for _, m := range matches {
				if isDeviceNode(m) {
					found[m] = []string{m}
				}
			}
		}
	} else {
		var all []string
		for _, g := range p.res.Group {
			matches, _ := filepath.Glob(g)
			for _, m := range matches {
				if st, err := os.Stat(m); err == nil && (st.IsDir() || st.Mode()&os.ModeDevice != 0) {
					all = append(all, m)
				}
			}
		}
		if len(all) > 0 {
			sort.Strings(all)
			found["group"] = all
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := false
	for base, paths := range found {
		if !p.present[base] || strings.Join(p.paths[base], "\x00") != strings.Join(paths, "\x00") {
			changed = true
		}
		p.present[base], p.paths[base] = true, paths
	}
	for base, was := range p.present {
		if _, ok := found[base]; !ok && was {
			p.present[base] = false
			changed = true
		}
	}
	return changed
}

// devices is the ListAndWatch answer: Shared IDs per device node, healthy
// while it is there.
func (p *plugin) devices() []*pluginapi.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	bases := make([]string, 0, len(p.present))
	for b := range p.present {
		bases = append(bases, b)
	}
	sort.Strings(bases)
	var out []*pluginapi.Device
	for _, b := range bases {
		h := pluginapi.Healthy
		if !p.present[b] {
			h = pluginapi.Unhealthy
		}
		for i := range p.res.Shared {
			out = append(out, &pluginapi.Device{ID: deviceID(b, i, p.res.Shared), Health: h})
		}
	}
	return out
}

func deviceID(base string, i, shared int) string {
	if shared == 1 {
		return base
	}
	return base + "#" + strconv.Itoa(i)
}

func baseOf(id string) string {
	if i := strings.LastIndexByte(id, '#'); i >= 0 {
		return id[:i]
	}
	return id
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	p.updates[ch] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.updates, ch)
		p.mu.Unlock()
	}()
	for {
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices()}); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-s.Context().Done():
			return nil
		}
	}
}

// Allocate gives each container exactly the device nodes of its devices.
func (p *plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		resp := &pluginapi.ContainerAllocateResponse{}
		seen := map[string]bool{}
		for _, id := range c.DevicesIds {
			base := baseOf(id)
			if !p.present[base] {
				return nil, fmt.Errorf("device %s of %s is not present", id, p.res.Name)
			}
			for _, path := range p.paths[base] {
				if !seen[path] {
					seen[path] = true
					resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{HostPath: path, ContainerPath: path, Permissions: "rw"})
				}
			}
		}
		out.ContainerResponses = append(out.ContainerResponses, resp)
	}
	return out, nil
}
