package autoscaling

import (
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	pathvalidation "k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Upstream's bounds of a behavior's windows and periods.
const (
	MaxPeriodSeconds              = 1800
	MaxStabilizationWindowSeconds = 3600
)

// ValidateSpec checks an autoscaler's spec as upstream's validation
// does, with its field paths and messages; minReplicas may not be below
// minLowerBound.
func ValidateSpec(spec *autoscalingv2.HorizontalPodAutoscalerSpec, minLowerBound int32) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	if spec.MinReplicas != nil && *spec.MinReplicas < minLowerBound {
		errs = append(errs, field.Invalid(p.Child("minReplicas"), *spec.MinReplicas, fmt.Sprintf("must be greater than or equal to %d", minLowerBound)))
	}
	if spec.MaxReplicas < 1 {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), spec.MaxReplicas, "must be greater than 0"))
	}
	if spec.MinReplicas != nil && spec.MaxReplicas < *spec.MinReplicas {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), spec.MaxReplicas, "must be greater than or equal to `minReplicas`"))
	}
	errs = append(errs, validateReference(spec.ScaleTargetRef, p.Child("scaleTargetRef"))...)
	errs = append(errs, validateMetrics(spec.Metrics, p.Child("metrics"), spec.MinReplicas)...)
	if b := spec.Behavior; b != nil {
		errs = append(errs, validateRules(b.ScaleUp, p.Child("behavior", "scaleUp"))...)
		errs = append(errs, validateRules(b.ScaleDown, p.Child("behavior", "scaleDown"))...)
	}
	return errs
}

func validateStatus(s *autoscalingv2.HorizontalPodAutoscalerStatus) field.ErrorList {
	var errs field.ErrorList
	const msg = "must be greater than or equal to 0"
	if s.CurrentReplicas < 0 {
		errs = append(errs, field.Invalid(field.NewPath("status", "currentReplicas"), int64(s.CurrentReplicas), msg))
	}
	if s.DesiredReplicas < 0 {
		errs = append(errs, field.Invalid(field.NewPath("status", "desiredReplicas"), int64(s.DesiredReplicas), msg))
	}
	return errs
}

func validateReference(ref autoscalingv2.CrossVersionObjectReference, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ref.Kind == "" {
		errs = append(errs, field.Required(p.Child("kind"), ""))
	} else {
		for _, msg := range pathvalidation.IsValidPathSegmentName(ref.Kind) {
			errs = append(errs, field.Invalid(p.Child("kind"), ref.Kind, msg))
		}
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		for _, msg := range pathvalidation.IsValidPathSegmentName(ref.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), ref.Name, msg))
		}
	}
	return errs
}

func validateMetrics(metrics []autoscalingv2.MetricSpec, p *field.Path, minReplicas *int32) field.ErrorList {
	var errs field.ErrorList
	objectOrExternal := false
	for i, m := range metrics {
		errs = append(errs, validateMetric(m, p.Index(i))...)
		if m.Type == autoscalingv2.ObjectMetricSourceType || m.Type == autoscalingv2.ExternalMetricSourceType {
			objectOrExternal = true
		}
	}
	if minReplicas != nil && *minReplicas == 0 && !objectOrExternal {
		errs = append(errs, field.Forbidden(p, "must specify at least one Object or External metric to support scaling to zero replicas"))
	}
	return errs
}

var metricTypes = []string{"ContainerResource", "External", "Object", "Pods", "Resource"}

func validateMetric(m autoscalingv2.MetricSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric source type"))
	}
	known := false
	for _, t := range metricTypes {
		known = known || string(m.Type) == t
	}
	if !known {
		errs = append(errs, field.NotSupported(p.Child("type"), m.Type, metricTypes))
	}
	// Upstream validates the first source present, in this order, and
	// forbids the others but the type's own.
	var present []string
	validateFirst := func(name string, set bool, v func() field.ErrorList) {
		if !set {
			return
		}
		present = append(present, name)
		if len(present) == 1 {
			errs = append(errs, v()...)
		}
	}
	validateFirst("object", m.Object != nil, func() field.ErrorList { return validateObject(m.Object, p.Child("object")) })
	validateFirst("external", m.External != nil, func() field.ErrorList { return validateExternal(m.External, p.Child("external")) })
	validateFirst("pods", m.Pods != nil, func() field.ErrorList { return validatePods(m.Pods, p.Child("pods")) })
	validateFirst("resource", m.Resource != nil, func() field.ErrorList { return validateResource(m.Resource, p.Child("resource")) })
	validateFirst("containerResource", m.ContainerResource != nil, func() field.ErrorList {
		return validateContainerResource(m.ContainerResource, p.Child("containerResource"))
	})

	expected := ""
	required := func(name string, set bool) {
		if !set {
			errs = append(errs, field.Required(p.Child(name), "must populate information for the given metric source"))
		}
		expected = name
	}
	switch m.Type {
	case autoscalingv2.ObjectMetricSourceType:
		required("object", m.Object != nil)
	case autoscalingv2.PodsMetricSourceType:
		required("pods", m.Pods != nil)
	case autoscalingv2.ResourceMetricSourceType:
		required("resource", m.Resource != nil)
	case autoscalingv2.ExternalMetricSourceType:
		required("external", m.External != nil)
	case autoscalingv2.ContainerResourceMetricSourceType:
		required("containerResource", m.ContainerResource != nil)
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), m.Type, metricTypes))
	}
	if len(present) != 1 {
		for _, name := range present {
			if name != expected {
				errs = append(errs, field.Forbidden(p.Child(name), "must populate the given metric source only"))
			}
		}
	}
	return errs
}

