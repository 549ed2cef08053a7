package deployment

import (
	"context"
	"fmt"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// calculateStatus is d's status from its ReplicaSets, with the Available
// condition; other conditions carry over.
func (c *Controller) calculateStatus(all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) appsv1.DeploymentStatus {
	available := sum(all, availableReplicas)
	st := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            sum(all, statusReplicas),
		UpdatedReplicas:     sum([]*appsv1.ReplicaSet{newRS}, statusReplicas),
		ReadyReplicas:       sum(all, readyReplicas),
		AvailableReplicas:   available,
		UnavailableReplicas: max(sum(all, specReplicas)-available, 0),
		TerminatingReplicas: terminatingReplicas(all),
		CollisionCount:      d.Status.CollisionCount,
	}
	st.Conditions = append(st.Conditions, d.Status.Conditions...)
	if available >= *d.Spec.Replicas-maxUnavailable(d) {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, reasonMinimumAvailable, "Deployment has minimum availability.", c.clock.Now()))
	} else {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, reasonMinimumUnavailable, "Deployment does not have minimum availability.", c.clock.Now()))
	}
	return st
}

// terminatingReplicas adds up the ReplicaSets' terminating pods; unknown
// (nil) if one of them does not report it.
func terminatingReplicas(all []*appsv1.ReplicaSet) *int32 {
	var n int32
	for _, rs := range all {
		if rs == nil {
			continue
		}
		if rs.Status.TerminatingReplicas == nil {
			return nil
		}
		n += *rs.Status.TerminatingReplicas
	}
	return &n
}

// syncStatusOnly reports status without changing any ReplicaSet (a
// Deployment being deleted).
func (c *Controller) syncStatusOnly(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	return c.syncDeploymentStatus(ctx, append(old, newRS), newRS, d)
}

func (c *Controller) syncDeploymentStatus(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) error {
	st := c.calculateStatus(all, newRS, d)
	if reflect.DeepEqual(d.Status, st) {
		return nil
	}
	d.Status = st
	return c.updateStatus(ctx, d)
}

// syncRolloutStatus is syncDeploymentStatus plus the Progressing
// condition: complete, progressing, or past its deadline.
func (c *Controller) syncRolloutStatus(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) error {
	st := c.calculateStatus(all, newRS, d)
	if !hasProgressDeadline(d) {
		removeCondition(&st, appsv1.DeploymentProgressing)
	}
	cur := getCondition(d.Status, appsv1.DeploymentProgressing)
	// A finished rollout being resynced: no progress to estimate.
	complete := st.Replicas == st.UpdatedReplicas && cur != nil && cur.Reason == reasonNewRSAvailable
	if hasProgressDeadline(d) && !complete {
		name := fmt.Sprintf("Deployment %q", d.Name)
		if newRS != nil {
			name = fmt.Sprintf("ReplicaSet %q", newRS.Name)
		}
		now := c.clock.Now()
		switch {
		case deploymentComplete(d, &st):
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable, name+" has successfully progressed.", now))
		case deploymentProgressing(d, &st):
			// Progress moves lastUpdateTime even with the same reason,
			// which setCondition would not do; the transition time stays.
			cond := newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonReplicaSetUpdated, name+" is progressing.", now)
			if cur != nil {
				if cur.Status == corev1.ConditionTrue {
					cond.LastTransitionTime = cur.LastTransitionTime
				}
				removeCondition(&st, appsv1.DeploymentProgressing)
			}
			setCondition(&st, cond)
		case c.deploymentTimedOut(d, &st):
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, reasonTimedOut, name+" has timed out progressing.", now))
		}
	}
	// The new ReplicaSet's failure first, else an old one's.
	if f := replicaFailure(newRS, all); f != nil {
		setCondition(&st, *f)
	} else {
		removeCondition(&st, appsv1.DeploymentReplicaFailure)
	}
	if reflect.DeepEqual(d.Status, st) {
		c.requeueStuck(d, st)
		return nil
	}
	d.Status = st
	return c.updateStatus(ctx, d)
}

func replicaFailure(newRS *appsv1.ReplicaSet, all []*appsv1.ReplicaSet) *appsv1.DeploymentCondition {
	for _, rs := range append([]*appsv1.ReplicaSet{newRS}, all...) {
		if rs == nil {
			continue
		}
		for _, c := range rs.Status.Conditions {
			if c.Type == appsv1.ReplicaSetReplicaFailure {
				return &appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: c.Status, Reason: c.Reason, Message: c.Message,
					LastUpdateTime: c.LastTransitionTime, LastTransitionTime: c.LastTransitionTime}
			}
		}
	}
	return nil
}

// requeueStuck looks at a rollout again when its deadline would pass:
// no event comes when nothing happens.
func (c *Controller) requeueStuck(d *appsv1.Deployment, st appsv1.DeploymentStatus) {
	cur := getCondition(d.Status, appsv1.DeploymentProgressing)
	if !hasProgressDeadline(d) || cur == nil || deploymentComplete(d, &st) || cur.Reason == reasonTimedOut {
		return
	}
	after := cur.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second).Sub(c.clock.Now())
	if after < time.Second {
		c.queue.AddRateLimited(keyOf(d))
		return
	}
	// A second more: condition times are whole seconds.
	c.queue.AddAfter(keyOf(d), after+time.Second)
}

func deploymentComplete(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	n := *d.Spec.Replicas
	return st.UpdatedReplicas == n && st.Replicas == n && st.AvailableReplicas == n && st.ObservedGeneration >= d.Generation
}

// deploymentProgressing: st shows more updated, ready or available
// replicas than d's status, or fewer old ones.
func deploymentProgressing(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	old := d.Status
	return st.UpdatedReplicas > old.UpdatedReplicas ||
		st.Replicas-st.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		st.ReadyReplicas > old.ReadyReplicas ||
		st.AvailableReplicas > old.AvailableReplicas
}

func (c *Controller) deploymentTimedOut(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	cond := getCondition(*st, appsv1.DeploymentProgressing)
	if cond == nil || cond.Reason == reasonNewRSAvailable {
		return false
	}
	if cond.Reason == reasonTimedOut {
		return true
	}
	return cond.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second).Before(c.clock.Now())
}
