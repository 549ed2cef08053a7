package daemonset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/controllers/history"
	"bonsai.dev/bonsai/controllers/kit"
)

// controlledRevisions claims the revisions of ds.
func (c *Controller) controlledRevisions(ctx context.Context, ds *appsv1.DaemonSet) ([]*appsv1.ControllerRevision, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	all, err := c.revLister.ControllerRevisions(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := &kit.RefManager[*appsv1.ControllerRevision]{
		Owner: ds, Kind: controllerKind, Selector: sel,
		Patch:    kit.PatchWith(c.client.Apps.ControllerRevisions),
		CanAdopt: kit.RecheckOwner(ds, c.client.Apps.DaemonSets(ds.Namespace).Get),
	}
	return m.Claim(ctx, all, nil)
}

// constructHistory finds (or records) the revision of ds's current
// template, numbered above every other, and returns the others.
func (c *Controller) constructHistory(ctx context.Context, ds *appsv1.DaemonSet) (cur *appsv1.ControllerRevision, old []*appsv1.ControllerRevision, err error) {
	revs, err := c.controlledRevisions(ctx, ds)
	if err != nil {
		return nil, nil, err
	}
	patch, err := history.TemplatePatch(&ds.Spec.Template)
	if err != nil {
		return nil, nil, err
	}
	var current []*appsv1.ControllerRevision
	for _, r := range revs {
		if bytes.Equal(r.Data.Raw, patch) {
			current = append(current, r)
		} else {
			old = append(old, r)
		}
	}
	next := history.MaxRevision(old) + 1
	if len(current) == 0 {
		cur, err = c.snapshot(ctx, ds, patch, next)
		return cur, old, err
	}
	// Equal duplicates (made under different collision counts) are merged
	// into the newest; pods of the others are relabelled first so they do
	// not look out of date.
	history.Sort(current)
	cur = current[len(current)-1]
	if len(current) > 1 {
		if err := c.relabelPods(ctx, ds, cur.Labels[history.HashLabel]); err != nil {
			return nil, nil, err
		}
	}
	for _, r := range current[:len(current)-1] {
		if err := c.client.Apps.ControllerRevisions(ds.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("delete duplicate revision %s: %w", r.Name, err)
		}
	}
	if cur.Revision < next {
		cur, err = history.SetRevision(ctx, c.client.Apps, cur, next)
	}
	return cur, old, err
}

// snapshot records ds's template as revision number rev, named by the
// template's hash. A revision of that name holding another template is a
// hash collision: collisionCount goes up in the status and the next sync
// hashes anew.
func (c *Controller) snapshot(ctx context.Context, ds *appsv1.DaemonSet, patch []byte, rev int64) (*appsv1.ControllerRevision, error) {
	hash := history.HashObject(&ds.Spec.Template, ds.Status.CollisionCount)
	labels := make(map[string]string, len(ds.Spec.Template.Labels)+1)
	for k, v := range ds.Spec.Template.Labels {
		labels[k] = v
	}
	labels[history.HashLabel] = hash
	r := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            history.Name(ds.Name, hash),
			Namespace:       ds.Namespace,
			Labels:          labels,
			Annotations:     ds.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Data:     runtime.RawExtension{Raw: patch},
		Revision: rev,
	}
	revs := c.client.Apps.ControllerRevisions(ds.Namespace)
	created, err := revs.Create(ctx, r, metav1.CreateOptions{})
	if err == nil {
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create revision %s: %w", r.Name, err)
	}
	existing, gerr := revs.Get(ctx, r.Name, metav1.GetOptions{})
	if gerr != nil {
		return nil, fmt.Errorf("get revision %s: %w", r.Name, gerr)
	}
	if bytes.Equal(existing.Data.Raw, patch) {
		return existing, nil
	}
	dsc := c.client.Apps.DaemonSets(ds.Namespace)
	fresh, gerr := dsc.Get(ctx, ds.Name, metav1.GetOptions{})
	if gerr != nil {
		return nil, fmt.Errorf("get daemonset for collision count: %w", gerr)
	}
	if !equalCount(fresh.Status.CollisionCount, ds.Status.CollisionCount) {
		return nil, fmt.Errorf("stale collision count of %s/%s; retrying", ds.Namespace, ds.Name)
	}
	if fresh.Status.CollisionCount == nil {
		fresh.Status.CollisionCount = new(int32)
	}
	*fresh.Status.CollisionCount++
	if _, err := dsc.UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("bump collision count: %w", err)
	}
	return nil, fmt.Errorf("revision %s collides with another template; collision count now %d", r.Name, *fresh.Status.CollisionCount)
}

func equalCount(a, b *int32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// cleanupHistory deletes the oldest revisions beyond revisionHistoryLimit
// that no live pod was made from.
func (c *Controller) cleanupHistory(ctx context.Context, ds *appsv1.DaemonSet, old []*appsv1.ControllerRevision) error {
	limit := 10
	if ds.Spec.RevisionHistoryLimit != nil {
		limit = int(*ds.Spec.RevisionHistoryLimit)
	}
	toKill := len(old) - limit
	if toKill <= 0 {
		return nil
	}
	byNode, err := c.daemonPods(ctx, ds, true)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, pods := range byNode {
		for _, p := range pods {
			if h := p.Labels[history.HashLabel]; h != "" {
				live[h] = true
			}
		}
	}
	old = slices.Clone(old)
	history.Sort(old)
	for _, r := range old {
		if toKill <= 0 {
			break
		}
		if live[r.Labels[history.HashLabel]] {
			continue
		}
		if err := c.client.Apps.ControllerRevisions(ds.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete old revision %s: %w", r.Name, err)
		}
		toKill--
	}
	return nil
}

// relabelPods gives every pod of ds the revision hash label hash.
func (c *Controller) relabelPods(ctx context.Context, ds *appsv1.DaemonSet, hash string) error {
	byNode, err := c.daemonPods(ctx, ds, true)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{history.HashLabel: hash}}})
	if err != nil {
		return err
	}
	for _, pods := range byNode {
		for _, p := range pods {
			if p.Labels[history.HashLabel] == hash {
				continue
			}
			if _, err := c.client.Core.Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("relabel pod %s: %w", p.Name, err)
			}
		}
	}
	return nil
}
