// Command testplugin is a device plugin written only against k8s.io/kubelet's
// v1beta1 API, as a vendor's would be, for bonsai's tests and benchmarks.
// It advertises one device per file in -dev-dir (character devices the
// test made with mknod), serves them on its own socket, registers on the
// kubelet's socket, and registers again whenever its socket disappears
// (the kubelet restarted). Device IDs listed in -unhealthy-file (one per
// line, re-read every 100 ms) are reported Unhealthy. Every Allocate is
// appended to -log.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

var (
	pluginDir     = flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins directory")
	resourceName  = flag.String("resource", "bonsai.test/dev", "resource name to register")
	socketName    = flag.String("socket", "testplugin.sock", "socket file name in -dir")
	version       = flag.String("version", pluginapi.Version, "API version to register with")
	devDir        = flag.String("dev-dir", "", "directory whose files are the devices")
	unhealthyFile = flag.String("unhealthy-file", "", "file listing unhealthy device IDs")
	mountDir      = flag.String("mount-dir", "", "host directory Allocate mounts at /testplugin (read-only)")
	preferred     = flag.Bool("preferred", false, "offer GetPreferredAllocation, preferring the last IDs in order")
	preStart      = flag.Bool("prestart", false, "ask for PreStartContainer")
	logFile       = flag.String("log", "", "append every Allocate and PreStartContainer here")
	numa          = flag.Int("numa", 0, "spread devices over this many NUMA nodes (0: no topology)")
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	mu      sync.Mutex
	devices []*pluginapi.Device
	updates chan struct{}
}

func main() {
	flag.Parse()
	p := &plugin{updates: make(chan struct{}, 1)}
	p.scan()
	go p.watchHealth()
	for {
		srv, err := p.serve()
		if err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		// The time registration starts, for benchmarks (Unix ns).
		fmt.Printf("registering %d\n", time.Now().UnixNano())
		if err := register(); err != nil {
			fmt.Fprintln(os.Stderr, "registration failed:", err)
			os.Exit(2)
		}
		fmt.Println("registered")
		// The kubelet deletes every socket when it starts: ours going is
		// the signal to register again.
		sock := filepath.Join(*pluginDir, *socketName)
		for {
			time.Sleep(100 * time.Millisecond)
			if _, err := os.Stat(sock); err != nil {
				break
			}
		}
		srv.Stop()
		fmt.Println("socket gone; registering again")
		for {
			if _, err := os.Stat(filepath.Join(*pluginDir, "kubelet.sock")); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (p *plugin) serve() (*grpc.Server, error) {
	sock := filepath.Join(*pluginDir, *socketName)
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

func register() error {
	var err error
	for range 50 {
		err = registerOnce()
		if err == nil || !strings.Contains(err.Error(), "connect") {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func registerOnce() error {
	kubelet := filepath.Join(*pluginDir, "kubelet.sock")
	conn, err := grpc.NewClient("passthrough:///"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", kubelet)
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: *version, Endpoint: *socketName, ResourceName: *resourceName,
		Options: &pluginapi.DevicePluginOptions{PreStartRequired: *preStart, GetPreferredAllocationAvailable: *preferred},
	})
	return err
}

// scan lists the devices and their health; it reports whether anything
// changed.
func (p *plugin) scan() bool {
	var ids []string
	if entries, err := os.ReadDir(*devDir); err == nil {
		for _, e := range entries {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	bad := map[string]bool{}
	if *unhealthyFile != "" {
		b, _ := os.ReadFile(*unhealthyFile)
		for _, l := range strings.Fields(string(b)) {
			bad[l] = true
		}
	}
	var devs []*pluginapi.Device
	for i, id := range ids {
		d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
		if bad[id] {
			d.Health = pluginapi.Unhealthy
		}
		if *numa > 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(i % *numa)}}}
		}
		devs = append(devs, d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	same := len(devs) == len(p.devices)
	for i := 0; same && i < len(devs); i++ {
		same = devs[i].ID == p.devices[i].ID && devs[i].Health == p.devices[i].Health
	}
	p.devices = devs
	return !same
}

func (p *plugin) watchHealth() {
	for {
		time.Sleep(100 * time.Millisecond)
		if p.scan() {
			select {
			case p.updates <- struct{}{}:
			default:
			}
		}
	}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{PreStartRequired: *preStart, GetPreferredAllocationAvailable: *preferred}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		p.mu.Lock()
		devs := p.devices
		p.mu.Unlock()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-p.updates:
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *plugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	out := &pluginapi.PreferredAllocationResponse{}
	for _, c := range r.ContainerRequests {
		chosen := append([]string(nil), c.MustIncludeDeviceIDs...)
		avail := append([]string(nil), c.AvailableDeviceIDs...)
		sort.Sort(sort.Reverse(sort.StringSlice(avail)))
		for _, id := range avail {
			if len(chosen) >= int(c.AllocationSize) {
				break
			}
			dup := false
			for _, x := range chosen {
				dup = dup || x == id
			}
			if !dup {
				chosen = append(chosen, id)
			}
		}
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return out, nil
}

func (p *plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		ids := append([]string(nil), c.DevicesIds...)
		sort.Strings(ids)
		logLine("allocate " + strings.Join(ids, ","))
		resp := &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"TEST_DEVICES": strings.Join(ids, ",")},
			Annotations: map[string]string{"bonsai.test/devices": strings.Join(ids, ",")},
		}
		for _, id := range ids {
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{HostPath: filepath.Join(*devDir, id), ContainerPath: "/dev/" + id, Permissions: "rw"})
		}
		if *mountDir != "" {
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{HostPath: *mountDir, ContainerPath: "/testplugin", ReadOnly: true})
		}
		out.ContainerResponses = append(out.ContainerResponses, resp)
	}
	return out, nil
}

func (p *plugin) PreStartContainer(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	ids := append([]string(nil), r.DevicesIds...)
	sort.Strings(ids)
	logLine("prestart " + strings.Join(ids, ","))
	return &pluginapi.PreStartContainerResponse{}, nil
}

var logMu sync.Mutex

func logLine(s string) {
	if *logFile == "" {
		return
	}
	logMu.Lock()
	defer logMu.Unlock()
	f, err := os.OpenFile(*logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintln(f, s)
	f.Close()
}
