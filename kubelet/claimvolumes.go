package kubelet

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/storage/ephemeral"

	"bonsai.dev/bonsai/kubelet/csi"
)

// A persistentVolumeClaim volume (or a generic ephemeral one, through
// the claim made for it) mounts the claim's PersistentVolume. bonsai
// mounts the volume kinds that are a directory on this host: hostPath
// (what the local-path provisioner makes) and local, and CSI volumes,
// which their driver publishes into the pod's dir (kubelet/csi). The
// claim must be
// Bound first; until it is, the pod waits with FailedMount events, as
// the kubelet's volume manager makes it wait.

// claimMount is where a claim's volume is on the host.
type claimMount struct {
	path     string
	readOnly bool
	csi      bool // a CSI persistent volume (expanded online)
}

// claimNameOf is the claim a volume uses, "" for other volume kinds.
func claimNameOf(pod *corev1.Pod, v *corev1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.Ephemeral != nil:
		return ephemeral.VolumeClaimName(pod, v)
	}
	return ""
}

// setupClaimVolume resolves a claim volume once: a bound claim's volume
// never changes, and a claim being deleted stops only pods not yet
// started with it.
func (w *podWorker) setupClaimVolume(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) error {
	if m, ok := w.claimMounts[v.Name]; ok {
		if m.csi {
			w.expandCSI(ctx, pod, v)
		}
		return nil
	}
	name := claimNameOf(pod, v)
	pvc, err := w.m.client.getClaim(ctx, pod.Namespace, name)
	if err != nil {
		return fmt.Errorf("error processing PVC %s/%s: %v", pod.Namespace, name, err)
	}
	if pvc.DeletionTimestamp != nil {
		return fmt.Errorf("can't start pod because PVC %s/%s is being deleted", pod.Namespace, name)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return fmt.Errorf("PVC %s/%s has non-bound phase (%q) or empty pvc.Spec.VolumeName (%q)", pod.Namespace, name, pvc.Status.Phase, pvc.Spec.VolumeName)
	}
	pv, err := w.m.client.getVolume(ctx, pvc.Spec.VolumeName)
	if err != nil {
		return fmt.Errorf("error processing PVC %s/%s: failed to fetch PV %q: %v", pod.Namespace, name, pvc.Spec.VolumeName, err)
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return fmt.Errorf("PV %q is not bound to PVC %s/%s", pv.Name, pod.Namespace, name)
	}
	readOnly := v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly
	var path string
	switch {
	case pv.Spec.CSI != nil:
		cm := w.m.cfg.CSI
		if cm == nil {
			return fmt.Errorf("persistent volume %q: CSI volumes are not available on this node", pv.Name)
		}
		src := pv.Spec.CSI
		readOnly = readOnly || src.ReadOnly
		path, err = cm.Publish(ctx, pod, w.podDir(), v.Name, csi.Volume{
			Driver: src.Driver, Handle: src.VolumeHandle, ReadOnly: readOnly, FSType: src.FSType,
			MountOptions: pv.Spec.MountOptions, Attributes: src.VolumeAttributes,
			AccessModes: pv.Spec.AccessModes, PVName: pv.Name,
		})
		if err != nil {
			return err
		}
	case pv.Spec.HostPath != nil:
		if err := checkHostPath(pv.Spec.HostPath); err != nil {
			return err
		}
		path = pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		st, err := os.Stat(pv.Spec.Local.Path)
		if err != nil {
			return fmt.Errorf("local volume %q: %v", pv.Name, err)
		}
		if !st.IsDir() {
			return fmt.Errorf("local volume %q: %s is not a directory (block devices are not supported)", pv.Name, pv.Spec.Local.Path)
		}
		path = pv.Spec.Local.Path
	default:
		return fmt.Errorf("persistent volume %q: only CSI, hostPath and local volumes can be mounted on this node", pv.Name)
	}
	if w.claimMounts == nil {
		w.claimMounts = map[string]claimMount{}
	}
	w.claimMounts[v.Name] = claimMount{path: path, readOnly: readOnly, csi: pv.Spec.CSI != nil}
	return nil
}

