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
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"bonsai.dev/bonsai/controllers/replicaset"
)

// claimReplicaSets returns the ReplicaSets d owns, after adopting the
// orphans its selector matches and releasing owned ones it no longer
// matches.
func (c *Controller) claimReplicaSets(ctx context.Context, d *appsv1.Deployment) ([]*appsv1.ReplicaSet, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("deployment %s has an invalid selector: %w", keyOf(d), err)
	}
	idx := c.rsInf.GetIndexer()
	owned, _ := idx.ByIndex(replicaset.OwnerIndex, string(d.UID))
	orphans, _ := idx.ByIndex(replicaset.OwnerIndex, replicaset.OrphanIndexKey(d.Namespace))
	var (
		claimed  []*appsv1.ReplicaSet
		errs     []error
		adoptErr error
		checked  bool
	)
	for _, o := range append(owned, orphans...) {
		rs := o.(*appsv1.ReplicaSet)
		matches := sel.Matches(labels.Set(rs.Labels))
		if ref := metav1.GetControllerOf(rs); ref != nil {
			switch {
			case ref.UID != d.UID:
			case matches:
				claimed = append(claimed, rs)
			case d.DeletionTimestamp == nil:
				_, err := c.client.Apps.ReplicaSets(rs.Namespace).Patch(ctx, rs.Name, types.StrategicMergePatchType, replicaset.ReleasePatch(d.UID, rs.UID), metav1.PatchOptions{})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
					errs = append(errs, fmt.Errorf("releasing ReplicaSet %s: %w", keyOf(rs), err))
				}
			}
			continue
		}
		if d.DeletionTimestamp != nil || !matches || rs.DeletionTimestamp != nil {
			continue
		}
		if !checked {
			adoptErr, checked = c.canAdopt(ctx, d), true
		}
		if adoptErr != nil {
			errs = append(errs, adoptErr)
			break
		}
		patch := replicaset.AdoptPatch(d, controllerKind.Kind, controllerKind.GroupVersion().String(), rs.UID)
		adopted, err := c.client.Apps.ReplicaSets(rs.Namespace).Patch(ctx, rs.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("adopting ReplicaSet %s: %w", keyOf(rs), err))
			}
			continue
		}
		claimed = append(claimed, adopted)
	}
	return claimed, utilerrors.NewAggregate(errs)
}

// canAdopt checks with the API (not the cache, which may lag a delete)
// that d still exists and is not being deleted.
func (c *Controller) canAdopt(ctx context.Context, d *appsv1.Deployment) error {
	fresh, err := c.client.Apps.Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if fresh.UID != d.UID {
		return fmt.Errorf("original Deployment %s is gone: got uid %s, wanted %s", keyOf(d), fresh.UID, d.UID)
	}
	if fresh.DeletionTimestamp != nil {
		return fmt.Errorf("deployment %s has just been deleted at %s", keyOf(d), fresh.DeletionTimestamp)
	}
	return nil
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
		objs, _ := c.podInf.GetIndexer().ByIndex(replicaset.OwnerIndex, string(rs.UID))
		pods := make([]*corev1.Pod, 0, len(objs))
		for _, o := range objs {
			if p := o.(*corev1.Pod); sel.Matches(labels.Set(p.Labels)) {
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
