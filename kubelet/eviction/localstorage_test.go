package eviction

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestLocalStorageViolation(t *testing.T) {
	u := func(n uint64) *uint64 { return &n }
	fs := func(n uint64) *statsapi.FsStats { return &statsapi.FsStats{UsedBytes: u(n)} }
	q := resource.MustParse
	limits := func(s string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: q(s)}}
	}
	sizeLimit := q("1Mi")
	scratch := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &sizeLimit}}}
	for _, tc := range []struct {
		name      string
		spec      corev1.PodSpec
		stats     statsapi.PodStats
		dedicated bool
		signal    string
		msg       string
	}{
		{name: "no limits", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
			stats: statsapi.PodStats{EphemeralStorage: fs(1 << 40), Containers: []statsapi.ContainerStats{{Name: "c", Rootfs: fs(1 << 40)}}}},
		{name: "emptyDir at its limit stays", spec: corev1.PodSpec{Volumes: []corev1.Volume{scratch}, Containers: []corev1.Container{{Name: "c"}}},
			stats: statsapi.PodStats{VolumeStats: []statsapi.VolumeStats{{Name: "scratch", FsStats: *fs(1 << 20)}}}},
		{name: "emptyDir over", spec: corev1.PodSpec{Volumes: []corev1.Volume{scratch}, Containers: []corev1.Container{{Name: "c"}}},
			stats:  statsapi.PodStats{VolumeStats: []statsapi.VolumeStats{{Name: "scratch", FsStats: *fs(1<<20 + 1)}}},
			signal: SignalEmptyDirFsLimit, msg: `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `},
		{name: "emptyDir not measured yet", spec: corev1.PodSpec{Volumes: []corev1.Volume{scratch}, Containers: []corev1.Container{{Name: "c"}}}},
		{name: "pod over the sum of its containers' limits", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: limits("1Mi")}, {Name: "b", Resources: limits("1Mi")}}},
			stats:  statsapi.PodStats{EphemeralStorage: fs(2<<20 + 1), Containers: []statsapi.ContainerStats{{Name: "a", Rootfs: fs(1 << 20)}, {Name: "b", Rootfs: fs(1 << 20)}}},
			signal: SignalEphemeralPodFsLimit, msg: "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. "},
		{name: "container over its own, the pod within an init container's", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "i", Resources: limits("10Mi")}}, Containers: []corev1.Container{{Name: "a", Resources: limits("1Mi")}}},
			stats:  statsapi.PodStats{EphemeralStorage: fs(3 << 20), Containers: []statsapi.ContainerStats{{Name: "a", Rootfs: fs(2 << 20), Logs: fs(1 << 20)}}},
			signal: SignalEphemeralContainerFsLimit, msg: `Container a exceeded its local ephemeral storage limit "1Mi". `},
		{name: "a dedicated image fs leaves the layer out", dedicated: true, spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "i", Resources: limits("10Mi")}}, Containers: []corev1.Container{{Name: "a", Resources: limits("1Mi")}}},
			stats: statsapi.PodStats{EphemeralStorage: fs(3 << 20), Containers: []statsapi.ContainerStats{{Name: "a", Rootfs: fs(2 << 20), Logs: fs(1000)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			signal, msg, ok := LocalStorageViolation(&corev1.Pod{Spec: tc.spec}, tc.stats, tc.dedicated)
			if ok != (tc.signal != "") || signal != tc.signal || msg != tc.msg {
				t.Errorf("= %q %q %v, want %q %q", signal, msg, ok, tc.signal, tc.msg)
			}
		})
	}
}