func validateObject(src *autoscalingv2.ObjectMetricSource, p *field.Path) field.ErrorList {
	errs := validateReference(src.DescribedObject, p.Child("describedObject"))
	errs = append(errs, validateIdentifier(src.Metric, p.Child("metric"))...)
	errs = append(errs, validateTarget(src.Target, p.Child("target"))...)
	if src.Target.Value == nil && src.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must set either a target value or averageValue"))
	}
	return errs
}

func validateExternal(src *autoscalingv2.ExternalMetricSource, p *field.Path) field.ErrorList {
	errs := validateIdentifier(src.Metric, p.Child("metric"))
	errs = append(errs, validateTarget(src.Target, p.Child("target"))...)
	if src.Target.Value == nil && src.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must set either a target value for metric or a per-pod target"))
	}
	if src.Target.Value != nil && src.Target.AverageValue != nil {
		errs = append(errs, field.Forbidden(p.Child("target", "value"), "may not set both a target value for metric and a per-pod target"))
	}
	return errs
}

func validatePods(src *autoscalingv2.PodsMetricSource, p *field.Path) field.ErrorList {
	errs := validateIdentifier(src.Metric, p.Child("metric"))
	errs = append(errs, validateTarget(src.Target, p.Child("target"))...)
	if src.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must specify a positive target averageValue"))
	}
	return errs
}

func validateResource(src *autoscalingv2.ResourceMetricSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if src.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "must specify a resource name"))
	}
	return append(errs, validateResourceTarget(src.Target, p)...)
}

func validateContainerResource(src *autoscalingv2.ContainerResourceMetricSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if src.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "must specify a resource name"))
	} else {
		for _, msg := range validation.IsQualifiedName(string(src.Name)) {
			errs = append(errs, field.Invalid(p.Child("name"), src.Name, msg))
		}
	}
	if src.Container == "" {
		errs = append(errs, field.Required(p.Child("container"), "must specify a container"))
	} else {
		for _, msg := range validation.IsDNS1123Label(src.Container) {
			errs = append(errs, field.Invalid(p.Child("container"), src.Container, msg))
		}
	}
	return append(errs, validateResourceTarget(src.Target, p)...)
}

func validateResourceTarget(t autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	errs := validateTarget(t, p.Child("target"))
	if t.AverageUtilization == nil && t.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageUtilization"), "must set either a target raw value or a target utilization"))
	}
	if t.AverageUtilization != nil && t.AverageValue != nil {
		errs = append(errs, field.Forbidden(p.Child("target", "averageValue"), "may not set both a target raw value and a target utilization"))
	}
	return errs
}

func validateTarget(t autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric target type"))
	}
	if t.Type != autoscalingv2.UtilizationMetricType && t.Type != autoscalingv2.ValueMetricType && t.Type != autoscalingv2.AverageValueMetricType {
		errs = append(errs, field.Invalid(p.Child("type"), t.Type, "must be either Utilization, Value, or AverageValue"))
	}
	if t.Value != nil && t.Value.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("value"), t.Value, "must be positive"))
	}
	if t.AverageValue != nil && t.AverageValue.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("averageValue"), t.AverageValue, "must be positive"))
	}
	if t.AverageUtilization != nil && *t.AverageUtilization < 1 {
		errs = append(errs, field.Invalid(p.Child("averageUtilization"), *t.AverageUtilization, "must be greater than 0"))
	}
	return errs
}

func validateIdentifier(id autoscalingv2.MetricIdentifier, p *field.Path) field.ErrorList {
	if id.Name == "" {
		return field.ErrorList{field.Required(p.Child("name"), "must specify a metric name")}
	}
	var errs field.ErrorList
	for _, msg := range pathvalidation.IsValidPathSegmentName(id.Name) {
		errs = append(errs, field.Invalid(p.Child("name"), id.Name, msg))
	}
	return errs
}

var selectPolicies = []string{"Disabled", "Max", "Min"}

func validateRules(r *autoscalingv2.HPAScalingRules, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if w := r.StabilizationWindowSeconds; w != nil && *w < 0 {
		errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), *w, "must be greater than or equal to zero"))
	}
	if w := r.StabilizationWindowSeconds; w != nil && *w > MaxStabilizationWindowSeconds {
		errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), *w, fmt.Sprintf("must be less than or equal to %v", MaxStabilizationWindowSeconds)))
	}
	if s := r.SelectPolicy; s != nil && *s != autoscalingv2.MaxChangePolicySelect && *s != autoscalingv2.MinChangePolicySelect && *s != autoscalingv2.DisabledPolicySelect {
		errs = append(errs, field.NotSupported(p.Child("selectPolicy"), *s, selectPolicies))
	}
	if t := r.Tolerance; t != nil && t.Sign() < 0 {
		errs = append(errs, field.Invalid(p.Child("tolerance"), t.String(), "must be greater than or equal to zero"))
	}
	pp := p.Child("policies")
	if len(r.Policies) == 0 {
		errs = append(errs, field.Required(pp, "must specify at least one Policy"))
	}
	for i, pol := range r.Policies {
		ip := pp.Index(i)
		if pol.Type != autoscalingv2.PodsScalingPolicy && pol.Type != autoscalingv2.PercentScalingPolicy {
			errs = append(errs, field.NotSupported(ip.Child("type"), pol.Type, []string{"Percent", "Pods"}))
		}
		if pol.Value <= 0 {
			errs = append(errs, field.Invalid(ip.Child("value"), pol.Value, "must be greater than zero"))
		}
		if pol.PeriodSeconds <= 0 {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.PeriodSeconds, "must be greater than zero"))
		}
		if pol.PeriodSeconds > MaxPeriodSeconds {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.PeriodSeconds, fmt.Sprintf("must be less than or equal to %v", MaxPeriodSeconds)))
		}
	}
	return errs
}
