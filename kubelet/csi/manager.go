// Package csi is the node side of the Container Storage Interface, as
// the kubelet's CSI volume plugin: CSI drivers' node plugins register
// through the plugin registry (kubelet/pluginregistry, type CSIPlugin),
// what NodeGetInfo answers goes into the node's CSINode object, its
// csi.volume.kubernetes.io/nodeid annotation and its topology labels, and
// the kubelet has volumes staged (NodeStageVolume, for drivers with
// STAGE_UNSTAGE) and published (NodePublishVolume) into a pod's volume
// dir before its containers start, and unpublished and unstaged once the
// pod is gone. What is published is recorded beside the mount
// (vol_data.json), so a restart of bonsai finds it and a pod deleted
// meanwhile still has its volumes torn down. It owns the driver
// connections and those files; the pod's lifecycle stays the kubelet's.
package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/deviceplugin"
)

// AnnotationNodeID is the node annotation mapping each registered CSI
// driver to its node ID, as the kubelet keeps it.
const AnnotationNodeID = "csi.volume.kubernetes.io/nodeid"

// callTimeout bounds a node call that is not a mount (info, stats).
const callTimeout = 30 * time.Second

// mountTimeout bounds a stage or publish call, as the kubelet's
// csiTimeout does (2 minutes).
const mountTimeout = 2 * time.Minute

// Config configures a Manager.
type Config struct {
	// KubeletRootDir is --kubelet-root-dir: volumes are staged in
	// <dir>/plugins/kubernetes.io/csi/<driver>/<sha256 of the handle>/globalmount.
	KubeletRootDir string
	// PodsDir holds the pod dirs the kubelet publishes volumes into.
	PodsDir  string
	NodeName string
	// API is the node's identity on the API server (CSINode, the node's
	// labels and annotation, CSIDrivers).
	API    *rest.Config
	Logger *slog.Logger
}

// Manager registers CSI drivers and mounts their volumes for pods.
type Manager struct {
	cfg           Config
	log           *slog.Logger
	core, storage rest.Interface

	mu      sync.Mutex
	drivers map[string]*driver

	nodeMu sync.Mutex // CSINode and Node writes
	// volMu orders the stage, publish, unpublish and unstage calls of
	// the node, so a volume is never unstaged while another pod
	// publishes it.
	volMu sync.Mutex
}

// driver is a registered CSI driver's node plugin.
type driver struct {
	name, endpoint string
	conn           *grpc.ClientConn
	node           csipb.NodeClient
	nodeID         string
	stage, stats   bool
	expand         bool
}

// New makes a manager; register it with the plugin registry for
// CSIPlugin and call Start.
func New(cfg Config) (*Manager, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	core, err := client.Core(cfg.API)
	if err != nil {
		return nil, err
	}
	st, err := client.REST(cfg.API, "/apis", storagev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg, log: log, core: core, storage: st, drivers: map[string]*driver{}}, nil
}

// Start makes sure the node has its CSINode, as the kubelet makes it at
// start-up (retrying until the Node exists, which owns it).
func (m *Manager) Start(ctx context.Context) {
	go func() {
		for ctx.Err() == nil {
			if err := m.updateCSINode(ctx, func(*storagev1.CSINode) bool { return false }); err == nil {
				return
			} else {
				m.log.Debug("CSINode not made yet", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
}

// ValidatePlugin accepts a CSI plugin that speaks CSI 1.x at an endpoint
// (pluginregistry.Handler), as the kubelet's CSI plugin handler does.
func (m *Manager) ValidatePlugin(name, endpoint string, versions []string) error {
	if endpoint == "" {
		return fmt.Errorf("CSI plugin %s has no endpoint", name)
	}
	for _, v := range versions {
		if v == "1" || (len(v) > 1 && v[:2] == "1.") || v == "v1" || (len(v) > 2 && v[:3] == "v1.") {
			return nil
		}
	}
	return fmt.Errorf("CSI plugin %s supports versions %v, none of which is 1.x, which bonsai speaks", name, versions)
}

// RegisterPlugin connects to the driver, asks it NodeGetInfo and
// NodeGetCapabilities and records it in the node's CSINode, annotation
// and labels. A driver whose node information cannot be stored is not
// registered (the kubelet deregisters it too).
func (m *Manager) RegisterPlugin(ctx context.Context, name, endpoint string, _ []string) error {
	conn, err := deviceplugin.DialUnix(endpoint)
	if err != nil {
		return fmt.Errorf("CSI driver %s endpoint %s: %v", name, endpoint, err)
	}
	d := &driver{name: name, endpoint: endpoint, conn: conn, node: csipb.NewNodeClient(conn)}
	fail := func(err error) error { conn.Close(); return err }
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	info, err := d.node.NodeGetInfo(cctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return fail(fmt.Errorf("CSI driver %s: NodeGetInfo: %v", name, err))
	}
	if info.NodeId == "" {
		return fail(fmt.Errorf("CSI driver %s: NodeGetInfo returned an empty node ID", name))
	}
	if info.MaxVolumesPerNode < 0 {
		return fail(fmt.Errorf("CSI driver %s: NodeGetInfo returned a negative maximum of volumes (%d)", name, info.MaxVolumesPerNode))
	}
	d.nodeID = info.NodeId
	caps, err := d.node.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return fail(fmt.Errorf("CSI driver %s: NodeGetCapabilities: %v", name, err))
	}
	for _, c := range caps.GetCapabilities() {
		switch c.GetRpc().GetType() {
		case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			d.stage = true
		case csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS:
			d.stats = true
		case csipb.NodeServiceCapability_RPC_EXPAND_VOLUME:
			d.expand = true
		}
	}
	var topo map[string]string
	if t := info.GetAccessibleTopology(); t != nil {
		topo = t.GetSegments()
	}
	if err := m.patchNode(ctx, name, info.NodeId, topo); err != nil {
		return fail(fmt.Errorf("CSI driver %s: updating node: %v", name, err))
	}
	keys := slices.Sorted(maps.Keys(topo))
	if err := m.updateCSINode(ctx, func(cn *storagev1.CSINode) bool {
		entry := storagev1.CSINodeDriver{Name: name, NodeID: info.NodeId, TopologyKeys: keys}
		if info.MaxVolumesPerNode > 0 {
			entry.Allocatable = &storagev1.VolumeNodeResources{Count: ptr.To(int32(min(info.MaxVolumesPerNode, 1<<31-1)))}
		}
		i := slices.IndexFunc(cn.Spec.Drivers, func(x storagev1.CSINodeDriver) bool { return x.Name == name })
		if i >= 0 {
			cn.Spec.Drivers[i] = entry
		} else {
			cn.Spec.Drivers = append(cn.Spec.Drivers, entry)
		}
		return true
	}); err != nil {
		return fail(fmt.Errorf("CSI driver %s: updating CSINode: %v", name, err))
	}
	m.mu.Lock()
	old := m.drivers[name]
	m.drivers[name] = d
	m.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
	m.log.Info("CSI driver registered", "driver", name, "endpoint", endpoint, "nodeID", info.NodeId)
	return nil
}

// DeRegisterPlugin drops a driver whose registration socket went: it
// leaves the CSINode and the node annotation (its topology labels stay,
// as the kubelet leaves them). Volumes it published stay mounted; their
// pods' teardown waits for the driver to come back.
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
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := m.updateCSINode(ctx, func(cn *storagev1.CSINode) bool {
		n := len(cn.Spec.Drivers)
		cn.Spec.Drivers = slices.DeleteFunc(cn.Spec.Drivers, func(x storagev1.CSINodeDriver) bool { return x.Name == name })
		return len(cn.Spec.Drivers) != n
	}); err != nil {
		m.log.Warn("removing CSI driver from CSINode", "driver", name, "err", err)
	}
	if err := m.patchNode(ctx, name, "", nil); err != nil {
		m.log.Warn("removing CSI driver's node ID", "driver", name, "err", err)
	}
	m.log.Info("CSI driver deregistered", "driver", name)
}

// Drivers are the registered CSI drivers' names, sorted.
func (m *Manager) Drivers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.drivers))
}

