package generic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// DRADriverName is the DRA driver the generic device plugin publishes
// the devices of `dra: true` resources as.
const DRADriverName = "generic.bonsai.dev"

// DRAConfig is where the generic DRA driver registers, serves and
// publishes.
type DRAConfig struct {
	NodeName string
	// RegistryDir is the kubelet's plugin registry
	// (<kubelet-root>/plugins_registry); PluginDir holds the DRA socket.
	RegistryDir, PluginDir string
	// CDIDir is where the CDI specs of prepared claims are written; it
	// must be one of the directories CDI devices are resolved in.
	CDIDir string
	// Resource is a resource.k8s.io/v1 client acting as the node.
	Resource rest.Interface
}

// HasDRA reports resources to publish as a DRA driver.
func (c *Config) HasDRA() bool {
	for _, r := range c.Resources {
		if r.DRA {
			return true
		}
	}
	return false
}

type draDriver struct {
	drapb.UnimplementedDRAPluginServer
	registerapi.UnimplementedRegistrationServer
	cfg     DRAConfig
	log     *slog.Logger
	plugins []*plugin
	wake    chan struct{}

	mu      sync.Mutex
	devices map[string][]string // device name → its device nodes, those present
}

// RunDRA publishes the devices of cfg's `dra: true` resources in a
// ResourceSlice of this node (driver generic.bonsai.dev, one pool named
// after the node) and serves them as a DRA driver's kubelet plugin,
// registered through the plugin registry like any other driver, until ctx
// ends.
func RunDRA(ctx context.Context, cfg *Config, dc DRAConfig, log *slog.Logger) {
	d := &draDriver{cfg: dc, log: log.With("component", "generic-dra-driver", "driver", DRADriverName), wake: make(chan struct{}, 1)}
	for _, r := range cfg.Resources {
		if !r.DRA {
			continue
		}
		p := &plugin{res: r, log: d.log.With("resource", r.Name),
			present: map[string]bool{}, paths: map[string][]string{}, updates: map[chan struct{}]bool{d.wake: true}}
		p.scan()
		go p.rescan(ctx)
		d.plugins = append(d.plugins, p)
	}
	go d.publish(ctx)
	go d.serve(ctx)
}

// deviceName is a DNS label for a device: the resource's type and the
// device node's path (or "group").
func deviceName(res, base string) string {
	_, typ, _ := strings.Cut(res, "/")
	s := strings.ToLower(typ + "-" + strings.TrimPrefix(base, "/dev/"))
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	s = strings.Trim(string(b), "-")
	if len(s) > 63 {
		s = strings.Trim(s[len(s)-63:], "-")
	}
	return s
}

// current is the present devices, sorted by name, and their nodes.
func (d *draDriver) current() ([]resourceapi.Device, map[string][]string) {
	nodes := map[string][]string{}
	var devs []resourceapi.Device
	for _, p := range d.plugins {
		p.mu.Lock()
		for base, ok := range p.present {
			if !ok {
				continue
			}
			name := deviceName(p.res.Name, base)
			if _, dup := nodes[name]; dup {
				continue
			}
			nodes[name] = append([]string(nil), p.paths[base]...)
			path := base
			if base == "group" {
				path = strings.Join(p.paths[base], ",")
			}
			res, pth := p.res.Name, path
			devs = append(devs, resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"resource": {StringValue: &res}, "path": {StringValue: &pth}}})
		}
		p.mu.Unlock()
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
	return devs, nodes
}

func (d *draDriver) sliceName() string { return d.cfg.NodeName + "-" + DRADriverName }

// publish keeps the node's ResourceSlice at the present devices.
func (d *draDriver) publish(ctx context.Context) {
	retry := time.Duration(0)
	for {
		devs, nodes := d.current()
		d.mu.Lock()
		d.devices = nodes
		d.mu.Unlock()
		if err := d.writeSlice(ctx, devs); err != nil {
			d.log.Warn("publishing the ResourceSlice; retrying", "err", err)
			retry = 5 * time.Second
		} else {
			retry = 0
		}
		var after <-chan time.Time
		if retry > 0 {
			after = time.After(retry)
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-after:
		}
	}
}

func (d *draDriver) writeSlice(ctx context.Context, devs []resourceapi.Device) error {
	rc := d.cfg.Resource
	cur := &resourceapi.ResourceSlice{}
	err := rc.Get().Resource("resourceslices").Name(d.sliceName()).Do(ctx).Into(cur)
	node := d.cfg.NodeName
	spec := resourceapi.ResourceSliceSpec{Driver: DRADriverName, NodeName: &node, Devices: devs,
		Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}
	switch {
	case apierrors.IsNotFound(err):
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: d.sliceName()}, Spec: spec}
		if err := rc.Post().Resource("resourceslices").Body(s).Do(ctx).Error(); err != nil {
			return err
		}
		d.log.Info("ResourceSlice published", "slice", d.sliceName(), "devices", len(devs))
		return nil
	case err != nil:
		return err
	}
	spec.Pool.Generation = cur.Spec.Pool.Generation
	if equality.Semantic.DeepEqual(cur.Spec, spec) {
		return nil
	}
	spec.Pool.Generation++
	cur.Spec = spec
	if err := rc.Put().Resource("resourceslices").Name(cur.Name).Body(cur).Do(ctx).Error(); err != nil {
		return err
	}
	d.log.Info("ResourceSlice updated", "slice", d.sliceName(), "devices", len(devs))
	return nil
}

