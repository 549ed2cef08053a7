package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/ephemeral"
	volumehelpers "k8s.io/component-helpers/storage/volume"

	"bonsai.dev/bonsai/client"
)

var everything = labels.Everything()

// VolumeBindingName is kube-scheduler's plugin for pods with
// PersistentVolumeClaims.
const VolumeBindingName = "VolumeBinding"

// Its reasons, word for word.
const (
	errUnboundImmediate = "pod has unbound immediate PersistentVolumeClaims"
	errVolumeConflict   = "node(s) had volume node affinity conflict"
	errBindConflict     = "node(s) didn't find available persistent volumes to bind"
	errPVNotExist       = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
	errNoCapacity       = "node(s) did not have enough free storage"
)

// volumeBindingPlugin places pods whose claims tie them to nodes: a
// bound claim's volume must be reachable from the node (its node
// affinity), and a WaitForFirstConsumer claim needs either a free volume
// that fits on the node or a class that can provision one there. Once a
// node is chosen, prebind binds the chosen free volumes to their claims
// and marks the claims to provision with volume.kubernetes.io/selected-
// node, then waits until the persistentvolume-binder (and the
// provisioner) have bound them, before the pod is bound.
type volumeBindingPlugin struct {
	claims     corelisters.PersistentVolumeClaimLister
	volumes    corelisters.PersistentVolumeLister
	classes    storagelisters.StorageClassLister
	drivers    storagelisters.CSIDriverLister
	capacities storagelisters.CSIStorageCapacityLister
	csiNodes   storagelisters.CSINodeLister
}

// volumeState is what PreFilter found of the pod's claims, and what
// Filter found each node would need.
type volumeState struct {
	bound     []*corev1.PersistentVolume
	pvMissing bool
	unbound   []*corev1.PersistentVolumeClaim
	// free are the volumes an unbound claim could take.
	free []*corev1.PersistentVolume
	// decisions are per node, one per unbound claim: the volume to bind
	// it to, or nil to provision one.
	decisions map[string][]*corev1.PersistentVolume
}

func (volumeBindingPlugin) Name() string { return VolumeBindingName }

func (p volumeBindingPlugin) PreFilter(state *CycleState, pod *corev1.Pod, _ []*NodeInfo) *Status {
	var vs *volumeState
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		var name string
		switch {
		case v.PersistentVolumeClaim != nil:
			name = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			name = ephemeral.VolumeClaimName(pod, v)
		default:
			continue
		}
		if vs == nil {
			vs = &volumeState{}
		}
		pvc, err := p.claims.PersistentVolumeClaims(pod.Namespace).Get(name)
		if err != nil {
			if v.Ephemeral != nil {
				return unresolvable(fmt.Sprintf("waiting for ephemeral volume controller to create the persistentvolumeclaim %q", name))
			}
			return unresolvable(fmt.Sprintf("persistentvolumeclaim %q not found", name))
		}
		if pvc.DeletionTimestamp != nil {
			return unresolvable(fmt.Sprintf("persistentvolumeclaim %q is being deleted", name))
		}
		if v.Ephemeral != nil {
			if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
				return unresolvable(err.Error())
			}
		}
		if pvc.Spec.VolumeName != "" {
			pv, err := p.volumes.Get(pvc.Spec.VolumeName)
			if err != nil {
				vs.pvMissing = true
				continue
			}
			vs.bound = append(vs.bound, pv)
			continue
		}
		if !p.delayBinding(pvc) {
			return unresolvable(errUnboundImmediate)
		}
		vs.unbound = append(vs.unbound, pvc)
	}
	if vs == nil {
		return nil
	}
	if len(vs.unbound) > 0 {
		vs.free, _ = p.volumes.List(everything)
		vs.decisions = map[string][]*corev1.PersistentVolume{}
	}
	state.volumes = vs
	return nil
}

func (p volumeBindingPlugin) delayBinding(pvc *corev1.PersistentVolumeClaim) bool {
	name := volumehelpers.GetPersistentVolumeClaimClass(pvc)
	if name == "" {
		return false
	}
	class, err := p.classes.Get(name)
	return err == nil && class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}

// SkipFilter: a pod without claims fits every node.
func (volumeBindingPlugin) SkipFilter(state *CycleState, _ *corev1.Pod) bool {
	return state.volumes == nil
}

