package statefulset

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"bonsai.dev/bonsai/controllers/history"
	"bonsai.dev/bonsai/controllers/kit"
)

// newRevision is the revision of set's current template, numbered
// revision, carrying the set's annotations (kubectl's change-cause).
func newRevision(set *appsv1.StatefulSet, revision int64, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	patch, err := history.TemplatePatch(&set.Spec.Template)
	if err != nil {
		return nil, err
	}
	r := history.New(set, controllerKind, set.Spec.Template.Labels, patch, revision, collisionCount)
	if len(set.Annotations) > 0 {
		r.Annotations = make(map[string]string, len(set.Annotations))
		for k, v := range set.Annotations {
			r.Annotations[k] = v
		}
	}
	return r, nil
}

// applyRevision is set with the template rev recorded.
func applyRevision(set *appsv1.StatefulSet, rev *appsv1.ControllerRevision) (*appsv1.StatefulSet, error) {
	cur, err := json.Marshal(set)
	if err != nil {
		return nil, err
	}
	patched, err := strategicpatch.StrategicMergePatch(cur, rev.Data.Raw, &appsv1.StatefulSet{})
	if err != nil {
		return nil, fmt.Errorf("apply revision %s: %w", rev.Name, err)
	}
	out := &appsv1.StatefulSet{}
	if err := json.Unmarshal(patched, out); err != nil {
		return nil, fmt.Errorf("apply revision %s: %w", rev.Name, err)
	}
	return out, nil
}

// listRevisions claims set's revisions, oldest first.
func (c *Controller) listRevisions(ctx context.Context, set *appsv1.StatefulSet) ([]*appsv1.ControllerRevision, error) {
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil, err
	}
	all, err := c.revLister.ControllerRevisions(set.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	revs, err := refManager(c, set, sel, kit.PatchWith(c.client.Apps.ControllerRevisions)).Claim(ctx, all, nil)
	history.Sort(revs)
	return revs, err
}

// revisions finds the current revision (status.currentRevision, or the
// update revision for a new set) and the update revision (the template's,
// created or, on a rollback, renumbered as the newest), and the collision
// count to record.
func (c *Controller) revisions(ctx context.Context, set *appsv1.StatefulSet, revs []*appsv1.ControllerRevision) (current, update *appsv1.ControllerRevision, collisionCount int32, err error) {
	if set.Status.CollisionCount != nil {
		collisionCount = *set.Status.CollisionCount
	}
	update, err = newRevision(set, history.MaxRevision(revs)+1, &collisionCount)
	if err != nil {
		return nil, nil, 0, err
	}
	equal := history.FindEqual(revs, update)
	switch {
	case len(equal) > 0 && history.Equal(revs[len(revs)-1], equal[len(equal)-1]):
		// The template did not change since the newest revision.
		update = revs[len(revs)-1]
	case len(equal) > 0:
		// A rollback: the old revision becomes the newest.
		update, err = history.SetRevision(ctx, c.client.Apps, equal[len(equal)-1], update.Revision)
	default:
		update, err = history.Create(ctx, c.client.Apps, set, update, &collisionCount)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	for _, r := range revs {
		if r.Name == set.Status.CurrentRevision {
			current = r
			break
		}
	}
	if current == nil {
		current = update
	}
	return current, update, collisionCount, nil
}

// truncateHistory deletes the oldest revisions beyond
// revisionHistoryLimit that are neither current, nor the update, nor any
// pod's.
func (c *Controller) truncateHistory(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod, revs []*appsv1.ControllerRevision, current, update *appsv1.ControllerRevision) error {
	live := map[string]bool{current.Name: true, update.Name: true}
	for _, p := range pods {
		live[revisionOf(p)] = true
	}
	var old []*appsv1.ControllerRevision
	for _, r := range revs {
		if !live[r.Name] {
			old = append(old, r)
		}
	}
	limit := 10
	if set.Spec.RevisionHistoryLimit != nil {
		limit = int(*set.Spec.RevisionHistoryLimit)
	}
	if len(old) <= limit {
		return nil
	}
	for _, r := range old[:len(old)-limit] {
		if err := c.client.Apps.ControllerRevisions(r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete old revision %s: %w", r.Name, err)
		}
	}
	return nil
}
