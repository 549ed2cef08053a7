package replicaset

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"bonsai.dev/bonsai/controllers/kit"
)

// Upstream's event reasons and condition reasons.
const (
	reasonSuccessfulCreate = "SuccessfulCreate"
	reasonFailedCreate     = "FailedCreate"
	reasonSuccessfulDelete = "SuccessfulDelete"
	reasonFailedDelete     = "FailedDelete"
)

// manageReplicas creates or deletes pods so that rs has spec.replicas,
// at most BurstReplicas per call, recording what it expects to see.
func (c *Controller) manageReplicas(ctx context.Context, rs *appsv1.ReplicaSet, pods []*corev1.Pod) error {
	key := keyOf(rs)
	diff := len(pods) - int(*rs.Spec.Replicas)
	switch {
	case diff < 0:
		n := min(-diff, c.cfg.BurstReplicas)
		c.exp.Expect(key, n, 0)
		c.log.Debug("creating pods", "owner", key, "need", *rs.Spec.Replicas, "creating", n)
		created, err := slowStartBatch(n, 1, func() error {
			pod, err := c.client.Core.Pods(rs.Namespace).Create(ctx, podFromTemplate(rs, c.owners.Kind), metav1.CreateOptions{})
			if err != nil {
				if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
					// Every later create fails too; the namespace
					// takes the ReplicaSet with it.
					return nil
				}
				c.recorder.Eventf(c.owners.EventObject(rs), corev1.EventTypeWarning, reasonFailedCreate, "Error creating: %v", err)
				return err
			}
			c.recorder.Eventf(c.owners.EventObject(rs), corev1.EventTypeNormal, reasonSuccessfulCreate, "Created pod: %s", pod.Name)
			return nil
		})
		// Creates not made, or refused, will never be seen.
		c.exp.Lower(key, n-created, 0)
		return err
	case diff > 0:
		n := min(diff, c.cfg.BurstReplicas)
		victims := podsToDelete(pods, c.relatedPods(rs), n, c.clock.Now())
		keys := make([]string, len(victims))
		for i, p := range victims {
			keys[i] = keyOf(p)
		}
		c.exp.ExpectNames(key, keys...)
		c.log.Debug("deleting pods", "owner", key, "need", *rs.Spec.Replicas, "deleting", n)
		var (
			mu   sync.Mutex
			errs []error
			wg   sync.WaitGroup
		)
		for _, p := range victims {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := c.client.Core.Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
				if err == nil {
					c.recorder.Eventf(c.owners.EventObject(rs), corev1.EventTypeNormal, reasonSuccessfulDelete, "Deleted pod: %s", p.Name)
					return
				}
				// The informer will not show this deletion.
				c.exp.Observed(key, keyOf(p))
				if apierrors.IsNotFound(err) {
					return
				}
				c.recorder.Eventf(c.owners.EventObject(rs), corev1.EventTypeWarning, reasonFailedDelete, "Error deleting: %v", err)
				mu.Lock()
				errs = append(errs, fmt.Errorf("deleting pod %s: %w", keyOf(p), err))
				mu.Unlock()
			}()
		}
		wg.Wait()
		return utilerrors.NewAggregate(errs)
	}
	return nil
}

// relatedPods are the pods of rs and of the ReplicaSets that share its
// controller (a Deployment's other revisions), for the scale-down ranking.
func (c *Controller) relatedPods(rs *appsv1.ReplicaSet) []*corev1.Pod {
	ref := metav1.GetControllerOf(rs)
	if ref == nil {
		return kit.ControlledBy[*corev1.Pod](c.podInf, string(rs.UID))
	}
	var out []*corev1.Pod
	for _, sibling := range kit.ControlledBy[metav1.Object](c.rsInf, string(ref.UID)) {
		out = append(out, kit.ControlledBy[*corev1.Pod](c.podInf, string(sibling.GetUID()))...)
	}
	return out
}

// calculateStatus is rs's status for its claimed active pods and its
// terminating ones; manageErr sets or clears the ReplicaFailure
// condition.
func (c *Controller) calculateStatus(rs *appsv1.ReplicaSet, pods, terminating []*corev1.Pod, manageErr error) appsv1.ReplicaSetStatus {
	st := *rs.Status.DeepCopy()
	now := c.clock.Now()
	template := labels.Set(rs.Spec.Template.Labels).AsSelectorPreValidated()
	var fully, ready, available int32
	for _, p := range pods {
		if template.Matches(labels.Set(p.Labels)) {
			fully++
		}
		if kit.IsPodReady(p) {
			ready++
			if kit.IsPodAvailable(p, rs.Spec.MinReadySeconds, now) {
				available++
			}
		}
	}
	failure := -1
	for i, cond := range st.Conditions {
		if cond.Type == appsv1.ReplicaSetReplicaFailure {
			failure = i
		}
	}
	switch {
	case manageErr != nil && failure < 0:
		reason := reasonFailedCreate
		if len(pods) > int(*rs.Spec.Replicas) {
			reason = reasonFailedDelete
		}
		st.Conditions = append(st.Conditions, appsv1.ReplicaSetCondition{Type: appsv1.ReplicaSetReplicaFailure,
			Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now), Reason: reason, Message: manageErr.Error()})
	case manageErr == nil && failure >= 0:
		st.Conditions = append(st.Conditions[:failure:failure], st.Conditions[failure+1:]...)
	}
	st.Replicas = int32(len(pods))
	st.FullyLabeledReplicas = fully
	st.ReadyReplicas = ready
	st.AvailableReplicas = available
	st.TerminatingReplicas = ptr(int32(len(terminating)))
	st.ObservedGeneration = rs.Generation
	return st
}

// updateStatus writes st unless rs has it already, retrying once on a
// conflict with the ReplicaSet read afresh.
func (c *Controller) updateStatus(ctx context.Context, rs *appsv1.ReplicaSet, st appsv1.ReplicaSetStatus) (*appsv1.ReplicaSet, error) {
	if apiequality.Semantic.DeepEqual(rs.Status, st) {
		return rs, nil
	}
	for attempt := 0; ; attempt++ {
		st.ObservedGeneration = rs.Generation
		rs.Status = st
		out, err := c.owners.UpdateStatus(ctx, rs)
		if err == nil {
			return out, nil
		}
		if attempt > 0 || !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("updating status of %s %s: %w", c.owners.Kind.Kind, keyOf(rs), err)
		}
		if rs, err = c.owners.Get(ctx, rs.Namespace, rs.Name); err != nil {
			return nil, err
		}
	}
}
