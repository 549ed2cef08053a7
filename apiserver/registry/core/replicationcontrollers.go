package core

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// replicationControllerStrategy holds a ReplicationController's rules, as
// kube-apiserver's: its generation counts spec changes (the controller
// reports status.observedGeneration), and its spec is validated as
// ValidateReplicationControllerSpec does, with equality selectors.
type replicationControllerStrategy struct{ registry.GenerationStrategy }

func (replicationControllerStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	s, p := &obj.(*corev1.ReplicationController).Spec, field.NewPath("spec")
	var errs field.ErrorList
	if s.MinReadySeconds < 0 {
		errs = append(errs, field.Invalid(p.Child("minReadySeconds"), s.MinReadySeconds, "must be greater than or equal to 0"))
	}
	if labels.Set(s.Selector).AsSelector().Empty() {
		errs = append(errs, field.Required(p.Child("selector"), ""))
	}
	errs = append(errs, ValidateReplicas(s.Replicas, p)...)
	tp := p.Child("template")
	if s.Template == nil {
		return append(errs, field.Required(tp, ""))
	}
	if sel := labels.Set(s.Selector).AsSelector(); !sel.Empty() && !sel.Matches(labels.Set(s.Template.Labels)) {
		errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), s.Template.Labels, "`selector` does not match template `labels`"))
	}
	errs = append(errs, ValidatePodSpec(&s.Template.Spec, tp.Child("spec"))...)
	if s.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), s.Template.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)}))
	}
	if s.Template.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(tp.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in ReplicationController is not Supported"))
	}
	return errs
}

// ValidateUpdate: unlike a ReplicaSet's, a ReplicationController's
// selector may change (kubectl rolling-update relabelled its old one).
func (st replicationControllerStrategy) ValidateUpdate(w *registry.WriteCtx, obj, _ runtime.Object) field.ErrorList {
	return st.Validate(w, obj)
}

// defaultReplicationController is upstream's SetDefaults_ReplicationController:
// one replica, and the selector and (when it has none) the controller's
// own labels taken from the template's labels.
func defaultReplicationController(obj runtime.Object) {
	o := obj.(*corev1.ReplicationController)
	if o.Spec.Replicas == nil {
		o.Spec.Replicas = ptrTo[int32](1)
	}
	if o.Spec.Template == nil {
		return
	}
	DefaultPodSpec(&o.Spec.Template.Spec)
	if len(o.Spec.Selector) == 0 {
		o.Spec.Selector = o.Spec.Template.Labels
	}
	if len(o.Labels) == 0 {
		o.Labels = o.Spec.Template.Labels
	}
}
