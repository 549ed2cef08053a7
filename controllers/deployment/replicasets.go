package deployment

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/controllers/kit"
)

// claimReplicaSets returns the ReplicaSets d owns, after adopting the
// orphans its selector matches and releasing owned ones it no longer
// matches.
func (c *Controller) claimReplicaSets(ctx context.Context, d *appsv1.Deployment) ([]*appsv1.ReplicaSet, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("deployment %s has an invalid selector: %w", keyOf(d), err)
	}
	m := &kit.RefManager[*appsv1.ReplicaSet]{
		Owner: d, Kind: controllerKind, Selector: sel,
		Patch:    kit.PatchWith(c.client.Apps.ReplicaSets),
		CanAdopt: kit.RecheckOwner(d, c.client.Apps.Deployments(d.Namespace).Get),
	}
	candidates := append(kit.ControlledBy[*appsv1.ReplicaSet](c.rsInf, string(d.UID)), kit.Orphans[*appsv1.ReplicaSet](c.rsInf, d.Namespace)...)
	return m.Claim(ctx, candidates, nil)
}

// podsByReplicaSet maps each of rsList's UIDs to its pods that match d's
// selector: what Recreate waits on.
func (c *Controller) podsByReplicaSet(d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) (map[types.UID][]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	m := make(map[types.UID][]*corev1.Pod, len(rsList))
	for _, rs := range rsList {
		owned := kit.ControlledBy[*corev1.Pod](c.podInf, string(rs.UID))
		pods := make([]*corev1.Pod, 0, len(owned))
		for _, p := range owned {
			if sel.Matches(labels.Set(p.Labels)) {
				pods = append(pods, p)
			}
		}
		m[rs.UID] = pods
	}
	return m, nil
}

// replicaSetsAndSyncRevision splits rsList into the new ReplicaSet (of
// d's template; created when create is set and there is none) and the
// old ones, and brings revisions up to date.
func (c *Controller) replicaSetsAndSyncRevision(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet, error) {
	existing := findNewReplicaSet(d, rsList)
	var old []*appsv1.ReplicaSet
	for _, rs := range rsList {
		if rs != existing {
			old = append(old, rs)
		}
	}
	newRS, err := c.newReplicaSet(ctx, d, existing, old, create)
	return newRS, old, err
}

