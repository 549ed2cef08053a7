package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// RuntimeClass is kube-apiserver's plugin of that name, for a new pod
// that names a RuntimeClass: the class must exist; its overhead becomes
// the pod's (a pod that sets a different one is refused), and its
// scheduling constraints are added to the pod's node selector (a
// conflicting value is refused) and tolerations. In the validating phase
// a pod's overhead must be its class's, and a pod without a class with
// an overhead may not set one.
type RuntimeClass struct {
	// RuntimeClasses lists the cluster's RuntimeClasses.
	RuntimeClasses func(ctx context.Context) ([]*nodev1.RuntimeClass, error)
}

func (RuntimeClass) Name() string              { return "RuntimeClass" }
func (RuntimeClass) Handles(op Operation) bool { return op == Create }

var podsGR = schema.GroupResource{Resource: "pods"}

// class finds the pod's RuntimeClass: nil when it names none.
func (r RuntimeClass) class(ctx context.Context, a Attributes, pod *corev1.Pod) (*nodev1.RuntimeClass, error) {
	if pod.Spec.RuntimeClassName == nil {
		return nil, nil
	}
	classes, err := r.RuntimeClasses(ctx)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	for _, c := range classes {
		if c.Name == *pod.Spec.RuntimeClassName {
			return c, nil
		}
	}
	return nil, apierrors.NewForbidden(podsGR, a.GetName(), fmt.Errorf("pod rejected: RuntimeClass %q not found", *pod.Spec.RuntimeClassName))
}

func (r RuntimeClass) Admit(ctx context.Context, a Attributes) error {
	pod, ok := newPod(a)
	if !ok {
		return nil
	}
	rc, err := r.class(ctx, a, pod)
	if err != nil || rc == nil {
		return err
	}
	if rc.Overhead != nil {
		if len(pod.Spec.Overhead) > 0 && !apiequality.Semantic.DeepEqual(rc.Overhead.PodFixed, pod.Spec.Overhead) {
			return apierrors.NewForbidden(podsGR, a.GetName(), fmt.Errorf("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"))
		}
		pod.Spec.Overhead = rc.Overhead.PodFixed.DeepCopy()
	}
	if s := rc.Scheduling; s != nil {
		for k, v := range s.NodeSelector {
			if pv, ok := pod.Spec.NodeSelector[k]; ok && pv != v {
				return apierrors.NewForbidden(podsGR, a.GetName(), fmt.Errorf("conflict: runtimeClass.scheduling.nodeSelector[%s] = %s; pod.spec.nodeSelector[%s] = %s", k, v, k, pv))
			}
		}
		for k, v := range s.NodeSelector {
			if pod.Spec.NodeSelector == nil {
				pod.Spec.NodeSelector = map[string]string{}
			}
			pod.Spec.NodeSelector[k] = v
		}
		for _, t := range s.Tolerations {
			if !hasToleration(pod.Spec.Tolerations, t) {
				pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
			}
		}
	}
	return nil
}

func (r RuntimeClass) Validate(ctx context.Context, a Attributes) error {
	pod, ok := newPod(a)
	if !ok {
		return nil
	}
	rc, err := r.class(ctx, a, pod)
	if err != nil {
		return err
	}
	switch {
	case rc != nil && rc.Overhead != nil:
		if !apiequality.Semantic.DeepEqual(rc.Overhead.PodFixed, pod.Spec.Overhead) {
			return apierrors.NewForbidden(podsGR, a.GetName(), fmt.Errorf("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"))
		}
	case pod.Spec.Overhead != nil:
		return apierrors.NewForbidden(podsGR, a.GetName(), fmt.Errorf("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"))
	}
	return nil
}

func hasToleration(ts []corev1.Toleration, t corev1.Toleration) bool {
	for _, x := range ts {
		if apiequality.Semantic.DeepEqual(x, t) {
			return true
		}
	}
	return false
}
