// Command csidriver is a CSI driver for bonsai's tests, in the manner of
// kubernetes-csi's csi-driver-host-path (which, like node-driver-registrar,
// cannot be fetched in bonsai's build environment): it serves the real
// CSI gRPC services (Identity, Controller, Node) on -endpoint, keeps each
// volume as a directory under -state-dir, and registers its node plugin
// in the kubelet's plugin registry as node-driver-registrar does
// (registration API, type CSIPlugin). Volumes are staged and published
// with bind mounts (read-only publishes are remounted read-only). The
// unmodified external-provisioner, external-attacher and external-resizer
// sidecars drive its Controller service. It prints each call it gets
// ("NodePublishVolume <volume id> <target>", ...), for tests to follow.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedControllerServer
	csipb.UnimplementedNodeServer
	registerapi.UnimplementedRegistrationServer

	name, nodeID, stateDir, topoKey, endpoint string
	maxVolumes                                int64
	stage, attach                             bool

	mu sync.Mutex
}

// volume is a volume's record (<state-dir>/volumes/<id>.json).
type volume struct {
	ID       string `json:"id"`
	Capacity int64  `json:"capacity"`
	// Attached: nodes it is published to (ControllerPublishVolume).
	Attached []string `json:"attached,omitempty"`
}

func main() {
	d := &driver{}
	registry := flag.String("registry-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registry; empty: do not register")
	flag.StringVar(&d.name, "driver", "csi.bonsai.test", "driver name")
	flag.StringVar(&d.nodeID, "node", "", "node ID (the node's name)")
	flag.StringVar(&d.endpoint, "endpoint", "", "the CSI socket (default <registry-dir>/../plugins/<driver>/csi.sock)")
	flag.StringVar(&d.stateDir, "state-dir", "", "where volumes are kept")
	flag.StringVar(&d.topoKey, "topology-key", "topology.csi.bonsai.test/node", "topology key of the node's segment (empty: none)")
	flag.Int64Var(&d.maxVolumes, "max-volumes", 0, "NodeGetInfo's max_volumes_per_node (0: no limit)")
	flag.BoolVar(&d.stage, "stage", true, "the node service has STAGE_UNSTAGE_VOLUME")
	flag.BoolVar(&d.attach, "attach", false, "the controller service has PUBLISH_UNPUBLISH_VOLUME")
	flag.Parse()
	if d.nodeID == "" || d.stateDir == "" {
		fatal(errors.New("-node and -state-dir are required"))
	}
	if d.endpoint == "" {
		d.endpoint = filepath.Join(filepath.Dir(*registry), "plugins", d.name, "csi.sock")
	}
	for _, dir := range []string{filepath.Join(d.stateDir, "volumes"), filepath.Dir(d.endpoint)} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	csiSrv := serve(d.endpoint, func(s *grpc.Server) {
		csipb.RegisterIdentityServer(s, d)
		csipb.RegisterControllerServer(s, d)
		csipb.RegisterNodeServer(s, d)
	})
	defer csiSrv.Stop()
	if *registry != "" {
		if err := os.MkdirAll(*registry, 0o750); err != nil {
			fatal(err)
		}
		reg := filepath.Join(*registry, d.name+"-reg.sock")
		regSrv := serve(reg, func(s *grpc.Server) { registerapi.RegisterRegistrationServer(s, d) })
		defer func() { regSrv.Stop(); os.Remove(reg) }()
	}
	fmt.Println("serving", d.endpoint)
	<-ctx.Done()
}

func serve(path string, register func(*grpc.Server)) *grpc.Server {
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go s.Serve(l)
	return s
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "csidriver:", err)
	os.Exit(1)
}

func logCall(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// Registration (node-driver-registrar's part).

func (d *driver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: d.name, Endpoint: d.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (d *driver) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		logCall("registered")
	} else {
		logCall("registration failed: %s", s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Identity.

func (d *driver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: d.name, VendorVersion: "0.1.0"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	caps := []*csipb.PluginCapability{
		{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE}}},
		{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{Type: csipb.PluginCapability_VolumeExpansion_ONLINE}}},
	}
	if d.topoKey != "" {
		caps = append(caps, &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}}})
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *driver) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

// Controller.

func (d *driver) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	types := []csipb.ControllerServiceCapability_RPC_Type{csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME}
	if d.attach {
		types = append(types, csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	}
	var caps []*csipb.ControllerServiceCapability
	for _, t := range types {
		caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *driver) topology() []*csipb.Topology {
	if d.topoKey == "" {
		return nil
	}
	return []*csipb.Topology{{Segments: map[string]string{d.topoKey: d.nodeID}}}
}

// validID: a volume ID names a file under the state dir, so it must not
// climb out of it.
func validID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return status.Errorf(codes.InvalidArgument, "invalid volume ID %q", id)
	}
	return nil
}