func (p volumeBindingPlugin) Filter(state *CycleState, _ *corev1.Pod, ni *NodeInfo) *Status {
	vs := state.volumes
	if vs == nil {
		return nil
	}
	if vs.pvMissing {
		return unresolvable(errPVNotExist)
	}
	node := ni.Node
	for _, pv := range vs.bound {
		if volumehelpers.CheckNodeAffinity(pv, node.Labels) != nil {
			return unresolvable(errVolumeConflict)
		}
	}
	if len(vs.unbound) == 0 {
		return nil
	}
	taken := map[string]*corev1.PersistentVolume{}
	decisions := make([]*corev1.PersistentVolume, len(vs.unbound))
	for i, pvc := range vs.unbound {
		pv, _ := volumehelpers.FindMatchingVolume(pvc, vs.free, node, taken, false, true)
		if pv != nil {
			taken[pv.Name] = pv
			decisions[i] = pv
			continue
		}
		if !p.canProvision(pvc, node) {
			return unresolvable(errBindConflict)
		}
		if !p.hasCapacity(pvc, node) {
			return unschedulable(errNoCapacity)
		}
	}
	vs.decisions[node.Name] = decisions
	return nil
}

// canProvision: the claim's class has a provisioner, and the claim was
// not promised to another node already.
func (p volumeBindingPlugin) canProvision(pvc *corev1.PersistentVolumeClaim, node *corev1.Node) bool {
	if sel, ok := pvc.Annotations[volumehelpers.AnnSelectedNode]; ok && sel != node.Name {
		return false
	}
	class, err := p.classes.Get(volumehelpers.GetPersistentVolumeClaimClass(pvc))
	if err != nil || class.Provisioner == volumehelpers.NotSupportedProvisioner {
		return false
	}
	// The class's allowedTopologies bound where it provisions.
	if len(class.AllowedTopologies) > 0 {
		ok := false
		for _, term := range class.AllowedTopologies {
			if topologyTermMatches(term, node.Labels) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func topologyTermMatches(term corev1.TopologySelectorTerm, nodeLabels map[string]string) bool {
	for _, e := range term.MatchLabelExpressions {
		v, ok := nodeLabels[e.Key]
		if !ok || !slices.Contains(e.Values, v) {
			return false
		}
	}
	return true
}

// hasCapacity: a CSI driver that tracks storage capacity
// (CSIDriver spec.storageCapacity) published a CSIStorageCapacity for
// the claim's class whose topology takes the node and whose capacity
// (maximumVolumeSize when set) holds the claim's request, as
// kube-scheduler's VolumeBinding checks before provisioning there.
// Drivers that do not track capacity fit everywhere.
func (p volumeBindingPlugin) hasCapacity(pvc *corev1.PersistentVolumeClaim, node *corev1.Node) bool {
	if p.drivers == nil || p.capacities == nil {
		return true
	}
	className := volumehelpers.GetPersistentVolumeClaimClass(pvc)
	class, err := p.classes.Get(className)
	if err != nil {
		return true
	}
	drv, err := p.drivers.Get(class.Provisioner)
	if err != nil || drv.Spec.StorageCapacity == nil || !*drv.Spec.StorageCapacity {
		return true
	}
	req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	caps, _ := p.capacities.List(everything)
	for _, c := range caps {
		if c.StorageClassName != className {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.NodeTopology)
		if c.NodeTopology == nil || err != nil || !sel.Matches(labels.Set(node.Labels)) {
			continue
		}
		have := c.Capacity
		if c.MaximumVolumeSize != nil {
			have = c.MaximumVolumeSize
		}
		if have != nil && have.Cmp(req) >= 0 {
			return true
		}
	}
	return false
}

// volumeBindings is what prebind must write for the pod on node: nil
// when the pod's claims are all bound.
type volumeBindings struct {
	claims  []*corev1.PersistentVolumeClaim
	volumes []*corev1.PersistentVolume
	node    string
	lister  corelisters.PersistentVolumeClaimLister
}

func (p volumeBindingPlugin) bindingsFor(state *CycleState, node string) *volumeBindings {
	vs := state.volumes
	if vs == nil || len(vs.unbound) == 0 {
		return nil
	}
	return &volumeBindings{claims: vs.unbound, volumes: vs.decisions[node], node: node, lister: p.claims}
}

// bindTimeout is how long prebind waits for the claims to be bound, as
// kube-scheduler's VolumeBinding bindTimeoutSeconds.
const bindTimeout = 10 * time.Minute

// waitBound waits until the persistentvolume-binder (and, for a claim
// to provision, the provisioner) bound every claim, so the pod reaches
// its node with volumes it can mount, as kube-scheduler's PreBind does.
func (b *volumeBindings) waitBound(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, bindTimeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		pending := ""
		for _, c := range b.claims {
			pvc, err := b.lister.PersistentVolumeClaims(c.Namespace).Get(c.Name)
			if err != nil {
				return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
			}
			if pvc.UID != c.UID {
				return fmt.Errorf("claim %s/%s was replaced", c.Namespace, c.Name)
			}
			if pvc.Spec.VolumeName == "" || pvc.Annotations[volumehelpers.AnnBindCompleted] == "" {
				pending = c.Namespace + "/" + c.Name
				break
			}
		}
		if pending == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("binding volumes: claim %s is not bound: %w", pending, ctx.Err())
		case <-t.C:
		}
	}
}

// prebind binds each chosen volume to its claim (claimRef and the
// bound-by-controller annotation, as the persistentvolume-binder would)
// and marks each claim to provision with the node; a write that loses a
// race fails the cycle, and the pod is tried again.
func (b *volumeBindings) prebind(ctx context.Context, core rest.Interface) error {
	for i, pvc := range b.claims {
		if pv := b.volumes[i]; pv != nil {
			bound, dirty, err := volumehelpers.GetBindVolumeToClaim(pv, pvc)
			if err != nil {
				return err
			}
			if dirty {
				if err := core.Put().Resource("persistentvolumes").Name(pv.Name).Body(bound).Do(ctx).Error(); err != nil {
					return fmt.Errorf("binding volume %q to claim %s/%s: %w", pv.Name, pvc.Namespace, pvc.Name, err)
				}
			}
			continue
		}
		if pvc.Annotations[volumehelpers.AnnSelectedNode] == b.node {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pvc.ResourceVersion,
			"annotations":     map[string]string{volumehelpers.AnnSelectedNode: b.node},
		}})
		err := core.Patch(types.MergePatchType).Namespace(pvc.Namespace).Resource("persistentvolumeclaims").Name(pvc.Name).Body(patch).Do(ctx).Error()
		if err != nil {
			return fmt.Errorf("selecting node %q for claim %s/%s: %w", b.node, pvc.Namespace, pvc.Name, err)
		}
	}
	return nil
}

