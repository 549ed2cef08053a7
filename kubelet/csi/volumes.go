package csi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// PluginName is the kubelet's name of its CSI volume plugin, the
// directory of CSI volumes under a pod's volumes and under the kubelet
// root's plugins.
const PluginName = "kubernetes.io~csi"

// Volume context keys the kubelet adds for drivers that ask for the
// pod's identity (CSIDriver spec.podInfoOnMount).
const (
	ctxPodName        = "csi.storage.k8s.io/pod.name"
	ctxPodNamespace   = "csi.storage.k8s.io/pod.namespace"
	ctxPodUID         = "csi.storage.k8s.io/pod.uid"
	ctxServiceAccount = "csi.storage.k8s.io/serviceAccount.name"
	ctxEphemeral      = "csi.storage.k8s.io/ephemeral"
)

// Volume is a pod's CSI volume: from a PersistentVolume's spec.csi or a
// pod's inline csi volume (Ephemeral).
type Volume struct {
	Driver, Handle string
	// ReadOnly: the PV, the claim reference or the inline volume says so.
	ReadOnly     bool
	FSType       string
	MountOptions []string
	Attributes   map[string]string
	// AccessModes are the PV's; an inline volume is single-node writer.
	AccessModes []corev1.PersistentVolumeAccessMode
	Ephemeral   bool
	PVName      string
}

// volData is what the kubelet records beside a published volume
// (vol_data.json) and a staged one: enough to tear it down without the
// API, after a restart or when the pod is gone.
type volData struct {
	Driver      string `json:"driverName"`
	Handle      string `json:"volumeHandle"`
	StagingPath string `json:"stagingPath,omitempty"`
	PVName      string `json:"specVolID,omitempty"`
	Ephemeral   bool   `json:"ephemeral,omitempty"`
	PodUID      string `json:"podUID,omitempty"`
}

const volDataFile = "vol_data.json"

// podVolumesDir is where a pod's CSI volumes are published.
func podVolumesDir(podDir string) string { return filepath.Join(podDir, "volumes", PluginName) }

// stagingDir is a volume's staging dir (its globalmount is the staging
// path), as the kubelet names it.
func (m *Manager) stagingDir(driver, handle string) string {
	return filepath.Join(m.cfg.KubeletRootDir, "plugins", "kubernetes.io", "csi", driver, fmt.Sprintf("%x", sha256.Sum256([]byte(handle))))
}

// AttachmentName is the VolumeAttachment of a volume on a node, as the
// attach/detach controller and the kubelet name it.
func AttachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// EphemeralHandle is the handle of a pod's inline volume, as the kubelet
// makes it.
func EphemeralHandle(podUID, volName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(podUID+volName)))
}

// csiDriver is the driver's CSIDriver object, or upstream's defaults
// when it has none (attach required, no pod info, fsGroup for RWO volumes
// with a file system type, persistent volumes only).
func (m *Manager) csiDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	d := &storagev1.CSIDriver{}
	err := m.storage.Get().Resource("csidrivers").Name(name).Do(ctx).Into(d)
	if apierrors.IsNotFound(err) {
		d = &storagev1.CSIDriver{}
		d.Name = name
	} else if err != nil {
		return nil, err
	}
	if d.Spec.AttachRequired == nil {
		d.Spec.AttachRequired = new(true)
	}
	if d.Spec.FSGroupPolicy == nil {
		p := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
		d.Spec.FSGroupPolicy = &p
	}
	if len(d.Spec.VolumeLifecycleModes) == 0 {
		d.Spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	return d, nil
}

