package autoscaling

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A v1 object without a CPU target means 80 % CPU, as upstream's
// conversion says; a v2 object round-trips through v1 whole, its
// conditions, current metrics and behavior in the annotations.
func TestConversion(t *testing.T) {
	v2, err := ToV2(&autoscalingv1.HorizontalPodAutoscaler{Spec: autoscalingv1.HorizontalPodAutoscalerSpec{MaxReplicas: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]autoscalingv2.MetricSpec{cpuUtilization(80)}, v2.Spec.Metrics); diff != "" {
		t.Errorf("default target (-want +got):\n%s", diff)
	}

	now := metav1.Now().Rfc3339Copy()
	in := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "h", Annotations: map[string]string{"keep": "me"}},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "StatefulSet", Name: "db", APIVersion: "apps/v1"},
			MinReplicas:    ptrTo[int32](2), MaxReplicas: 9,
			Metrics: []autoscalingv2.MetricSpec{
				cpuUtilization(70),
				{Type: "Pods", Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "qps"},
					Target: autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: ptrTo(resource.MustParse("10"))}}},
			},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: ScaleUpRules(), ScaleDown: ScaleDownRules()},
		},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{
			CurrentReplicas: 3, DesiredReplicas: 4, LastScaleTime: &now, ObservedGeneration: ptrTo[int64](5),
			CurrentMetrics: []autoscalingv2.MetricStatus{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricStatus{Name: "cpu",
				Current: autoscalingv2.MetricValueStatus{AverageUtilization: ptrTo[int32](91), AverageValue: ptrTo(resource.MustParse("182m"))}}}},
			Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: "AbleToScale", Status: "True", Reason: "SucceededRescale", Message: "m", LastTransitionTime: now}},
		},
	}
	v1 := ToV1(in)
	if *v1.Spec.TargetCPUUtilizationPercentage != 70 || *v1.Status.CurrentCPUUtilizationPercentage != 91 || v1.Annotations["keep"] != "me" ||
		v1.Annotations[MetricSpecsAnnotation] != `[{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"10"}}]` || v1.Annotations[ConditionsAnnotation] == "" {
		t.Errorf("v1: %+v %+v %v", v1.Spec, v1.Status, v1.Annotations)
	}
	back, err := ToV2(v1)
	if err != nil {
		t.Fatal(err)
	}
	// Upstream's order: the annotation's metrics, then the CPU target.
	want := in.DeepCopy()
	want.Spec.Metrics = []autoscalingv2.MetricSpec{in.Spec.Metrics[1], in.Spec.Metrics[0]}
	want.APIVersion = "autoscaling/v2"
	if diff := cmp.Diff(want, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestFormatMetrics(t *testing.T) {
	q := resource.MustParse("100Mi")
	cur := resource.MustParse("50Mi")
	specs := []autoscalingv2.MetricSpec{
		cpuUtilization(80),
		{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "memory", Target: autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: &q}}},
		{Type: "External", External: &autoscalingv2.ExternalMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "x"}, Target: autoscalingv2.MetricTarget{Type: "Value", Value: &q}}},
	}
	statuses := []autoscalingv2.MetricStatus{
		{Type: "Resource", Resource: &autoscalingv2.ResourceMetricStatus{Name: "cpu", Current: autoscalingv2.MetricValueStatus{AverageUtilization: ptrTo[int32](95)}}},
		{Type: "Resource", Resource: &autoscalingv2.ResourceMetricStatus{Name: "memory", Current: autoscalingv2.MetricValueStatus{AverageValue: &cur}}},
	}
	for _, tc := range []struct {
		specs    []autoscalingv2.MetricSpec
		statuses []autoscalingv2.MetricStatus
		want     string
	}{
		{nil, nil, "<none>"},
		{specs[:1], nil, "cpu: <unknown>/80%"},
		{specs[:1], statuses[:1], "cpu: 95%/80%"},
		{specs[:2], statuses, "cpu: 95%/80%, memory: 50Mi/100Mi"},
		{specs, statuses, "cpu: 95%/80%, memory: 50Mi/100Mi + 1 more..."},
		{specs[2:], nil, "<unknown>/100Mi"},
	} {
		if got := FormatMetrics(tc.specs, tc.statuses); got != tc.want {
			t.Errorf("FormatMetrics(%d specs, %d statuses) = %q, want %q", len(tc.specs), len(tc.statuses), got, tc.want)
		}
	}
}

func TestValidateMetricSources(t *testing.T) {
	for _, tc := range []struct {
		m    autoscalingv2.MetricSpec
		want []string
	}{
		{autoscalingv2.MetricSpec{Type: "Resource"}, []string{"spec.metrics[0].resource: Required value: must populate information for the given metric source"}},
		{autoscalingv2.MetricSpec{Type: "Bogus"}, []string{`spec.metrics[0].type: Unsupported value: "Bogus"`}},
		{autoscalingv2.MetricSpec{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu", Target: autoscalingv2.MetricTarget{Type: "Utilization"}},
			Pods: &autoscalingv2.PodsMetricSource{}}, []string{
			"spec.metrics[0].pods.metric.name: Required value: must specify a metric name",
			"spec.metrics[0].pods: Forbidden: must populate the given metric source only",
		}},
		{autoscalingv2.MetricSpec{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu", Target: autoscalingv2.MetricTarget{Type: "Utilization"}}},
			[]string{"spec.metrics[0].resource.target.averageUtilization: Required value: must set either a target raw value or a target utilization"}},
	} {
		spec := &autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "d"}, MaxReplicas: 1,
			Metrics: []autoscalingv2.MetricSpec{tc.m}}
		var got []string
		for _, e := range ValidateSpec(spec, 1) {
			got = append(got, e.Error())
		}
		for _, w := range tc.want {
			found := false
			for _, g := range got {
				found = found || len(g) >= len(w) && g[:len(w)] == w
			}
			if !found {
				t.Errorf("%+v: errors %q lack %q", tc.m, got, w)
			}
		}
	}
}
