package scheduler

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/storage/ephemeral"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

// NodeVolumeLimitsName is kube-scheduler's plugin that keeps a node's
// CSI volumes within what each driver's node plugin takes (its
// CSINode's allocatable count, from NodeGetInfo's max_volumes_per_node).
const NodeVolumeLimitsName = "NodeVolumeLimits"

// errMaxVolumeCount is its reason, word for word.
const errMaxVolumeCount = "node(s) exceed max volume count"

// volumeLimitsPlugin counts, per driver, the distinct CSI volumes the
// node's pods use and the pod would add: bound claims by volume handle,
// claims still to provision by claim (their class's provisioner is the
// driver), inline volumes by pod and volume. A node without a CSINode,
// or a driver without a count, has no limit.
type volumeLimitsPlugin struct{ vb *volumeBindingPlugin }

func (volumeLimitsPlugin) Name() string { return NodeVolumeLimitsName }

func (p volumeLimitsPlugin) Filter(_ *CycleState, pod *corev1.Pod, ni *NodeInfo) *Status {
	if p.vb.csiNodes == nil {
		return nil
	}
	add := p.csiVolumes(pod)
	if len(add) == 0 {
		return nil
	}
	cn, err := p.vb.csiNodes.Get(ni.Node.Name)
	if err != nil {
		return nil
	}
	var used map[string]map[string]bool // by driver, built once needed
	for _, d := range cn.Spec.Drivers {
		vols := add[d.Name]
		if len(vols) == 0 || d.Allocatable == nil || d.Allocatable.Count == nil {
			continue
		}
		if used == nil {
			used = map[string]map[string]bool{}
			for _, cp := range ni.pods {
				if cp.pod.UID == pod.UID {
					continue
				}
				for drv, vs := range p.csiVolumes(cp.pod) {
					if used[drv] == nil {
						used[drv] = map[string]bool{}
					}
					for v := range vs {
						used[drv][v] = true
					}
				}
			}
		}
		n := len(used[d.Name])
		for v := range vols {
			if !used[d.Name][v] {
				n++
			}
		}
		if n > int(*d.Allocatable.Count) {
			return unschedulable(errMaxVolumeCount)
		}
	}
	return nil
}

// csiVolumes are the CSI volumes a pod uses, by driver.
func (p volumeLimitsPlugin) csiVolumes(pod *corev1.Pod) map[string]map[string]bool {
	var out map[string]map[string]bool
	put := func(driver, key string) {
		if out == nil {
			out = map[string]map[string]bool{}
		}
		if out[driver] == nil {
			out[driver] = map[string]bool{}
		}
		out[driver][key] = true
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		var claim string
		switch {
		case v.CSI != nil:
			put(v.CSI.Driver, "inline/"+string(pod.UID)+"/"+v.Name)
			continue
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = ephemeral.VolumeClaimName(pod, v)
		default:
			continue
		}
		pvc, err := p.vb.claims.PersistentVolumeClaims(pod.Namespace).Get(claim)
		if err != nil {
			continue
		}
		if pvc.Spec.VolumeName != "" {
			if pv, err := p.vb.volumes.Get(pvc.Spec.VolumeName); err == nil && pv.Spec.CSI != nil {
				put(pv.Spec.CSI.Driver, "handle/"+pv.Spec.CSI.VolumeHandle)
			}
			continue
		}
		if class, err := p.vb.classes.Get(volumehelpers.GetPersistentVolumeClaimClass(pvc)); err == nil {
			put(class.Provisioner, "claim/"+pod.Namespace+"/"+claim)
		}
	}
	return out
}
