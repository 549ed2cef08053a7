package autoscaling

import (
	"fmt"
	"strings"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/registry"
)

// kube-apiserver's columns for HorizontalPodAutoscalers, all typed
// string as upstream's are.
var hpaColumns = registry.Cols(registry.NameCol,
	registry.Col("Reference", registry.TString, autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["scaleTargetRef"]),
	registry.Col("Targets", registry.TString, autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["metrics"]),
	registry.Col("MinPods", registry.TString, autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["minReplicas"]),
	registry.Col("MaxPods", registry.TString, autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["maxReplicas"]),
	registry.Col("Replicas", registry.TString, autoscalingv2.HorizontalPodAutoscalerStatus{}.SwaggerDoc()["currentReplicas"]),
	registry.AgeCol,
)

var hpaV2Printer = registry.Printer{Columns: hpaColumns, Cells: func(o runtime.Object) []any { return hpaCells(o.(*autoscalingv2.HorizontalPodAutoscaler)) }}

var hpaV1Printer = registry.Printer{Columns: hpaColumns, Cells: func(o runtime.Object) []any {
	v2, err := ToV2(o.(*autoscalingv1.HorizontalPodAutoscaler))
	if err != nil {
		v2 = &autoscalingv2.HorizontalPodAutoscaler{}
	}
	return hpaCells(v2)
}}

func hpaCells(h *autoscalingv2.HorizontalPodAutoscaler) []any {
	minPods := "<unset>"
	if h.Spec.MinReplicas != nil {
		minPods = fmt.Sprint(*h.Spec.MinReplicas)
	}
	ref := h.Spec.ScaleTargetRef.Kind + "/" + h.Spec.ScaleTargetRef.Name
	return []any{h.Name, ref, FormatMetrics(h.Spec.Metrics, h.Status.CurrentMetrics), minPods, int64(h.Spec.MaxReplicas), int64(h.Status.CurrentReplicas), registry.Age(h)}
}

// FormatMetrics is the Targets cell: each metric's current value (or
// <unknown>) over its target, the first two and a count of the rest, as
// kubectl get hpa shows them.
func FormatMetrics(specs []autoscalingv2.MetricSpec, statuses []autoscalingv2.MetricStatus) string {
	if len(specs) == 0 {
		return "<none>"
	}
	const unknown, shown = "<unknown>", 2
	var list []string
	for i, spec := range specs {
		var st *autoscalingv2.MetricStatus
		if i < len(statuses) {
			st = &statuses[i]
		}
		s := "<unknown type>"
		switch spec.Type {
		case autoscalingv2.ExternalMetricSourceType:
			if spec.External == nil {
				break
			}
			cur := unknown
			if t := spec.External.Target; t.AverageValue != nil {
				if st != nil && st.External != nil && st.External.Current.AverageValue != nil {
					cur = st.External.Current.AverageValue.String()
				}
				s = fmt.Sprintf("%s/%s (avg)", cur, t.AverageValue.String())
			} else {
				if st != nil && st.External != nil && st.External.Current.Value != nil {
					cur = st.External.Current.Value.String()
				}
				s = fmt.Sprintf("%s/%s", cur, quantity(t.Value))
			}
		case autoscalingv2.PodsMetricSourceType:
			if spec.Pods == nil {
				break
			}
			cur := unknown
			if st != nil && st.Pods != nil && st.Pods.Current.AverageValue != nil {
				cur = st.Pods.Current.AverageValue.String()
			}
			s = fmt.Sprintf("%s/%s", cur, quantity(spec.Pods.Target.AverageValue))
		case autoscalingv2.ObjectMetricSourceType:
			if spec.Object == nil {
				break
			}
			cur := unknown
			if t := spec.Object.Target; t.AverageValue != nil {
				if st != nil && st.Object != nil && st.Object.Current.AverageValue != nil {
					cur = st.Object.Current.AverageValue.String()
				}
				s = fmt.Sprintf("%s/%s (avg)", cur, t.AverageValue.String())
			} else {
				if st != nil && st.Object != nil && st.Object.Current.Value != nil {
					cur = st.Object.Current.Value.String()
				}
				s = fmt.Sprintf("%s/%s", cur, quantity(t.Value))
			}
		case autoscalingv2.ResourceMetricSourceType:
			if spec.Resource == nil {
				break
			}
			var cur *autoscalingv2.MetricValueStatus
			if st != nil && st.Resource != nil {
				cur = &st.Resource.Current
			}
			s = spec.Resource.Name.String() + ": " + resourceTargets(spec.Resource.Target, cur)
		case autoscalingv2.ContainerResourceMetricSourceType:
			if spec.ContainerResource == nil {
				break
			}
			var cur *autoscalingv2.MetricValueStatus
			if st != nil && st.ContainerResource != nil {
				cur = &st.ContainerResource.Current
			}
			s = spec.ContainerResource.Name.String() + ": " + resourceTargets(spec.ContainerResource.Target, cur)
		}
		list = append(list, s)
	}
	if len(list) > shown {
		return fmt.Sprintf("%s + %d more...", strings.Join(list[:shown], ", "), len(list)-shown)
	}
	return strings.Join(list, ", ")
}

func resourceTargets(t autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	c := "<unknown>"
	if t.AverageValue != nil {
		if cur != nil && cur.AverageValue != nil {
			c = cur.AverageValue.String()
		}
		return c + "/" + t.AverageValue.String()
	}
	if cur != nil && cur.AverageUtilization != nil {
		c = fmt.Sprintf("%d%%", *cur.AverageUtilization)
	}
	target := "<auto>"
	if t.AverageUtilization != nil {
		target = fmt.Sprintf("%d%%", *t.AverageUtilization)
	}
	return c + "/" + target
}

// quantity is q, "<nil>" when unset (Quantity's own String says so).
func quantity(q *resource.Quantity) string { return q.String() }