// newReplicaSet brings the existing new ReplicaSet's annotations and
// minReadySeconds up to date, or creates it, and records its revision on
// d.
func (c *Controller) newReplicaSet(ctx context.Context, d *appsv1.Deployment, existing *appsv1.ReplicaSet, old []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, error) {
	newRevision := maxRevision(old) + 1
	if existing != nil {
		rs := existing.DeepCopy()
		annotated := setNewReplicaSetAnnotations(d, rs, newRevision, true)
		if annotated || rs.Spec.MinReadySeconds != d.Spec.MinReadySeconds {
			rs.Spec.MinReadySeconds = d.Spec.MinReadySeconds
			return c.client.Apps.ReplicaSets(rs.Namespace).Update(ctx, rs, metav1.UpdateOptions{})
		}
		needsUpdate := setDeploymentRevision(d, rs.Annotations[RevisionAnnotation])
		if hasProgressDeadline(d) && getCondition(d.Status, appsv1.DeploymentProgressing) == nil {
			setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonFoundNewRS,
				fmt.Sprintf("Found new replica set %q", rs.Name), c.clock.Now()))
			needsUpdate = true
		}
		if needsUpdate {
			if err := c.updateStatus(ctx, d); err != nil {
				return nil, err
			}
		}
		return rs, nil
	}
	if !create {
		return nil, nil
	}

	hash := templateHash(&d.Spec.Template, d.Status.CollisionCount)
	template := *d.Spec.Template.DeepCopy()
	template.Labels = withLabel(d.Spec.Template.Labels, appsv1.DefaultDeploymentUniqueLabelKey, hash)
	selector := d.Spec.Selector.DeepCopy()
	selector.MatchLabels = withLabel(selector.MatchLabels, appsv1.DefaultDeploymentUniqueLabelKey, hash)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			// Deterministic, so that a retried create finds its own.
			Name:            d.Name + "-" + hash,
			Namespace:       d.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, controllerKind)},
			Labels:          template.Labels,
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: new(int32), MinReadySeconds: d.Spec.MinReadySeconds, Selector: selector, Template: template},
	}
	n, err := newRSReplicas(d, append(append([]*appsv1.ReplicaSet(nil), old...), rs), rs)
	if err != nil {
		return nil, err
	}
	*rs.Spec.Replicas = n
	setNewReplicaSetAnnotations(d, rs, newRevision, false)
	created, err := c.client.Apps.ReplicaSets(d.Namespace).Create(ctx, rs, metav1.CreateOptions{})
	alreadyExists := false
	switch {
	case apierrors.IsAlreadyExists(err):
		alreadyExists = true
		found, getErr := c.rsLister.ReplicaSets(rs.Namespace).Get(rs.Name)
		if getErr != nil {
			return nil, getErr
		}
		// Ours, and of this template: a create retried before the
		// cache showed the first. Anything else is a hash collision:
		// count it, so the next sync tries another name.
		if ref := metav1.GetControllerOf(found); ref != nil && ref.UID == d.UID && equalIgnoreHash(&d.Spec.Template, &found.Spec.Template) {
			created, err = found, nil
			break
		}
		if d.Status.CollisionCount == nil {
			d.Status.CollisionCount = new(int32)
		}
		*d.Status.CollisionCount++
		if uErr := c.updateStatus(ctx, d); uErr == nil {
			c.log.Info("hash collision, collisionCount raised", "deployment", keyOf(d), "collisionCount", *d.Status.CollisionCount)
		}
		return nil, err
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil, err
	case err != nil:
		msg := fmt.Sprintf("Failed to create new replica set %q: %v", rs.Name, err)
		if hasProgressDeadline(d) {
			setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, reasonFailedRSCreate, msg, c.clock.Now()))
			// The create's error is the one to report.
			_ = c.updateStatus(ctx, d)
		}
		c.recorder.Event(d, corev1.EventTypeWarning, reasonFailedRSCreate, msg)
		return nil, err
	}
	if !alreadyExists && n > 0 {
		c.recorder.Eventf(d, corev1.EventTypeNormal, reasonScalingReplicaSet, "Scaled up replica set %s from 0 to %d", created.Name, n)
	}
	needsUpdate := setDeploymentRevision(d, strconv.FormatInt(newRevision, 10))
	if !alreadyExists && hasProgressDeadline(d) {
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewReplicaSet,
			fmt.Sprintf("Created new replica set %q", created.Name), c.clock.Now()))
		needsUpdate = true
	}
	if needsUpdate {
		if err := c.updateStatus(ctx, d); err != nil {
			return nil, err
		}
	}
	return created, nil
}

// updateStatus writes d's status and annotations (a Deployment's status
// write carries its revision annotation, as upstream), keeping d's
// resourceVersion current for a later write of the same sync.
func (c *Controller) updateStatus(ctx context.Context, d *appsv1.Deployment) error {
	out, err := c.client.Apps.Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of Deployment %s: %w", keyOf(d), err)
	}
	d.ResourceVersion = out.ResourceVersion
	return nil
}

func withLabel(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

// newRSReplicas is how far the new ReplicaSet may scale up now: all the
// way for Recreate; within replicas+maxSurge in all for RollingUpdate.
func newRSReplicas(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) (int32, error) {
	switch d.Spec.Strategy.Type {
	case appsv1.RollingUpdateDeploymentStrategyType:
		surge, err := intOrPercent(d.Spec.Strategy.RollingUpdate.MaxSurge, *d.Spec.Replicas, true)
		if err != nil {
			return 0, err
		}
		current := sum(all, specReplicas)
		maxTotal := *d.Spec.Replicas + surge
		if current >= maxTotal {
			return replicas(newRS), nil
		}
		return replicas(newRS) + min(maxTotal-current, *d.Spec.Replicas-replicas(newRS)), nil
	case appsv1.RecreateDeploymentStrategyType:
		return *d.Spec.Replicas, nil
	}
	return 0, fmt.Errorf("deployment strategy %q isn't supported", d.Spec.Strategy.Type)
}