// Publish makes a pod's CSI volume available in the pod's dir and
// returns the host path the containers mount: it waits for the volume's
// VolumeAttachment when the driver needs attach, stages it once per node
// when the driver stages, and publishes it for the pod. A volume already
// published (before a restart of bonsai) is returned as it is.
func (m *Manager) Publish(ctx context.Context, pod *corev1.Pod, podDir, volName string, v Volume) (string, error) {
	volDir := filepath.Join(podVolumesDir(podDir), volName)
	target := filepath.Join(volDir, "mount")
	if data, err := readVolData(volDir); err == nil && data.Driver == v.Driver && data.Handle == v.Handle && isMountPoint(target) {
		return target, nil
	}
	d, err := m.driver(v.Driver)
	if err != nil {
		return "", err
	}
	cd, err := m.csiDriver(ctx, v.Driver)
	if err != nil {
		return "", fmt.Errorf("getting CSIDriver %s: %v", v.Driver, err)
	}
	mode := storagev1.VolumeLifecyclePersistent
	if v.Ephemeral {
		mode = storagev1.VolumeLifecycleEphemeral
	}
	if !slices.Contains(cd.Spec.VolumeLifecycleModes, mode) {
		return "", fmt.Errorf("volume mode %q not supported by driver %s (only supports %q)", mode, v.Driver, cd.Spec.VolumeLifecycleModes)
	}
	var publishContext map[string]string
	if *cd.Spec.AttachRequired && !v.Ephemeral {
		va := &storagev1.VolumeAttachment{}
		name := AttachmentName(v.Handle, v.Driver, m.cfg.NodeName)
		if err := m.storage.Get().Resource("volumeattachments").Name(name).Do(ctx).Into(va); err != nil {
			return "", fmt.Errorf("volume %s is not attached to node %s yet (VolumeAttachment %s: %v)", v.Handle, m.cfg.NodeName, name, err)
		}
		if !va.Status.Attached {
			msg := ""
			if e := va.Status.AttachError; e != nil {
				msg = ": " + e.Message
			}
			return "", fmt.Errorf("volume %s is not attached to node %s yet (VolumeAttachment %s)%s", v.Handle, m.cfg.NodeName, name, msg)
		}
		publishContext = va.Status.AttachmentMetadata
	}
	attrs := map[string]string{}
	for k, val := range v.Attributes {
		attrs[k] = val
	}
	if cd.Spec.PodInfoOnMount != nil && *cd.Spec.PodInfoOnMount {
		attrs[ctxPodName] = pod.Name
		attrs[ctxPodNamespace] = pod.Namespace
		attrs[ctxPodUID] = string(pod.UID)
		attrs[ctxServiceAccount] = pod.Spec.ServiceAccountName
		attrs[ctxEphemeral] = fmt.Sprint(v.Ephemeral)
	}
	volCap := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: v.FSType, MountFlags: v.MountOptions}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessMode(v.AccessModes)},
	}

	m.volMu.Lock()
	defer m.volMu.Unlock()
	data := volData{Driver: v.Driver, Handle: v.Handle, PVName: v.PVName, Ephemeral: v.Ephemeral, PodUID: string(pod.UID)}
	if d.stage && !v.Ephemeral {
		sdir := m.stagingDir(v.Driver, v.Handle)
		data.StagingPath = filepath.Join(sdir, "globalmount")
		if err := os.MkdirAll(data.StagingPath, 0o750); err != nil {
			return "", err
		}
		if err := writeVolData(sdir, volData{Driver: v.Driver, Handle: v.Handle, PVName: v.PVName}); err != nil {
			return "", err
		}
		cctx, cancel := context.WithTimeout(ctx, mountTimeout)
		_, err := d.node.NodeStageVolume(cctx, &csipb.NodeStageVolumeRequest{
			VolumeId: v.Handle, PublishContext: publishContext, StagingTargetPath: data.StagingPath,
			VolumeCapability: volCap, VolumeContext: v.Attributes,
		})
		cancel()
		if err != nil {
			return "", fmt.Errorf("MountDevice failed for volume %q : rpc error: NodeStageVolume: %v", volName, err)
		}
	}
	// The record goes first: a publish that fails half way is still
	// unpublished when the pod goes.
	if err := os.MkdirAll(volDir, 0o750); err != nil {
		return "", err
	}
	if err := writeVolData(volDir, data); err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, mountTimeout)
	defer cancel()
	if _, err := d.node.NodePublishVolume(cctx, &csipb.NodePublishVolumeRequest{
		VolumeId: v.Handle, PublishContext: publishContext, StagingTargetPath: data.StagingPath,
		TargetPath: target, VolumeCapability: volCap, Readonly: v.ReadOnly, VolumeContext: attrs,
	}); err != nil {
		return "", fmt.Errorf("rpc error: NodePublishVolume: %v", err)
	}
	if gid := fsGroupOf(pod); gid != nil && !v.ReadOnly && fsGroupApplies(*cd.Spec.FSGroupPolicy, v) {
		if err := applyFSGroup(target, *gid, pod.Spec.SecurityContext.FSGroupChangePolicy); err != nil {
			return "", fmt.Errorf("applying fsGroup %d: %v", *gid, err)
		}
	}
	return target, nil
}