func (m *Manager) driver(name string) (*driver, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.drivers[name]
	if d == nil {
		// The kubelet's words, so a user searching them finds the cause.
		return nil, fmt.Errorf("kubernetes.io/csi: driver name %s not found in the list of registered CSI drivers", name)
	}
	return d, nil
}

// patchNode sets (nodeID != "") or removes the driver's entry of the
// node ID annotation and adds its topology labels, with a merge patch
// so the node's other writers are not raced.
func (m *Manager) patchNode(ctx context.Context, driverName, nodeID string, topo map[string]string) error {
	m.nodeMu.Lock()
	defer m.nodeMu.Unlock()
	node := &corev1.Node{}
	if err := m.core.Get().Resource("nodes").Name(m.cfg.NodeName).Do(ctx).Into(node); err != nil {
		return err
	}
	ids := map[string]string{}
	if s := node.Annotations[AnnotationNodeID]; s != "" {
		if err := json.Unmarshal([]byte(s), &ids); err != nil {
			ids = map[string]string{} // a broken annotation is rewritten
		}
	}
	if nodeID == "" {
		delete(ids, driverName)
	} else {
		ids[driverName] = nodeID
	}
	for k, v := range topo {
		if cur, ok := node.Labels[k]; ok && cur != v {
			return fmt.Errorf("topology label %s=%s conflicts with the node's label %s=%s", k, v, k, cur)
		}
	}
	ann := map[string]any{AnnotationNodeID: nil}
	if len(ids) > 0 {
		b, _ := json.Marshal(ids)
		ann[AnnotationNodeID] = string(b)
	}
	meta := map[string]any{"annotations": ann}
	if len(topo) > 0 {
		meta["labels"] = topo
	}
	body, _ := json.Marshal(map[string]any{"metadata": meta})
	return m.core.Patch(types.MergePatchType).Resource("nodes").Name(m.cfg.NodeName).Body(body).Do(ctx).Error()
}

// updateCSINode changes the node's CSINode (made if missing, owned by
// the Node as the kubelet makes it); change reports whether it changed.
func (m *Manager) updateCSINode(ctx context.Context, change func(*storagev1.CSINode) bool) error {
	m.nodeMu.Lock()
	defer m.nodeMu.Unlock()
	for attempt := 0; ; attempt++ {
		cn := &storagev1.CSINode{}
		err := m.storage.Get().Resource("csinodes").Name(m.cfg.NodeName).Do(ctx).Into(cn)
		if apierrors.IsNotFound(err) {
			node := &corev1.Node{}
			if err := m.core.Get().Resource("nodes").Name(m.cfg.NodeName).Do(ctx).Into(node); err != nil {
				return err
			}
			cn = &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{
				Name:            m.cfg.NodeName,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			}}
			change(cn)
			if cn.Spec.Drivers == nil {
				cn.Spec.Drivers = []storagev1.CSINodeDriver{}
			}
			err = m.storage.Post().Resource("csinodes").Body(cn).Do(ctx).Error()
		} else if err == nil {
			if !change(cn) {
				return nil
			}
			err = m.storage.Put().Resource("csinodes").Name(cn.Name).Body(cn).Do(ctx).Error()
		}
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 5 {
			continue
		}
		return err
	}
}
