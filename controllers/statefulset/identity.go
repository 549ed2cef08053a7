package statefulset

import (
	"regexp"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/controllers/history"
	"bonsai.dev/bonsai/controllers/kit"
)

// statefulPodRegex splits a pod name into its set's name and ordinal.
var statefulPodRegex = regexp.MustCompile("(.*)-([0-9]+)$")

// parentAndOrdinal is the set name and ordinal a pod's name encodes;
// ordinal -1 when it encodes none.
func parentAndOrdinal(pod *corev1.Pod) (string, int) {
	m := statefulPodRegex.FindStringSubmatch(pod.Name)
	if len(m) != 3 {
		return "", -1
	}
	i, err := strconv.ParseInt(m[2], 10, 32)
	if err != nil {
		return "", -1
	}
	return m[1], int(i)
}

func ordinalOf(pod *corev1.Pod) int {
	_, o := parentAndOrdinal(pod)
	return o
}

// isMemberOf says whether pod's name makes it one of set's.
func isMemberOf(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	p, o := parentAndOrdinal(pod)
	return o >= 0 && p == set.Name
}

func podName(set *appsv1.StatefulSet, ordinal int) string {
	return set.Name + "-" + strconv.Itoa(ordinal)
}

func startOrdinal(set *appsv1.StatefulSet) int {
	if set.Spec.Ordinals != nil {
		return int(set.Spec.Ordinals.Start)
	}
	return 0
}

func replicas(set *appsv1.StatefulSet) int {
	if set.Spec.Replicas != nil {
		return int(*set.Spec.Replicas)
	}
	return 1
}

// endOrdinal is the last ordinal the set wants (start-1 when it wants none).
func endOrdinal(set *appsv1.StatefulSet) int {
	return startOrdinal(set) + replicas(set) - 1
}

func inOrdinalRange(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	o := ordinalOf(pod)
	return o >= startOrdinal(set) && o <= endOrdinal(set)
}

// claimName is the PVC of template for the pod of ordinal:
// <template>-<set>-<ordinal>.
func claimName(set *appsv1.StatefulSet, template *corev1.PersistentVolumeClaim, ordinal int) string {
	return template.Name + "-" + set.Name + "-" + strconv.Itoa(ordinal)
}

// claimsFor is the PVCs the pod of ordinal uses, one per claim template,
// in template order, labelled with the set's selector labels.
func claimsFor(set *appsv1.StatefulSet, ordinal int) []corev1.PersistentVolumeClaim {
	out := make([]corev1.PersistentVolumeClaim, 0, len(set.Spec.VolumeClaimTemplates))
	for i := range set.Spec.VolumeClaimTemplates {
		c := set.Spec.VolumeClaimTemplates[i].DeepCopy()
		c.Name = claimName(set, &set.Spec.VolumeClaimTemplates[i], ordinal)
		c.Namespace = set.Namespace
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		if set.Spec.Selector != nil {
			for k, v := range set.Spec.Selector.MatchLabels {
				c.Labels[k] = v
			}
		}
		out = append(out, *c)
	}
	return out
}

// newPod is the pod of ordinal as set describes it: the template, its
// stable name, hostname and subdomain, identity labels and claim volumes.
func newPod(set *appsv1.StatefulSet, ordinal int) *corev1.Pod {
	t := set.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            podName(set, ordinal),
			Namespace:       set.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, controllerKind)},
		},
		Spec: t.Spec,
	}
	updateIdentity(set, pod)
	pod.Spec.Hostname = pod.Name
	pod.Spec.Subdomain = set.Spec.ServiceName
	updateStorage(set, pod)
	return pod
}

// newVersionedPod is the pod of ordinal at the revision it should have:
// below the partition the current revision, else the update revision.
func newVersionedPod(current, update *appsv1.StatefulSet, currentRev, updateRev string, ordinal int) *corev1.Pod {
	ru := current.Spec.UpdateStrategy.RollingUpdate
	if current.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && ru != nil && ru.Partition != nil &&
		ordinal < startOrdinal(current)+int(*ru.Partition) {
		pod := newPod(current, ordinal)
		pod.Labels[history.HashLabel] = currentRev
		return pod
	}
	pod := newPod(update, ordinal)
	pod.Labels[history.HashLabel] = updateRev
	return pod
}

// updateIdentity sets the labels that name the pod and its index.
func updateIdentity(set *appsv1.StatefulSet, pod *corev1.Pod) {
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[appsv1.StatefulSetPodNameLabel] = pod.Name
	pod.Labels[appsv1.PodIndexLabel] = strconv.Itoa(ordinalOf(pod))
}

func identityMatches(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	parent, ordinal := parentAndOrdinal(pod)
	return ordinal >= 0 && parent == set.Name && pod.Namespace == set.Namespace &&
		pod.Labels[appsv1.StatefulSetPodNameLabel] == pod.Name &&
		pod.Labels[appsv1.PodIndexLabel] == strconv.Itoa(ordinal)
}

// updateStorage points the pod's volumes of the claim templates' names
// at the pod's claims, keeping its other volumes.
func updateStorage(set *appsv1.StatefulSet, pod *corev1.Pod) {
	claims := claimsFor(set, ordinalOf(pod))
	vols := make([]corev1.Volume, 0, len(claims)+len(pod.Spec.Volumes))
	templated := map[string]bool{}
	for i, c := range claims {
		name := set.Spec.VolumeClaimTemplates[i].Name
		templated[name] = true
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name},
		}})
	}
	for _, v := range pod.Spec.Volumes {
		if !templated[v.Name] {
			vols = append(vols, v)
		}
	}
	pod.Spec.Volumes = vols
}

func storageMatches(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	ordinal := ordinalOf(pod)
	if ordinal < 0 {
		return false
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	for i := range set.Spec.VolumeClaimTemplates {
		t := &set.Spec.VolumeClaimTemplates[i]
		v, ok := vols[t.Name]
		if !ok || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != claimName(set, t, ordinal) {
			return false
		}
	}
	return true
}

func revisionOf(pod *corev1.Pod) string { return pod.Labels[history.HashLabel] }

// Pod states as upstream's stateful set utilities read them.

// isCreated: the API server has the pod (it sets a phase on create).
func isCreated(pod *corev1.Pod) bool   { return pod.Status.Phase != "" }
func isPending(pod *corev1.Pod) bool   { return pod.Status.Phase == corev1.PodPending }
func isFailed(pod *corev1.Pod) bool    { return pod.Status.Phase == corev1.PodFailed }
func isSucceeded(pod *corev1.Pod) bool { return pod.Status.Phase == corev1.PodSucceeded }
func isTerminating(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil
}

func isRunningAndReady(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && kit.IsPodReady(pod)
}

func isRunningAndAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	return pod.Status.Phase == corev1.PodRunning && kit.IsPodAvailable(pod, minReadySeconds, now)
}

// isHealthy: Running, Ready and not on its way out.
func isHealthy(pod *corev1.Pod) bool { return isRunningAndReady(pod) && !isTerminating(pod) }

// isUnavailable counts against maxUnavailable: not created, terminating,
// or not available yet.
func isUnavailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	return !isCreated(pod) || isTerminating(pod) || !isRunningAndAvailable(pod, minReadySeconds, now)
}
