package deployment

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func intOrPercent(v *intstr.IntOrString, total int32, roundUp bool) (int32, error) {
	n, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(v, intstr.FromInt32(0)), int(total), roundUp)
	return int32(n), err
}

// rolloutRolling scales the new ReplicaSet up within maxSurge, else the
// old ones down within maxUnavailable, one step per sync; each step's
// ReplicaSet events bring the next sync.
func (c *Controller) rolloutRolling(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rsList, true)
	if err != nil {
		return err
	}
	all := append(append([]*appsv1.ReplicaSet(nil), old...), newRS)
	scaledUp, err := c.reconcileNewReplicaSet(ctx, all, newRS, d)
	if err != nil {
		return err
	}
	if scaledUp {
		return c.syncRolloutStatus(ctx, all, newRS, d)
	}
	scaledDown, err := c.reconcileOldReplicaSets(ctx, all, activeReplicaSets(old), newRS, d)
	if err != nil {
		return err
	}
	if scaledDown {
		return c.syncRolloutStatus(ctx, all, newRS, d)
	}
	if deploymentComplete(d, &d.Status) {
		if err := c.cleanupOldReplicaSets(ctx, old, d); err != nil {
			return err
		}
	}
	return c.syncRolloutStatus(ctx, all, newRS, d)
}

func (c *Controller) reconcileNewReplicaSet(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	switch {
	case replicas(newRS) == *d.Spec.Replicas:
		return false, nil
	case replicas(newRS) > *d.Spec.Replicas:
		scaled, _, err := c.scaleReplicaSet(ctx, newRS, *d.Spec.Replicas, d)
		return scaled, err
	}
	n, err := newRSReplicas(d, all, newRS)
	if err != nil {
		return false, err
	}
	scaled, _, err := c.scaleReplicaSet(ctx, newRS, n, d)
	return scaled, err
}

// reconcileOldReplicaSets scales old ReplicaSets down as far as
// maxUnavailable allows, their unhealthy replicas first (they would
// otherwise block the rollout).
func (c *Controller) reconcileOldReplicaSets(ctx context.Context, all, old []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	if sum(old, specReplicas) == 0 {
		return false, nil
	}
	minAvailable := *d.Spec.Replicas - maxUnavailable(d)
	newUnavailable := replicas(newRS) - newRS.Status.AvailableReplicas
	maxScaledDown := sum(all, specReplicas) - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return false, nil
	}
	old, cleaned, err := c.cleanupUnhealthyReplicas(ctx, old, d, maxScaledDown)
	if err != nil {
		return false, err
	}
	all = append(append([]*appsv1.ReplicaSet(nil), old...), newRS)
	scaledDown, err := c.scaleDownOldForRollingUpdate(ctx, all, old, d)
	if err != nil {
		return false, err
	}
	return cleaned+scaledDown > 0, nil
}

func (c *Controller) cleanupUnhealthyReplicas(ctx context.Context, old []*appsv1.ReplicaSet, d *appsv1.Deployment, maxCleanup int32) ([]*appsv1.ReplicaSet, int32, error) {
	sortOlderFirst(old)
	var total int32
	for i, rs := range old {
		if total >= maxCleanup {
			break
		}
		if replicas(rs) == 0 || replicas(rs) <= rs.Status.AvailableReplicas {
			continue
		}
		n := min(maxCleanup-total, replicas(rs)-rs.Status.AvailableReplicas)
		_, updated, err := c.scaleReplicaSet(ctx, rs, replicas(rs)-n, d)
		if err != nil {
			return nil, total, err
		}
		total += n
		old[i] = updated
	}
	return old, total, nil
}