// serve runs the DRA service and the registration service the node's
// plugin registry finds.
func (d *draDriver) serve(ctx context.Context) {
	if err := os.MkdirAll(d.cfg.PluginDir, 0o750); err != nil {
		d.log.Error("generic DRA driver not served", "err", err)
		return
	}
	endpoint := filepath.Join(d.cfg.PluginDir, "dra.sock")
	reg := filepath.Join(d.cfg.RegistryDir, DRADriverName+"-reg.sock")
	var servers []*grpc.Server
	for _, s := range []struct {
		path string
		reg  func(*grpc.Server)
	}{
		{endpoint, func(g *grpc.Server) { drapb.RegisterDRAPluginServer(g, d) }},
		{reg, func(g *grpc.Server) { registerapi.RegisterRegistrationServer(g, d) }},
	} {
		os.Remove(s.path)
		l, err := net.Listen("unix", s.path)
		if err != nil {
			d.log.Error("generic DRA driver not served", "err", err)
			for _, g := range servers {
				g.Stop()
			}
			return
		}
		g := grpc.NewServer()
		s.reg(g)
		go g.Serve(l)
		servers = append(servers, g)
	}
	<-ctx.Done()
	for _, g := range servers {
		g.Stop()
	}
	os.Remove(reg)
	os.Remove(endpoint)
}

func (d *draDriver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: DRADriverName,
		Endpoint: filepath.Join(d.cfg.PluginDir, "dra.sock"), SupportedVersions: []string{drapb.DRAPluginService}}, nil
}

func (d *draDriver) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		d.log.Error("generic DRA driver refused by the node", "err", s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (d *draDriver) specPath(uid string) string {
	return filepath.Join(d.cfg.CDIDir, DRADriverName+"-"+uid+".json")
}

type cdiNode struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
}

type cdiDevice struct {
	Name           string `json:"name"`
	ContainerEdits struct {
		DeviceNodes []cdiNode `json:"deviceNodes"`
	} `json:"containerEdits"`
}

// NodePrepareResources writes a CDI spec per claim giving the container
// the device nodes of its allocated devices, at their host paths.
func (d *draDriver) NodePrepareResources(ctx context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		devs, err := d.prepare(ctx, c)
		r := &drapb.NodePrepareResourceResponse{Devices: devs}
		if err != nil {
			r = &drapb.NodePrepareResourceResponse{Error: err.Error()}
		}
		resp.Claims[c.Uid] = r
	}
	return resp, nil
}

func (d *draDriver) prepare(ctx context.Context, c *drapb.Claim) ([]*drapb.Device, error) {
	claim := &resourceapi.ResourceClaim{}
	if err := d.cfg.Resource.Get().Namespace(c.Namespace).Resource("resourceclaims").Name(c.Name).Do(ctx).Into(claim); err != nil {
		return nil, err
	}
	if claim.UID != types.UID(c.Uid) {
		return nil, fmt.Errorf("claim %s/%s was replaced", c.Namespace, c.Name)
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*drapb.Device
	var spec []cdiDevice
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DRADriverName {
			continue
		}
		nodes, ok := d.devices[r.Device]
		if !ok || r.Pool != d.cfg.NodeName {
			return nil, fmt.Errorf("device %s/%s is not present on this node", r.Pool, r.Device)
		}
		cd := cdiDevice{Name: c.Uid + "-" + r.Device}
		for _, n := range nodes {
			cd.ContainerEdits.DeviceNodes = append(cd.ContainerEdits.DeviceNodes, cdiNode{Path: n, Permissions: "rw"})
		}
		spec = append(spec, cd)
		out = append(out, &drapb.Device{RequestNames: []string{strings.SplitN(r.Request, "/", 2)[0]}, PoolName: r.Pool, DeviceName: r.Device,
			CdiDeviceIds: []string{DRADriverName + "/device=" + cd.Name}})
	}
	b, err := json.Marshal(map[string]any{"cdiVersion": "0.6.0", "kind": DRADriverName + "/device", "devices": spec})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d.cfg.CDIDir, 0o755); err != nil {
		return nil, err
	}
	tmp := d.specPath(c.Uid) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return nil, err
	}
	return out, os.Rename(tmp, d.specPath(c.Uid))
}

// NodeUnprepareResources removes the claims' CDI specs.
func (d *draDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		r := &drapb.NodeUnprepareResourceResponse{}
		if err := os.Remove(d.specPath(c.Uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.Error = err.Error()
		}
		resp.Claims[c.Uid] = r
	}
	return resp, nil
}