// accessMode is the CSI access mode of a PV's access modes, as the
// kubelet maps them (an inline volume is a single node writer).
func accessMode(modes []corev1.PersistentVolumeAccessMode) csipb.VolumeCapability_AccessMode_Mode {
	switch {
	case slices.Contains(modes, corev1.ReadWriteMany):
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	case slices.Contains(modes, corev1.ReadOnlyMany):
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case slices.Contains(modes, corev1.ReadWriteOncePod):
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	}
	return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
}

func fsGroupOf(pod *corev1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// fsGroupApplies: File always, None never, ReadWriteOnceWithFSType only
// for a volume with a file system type and only the ReadWriteOnce
// access mode, as the kubelet's CSI plugin decides.
func fsGroupApplies(policy storagev1.FSGroupPolicy, v Volume) bool {
	switch policy {
	case storagev1.FileFSGroupPolicy:
		return true
	case storagev1.NoneFSGroupPolicy:
		return false
	}
	if v.FSType == "" {
		return false
	}
	if v.Ephemeral {
		return true
	}
	return len(v.AccessModes) == 1 && v.AccessModes[0] == corev1.ReadWriteOnce
}

// applyFSGroup gives the volume's files the group gid, group read and
// write (and execute where the owner has it) and the setgid bit on
// directories, as the kubelet's SetVolumeOwnership does; with
// OnRootMismatch it stops when the root already has them. Symlinks are
// not followed.
func applyFSGroup(dir string, gid int64, policy *corev1.PodFSGroupChangePolicy) error {
	if policy != nil && *policy == corev1.FSGroupChangeOnRootMismatch {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err == nil && int64(st.Gid) == gid && st.Mode&syscall.S_ISGID != 0 && st.Mode&0o070 >= 0o060 {
			return nil
		}
	}
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if err := os.Lchown(p, -1, int(gid)); err != nil {
			return err
		}
		mode := fi.Mode() | 0o060
		if fi.Mode()&0o100 != 0 {
			mode |= 0o010
		}
		if fi.IsDir() {
			mode |= fs.ModeSetgid | 0o010
		}
		return os.Chmod(p, mode)
	})
}

// TeardownPod unpublishes every CSI volume of a pod's dir and unstages
// those no other pod of the node still uses. It fails (and the pod's
// dir stays, to be tried again) while a volume's driver is not
// registered or refuses.
func (m *Manager) TeardownPod(ctx context.Context, podDir string) error {
	dir := podVolumesDir(podDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if err := m.unpublish(ctx, filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", e.Name(), err))
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) unpublish(ctx context.Context, volDir string) error {
	m.volMu.Lock()
	defer m.volMu.Unlock()
	target := filepath.Join(volDir, "mount")
	data, err := readVolData(volDir)
	if err != nil {
		if isMountPoint(target) {
			return fmt.Errorf("%s is mounted and its %s is unreadable: %v", target, volDataFile, err)
		}
		return os.RemoveAll(volDir)
	}
	d, err := m.driver(data.Driver)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, mountTimeout)
	_, err = d.node.NodeUnpublishVolume(cctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: data.Handle, TargetPath: target})
	cancel()
	if err != nil {
		return fmt.Errorf("rpc error: NodeUnpublishVolume: %v", err)
	}
	if isMountPoint(target) {
		return fmt.Errorf("driver %s unpublished %s but it is still mounted", data.Driver, target)
	}
	os.Remove(target)
	if err := os.RemoveAll(volDir); err != nil {
		return err
	}
	if data.StagingPath == "" || m.inUse(data.Driver, data.Handle) {
		return nil
	}
	cctx, cancel = context.WithTimeout(ctx, mountTimeout)
	_, err = d.node.NodeUnstageVolume(cctx, &csipb.NodeUnstageVolumeRequest{VolumeId: data.Handle, StagingTargetPath: data.StagingPath})
	cancel()
	if err != nil {
		// Unstaging is tried again at the next teardown or housekeeping.
		return fmt.Errorf("rpc error: NodeUnstageVolume: %v", err)
	}
	if isMountPoint(data.StagingPath) {
		return fmt.Errorf("driver %s unstaged %s but it is still mounted", data.Driver, data.StagingPath)
	}
	return os.RemoveAll(filepath.Dir(data.StagingPath))
}