// scaleDownOldForRollingUpdate scales old ReplicaSets down, oldest first,
// by what is available beyond replicas-maxUnavailable. A ReplicaSet
// counts at most spec.replicas available: one just scaled down may not
// have reported its pods' deletion yet, and must not be counted twice.
func (c *Controller) scaleDownOldForRollingUpdate(ctx context.Context, all, old []*appsv1.ReplicaSet, d *appsv1.Deployment) (int32, error) {
	minAvailable := *d.Spec.Replicas - maxUnavailable(d)
	available := sum(all, func(rs *appsv1.ReplicaSet) int32 { return min(rs.Status.AvailableReplicas, replicas(rs)) })
	if available <= minAvailable {
		return 0, nil
	}
	sortOlderFirst(old)
	want := available - minAvailable
	var total int32
	for _, rs := range old {
		if total >= want {
			break
		}
		if replicas(rs) == 0 {
			continue
		}
		n := min(replicas(rs), want-total)
		if _, _, err := c.scaleReplicaSet(ctx, rs, replicas(rs)-n, d); err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// rolloutRecreate scales every old ReplicaSet to 0, waits for their pods
// to be gone, then creates (or scales up) the new one.
func (c *Controller) rolloutRecreate(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	// No new ReplicaSet yet: creating it would scale up before down.
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	all := append(append([]*appsv1.ReplicaSet(nil), old...), newRS)
	scaledDown := false
	for _, rs := range activeReplicaSets(old) {
		scaled, _, err := c.scaleReplicaSet(ctx, rs, 0, d)
		if err != nil {
			return err
		}
		scaledDown = scaledDown || scaled
	}
	if scaledDown {
		return c.syncRolloutStatus(ctx, all, newRS, d)
	}
	podMap, err := c.podsByReplicaSet(d, rsList)
	if err != nil {
		return err
	}
	if oldPodsRunning(newRS, old, podMap) {
		return c.syncRolloutStatus(ctx, all, newRS, d)
	}
	if newRS == nil {
		if newRS, old, err = c.replicaSetsAndSyncRevision(ctx, d, rsList, true); err != nil {
			return err
		}
		all = append(append([]*appsv1.ReplicaSet(nil), old...), newRS)
	}
	if _, _, err := c.scaleReplicaSet(ctx, newRS, *d.Spec.Replicas, d); err != nil {
		return err
	}
	if deploymentComplete(d, &d.Status) {
		if err := c.cleanupOldReplicaSets(ctx, old, d); err != nil {
			return err
		}
	}
	return c.syncRolloutStatus(ctx, all, newRS, d)
}

// oldPodsRunning: an old ReplicaSet still reports pods, or one of its
// pods is not terminated (a terminating one included).
func oldPodsRunning(newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet, podMap map[types.UID][]*corev1.Pod) bool {
	if sum(old, statusReplicas) > 0 {
		return true
	}
	for uid, pods := range podMap {
		if newRS != nil && newRS.UID == uid {
			continue
		}
		for _, p := range pods {
			if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				return true
			}
		}
	}
	return false
}

// scaleReplicaSet sets rs's replicas to n and its replicas annotations to
// d's; scaled is true when the size changed. It returns rs as written.
func (c *Controller) scaleReplicaSet(ctx context.Context, rs *appsv1.ReplicaSet, n int32, d *appsv1.Deployment) (bool, *appsv1.ReplicaSet, error) {
	maxReplicas := *d.Spec.Replicas + maxSurge(d)
	sizeChanged := replicas(rs) != n
	if !sizeChanged && !replicasAnnotationsNeedUpdate(rs, *d.Spec.Replicas, maxReplicas) {
		return false, rs, nil
	}
	from := replicas(rs)
	cp := rs.DeepCopy()
	cp.Spec.Replicas = &n
	setReplicasAnnotations(cp, *d.Spec.Replicas, maxReplicas)
	out, err := c.client.Apps.ReplicaSets(cp.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
	if err != nil {
		return false, rs, fmt.Errorf("scaling ReplicaSet %s to %d: %w", keyOf(rs), n, err)
	}
	if sizeChanged {
		op := "up"
		if n < from {
			op = "down"
		}
		c.recorder.Eventf(d, corev1.EventTypeNormal, reasonScalingReplicaSet, "Scaled %s replica set %s from %d to %d", op, rs.Name, from, n)
	}
	return sizeChanged, out, nil
}
