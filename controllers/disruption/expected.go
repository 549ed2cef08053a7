package disruption

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// expectedScale sums the scale of the controllers of the pods, each
// counted once: the number of pods they want, present or not. A pod
// without a controller is unmanaged; a controller that cannot be found
// (or a kind without a known scale) is an error, as upstream's.
func (c *Controller) expectedScale(ctx context.Context, pods []*corev1.Pod) (int32, []string, error) {
	scales := map[types.UID]int32{}
	var unmanaged []string
	for _, pod := range pods {
		ref := metav1.GetControllerOf(pod)
		if ref == nil {
			unmanaged = append(unmanaged, pod.Name)
			continue
		}
		if _, seen := scales[ref.UID]; seen {
			continue
		}
		uid, scale, found, err := c.controllerScale(ctx, pod.Namespace, ref)
		if err != nil {
			return 0, nil, err
		}
		if !found {
			return 0, nil, fmt.Errorf("found no controllers for pod %q", pod.Name)
		}
		// Keyed by the pod's own controller too, so its siblings are
		// not looked up again when the scale is a Deployment's.
		scales[ref.UID] = 0
		scales[uid] = scale
	}
	var total int32
	for _, n := range scales {
		total += n
	}
	return total, unmanaged, nil
}

// controllerScale is the scale (scale subresource's spec.replicas) of
// the workload a pod's controllerRef leads to: a ReplicaSet's, or its
// Deployment's when a Deployment owns it; a StatefulSet's; a
// ReplicationController's. A ref whose UID no longer matches the object
// of its name is not found.
func (c *Controller) controllerScale(ctx context.Context, ns string, ref *metav1.OwnerReference) (types.UID, int32, bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return "", 0, false, nil
	}
	switch {
	case gv.Group == appsv1.GroupName && ref.Kind == "ReplicaSet":
		rs, err := c.cfg.Client.Apps.ReplicaSets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil || rs.UID != ref.UID {
			return notFound(err)
		}
		if dref := metav1.GetControllerOf(rs); dref != nil && dref.Kind == "Deployment" {
			s, err := c.cfg.Client.Apps.Deployments(ns).GetScale(ctx, dref.Name, metav1.GetOptions{})
			if err != nil || s.UID != dref.UID {
				return notFound(err)
			}
			return s.UID, s.Spec.Replicas, true, nil
		}
		s, err := c.cfg.Client.Apps.ReplicaSets(ns).GetScale(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return notFound(err)
		}
		return rs.UID, s.Spec.Replicas, true, nil
	case gv.Group == appsv1.GroupName && ref.Kind == "StatefulSet":
		s, err := c.cfg.Client.Apps.StatefulSets(ns).GetScale(ctx, ref.Name, metav1.GetOptions{})
		if err != nil || s.UID != ref.UID {
			return notFound(err)
		}
		return s.UID, s.Spec.Replicas, true, nil
	case gv.Group == "" && ref.Kind == "ReplicationController":
		s, err := c.cfg.Client.Core.ReplicationControllers(ns).GetScale(ctx, ref.Name, metav1.GetOptions{})
		if err != nil || s.UID != ref.UID {
			return notFound(err)
		}
		return s.UID, s.Spec.Replicas, true, nil
	}
	return "", 0, false, nil
}

// notFound turns a missing object into "no controller" and passes other
// errors on.
func notFound(err error) (types.UID, int32, bool, error) {
	if err == nil || apierrors.IsNotFound(err) {
		return "", 0, false, nil
	}
	return "", 0, false, err
}
