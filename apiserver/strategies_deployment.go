package apiserver

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// What kube-apiserver checks of a Deployment's and a ReplicaSet's spec
// beyond the selector, replicas and pod template (validateWorkload): the
// rollout strategy and its fenceposts, the durations, and the template's
// restart policy.

// surgeIntOrPercent checks a Deployment's maxSurge: a non-negative
// integer or percentage, which unlike maxUnavailable (intOrPercent) may
// exceed 100%.
func surgeIntOrPercent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	if v.Type == intstr.String {
		var errs field.ErrorList
		for _, msg := range validation.IsValidPercent(v.StrVal) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
		return errs
	}
	return nonNegative(int64(v.IntValue()), p)
}

func validateDeploymentStrategy(st *appsv1.DeploymentStrategy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch st.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if st.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(path.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		ru := st.RollingUpdate
		if ru == nil {
			return append(errs, field.Required(path.Child("rollingUpdate"), "this should be defaulted and never be nil"))
		}
		rp := path.Child("rollingUpdate")
		if ru.MaxUnavailable != nil {
			errs = append(errs, intOrPercent(*ru.MaxUnavailable, rp.Child("maxUnavailable"))...)
		}
		if ru.MaxSurge != nil {
			errs = append(errs, surgeIntOrPercent(*ru.MaxSurge, rp.Child("maxSurge"))...)
		}
		if isZero(ru.MaxSurge) && isZero(ru.MaxUnavailable) {
			errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), ru.MaxUnavailable, "may not be 0 when `maxSurge` is 0"))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("type"), st.Type, []string{string(appsv1.RecreateDeploymentStrategyType), string(appsv1.RollingUpdateDeploymentStrategyType)}))
	}
	return errs
}

// validateRestartAlways: a controller's pods are replaced, never left
// terminated, so their template must restart them.
func validateRestartAlways(t *corev1.PodTemplateSpec, path *field.Path) field.ErrorList {
	if t.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		return field.ErrorList{field.NotSupported(path.Child("template", "spec", "restartPolicy"), t.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)})}
	}
	return nil
}

func validateDeploymentSpec(s *appsv1.DeploymentSpec) field.ErrorList {
	p := field.NewPath("spec")
	errs := validateWorkload(s.Selector, &s.Template, s.Replicas)
	errs = append(errs, validateRestartAlways(&s.Template, p)...)
	errs = append(errs, validateDeploymentStrategy(&s.Strategy, p.Child("strategy"))...)
	errs = append(errs, nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))...)
	if s.RevisionHistoryLimit != nil {
		errs = append(errs, nonNegative(int64(*s.RevisionHistoryLimit), p.Child("revisionHistoryLimit"))...)
	}
	if pd := s.ProgressDeadlineSeconds; pd != nil {
		errs = append(errs, nonNegative(int64(*pd), p.Child("progressDeadlineSeconds"))...)
		if *pd <= s.MinReadySeconds {
			errs = append(errs, field.Invalid(p.Child("progressDeadlineSeconds"), *pd, "must be greater than minReadySeconds"))
		}
	}
	return errs
}

func validateReplicaSetSpec(s *appsv1.ReplicaSetSpec) field.ErrorList {
	p := field.NewPath("spec")
	errs := validateWorkload(s.Selector, &s.Template, s.Replicas)
	errs = append(errs, validateRestartAlways(&s.Template, p)...)
	return append(errs, nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))...)
}

// prepareForUpdate: a Deployment's generation counts annotation changes
// too, as upstream's does, because its ReplicaSets copy its annotations;
// a spec change bumps it already.
func (st deploymentStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	if err := st.GenerationStrategy.PrepareForUpdate(w, obj, old); err != nil {
		return err
	}
	d, o := obj.(*appsv1.Deployment), old.(*appsv1.Deployment)
	if !specChanged(obj, old) && !apiequality.Semantic.DeepEqual(d.Annotations, o.Annotations) {
		d.Generation = o.Generation + 1
	}
	return nil
}
