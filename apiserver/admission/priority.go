package admission

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// newPod is the pod a create makes, if a creates one.
func newPod(a Attributes) (*corev1.Pod, bool) {
	if a.GetResource() != podsResource || a.GetSubresource() != "" {
		return nil, false
	}
	pod, ok := a.GetObject().(*corev1.Pod)
	return pod, ok
}

// Priority is kube-apiserver's Priority plugin for a new pod: its
// priority from its priorityClassName, and the default preemption policy.
// Only the built-in classes are known by name (any other class gives 0);
// a pod that sets its priority keeps it.
type Priority struct{}

func (Priority) Name() string              { return "Priority" }
func (Priority) Handles(op Operation) bool { return op == Create }

func (Priority) Admit(_ context.Context, a Attributes) error {
	p, ok := newPod(a)
	if !ok {
		return nil
	}
	if p.Spec.Priority == nil {
		p.Spec.Priority = ptrTo(priorityOf(p.Spec.PriorityClassName))
	}
	if p.Spec.PreemptionPolicy == nil {
		p.Spec.PreemptionPolicy = ptrTo(corev1.PreemptLowerPriority)
	}
	return nil
}

// Kubernetes' built-in priority classes.
func priorityOf(class string) int32 {
	switch class {
	case "system-node-critical":
		return 2000001000
	case "system-cluster-critical":
		return 2000000000
	}
	return 0
}

func ptrTo[T any](v T) *T { return &v }
