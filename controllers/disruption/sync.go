package disruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	pdbhelper "k8s.io/component-helpers/apps/poddisruptionbudget"

	"bonsai.dev/bonsai/controllers/kit"
)

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pdb, err := c.pdbs.PodDisruptionBudgets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	err = c.trySync(ctx, pdb)
	// A lost race is retried as it is; anything else leaves the budget
	// allowing no disruption until a sync succeeds.
	if err == nil || apierrors.IsConflict(err) {
		return err
	}
	c.log.Warn("failed to sync PodDisruptionBudget", "pdb", key, "err", err)
	return c.failSafe(ctx, pdb, err)
}

func (c *Controller) trySync(ctx context.Context, pdb *policyv1.PodDisruptionBudget) error {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "NoPods", "Failed to get pods: %v", err)
		return err
	}
	pods, err := c.pods.Pods(pdb.Namespace).List(sel)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		c.recorder.Event(pdb, corev1.EventTypeNormal, "NoPods", "No matching pods found")
	}
	expected, desired, unmanaged, err := c.expectedPodCount(ctx, pdb, pods)
	if err != nil {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "CalculateExpectedPodCountFailed", "Failed to calculate the number of expected pods: %v", err)
		return err
	}
	if len(unmanaged) > 0 {
		c.recorder.Eventf(pdb, corev1.EventTypeNormal, "UnmanagedPods", "Pods selected by this PodDisruptionBudget (selector: %v) were found "+
			"to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. "+
			"To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.", sel)
	}
	now := c.clock.Now()
	disrupted, recheck := c.disruptedPods(pods, pdb, now)
	healthy := countHealthy(pods, disrupted, now)
	if err := c.updateStatus(ctx, pdb, healthy, desired, expected, disrupted); err != nil {
		return err
	}
	if recheck != nil {
		c.queue.AddAfter(pdb.Namespace+"/"+pdb.Name, recheck.Sub(now))
	}
	return nil
}

// expectedPodCount is how many pods the budget expects and needs
// healthy. An integer minAvailable counts the pods there are; a
// percentage or maxUnavailable counts what the pods' controllers want
// (their scale), so that missing pods count as unavailable.
func (c *Controller) expectedPodCount(ctx context.Context, pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod) (expected, desired int32, unmanaged []string, err error) {
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		if expected, unmanaged, err = c.expectedScale(ctx, pods); err != nil {
			return
		}
		var maxUnavailable int
		if maxUnavailable, err = intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(expected), true); err != nil {
			return
		}
		desired = max(expected-int32(maxUnavailable), 0)
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int:
		desired = pdb.Spec.MinAvailable.IntVal
		expected = int32(len(pods))
	case pdb.Spec.MinAvailable != nil:
		if expected, unmanaged, err = c.expectedScale(ctx, pods); err != nil {
			return
		}
		var minAvailable int
		if minAvailable, err = intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(expected), true); err != nil {
			return
		}
		desired = int32(minAvailable)
	}
	return
}

// disruptedPods keeps the pods the eviction API recorded that are
// neither being deleted yet nor overdue; recheck is when the first of
// them will be overdue.
func (c *Controller) disruptedPods(pods []*corev1.Pod, pdb *policyv1.PodDisruptionBudget, now time.Time) (map[string]metav1.Time, *time.Time) {
	out := map[string]metav1.Time{}
	var recheck *time.Time
	if pdb.Status.DisruptedPods == nil {
		return out, nil
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		at, ok := pdb.Status.DisruptedPods[pod.Name]
		if !ok {
			continue
		}
		due := at.Add(DeletionTimeout)
		if due.Before(now) {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "NotDeleted", "Pod was expected by PDB %s/%s to be deleted but it wasn't", pdb.Namespace, pdb.Name)
			continue
		}
		if recheck == nil || due.Before(*recheck) {
			recheck = &due
		}
		out[pod.Name] = at
	}
	return out, recheck
}

// countHealthy counts the Ready pods that are neither being deleted nor
// about to be.
func countHealthy(pods []*corev1.Pod, disrupted map[string]metav1.Time, now time.Time) int32 {
	var n int32
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if at, ok := disrupted[pod.Name]; ok && at.Add(DeletionTimeout).After(now) {
			continue
		}
		if kit.IsPodReady(pod) {
			n++
		}
	}
	return n
}

// updateStatus writes the status if anything in it changed. No pods
// expected means no disruption allowed: a budget whose first pods just
// appeared must not allow evicting them before it counted them.
func (c *Controller) updateStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget, healthy, desired, expected int32, disrupted map[string]metav1.Time) error {
	allowed := healthy - desired
	if expected <= 0 || allowed <= 0 {
		allowed = 0
	}
	st := pdb.Status
	if st.CurrentHealthy == healthy && st.DesiredHealthy == desired && st.ExpectedPods == expected &&
		st.DisruptionsAllowed == allowed && apiequality.Semantic.DeepEqual(st.DisruptedPods, disrupted) &&
		st.ObservedGeneration == pdb.Generation && pdbhelper.ConditionsAreUpToDate(pdb) {
		return nil
	}
	upd := pdb.DeepCopy()
	upd.Status = policyv1.PodDisruptionBudgetStatus{
		CurrentHealthy:     healthy,
		DesiredHealthy:     desired,
		ExpectedPods:       expected,
		DisruptionsAllowed: allowed,
		DisruptedPods:      disrupted,
		ObservedGeneration: pdb.Generation,
		Conditions:         upd.Status.Conditions,
	}
	pdbhelper.UpdateDisruptionAllowedCondition(upd)
	_, err := c.cfg.Client.Policy.PodDisruptionBudgets(pdb.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	return err
}

// failSafe allows no disruption and says why in the condition.
func (c *Controller) failSafe(ctx context.Context, pdb *policyv1.PodDisruptionBudget, syncErr error) error {
	upd := pdb.DeepCopy()
	upd.Status.DisruptionsAllowed = 0
	apimeta.SetStatusCondition(&upd.Status.Conditions, metav1.Condition{
		Type:               policyv1.DisruptionAllowedCondition,
		Status:             metav1.ConditionFalse,
		Reason:             policyv1.SyncFailedReason,
		Message:            syncErr.Error(),
		ObservedGeneration: upd.Status.ObservedGeneration,
	})
	if _, err := c.cfg.Client.Policy.PodDisruptionBudgets(pdb.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("%v (and failed to record it: %w)", syncErr, err)
	}
	// Retry: the cause (a controller not found yet) may pass.
	return syncErr
}