func (d *driver) volDir(id string) string  { return filepath.Join(d.stateDir, "volumes", id) }
func (d *driver) volFile(id string) string { return filepath.Join(d.stateDir, "volumes", id+".json") }

func (d *driver) load(id string) (*volume, error) {
	b, err := os.ReadFile(d.volFile(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", id)
	} else if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	v := &volume{}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return v, nil
}

func (d *driver) save(v *volume) error {
	b, _ := json.Marshal(v)
	tmp := d.volFile(v.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return os.Rename(tmp, d.volFile(v.ID))
}

func (d *driver) CreateVolume(_ context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	if req.Name == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	if len(req.VolumeCapabilities) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	id := req.Name
	if err := validID(id); err != nil {
		return nil, err
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && size > lim {
		return nil, status.Error(codes.OutOfRange, "required bytes exceed the limit")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	logCall("CreateVolume %s %d", id, size)
	if v, err := d.load(id); err == nil {
		if v.Capacity != size {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with capacity %d", id, v.Capacity)
		}
	} else {
		if err := os.MkdirAll(d.volDir(id), 0o777); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		os.Chmod(d.volDir(id), 0o777)
		if err := d.save(&volume{ID: id, Capacity: size}); err != nil {
			return nil, err
		}
	}
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: id, CapacityBytes: size, VolumeContext: req.Parameters, AccessibleTopology: d.topology()}}, nil
}

func (d *driver) DeleteVolume(_ context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	logCall("DeleteVolume %s", req.VolumeId)
	if err := os.RemoveAll(d.volDir(req.VolumeId)); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	os.Remove(d.volFile(req.VolumeId))
	return &csipb.DeleteVolumeResponse{}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	if _, err := d.load(req.VolumeId); err != nil {
		return nil, err
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: req.VolumeCapabilities}}, nil
}

func (d *driver) ControllerPublishVolume(_ context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	if !d.attach {
		return nil, status.Error(codes.Unimplemented, "no attach")
	}
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	if req.NodeId != d.nodeID {
		return nil, status.Errorf(codes.NotFound, "node %s not found", req.NodeId)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	logCall("ControllerPublishVolume %s %s", req.VolumeId, req.NodeId)
	v, err := d.load(req.VolumeId)
	if err != nil {
		return nil, err
	}
	if !contains(v.Attached, req.NodeId) {
		v.Attached = append(v.Attached, req.NodeId)
		if err := d.save(v); err != nil {
			return nil, err
		}
	}
	return &csipb.ControllerPublishVolumeResponse{PublishContext: map[string]string{"attached-to": req.NodeId}}, nil
}

func (d *driver) ControllerUnpublishVolume(_ context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	logCall("ControllerUnpublishVolume %s %s", req.VolumeId, req.NodeId)
	v, err := d.load(req.VolumeId)
	if status.Code(err) == codes.NotFound {
		return &csipb.ControllerUnpublishVolumeResponse{}, nil
	} else if err != nil {
		return nil, err
	}
	var keep []string
	for _, n := range v.Attached {
		if n != req.NodeId {
			keep = append(keep, n)
		}
	}
	v.Attached = keep
	return &csipb.ControllerUnpublishVolumeResponse{}, d.save(v)
}

func (d *driver) ControllerExpandVolume(_ context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	logCall("ControllerExpandVolume %s %d", req.VolumeId, req.GetCapacityRange().GetRequiredBytes())
	v, err := d.load(req.VolumeId)
	if err != nil {
		return nil, err
	}
	if n := req.GetCapacityRange().GetRequiredBytes(); n > v.Capacity {
		v.Capacity = n
		if err := d.save(v); err != nil {
			return nil, err
		}
	}
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: v.Capacity, NodeExpansionRequired: true}, nil
}

// Node.

func (d *driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	r := &csipb.NodeGetInfoResponse{NodeId: d.nodeID, MaxVolumesPerNode: d.maxVolumes}
	if t := d.topology(); t != nil {
		r.AccessibleTopology = t[0]
	}
	return r, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	types := []csipb.NodeServiceCapability_RPC_Type{csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME}
	if d.stage {
		types = append(types, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	}
	var caps []*csipb.NodeServiceCapability
	for _, t := range types {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *driver) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	if req.StagingTargetPath == "" || req.VolumeCapability == nil {
		return nil, status.Error(codes.InvalidArgument, "staging target path or volume capability missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	logCall("NodeStageVolume %s %s", req.VolumeId, req.StagingTargetPath)
	if _, err := d.load(req.VolumeId); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(req.StagingTargetPath, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !mounted(req.StagingTargetPath) {
		if err := unix.Mount(d.volDir(req.VolumeId), req.StagingTargetPath, "", unix.MS_BIND, ""); err != nil {
			return nil, status.Errorf(codes.Internal, "bind %s: %v", req.StagingTargetPath, err)
		}
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	logCall("NodeUnstageVolume %s %s", req.VolumeId, req.StagingTargetPath)
	if err := unmount(req.StagingTargetPath); err != nil {
		return nil, err
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (d *driver) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	if req.TargetPath == "" || req.VolumeCapability == nil {
		return nil, status.Error(codes.InvalidArgument, "target path or volume capability missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ephemeral := req.VolumeContext["csi.storage.k8s.io/ephemeral"] == "true"
	logCall("NodePublishVolume %s %s ro=%v ephemeral=%v pod=%s/%s", req.VolumeId, req.TargetPath, req.Readonly, ephemeral,
		req.VolumeContext["csi.storage.k8s.io/pod.namespace"], req.VolumeContext["csi.storage.k8s.io/pod.name"])
	src := d.volDir(req.VolumeId)
	switch {
	case ephemeral:
		if err := os.MkdirAll(src, 0o777); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		os.Chmod(src, 0o777)
		if c := req.VolumeContext["content"]; c != "" {
			os.WriteFile(filepath.Join(src, "content"), []byte(c), 0o644)
		}
	case d.stage:
		if req.StagingTargetPath == "" || !mounted(req.StagingTargetPath) {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %q", req.VolumeId, req.StagingTargetPath)
		}
		src = req.StagingTargetPath
	default:
		if _, err := d.load(req.VolumeId); err != nil {
			return nil, err
		}
	}
	if d.attach && !ephemeral && req.PublishContext["attached-to"] != d.nodeID {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not attached to %s (publish context %v)", req.VolumeId, d.nodeID, req.PublishContext)
	}
	if err := os.MkdirAll(req.TargetPath, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted(req.TargetPath) {
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	if err := unix.Mount(src, req.TargetPath, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind %s: %v", req.TargetPath, err)
	}
	if req.Readonly {
		if err := unix.Mount("", req.TargetPath, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			unix.Unmount(req.TargetPath, 0)
			return nil, status.Errorf(codes.Internal, "read-only remount %s: %v", req.TargetPath, err)
		}
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	logCall("NodeUnpublishVolume %s %s", req.VolumeId, req.TargetPath)
	if err := unmount(req.TargetPath); err != nil {
		return nil, err
	}
	os.Remove(req.TargetPath)
	if _, err := d.load(req.VolumeId); status.Code(err) == codes.NotFound {
		// An ephemeral volume has no record: it goes with its pod.
		os.RemoveAll(d.volDir(req.VolumeId))
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (d *driver) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	if req.VolumePath == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path missing")
	}
	v, err := d.load(req.VolumeId)
	if err != nil {
		return nil, err
	}
	if !mounted(req.VolumePath) {
		return nil, status.Errorf(codes.NotFound, "%s is not mounted", req.VolumePath)
	}
	var used, inodes int64
	filepath.WalkDir(d.volDir(req.VolumeId), func(_ string, e fs.DirEntry, err error) error {
		if err == nil {
			inodes++
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
				used += fi.Size()
			}
		}
		return nil
	})
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: v.Capacity, Used: used, Available: max(v.Capacity-used, 0)},
		{Unit: csipb.VolumeUsage_INODES, Used: inodes},
	}}, nil
}

func (d *driver) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	if err := validID(req.VolumeId); err != nil {
		return nil, err
	}
	logCall("NodeExpandVolume %s %d", req.VolumeId, req.GetCapacityRange().GetRequiredBytes())
	v, err := d.load(req.VolumeId)
	if err != nil {
		return nil, err
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: v.Capacity}, nil
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// mounted: p is a mount point (in the mount table).
func mounted(p string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == p {
			return true
		}
	}
	return false
}

func unmount(p string) error {
	for mounted(p) {
		if err := unix.Unmount(p, 0); err != nil {
			return status.Errorf(codes.Internal, "unmount %s: %v", p, err)
		}
	}
	return nil
}
