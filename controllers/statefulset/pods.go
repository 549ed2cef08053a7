package statefulset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// createPod creates the pod's claims, then the pod, then gives the claims
// the owners the retention policy wants (the pod's uid exists only now).
func (c *Controller) createPod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	if err := c.createClaims(ctx, set, pod); err != nil {
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "create Pod %s in StatefulSet %s failed error: %s", pod.Name, set.Name, err)
		return err
	}
	created, err := c.client.Core.Pods(set.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return err // the cache is behind; the next sync sees the pod
	}
	if err != nil {
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "create Pod %s in StatefulSet %s failed error: %s", pod.Name, set.Name, err)
		return fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulCreate", "create Pod %s in StatefulSet %s successful", pod.Name, set.Name)
	return c.updateClaimsForPolicy(ctx, set, created)
}

func (c *Controller) deletePod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	err := c.client.Core.Pods(set.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil {
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedDelete", "delete Pod %s in StatefulSet %s failed error: %s", pod.Name, set.Name, err)
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulDelete", "delete Pod %s in StatefulSet %s successful", pod.Name, set.Name)
	return nil
}

// updatePod restores the pod's identity labels and claim volumes (creating
// missing claims) and its claims' owners, retrying on conflict.
func (c *Controller) updatePod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		dirty := false
		if !identityMatches(set, pod) {
			updateIdentity(set, pod)
			dirty = true
		}
		if !storageMatches(set, pod) {
			updateStorage(set, pod)
			dirty = true
			if err := c.createClaims(ctx, set, pod); err != nil {
				return err
			}
		}
		if ok, err := c.claimsMatchPolicy(set, pod); err != nil {
			return err
		} else if !ok {
			if err := c.updateClaimsForPolicy(ctx, set, pod); err != nil {
				return err
			}
		}
		if !dirty {
			return nil
		}
		_, err := c.client.Core.Pods(set.Namespace).Update(ctx, pod, metav1.UpdateOptions{})
		if err == nil {
			c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulUpdate", "update Pod %s in StatefulSet %s successful", pod.Name, set.Name)
			return nil
		}
		if fresh, gerr := c.podLister.Pods(set.Namespace).Get(pod.Name); gerr == nil {
			pod = fresh.DeepCopy()
		}
		return err
	})
}
