package deployment

import (
	"context"
	"math"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// syncScaleOnly handles a paused Deployment or a resize: ReplicaSets are
// scaled (proportionally mid-rollout) but no rollout step is taken.
func (c *Controller) syncScaleOnly(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	if err := c.scale(ctx, d, newRS, old); err != nil {
		return err
	}
	if d.Spec.Paused {
		if err := c.cleanupOldReplicaSets(ctx, old, d); err != nil {
			return err
		}
	}
	return c.syncDeploymentStatus(ctx, append(append([]*appsv1.ReplicaSet(nil), old...), newRS), newRS, d)
}

// isScalingEvent: some active ReplicaSet was sized for another
// spec.replicas than d's (its desired-replicas annotation).
func (c *Controller) isScalingEvent(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) (bool, error) {
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rsList, false)
	if err != nil {
		return false, err
	}
	for _, rs := range activeReplicaSets(append(old, newRS)) {
		desired, err := strconv.ParseInt(rs.Annotations[DesiredReplicasAnnotation], 10, 32)
		if err != nil {
			continue
		}
		if int32(desired) != *d.Spec.Replicas {
			return true, nil
		}
	}
	return false, nil
}

// scale brings the ReplicaSets' total to d's size: the one active
// ReplicaSet (or the newest) takes it all; mid-rollout, the difference is
// shared among the active ones in proportion to their sizes.
func (c *Controller) scale(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	if rs := activeOrLatest(newRS, old); rs != nil {
		if replicas(rs) == *d.Spec.Replicas {
			return nil
		}
		_, _, err := c.scaleReplicaSet(ctx, rs, *d.Spec.Replicas, d)
		return err
	}
	// A saturated new ReplicaSet (one adopted, say) leaves the old ones
	// nothing.
	if isSaturated(d, newRS) {
		for _, rs := range activeReplicaSets(old) {
			if _, _, err := c.scaleReplicaSet(ctx, rs, 0, d); err != nil {
				return err
			}
		}
		return nil
	}
	if !isRollingUpdate(d) {
		return nil
	}
	active := activeReplicaSets(append(append([]*appsv1.ReplicaSet(nil), old...), newRS))
	var allowed int32
	if *d.Spec.Replicas > 0 {
		allowed = *d.Spec.Replicas + maxSurge(d)
	}
	toAdd := allowed - sum(active, specReplicas)
	// Larger first; among equals, newer first when growing and older
	// first when shrinking.
	sortBySize(active, toAdd > 0)
	sizes := make([]int32, len(active))
	var added int32
	for i, rs := range active {
		sizes[i] = replicas(rs)
		if toAdd != 0 {
			p := proportion(rs, d, toAdd, added)
			sizes[i] += p
			added += p
		}
	}
	for i, rs := range active {
		// What rounding left goes to the largest.
		if i == 0 && toAdd != 0 {
			sizes[i] = max(sizes[i]+toAdd-added, 0)
		}
		if _, _, err := c.scaleReplicaSet(ctx, rs, sizes[i], d); err != nil {
			return err
		}
	}
	return nil
}

// activeOrLatest is the ReplicaSet to give all the replicas when at most
// one is active: that one, else the new one, else the newest old one; nil
// when several are active.
func activeOrLatest(newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if newRS == nil && len(old) == 0 {
		return nil
	}
	sorted := append([]*appsv1.ReplicaSet(nil), old...)
	sortOlderFirst(sorted)
	active := activeReplicaSets(append(sorted, newRS))
	switch len(active) {
	case 0:
		if newRS != nil {
			return newRS
		}
		return sorted[len(sorted)-1]
	case 1:
		return active[0]
	}
	return nil
}

func isSaturated(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	if rs == nil {
		return false
	}
	desired, err := strconv.ParseInt(rs.Annotations[DesiredReplicasAnnotation], 10, 32)
	if err != nil {
		return false
	}
	return replicas(rs) == *d.Spec.Replicas && int32(desired) == *d.Spec.Replicas && rs.Status.AvailableReplicas == *d.Spec.Replicas
}

// proportion is rs's share of toAdd (negative when shrinking), given
// that added was handed out already: its size scaled by the ratio of the
// Deployment's new maximum to the maximum it was sized for.
func proportion(rs *appsv1.ReplicaSet, d *appsv1.Deployment, toAdd, added int32) int32 {
	if replicas(rs) == 0 || toAdd == 0 || toAdd == added {
		return 0
	}
	fraction := fraction(rs, d)
	allowed := toAdd - added
	if toAdd > 0 {
		return min(fraction, allowed)
	}
	return max(fraction, allowed)
}

func fraction(rs *appsv1.ReplicaSet, d *appsv1.Deployment) int32 {
	if *d.Spec.Replicas == 0 {
		return -replicas(rs)
	}
	maxNow := *d.Spec.Replicas + maxSurge(d)
	before, err := strconv.ParseInt(rs.Annotations[MaxReplicasAnnotation], 10, 32)
	if err != nil || before == 0 {
		// No record of the size it was made for: take the
		// Deployment's current size.
		before = int64(d.Status.Replicas)
		if before == 0 {
			return 0
		}
	}
	size := float64(replicas(rs)) * float64(maxNow) / float64(before)
	return int32(math.Round(size)) - replicas(rs)
}

// cleanupOldReplicaSets deletes the oldest revisions beyond
// revisionHistoryLimit, those scaled to 0 and settled only.
func (c *Controller) cleanupOldReplicaSets(ctx context.Context, old []*appsv1.ReplicaSet, d *appsv1.Deployment) error {
	if !hasRevisionHistoryLimit(d) {
		return nil
	}
	var alive []*appsv1.ReplicaSet
	for _, rs := range old {
		if rs != nil && rs.DeletionTimestamp == nil {
			alive = append(alive, rs)
		}
	}
	diff := len(alive) - int(*d.Spec.RevisionHistoryLimit)
	if diff <= 0 {
		return nil
	}
	sortByRevision(alive)
	for _, rs := range alive[:diff] {
		if rs.Status.Replicas != 0 || replicas(rs) != 0 || rs.Generation > rs.Status.ObservedGeneration {
			continue
		}
		c.log.Debug("deleting old ReplicaSet", "deployment", keyOf(d), "replicaset", rs.Name)
		if err := c.client.Apps.ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// checkPausedConditions records a pause or resume in the Progressing
// condition (Unknown), unless a deadline was reported exceeded.
func (c *Controller) checkPausedConditions(ctx context.Context, d *appsv1.Deployment) error {
	if !hasProgressDeadline(d) {
		return nil
	}
	cond := getCondition(d.Status, appsv1.DeploymentProgressing)
	if cond != nil && cond.Reason == reasonTimedOut {
		return nil
	}
	pausedNoted := cond != nil && cond.Reason == reasonPaused
	switch {
	case d.Spec.Paused && !pausedNoted:
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonPaused, "Deployment is paused", c.clock.Now()))
	case !d.Spec.Paused && pausedNoted:
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonResumed, "Deployment is resumed", c.clock.Now()))
	default:
		return nil
	}
	return c.updateStatus(ctx, d)
}
