package apiserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HorizontalPodAutoscalers are served as autoscaling/v2 (preferred,
// stored) and autoscaling/v1 over the same objects: a v1 object reads as
// v2 with its CPU target as a metric and upstream's defaults, a v2
// object reads as v1 with the rest in upstream's annotations, and both
// are rejected with upstream's field errors.
func TestHorizontalPodAutoscalerVersions(t *testing.T) {
	e := newTestEnv(t)
	ref1 := autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	v1, err := e.cs.AutoscalingV1().HorizontalPodAutoscalers("default").Create(e.ctx, &autoscalingv1.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref1, MaxReplicas: 5, TargetCPUUtilizationPercentage: ptrTo[int32](60)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *v1.Spec.MinReplicas != 1 || *v1.Spec.TargetCPUUtilizationPercentage != 60 || len(v1.Annotations) != 0 || v1.Generation != 1 {
		t.Errorf("v1 as created: %+v %v", v1.Spec, v1.Annotations)
	}
	v2, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(e.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantMetrics := []autoscalingv2.MetricSpec{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu",
		Target: autoscalingv2.MetricTarget{Type: "Utilization", AverageUtilization: ptrTo[int32](60)}}}}
	if diff := cmp.Diff(wantMetrics, v2.Spec.Metrics); diff != "" || v2.Spec.Behavior != nil || v2.UID != v1.UID {
		t.Errorf("v1 object read as v2 (-want +got):\n%s behavior %+v", diff, v2.Spec.Behavior)
	}

	// A v2 object with a memory metric and a behavior: v1 shows the CPU
	// target and carries the rest in annotations.
	window := int32(30)
	obj := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "api"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api"},
			MaxReplicas:    3,
			Metrics: []autoscalingv2.MetricSpec{
				{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "memory", Target: autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: ptrTo(apiresource.MustParse("100Mi"))}}},
				{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu", Target: autoscalingv2.MetricTarget{Type: "Utilization", AverageUtilization: ptrTo[int32](50)}}},
			},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &window}},
		},
	}
	created, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(e.ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := created.Spec.Behavior
	if *b.ScaleDown.StabilizationWindowSeconds != 30 || *b.ScaleDown.SelectPolicy != "Max" || len(b.ScaleDown.Policies) != 1 || b.ScaleDown.Policies[0].Value != 100 ||
		*b.ScaleUp.StabilizationWindowSeconds != 0 || len(b.ScaleUp.Policies) != 2 || b.ScaleUp.Policies[0].Type != "Pods" || b.ScaleUp.Policies[0].Value != 4 || *created.Spec.MinReplicas != 1 {
		t.Errorf("v2 defaults: %+v %+v", b.ScaleUp, b.ScaleDown)
	}
	asV1, err := e.cs.AutoscalingV1().HorizontalPodAutoscalers("default").Get(e.ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *asV1.Spec.TargetCPUUtilizationPercentage != 50 || !strings.Contains(asV1.Annotations["autoscaling.alpha.kubernetes.io/metrics"], `"name":"memory"`) ||
		!strings.Contains(asV1.Annotations["autoscaling.alpha.kubernetes.io/behavior"], `"stabilizationWindowSeconds":30`) {
		t.Errorf("v2 object read as v1: %+v %v", asV1.Spec, asV1.Annotations)
	}
	// The controller's status (through v2) survives a v1 update that
	// drops the annotations carrying it.
	created.Status = autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 2, DesiredReplicas: 2,
		Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: "AbleToScale", Status: "True", Reason: "SucceededGetScale", LastTransitionTime: metav1.Now().Rfc3339Copy()}}}
	if created, err = e.cs.AutoscalingV2().HorizontalPodAutoscalers("default").UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bare, err := e.cs.AutoscalingV1().HorizontalPodAutoscalers("default").Get(e.ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(bare.Annotations, "autoscaling.alpha.kubernetes.io/conditions")
	bare.Status.CurrentReplicas = 7 // status is not written through the main resource
	if _, err := e.cs.AutoscalingV1().HorizontalPodAutoscalers("default").Update(e.ctx, bare, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(e.ctx, "api", metav1.GetOptions{}); err != nil || len(got.Status.Conditions) != 1 || got.Status.CurrentReplicas != 2 {
		t.Fatalf("status after a v1 update without its annotations: %v %+v", err, got.Status)
	}
	asV1, err = e.cs.AutoscalingV1().HorizontalPodAutoscalers("default").Get(e.ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Updating through v1 with the annotations keeps every v2 field.
	asV1.Spec.MaxReplicas = 4
	if _, err := e.cs.AutoscalingV1().HorizontalPodAutoscalers("default").Update(e.ctx, asV1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	back, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(e.ctx, "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(created.Spec.Metrics, back.Spec.Metrics); diff != "" || back.Spec.MaxReplicas != 4 || *back.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 30 || len(back.Annotations) != 0 || back.Generation != 2 {
		t.Errorf("after a v1 update (-want +got):\n%s %+v %v", diff, back.Spec, back.Annotations)
	}

	// The object's managedFields hold both versions' writers: the field
	// manager converts between them as upstream's does.
	versions := map[string]bool{}
	for _, f := range back.ManagedFields {
		versions[f.APIVersion] = true
	}
	if !versions["autoscaling/v1"] || !versions["autoscaling/v2"] {
		t.Errorf("managedFields: %+v", back.ManagedFields)
	}

	// Upstream's validation errors, through either version.
	bad := obj.DeepCopy()
	bad.Name = "bad"
	bad.Spec.MinReplicas = ptrTo[int32](0)
	bad.Spec.MaxReplicas = 0
	bad.Spec.ScaleTargetRef.Kind = ""
	bad.Spec.Behavior.ScaleDown.StabilizationWindowSeconds = ptrTo[int32](3601)
	bad.Spec.Behavior.ScaleUp = &autoscalingv2.HPAScalingRules{Policies: []autoscalingv2.HPAScalingPolicy{{Type: "Pods", Value: 0, PeriodSeconds: 1801}}}
	_, err = e.cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(e.ctx, bad, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("invalid v2 create: %v", err)
	}
	for _, want := range []string{
		"spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
		"spec.maxReplicas: Invalid value: 0: must be greater than 0",
		"spec.scaleTargetRef.kind: Required value",
		"spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero",
		"spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 1801: must be less than or equal to 1800",
		"spec.behavior.scaleDown.stabilizationWindowSeconds: Invalid value: 3601: must be less than or equal to 3600",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("invalid v2 create: %v\nlacks %q", err, want)
		}
	}
	_, err = e.cs.AutoscalingV1().HorizontalPodAutoscalers("default").Create(e.ctx, &autoscalingv1.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec:       autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: ref1, MinReplicas: ptrTo[int32](3), MaxReplicas: 2, TargetCPUUtilizationPercentage: ptrTo[int32](0)},
	}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`") ||
		!strings.Contains(err.Error(), "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0") ||
		!strings.Contains(err.Error(), `HorizontalPodAutoscaler.autoscaling "bad" is invalid`) {
		t.Errorf("invalid v1 create: %v", err)
	}

	// Discovery: v2 preferred, hpa short name, in category all, status.
	groups, err := e.cs.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		if g.Name == "autoscaling" && (g.PreferredVersion.Version != "v2" || len(g.Versions) != 2) {
			t.Errorf("autoscaling group: %+v", g)
		}
	}
	for _, gv := range []string{"autoscaling/v2", "autoscaling/v1"} {
		rl, err := e.cs.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]metav1.APIResource{}
		for _, r := range rl.APIResources {
			names[r.Name] = r
		}
		r := names["horizontalpodautoscalers"]
		if _, ok := names["horizontalpodautoscalers/status"]; !ok || !cmp.Equal(r.ShortNames, []string{"hpa"}) || !contains(r.Categories, "all") || !r.Namespaced {
			t.Errorf("%s discovery: %+v", gv, rl.APIResources)
		}
	}

	// kubectl get hpa's table.
	req, _ := http.NewRequest("GET", "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers/api", nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	rr := httptest.NewRecorder()
	e.s.Handler().ServeHTTP(rr, req)
	var tbl metav1.Table
	if err := json.Unmarshal(rr.Body.Bytes(), &tbl); err != nil || len(tbl.Rows) != 1 {
		t.Fatalf("table: %v %.300s", err, rr.Body.String())
	}
	var cols []string
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if diff := cmp.Diff([]string{"Name", "Reference", "Targets", "MinPods", "MaxPods", "Replicas", "Age"}, cols); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	cells := tbl.Rows[0].Cells
	if cells[1] != "Deployment/api" || cells[2] != "memory: <unknown>/100Mi, cpu: <unknown>/50%" || cells[3] != "1" || cells[4] != float64(4) || cells[5] != float64(2) {
		t.Errorf("row: %v", cells)
	}
}
