package eviction

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's local storage isolation: a pod that writes past its own
// limits is evicted at once whatever the node's pressure, under these
// signals in the kubelet_evictions metric.
const (
	SignalEmptyDirFsLimit           = "emptydirfs.limit"
	SignalEphemeralPodFsLimit       = "ephemeralpodfs.limit"
	SignalEphemeralContainerFsLimit = "ephemeralcontainerfs.limit"
)

// LocalStorageViolation is why pod must go for its own local storage
// use, in the kubelet's order and words: an emptyDir past its sizeLimit,
// the pod's ephemeral storage past the sum of its containers' limits, or
// a container's logs and writable layer (the layer only without a
// dedicated image file system) past its own limit. ok is false when the
// pod keeps within them or has no figures yet.
func LocalStorageViolation(pod *corev1.Pod, st statsapi.PodStats, dedicatedImageFs bool) (signal, msg string, ok bool) {
	used := map[string]uint64{}
	for _, v := range st.VolumeStats {
		if v.UsedBytes != nil {
			used[v.Name] = *v.UsedBytes
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Sign() <= 0 {
			continue
		}
		if u, found := used[v.Name]; found && overLimit(u, *v.EmptyDir.SizeLimit) {
			return SignalEmptyDirFsLimit, fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", v.Name, v.EmptyDir.SizeLimit.String()), true
		}
	}
	if limit, found := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceEphemeralStorage]; found {
		var u uint64
		if e := st.EphemeralStorage; e != nil && e.UsedBytes != nil {
			u = *e.UsedBytes
		}
		if overLimit(u, limit) {
			return SignalEphemeralPodFsLimit, fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String()), true
		}
	}
	limits := map[string]resource.Quantity{}
	for _, c := range pod.Spec.Containers {
		if l, found := c.Resources.Limits[corev1.ResourceEphemeralStorage]; found && l.Value() != 0 {
			limits[c.Name] = l
		}
	}
	for _, c := range st.Containers {
		limit, found := limits[c.Name]
		if !found {
			continue
		}
		u := fsUsed(c.Logs)
		if !dedicatedImageFs {
			u += fsUsed(c.Rootfs)
		}
		if overLimit(u, limit) {
			return SignalEphemeralContainerFsLimit, fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", c.Name, limit.String()), true
		}
	}
	return "", "", false
}

func fsUsed(f *statsapi.FsStats) uint64 {
	if f == nil || f.UsedBytes == nil {
		return 0
	}
	return *f.UsedBytes
}

func overLimit(used uint64, limit resource.Quantity) bool {
	return resource.NewQuantity(int64(used), resource.BinarySI).Cmp(limit) > 0
}
