package disruption

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// StalePodDisruptionTimeout is how long a pod may carry a true
// DisruptionTarget condition without being deleted before the condition
// is reset: the disruption it announced did not happen.
const StalePodDisruptionTimeout = 2 * time.Minute

// podPrefix marks pod keys in the queue, beside budget keys (no
// namespace has a colon in its name).
const podPrefix = "pod:"

// disruptionTarget is the pod's true DisruptionTarget condition, if it
// has one and is not being deleted.
func disruptionTarget(pod *corev1.Pod) *corev1.PodCondition {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// watchStale queues a pod marked for disruption for when its mark goes
// stale.
func (c *Controller) watchStale(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	cond := disruptionTarget(pod)
	if cond == nil {
		return
	}
	k, err := cache.MetaNamespaceKeyFunc(pod)
	if err != nil {
		return
	}
	c.queue.AddAfter(podPrefix+k, cond.LastTransitionTime.Add(StalePodDisruptionTimeout).Sub(c.clock.Now()))
}

// syncStalePod resets a DisruptionTarget condition that outlived its
// timeout without the pod being deleted.
func (c *Controller) syncStalePod(ctx context.Context, key string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cond := disruptionTarget(pod)
	if cond == nil {
		return nil
	}
	if wait := cond.LastTransitionTime.Add(StalePodDisruptionTimeout).Sub(c.clock.Now()); wait > 0 {
		c.queue.AddAfter(podPrefix+key, wait)
		return nil
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": corev1.DisruptionTarget, "status": corev1.ConditionFalse, "lastTransitionTime": metav1.NewTime(c.clock.Now()),
		}}},
	})
	_, err = c.cfg.Client.Core.Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