// expandCSI finishes an online expansion of a mounted CSI claim on the
// node: once the driver's controller side has grown the volume and the
// claim's resize status is NodeResizePending, the driver grows it on the
// node (NodeExpandVolume) and the claim's status gets the new capacity,
// as the kubelet's volume manager does. A failure is an event and is
// tried again at the next sync.
func (w *podWorker) expandCSI(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) {
	name := claimNameOf(pod, v)
	pvc, err := w.m.client.getClaim(ctx, pod.Namespace, name)
	if err != nil || pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != corev1.PersistentVolumeClaimNodeResizePending {
		return
	}
	pv, err := w.m.client.getVolume(ctx, pvc.Spec.VolumeName)
	if err != nil || pv.Spec.CSI == nil {
		return
	}
	size, ok := pvc.Status.AllocatedResources[corev1.ResourceStorage]
	if !ok {
		size = pv.Spec.Capacity[corev1.ResourceStorage]
	}
	if err := w.m.cfg.CSI.Expand(ctx, w.podDir(), v.Name, pv.Spec.AccessModes, pv.Spec.CSI.FSType, size.Value()); err != nil {
		w.event(ctx, pod, "", corev1.EventTypeWarning, "VolumeResizeFailed", fmt.Sprintf("NodeExpandVolume.NodeExpandVolume failed for volume %q : %v", v.Name, err))
		return
	}
	patch := fmt.Sprintf(`{"status":{"capacity":{"storage":%q},"allocatedResourceStatuses":null}}`, size.String())
	if err := w.m.client.patchClaimStatus(ctx, pod.Namespace, name, []byte(patch)); err != nil {
		w.m.log.Warn("recording a volume's expansion", "pod", podKey(pod), "claim", name, "err", err)
		return
	}
	w.event(ctx, pod, "", corev1.EventTypeNormal, "FileSystemResizeSuccessful", fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q", v.Name))
}

// claimPath is the host path of a claim volume set up before.
func (w *podWorker) claimPath(name string) (string, bool) {
	m, ok := w.claimMounts[name]
	return m.path, ok
}

// claimReadOnly: the pod asked for the claim read-only, which binds
// every mount of it read-only.
func (w *podWorker) claimReadOnly(name string) bool {
	return w.claimMounts[name].readOnly
}

func (c *Client) getClaim(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	out := &corev1.PersistentVolumeClaim{}
	return out, c.core.Get().Namespace(ns).Resource("persistentvolumeclaims").Name(name).Do(ctx).Into(out)
}

func (c *Client) getVolume(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	out := &corev1.PersistentVolume{}
	return out, c.core.Get().Resource("persistentvolumes").Name(name).Do(ctx).Into(out)
}

// setupInlineCSI has a pod's inline (ephemeral) CSI volume published, once.
func (w *podWorker) setupInlineCSI(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) error {
	if _, ok := w.claimMounts[v.Name]; ok {
		return nil
	}
	cm := w.m.cfg.CSI
	if cm == nil {
		return fmt.Errorf("CSI volumes are not available on this node")
	}
	src := v.CSI
	ro := src.ReadOnly != nil && *src.ReadOnly
	fsType := ""
	if src.FSType != nil {
		fsType = *src.FSType
	}
	path, err := cm.Publish(ctx, pod, w.podDir(), v.Name, csi.Volume{
		Driver: src.Driver, Handle: csi.EphemeralHandle(string(pod.UID), v.Name), ReadOnly: ro, FSType: fsType,
		Attributes: src.VolumeAttributes, Ephemeral: true,
	})
	if err != nil {
		return err
	}
	if w.claimMounts == nil {
		w.claimMounts = map[string]claimMount{}
	}
	w.claimMounts[v.Name] = claimMount{path: path, readOnly: ro}
	return nil
}

// teardownCSI has the pod's CSI volumes unpublished (and unstaged when
// no other pod uses them) before its dir goes.
func (m *podManager) teardownCSI(ctx context.Context, podDir string) error {
	if m.cfg.CSI == nil {
		return nil
	}
	return m.cfg.CSI.TeardownPod(ctx, podDir)
}

func (c *Client) patchClaimStatus(ctx context.Context, ns, name string, patch []byte) error {
	return c.core.Patch(types.MergePatchType).Namespace(ns).Resource("persistentvolumeclaims").Name(name).SubResource("status").Body(patch).Do(ctx).Error()
}
