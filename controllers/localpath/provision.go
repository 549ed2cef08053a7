package localpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

// The event reasons external provisioners use.
const (
	reasonProvisioning          = "Provisioning"
	reasonProvisioningSucceeded = "ProvisioningSucceeded"
	reasonProvisioningFailed    = "ProvisioningFailed"
	reasonVolumeFailedDelete    = "VolumeFailedDelete"
)

// syncClaim provisions a volume for a claim that asks this provisioner
// for one and has a node.
func (c *Controller) syncClaim(ctx context.Context, k string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(k)
	pvc, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Annotations[volumehelpers.AnnStorageProvisioner] != Provisioner {
		return nil
	}
	className := volumehelpers.GetPersistentVolumeClaimClass(pvc)
	class, err := c.classes.Get(className)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if class.Provisioner != Provisioner {
		return nil
	}
	pvName := "pvc-" + string(pvc.UID)
	if _, err := c.volumes.Get(pvName); err == nil {
		return nil // provisioned; the binder binds it
	}
	nodeName := pvc.Annotations[volumehelpers.AnnSelectedNode]
	if nodeName == "" {
		// A local volume lives on one node: without one chosen by the
		// scheduler (an Immediate class) there is nowhere to put it.
		c.recorder.Event(pvc, corev1.EventTypeWarning, reasonProvisioningFailed, "configuration error, no node was specified")
		return nil
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		c.recorder.Event(pvc, corev1.EventTypeWarning, reasonProvisioningFailed, "Block volume mode is not supported: a local-path volume is a directory")
		return nil
	}
	node, err := c.nodes.Get(nodeName)
	if err != nil {
		c.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonProvisioningFailed, "failed to get target node: %v", err)
		return err
	}
	c.recorder.Eventf(pvc, corev1.EventTypeNormal, reasonProvisioning, "External provisioner is provisioning volume for claim %q", k)
	dir := filepath.Join(c.root, fmt.Sprintf("%s_%s_%s", pvName, pvc.Namespace, pvc.Name))
	// 0777 as local-path-provisioner does: the pod's user is unknown here.
	if err := os.MkdirAll(dir, 0o777); err != nil {
		c.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonProvisioningFailed, "failed to provision volume with StorageClass %q: %v", className, err)
		return err
	}
	os.Chmod(dir, 0o777)
	pv := c.volumeFor(pvc, pvName, dir, node, class.ReclaimPolicy, class.MountOptions)
	_, err = c.cfg.Client.Core.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // made by an earlier sync the cache had not seen
	}
	if err != nil {
		c.recorder.Eventf(pvc, corev1.EventTypeWarning, reasonProvisioningFailed, "failed to provision volume with StorageClass %q: %v", className, err)
		return err
	}
	c.log.Info("provisioned volume", "claim", k, "volume", pvName, "node", nodeName, "path", dir)
	c.recorder.Eventf(pvc, corev1.EventTypeNormal, reasonProvisioningSucceeded, "Successfully provisioned volume %s", pvName)
	return nil
}

// volumeFor is the hostPath volume for pvc in dir on node, pre-bound to
// the claim.
func (c *Controller) volumeFor(pvc *corev1.PersistentVolumeClaim, name, dir string, node *corev1.Node, reclaim *corev1.PersistentVolumeReclaimPolicy, mountOptions []string) *corev1.PersistentVolume {
	hostname := node.Labels[corev1.LabelHostname]
	if hostname == "" {
		hostname = node.Name
	}
	policy := corev1.PersistentVolumeReclaimDelete
	if reclaim != nil {
		policy = *reclaim
	}
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{volumehelpers.AnnDynamicallyProvisioned: Provisioner},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    pvc.Spec.VolumeMode,
			StorageClassName:              volumehelpers.GetPersistentVolumeClaimClass(pvc),
			PersistentVolumeReclaimPolicy: policy,
			MountOptions:                  mountOptions,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirOrCreate}},
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion,
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname}}},
			}}}},
		},
	}
}

// syncVolume deletes a released volume of this provisioner whose policy
// is Delete: first its directory, then the object (which the
// pv-protection finalizer holds until it is no longer bound).
func (c *Controller) syncVolume(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Annotations[volumehelpers.AnnDynamicallyProvisioned] != Provisioner || pv.DeletionTimestamp != nil ||
		pv.Status.Phase != corev1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	if pv.Spec.HostPath != nil {
		dir := filepath.Clean(pv.Spec.HostPath.Path)
		// Only what this provisioner made: never a path a user edited
		// to point elsewhere.
		if filepath.Dir(dir) != c.root {
			c.recorder.Eventf(pv, corev1.EventTypeWarning, reasonVolumeFailedDelete, "refusing to delete %s: not under %s", dir, c.root)
			return nil
		}
		if err := os.RemoveAll(dir); err != nil {
			c.recorder.Eventf(pv, corev1.EventTypeWarning, reasonVolumeFailedDelete, "failed to delete volume directory %s: %v", dir, err)
			return err
		}
	}
	err = c.cfg.Client.Core.PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c.log.Info("deleted volume", "volume", pv.Name)
	return nil
}
