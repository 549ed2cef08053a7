package podautoscaler

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	custommetricsv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	externalmetricsv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
)

// Pods, Object and External metrics come from the custom and external
// metrics APIs (custom.metrics.k8s.io/v1beta2,
// external.metrics.k8s.io/v1beta1), which bonsai does not serve itself:
// an adapter (prometheus-adapter, KEDA) serves them through an
// APIService, and the autoscaler reads them as kube-controller-manager
// does, in milli-units.

// customList gets a custom metrics API list; metricSel goes as
// metricLabelSelector when it selects anything narrower than all.
func (t *targets) customList(ctx context.Context, path string, podSel, metricSel labels.Selector) (*custommetricsv1beta2.MetricValueList, error) {
	req := t.rest.Get().AbsPath("/apis/custom.metrics.k8s.io/v1beta2/" + path)
	if podSel != nil {
		req = req.Param("labelSelector", podSel.String())
	}
	if s := metricSel.String(); s != "" {
		req = req.Param("metricLabelSelector", s)
	}
	raw, err := req.Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("unable to fetch metrics from custom metrics API: %w", err)
	}
	var list custommetricsv1beta2.MetricValueList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("unable to fetch metrics from custom metrics API: %w", err)
	}
	return &list, nil
}

// podsCustomMetric is each selected pod's figure of a Pods metric.
func (t *targets) podsCustomMetric(ctx context.Context, ns, name string, podSel, metricSel labels.Selector) (podMetrics, error) {
	list, err := t.customList(ctx, "namespaces/"+ns+"/pods/*/"+name, podSel, metricSel)
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no metrics returned from custom metrics API")
	}
	out := make(podMetrics, len(list.Items))
	for _, m := range list.Items {
		pm := podMetric{Timestamp: m.Timestamp.Time, Value: m.Value.MilliValue()}
		if m.WindowSeconds != nil {
			pm.Window = time.Duration(*m.WindowSeconds) * time.Second
		}
		out[m.DescribedObject.Name] = pm
	}
	return out, nil
}

// objectCustomMetric is an Object metric's figure: the described object
// is found by its kind through discovery, and asked for under its
// group-qualified resource name ("services", "ingresses.networking.k8s.io").
func (t *targets) objectCustomMetric(ctx context.Context, ns string, obj autoscalingv2.CrossVersionObjectReference, name string, metricSel labels.Selector) (int64, error) {
	gv, err := schema.ParseGroupVersion(obj.APIVersion)
	if err != nil {
		return 0, err
	}
	ms, err := t.mappings(gv.WithKind(obj.Kind).GroupKind())
	if err != nil {
		return 0, err
	}
	if len(ms) == 0 {
		return 0, fmt.Errorf("no matches for kind %q in group %q", obj.Kind, gv.Group)
	}
	list, err := t.customList(ctx, "namespaces/"+ns+"/"+ms[0].Resource.GroupResource().String()+"/"+obj.Name+"/"+name, nil, metricSel)
	if err != nil {
		return 0, err
	}
	if len(list.Items) != 1 {
		return 0, fmt.Errorf("expected exactly one metric value for %s %s/%s, got %d", obj.Kind, ns, obj.Name, len(list.Items))
	}
	return list.Items[0].Value.MilliValue(), nil
}

// externalMetric is the sum of an External metric's values.
func (t *targets) externalMetric(ctx context.Context, ns, name string, metricSel labels.Selector) (int64, error) {
	req := t.rest.Get().AbsPath("/apis/external.metrics.k8s.io/v1beta1/namespaces/" + ns + "/" + name)
	if s := metricSel.String(); s != "" {
		req = req.Param("labelSelector", s)
	}
	raw, err := req.Do(ctx).Raw()
	if err != nil {
		return 0, fmt.Errorf("unable to fetch metrics from external metrics API: %w", err)
	}
	var list externalmetricsv1beta1.ExternalMetricValueList
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, fmt.Errorf("unable to fetch metrics from external metrics API: %w", err)
	}
	if len(list.Items) == 0 {
		return 0, fmt.Errorf("no metrics returned from external metrics API")
	}
	var sum int64
	for _, m := range list.Items {
		v := m.Value.MilliValue()
		if v > 0 && sum > math.MaxInt64-v {
			return math.MaxInt64, nil
		}
		sum += v
	}
	return sum, nil
}

// ratioReplicas is upstream's count for a ratio of a Value target: the
// current count within tolerance, else the ratio times the ready pods
// (scaling from zero: the ratio itself).
func (rc replicaCalc) ratioReplicas(current int32, ratio float64, pods []*corev1.Pod) (int32, error) {
	if current == 0 {
		return int32(math.Ceil(ratio)), nil
	}
	if rc.tolerances.within(ratio) {
		return current, nil
	}
	if len(pods) == 0 {
		return 0, fmt.Errorf("unable to calculate ready pods: no pods returned by selector while calculating replica count")
	}
	ready := 0
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && podReady(p) {
			ready++
		}
	}
	return int32(min(math.Ceil(ratio*float64(ready)), math.MaxInt32)), nil
}

