// Package autoscaling holds the kinds of the autoscaling group:
// HorizontalPodAutoscalers, stored as autoscaling/v2 and shown as
// autoscaling/v1 too, with upstream's defaults, validation, v1
// conversion (the v2-only fields ride in annotations) and table columns.
// The controller that acts on them is controllers/podautoscaler; this
// package only defines the objects.
package autoscaling

import (
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// GVR2 and GVR1 are the two versions served; v2 is the stored one.
var (
	GVR2 = registry.GVR("autoscaling", "v2", "horizontalpodautoscalers")
	GVR1 = registry.GVR("autoscaling", "v1", "horizontalpodautoscalers")
)

// Kinds are the group's rows of the table of served kinds: v2 first, the
// preferred version, as kube-apiserver lists them.
func Kinds() []registry.Kind {
	all := []string{"all"}
	return []registry.Kind{
		{GVR: GVR2, Kind: "HorizontalPodAutoscaler", Namespaced: true, ShortNames: []string{"hpa"}, Categories: all, Subresources: []string{"status"},
			Strategy: hpaStrategy{}, Defaulter: DefaultV2, Printer: &hpaV2Printer},
		{GVR: GVR1, Kind: "HorizontalPodAutoscaler", Namespaced: true, ShortNames: []string{"hpa"}, Categories: all, Subresources: []string{"status"},
			Strategy: hpaV1Strategy{}, Defaulter: defaultV1, Printer: &hpaV1Printer,
			StoredAs: GVR2, ToStorage: toStorage, FromStorage: fromStorage},
	}
}

// DefaultCPUUtilization is the target of an autoscaler without metrics,
// as upstream's.
const DefaultCPUUtilization = 80

// DefaultV2 applies autoscaling/v2's defaults: minReplicas 1, 80 % CPU
// when no metric is given, and, once a behavior is given, every rule it
// leaves out. The scale-down stabilization window stays unset: the
// controller's --horizontal-pod-autoscaler-downscale-stabilization
// supplies it, as upstream's does.
func DefaultV2(obj runtime.Object) {
	hpa := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if hpa.Spec.MinReplicas == nil {
		hpa.Spec.MinReplicas = ptrTo[int32](1)
	}
	if len(hpa.Spec.Metrics) == 0 {
		hpa.Spec.Metrics = []autoscalingv2.MetricSpec{cpuUtilization(DefaultCPUUtilization)}
	}
	if b := hpa.Spec.Behavior; b != nil {
		b.ScaleUp = withDefaults(b.ScaleUp, ScaleUpRules())
		b.ScaleDown = withDefaults(b.ScaleDown, ScaleDownRules())
	}
}

// ScaleUpRules are upstream's scale-up rules: no stabilization, at most
// 4 pods or doubling (whichever is more) per 15 s.
func ScaleUpRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptrTo[int32](0),
		SelectPolicy:               ptrTo(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
}

// ScaleDownRules are upstream's scale-down rules: down to any count per
// 15 s, the stabilization window left to the controller.
func ScaleDownRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		SelectPolicy: ptrTo(autoscalingv2.MaxChangePolicySelect),
		Policies:     []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}},
	}
}

// withDefaults is rules with what it leaves unset taken from def.
func withDefaults(rules, def *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if rules == nil {
		return def
	}
	if rules.SelectPolicy != nil {
		def.SelectPolicy = rules.SelectPolicy
	}
	if rules.StabilizationWindowSeconds != nil {
		def.StabilizationWindowSeconds = rules.StabilizationWindowSeconds
	}
	if rules.Policies != nil {
		def.Policies = rules.Policies
	}
	if rules.Tolerance != nil {
		def.Tolerance = rules.Tolerance
	}
	return def
}

func defaultV1(obj runtime.Object) {
	hpa := obj.(*autoscalingv1.HorizontalPodAutoscaler)
	if hpa.Spec.MinReplicas == nil {
		hpa.Spec.MinReplicas = ptrTo[int32](1)
	}
}