// inUse reports whether a pod dir of the node still has the volume
// published.
func (m *Manager) inUse(driver, handle string) bool {
	matches, _ := filepath.Glob(filepath.Join(m.cfg.PodsDir, "*", "volumes", PluginName, "*", volDataFile))
	for _, p := range matches {
		if d, err := readVolData(filepath.Dir(p)); err == nil && d.Driver == driver && d.Handle == handle {
			return true
		}
	}
	return false
}

// UnstageUnused unstages staged volumes no pod of the node publishes any
// more (their last pod's teardown failed half way, or bonsai stopped in
// between); housekeeping calls it.
func (m *Manager) UnstageUnused(ctx context.Context) error {
	matches, _ := filepath.Glob(filepath.Join(m.cfg.KubeletRootDir, "plugins", "kubernetes.io", "csi", "*", "*", volDataFile))
	var errs []error
	for _, p := range matches {
		sdir := filepath.Dir(p)
		data, err := readVolData(sdir)
		if err != nil {
			continue
		}
		m.volMu.Lock()
		if m.inUse(data.Driver, data.Handle) {
			m.volMu.Unlock()
			continue
		}
		err = m.unstage(ctx, data.Driver, data.Handle, filepath.Join(sdir, "globalmount"))
		m.volMu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) unstage(ctx context.Context, driverName, handle, staging string) error {
	d, err := m.driver(driverName)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, mountTimeout)
	defer cancel()
	if _, err := d.node.NodeUnstageVolume(cctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: staging}); err != nil {
		return fmt.Errorf("rpc error: NodeUnstageVolume: %v", err)
	}
	if isMountPoint(staging) {
		return fmt.Errorf("driver %s unstaged %s but it is still mounted", driverName, staging)
	}
	return os.RemoveAll(filepath.Dir(staging))
}

func readVolData(dir string) (volData, error) {
	var d volData
	b, err := os.ReadFile(filepath.Join(dir, volDataFile))
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, err
	}
	if d.Driver == "" || d.Handle == "" {
		return d, fmt.Errorf("%s names no driver or volume", volDataFile)
	}
	return d, nil
}

func writeVolData(dir string, d volData) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+volDataFile)
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, volDataFile))
}

// isMountPoint: p is the root of a mount (its device differs from its
// parent's, or it is a bind mount of the same file system, which only
// the mount table shows).
func isMountPoint(p string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(p, &st) != nil || unix.Stat(filepath.Dir(p), &parent) != nil {
		return false
	}
	if st.Dev != parent.Dev {
		return true
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	return mountinfoHas(string(b), p)
}

// mountinfoHas reports whether /proc/self/mountinfo lists p as a mount
// point (the fifth field, with spaces and the like octal-escaped).
func mountinfoHas(mountinfo, p string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMount(f[4]) == p {
			return true
		}
	}
	return false
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Expand has the driver grow a published volume's file system to size
// (NodeExpandVolume), as the kubelet does once the controller side of an
// online expansion is done. A driver without the node's EXPAND_VOLUME
// capability has nothing to do on the node.
func (m *Manager) Expand(ctx context.Context, podDir, volName string, accessModes []corev1.PersistentVolumeAccessMode, fsType string, size int64) error {
	volDir := filepath.Join(podVolumesDir(podDir), volName)
	data, err := readVolData(volDir)
	if err != nil {
		return err
	}
	d, err := m.driver(data.Driver)
	if err != nil {
		return err
	}
	if !d.expand {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, mountTimeout)
	defer cancel()
	_, err = d.node.NodeExpandVolume(cctx, &csipb.NodeExpandVolumeRequest{
		VolumeId: data.Handle, VolumePath: filepath.Join(volDir, "mount"), StagingTargetPath: data.StagingPath,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size},
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessMode(accessModes)},
		},
	})
	if err != nil {
		return fmt.Errorf("rpc error: NodeExpandVolume: %v", err)
	}
	return nil
}