// perPodReplicas is upstream's count for an AverageValue target of an
// Object or External metric: total usage over the target per pod, with
// the mean usage per replica now.
func (rc replicaCalc) perPodReplicas(statusReplicas int32, usage, target int64) (int32, int64) {
	n := statusReplicas
	if !rc.tolerances.within(float64(usage) / (float64(target) * float64(n))) {
		n = int32(math.Ceil(float64(usage) / float64(target)))
	}
	if statusReplicas == 0 {
		return n, usage
	}
	return n, int64(math.Ceil(float64(usage) / float64(statusReplicas)))
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func milli(v int64) *resource.Quantity { return resource.NewMilliQuantity(v, resource.DecimalSI) }

// customReplicas is a Pods, Object or External metric's count, name and
// status, as kube-controller-manager computes them.
func (c *Controller) customReplicas(ctx context.Context, rc replicaCalc, hpa *autoscalingv2.HorizontalPodAutoscaler, spec autoscalingv2.MetricSpec, current, statusReplicas int32, sel labels.Selector, pods []*corev1.Pod, status *autoscalingv2.MetricStatus) (int32, string, condition, error) {
	switch spec.Type {
	case autoscalingv2.PodsMetricSourceType:
		s := spec.Pods
		fail := func(err error) (int32, string, condition, error) {
			return 0, "", c.unable(hpa, "FailedGetPodsMetric", err), fmt.Errorf("failed to get pods metric value: %w", err)
		}
		metricSel, err := metav1.LabelSelectorAsSelector(s.Metric.Selector)
		if err != nil {
			return fail(err)
		}
		metrics, err := c.targets.podsCustomMetric(ctx, hpa.Namespace, s.Metric.Name, sel, metricSel)
		if err != nil {
			return fail(fmt.Errorf("unable to get metric %s: %w", s.Metric.Name, err))
		}
		n, usage, err := rc.averageReplicas(current, s.Target.AverageValue.MilliValue(), "", pods, metrics)
		if err != nil {
			return fail(err)
		}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, Pods: &autoscalingv2.PodsMetricStatus{Metric: s.Metric, Current: autoscalingv2.MetricValueStatus{AverageValue: milli(usage)}}}
		return n, "pods metric " + s.Metric.Name, condition{}, nil
	case autoscalingv2.ObjectMetricSourceType:
		s := spec.Object
		fail := func(err error) (int32, string, condition, error) {
			return 0, "", c.unable(hpa, "FailedGetObjectMetric", err), fmt.Errorf("failed to get object metric value: %w", err)
		}
		metricSel, err := metav1.LabelSelectorAsSelector(s.Metric.Selector)
		if err != nil {
			return fail(err)
		}
		usage, err := c.targets.objectCustomMetric(ctx, hpa.Namespace, s.DescribedObject, s.Metric.Name, metricSel)
		if err != nil {
			return fail(fmt.Errorf("unable to get metric %s: %s on %s %s/%s: %w", s.Metric.Name, s.DescribedObject.Kind, hpa.Namespace, s.DescribedObject.Kind, s.DescribedObject.Name, err))
		}
		st := &autoscalingv2.ObjectMetricStatus{DescribedObject: s.DescribedObject, Metric: s.Metric}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, Object: st}
		switch {
		case s.Target.Type == autoscalingv2.ValueMetricType && s.Target.Value != nil:
			n, err := rc.ratioReplicas(current, float64(usage)/float64(s.Target.Value.MilliValue()), pods)
			if err != nil {
				return fail(err)
			}
			st.Current.Value = milli(usage)
			return n, fmt.Sprintf("%s metric %s", s.DescribedObject.Kind, s.Metric.Name), condition{}, nil
		case s.Target.Type == autoscalingv2.AverageValueMetricType && s.Target.AverageValue != nil:
			n, avg := rc.perPodReplicas(statusReplicas, usage, s.Target.AverageValue.MilliValue())
			st.Current.AverageValue = milli(avg)
			return n, fmt.Sprintf("external metric %s(%+v)", s.Metric.Name, s.Metric.Selector), condition{}, nil
		}
		return fail(fmt.Errorf("invalid object metric source: neither a value target nor an average value target was set"))
	case autoscalingv2.ExternalMetricSourceType:
		s := spec.External
		fail := func(err error) (int32, string, condition, error) {
			return 0, "", c.unable(hpa, "FailedGetExternalMetric", err), fmt.Errorf("failed to get %s external metric value: %w", s.Metric.Name, err)
		}
		metricSel, err := metav1.LabelSelectorAsSelector(s.Metric.Selector)
		if err != nil {
			return fail(err)
		}
		usage, err := c.targets.externalMetric(ctx, hpa.Namespace, s.Metric.Name, metricSel)
		if err != nil {
			return fail(fmt.Errorf("unable to get external metric %s/%s/%+v: %s", hpa.Namespace, s.Metric.Name, s.Metric.Selector, err))
		}
		st := &autoscalingv2.ExternalMetricStatus{Metric: s.Metric}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, External: st}
		name := fmt.Sprintf("external metric %s(%+v)", s.Metric.Name, s.Metric.Selector)
		switch {
		case s.Target.Type == autoscalingv2.AverageValueMetricType && s.Target.AverageValue != nil:
			n, avg := rc.perPodReplicas(statusReplicas, usage, s.Target.AverageValue.MilliValue())
			st.Current.AverageValue = milli(avg)
			return n, name, condition{}, nil
		case s.Target.Type == autoscalingv2.ValueMetricType && s.Target.Value != nil:
			n, err := rc.ratioReplicas(current, float64(usage)/float64(s.Target.Value.MilliValue()), pods)
			if err != nil {
				return fail(err)
			}
			st.Current.Value = milli(usage)
			return n, name, condition{}, nil
		}
		return fail(fmt.Errorf("invalid external metric source: neither a value target nor an average value target was set"))
	}
	err := fmt.Errorf("unknown metric source type %q", string(spec.Type))
	return 0, "", c.unable(hpa, "InvalidMetricSourceType", err), err
}