func cpuUtilization(pct int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptrTo(pct)},
	}}
}

// hpaStrategy: status is the controller's, spec changes count as
// generations.
type hpaStrategy struct{ registry.GenerationStrategy }

func (hpaStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return ValidateSpec(&obj.(*autoscalingv2.HorizontalPodAutoscaler).Spec, 1)
}

func (hpaStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return ValidateSpec(&obj.(*autoscalingv2.HorizontalPodAutoscaler).Spec, updateLowerBound(old.(*autoscalingv2.HorizontalPodAutoscaler)))
}

func (hpaStrategy) ValidateStatusUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return validateStatus(&obj.(*autoscalingv2.HorizontalPodAutoscaler).Status)
}

// updateLowerBound is the least minReplicas an update may set: 1, or 0
// for an object that has 0 already (written while upstream's
// HPAScaleToZero gate was on).
func updateLowerBound(old *autoscalingv2.HorizontalPodAutoscaler) int32 {
	if m := old.Spec.MinReplicas; m != nil && *m == 0 {
		return 0
	}
	return 1
}

// hpaV1Strategy validates an autoscaling/v1 object as the v2 object it
// is stored as, so errors name the same fields upstream's (which
// validates the internal form) do.
type hpaV1Strategy struct{ registry.GenerationStrategy }

// PrepareForCreate resets the status, and the status v1 carries in
// annotations.
func (st hpaV1Strategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	hpa := obj.(*autoscalingv1.HorizontalPodAutoscaler)
	hpa.Status = autoscalingv1.HorizontalPodAutoscalerStatus{}
	keepStatusAnnotations(hpa, nil)
	return nil
}

// PrepareForUpdate keeps the status, the annotations that carry the rest
// of it included: a v1 client that drops them keeps the conditions and
// current metrics, as upstream's status-preserving update does.
func (st hpaV1Strategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	hpa, o := obj.(*autoscalingv1.HorizontalPodAutoscaler), old.(*autoscalingv1.HorizontalPodAutoscaler)
	hpa.Status = o.Status
	keepStatusAnnotations(hpa, o.Annotations)
	return nil
}

// keepStatusAnnotations sets hpa's status annotations to those of from.
func keepStatusAnnotations(hpa *autoscalingv1.HorizontalPodAutoscaler, from map[string]string) {
	for _, k := range []string{MetricStatusesAnnotation, ConditionsAnnotation} {
		v, ok := from[k]
		_, had := hpa.Annotations[k]
		switch {
		case ok:
			if hpa.Annotations == nil {
				hpa.Annotations = map[string]string{}
			}
			hpa.Annotations[k] = v
		case had:
			delete(hpa.Annotations, k)
		}
	}
	if len(hpa.Annotations) == 0 {
		hpa.Annotations = nil
	}
}

func (hpaV1Strategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	v2, err := ToV2(obj.(*autoscalingv1.HorizontalPodAutoscaler))
	if err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "annotations"), "", err.Error())}
	}
	return ValidateSpec(&v2.Spec, 1)
}

func (hpaV1Strategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	v2, err := ToV2(obj.(*autoscalingv1.HorizontalPodAutoscaler))
	if err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "annotations"), "", err.Error())}
	}
	bound := int32(1)
	if m := old.(*autoscalingv1.HorizontalPodAutoscaler).Spec.MinReplicas; m != nil && *m == 0 {
		bound = 0
	}
	return ValidateSpec(&v2.Spec, bound)
}

func (hpaV1Strategy) ValidateStatusUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	s := obj.(*autoscalingv1.HorizontalPodAutoscaler).Status
	return validateStatus(&autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: s.CurrentReplicas, DesiredReplicas: s.DesiredReplicas})
}

func ptrTo[T any](v T) *T { return &v }