// watchStorage starts the informers VolumeBinding reads from; a change
// to any claim, volume or class may make a waiting pod fit.
func (s *Scheduler) watchStorage() error {
	storageClient, err := client.REST(s.cfg.RESTConfig, "/apis", storagev1.SchemeGroupVersion)
	if err != nil {
		return err
	}
	wake := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.queue.moveAll() },
		UpdateFunc: func(any, any) { s.queue.moveAll() },
	}
	for _, w := range []struct {
		rc       rest.Interface
		resource string
		obj      runtime.Object
	}{
		{s.core, "persistentvolumeclaims", &corev1.PersistentVolumeClaim{}},
		{s.core, "persistentvolumes", &corev1.PersistentVolume{}},
		{storageClient, "storageclasses", &storagev1.StorageClass{}},
		{storageClient, "csidrivers", &storagev1.CSIDriver{}},
		{storageClient, "csistoragecapacities", &storagev1.CSIStorageCapacity{}},
		{storageClient, "csinodes", &storagev1.CSINode{}},
	} {
		inf := s.informer(w.rc, w.resource, w.obj)
		reg, err := inf.AddEventHandler(wake)
		if err != nil {
			return err
		}
		s.synced = append(s.synced, reg.HasSynced)
		s.storage = append(s.storage, inf)
	}
	s.volumes = volumeBindingPlugin{
		claims:     corelisters.NewPersistentVolumeClaimLister(s.storage[0].GetIndexer()),
		volumes:    corelisters.NewPersistentVolumeLister(s.storage[1].GetIndexer()),
		classes:    storagelisters.NewStorageClassLister(s.storage[2].GetIndexer()),
		drivers:    storagelisters.NewCSIDriverLister(s.storage[3].GetIndexer()),
		capacities: storagelisters.NewCSIStorageCapacityLister(s.storage[4].GetIndexer()),
		csiNodes:   storagelisters.NewCSINodeLister(s.storage[5].GetIndexer()),
	}
	return nil
}
