package admission

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// DefaultNotReadyTolerationSeconds is how long a new pod stays on a node
// that is not ready or unreachable, unless it says otherwise: upstream's
// --default-not-ready-toleration-seconds and
// --default-unreachable-toleration-seconds.
const DefaultNotReadyTolerationSeconds int64 = 300

// DefaultTolerationSeconds is kube-apiserver's DefaultTolerationSeconds
// plugin: a new pod tolerates the not-ready and unreachable NoExecute
// taints for DefaultNotReadyTolerationSeconds, unless it tolerates them
// already.
type DefaultTolerationSeconds struct{}

func (DefaultTolerationSeconds) Name() string              { return "DefaultTolerationSeconds" }
func (DefaultTolerationSeconds) Handles(op Operation) bool { return op == Create }

func (DefaultTolerationSeconds) Admit(_ context.Context, a Attributes) error {
	p, ok := newPod(a)
	if !ok {
		return nil
	}
	addDefaultToleration(p, corev1.TaintNodeNotReady)
	addDefaultToleration(p, corev1.TaintNodeUnreachable)
	return nil
}

func addDefaultToleration(p *corev1.Pod, key string) {
	for _, t := range p.Spec.Tolerations {
		if (t.Key == key || t.Key == "") && (t.Effect == corev1.TaintEffectNoExecute || t.Effect == "") && (t.Operator == corev1.TolerationOpExists || t.Key == "") {
			return
		}
	}
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{
		Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrTo(DefaultNotReadyTolerationSeconds),
	})
}
