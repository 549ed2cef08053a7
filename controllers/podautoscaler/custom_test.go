package podautoscaler

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

// metricsAdapter is a custom and external metrics API server, as
// prometheus-adapter or KEDA serve them through an APIService: the pods
// share qps 30 (one pod reports 30, three 10 each), the Service "frontend" requests-per-second 300, the
// external queue_depth (queue=jobs) two series of 20 and 30. It records
// the queries it answers.
type metricsAdapter struct {
	srv     *httptest.Server
	mu      sync.Mutex
	queries []string
}

func newMetricsAdapter(t *testing.T, e *clustertest.Env) *metricsAdapter {
	a := &metricsAdapter{}
	now := metav1.Now()
	a.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.queries = append(a.queries, r.URL.RequestURI())
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		p := r.URL.Path
		switch {
		case p == "/apis/custom.metrics.k8s.io/v1beta2" || p == "/apis/external.metrics.k8s.io/v1beta1":
			gv := strings.TrimPrefix(p, "/apis/")
			enc.Encode(metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv,
				APIResources: []metav1.APIResource{{Name: "metrics", Namespaced: true, Kind: "MetricValueList", Verbs: metav1.Verbs{"get"}}}})
		case strings.HasPrefix(p, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/qps"):
			pods, err := e.Client.Core.Pods(ns).List(e.Ctx, metav1.ListOptions{LabelSelector: r.URL.Query().Get("labelSelector")})
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			// The load is spread: more pods, fewer queries each.
			var items []map[string]any
			for _, pod := range pods.Items {
				items = append(items, map[string]any{"describedObject": map[string]any{"kind": "Pod", "namespace": ns, "name": pod.Name, "apiVersion": "/v1"},
					"metric": map[string]any{"name": "qps"}, "timestamp": now, "windowSeconds": 60, "value": fmt.Sprintf("%dm", 30000/len(pods.Items))})
			}
			enc.Encode(map[string]any{"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": map[string]any{}, "items": items})
		case p == "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/services/frontend/requests-per-second":
			enc.Encode(map[string]any{"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": map[string]any{}, "items": []any{
				map[string]any{"describedObject": map[string]any{"kind": "Service", "namespace": ns, "name": "frontend", "apiVersion": "/v1"},
					"metric": map[string]any{"name": "requests-per-second"}, "timestamp": now, "value": "300"}}})
		case p == "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth" && r.URL.Query().Get("labelSelector") == "queue=jobs":
			enc.Encode(map[string]any{"kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1", "metadata": map[string]any{}, "items": []any{
				map[string]any{"metricName": "queue_depth", "metricLabels": map[string]string{"queue": "jobs"}, "timestamp": now, "value": "20"},
				map[string]any{"metricName": "queue_depth", "metricLabels": map[string]string{"queue": "jobs"}, "timestamp": now, "value": "30"}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.srv.Close)
	port := int32(netip.MustParseAddrPort(a.srv.Listener.Addr().String()).Port())
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "adapter"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(port)}}}}
	if _, err := e.Client.Core.Services(ns).Create(e.Ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "adapter-1", Labels: map[string]string{discoveryv1.LabelServiceName: "adapter"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port)}}}
	if _, err := e.Client.Discovery.EndpointSlices(ns).Create(e.Ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	apiservices := dc.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"})
	for _, gv := range []schema.GroupVersion{{Group: "custom.metrics.k8s.io", Version: "v1beta2"}, {Group: "external.metrics.k8s.io", Version: "v1beta1"}} {
		as := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
			"metadata": map[string]any{"name": gv.Version + "." + gv.Group},
			"spec": map[string]any{"group": gv.Group, "version": gv.Version, "groupPriorityMinimum": int64(100), "versionPriority": int64(100),
				"insecureSkipTLSVerify": true, "service": map[string]any{"namespace": ns, "name": "adapter", "port": int64(443)}}}}
		if _, err := apiservices.Create(e.Ctx, as, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func (a *metricsAdapter) asked(prefix string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, q := range a.queries {
		if strings.HasPrefix(q, prefix) {
			return true
		}
	}
	return false
}

// Pods, Object and External metrics served by an adapter through the
// aggregator scale as kube-controller-manager scales them: qps 30 against
// an average of 10 per pod wants 3 pods; a Service at 300 requests/s against a
// value of 100 triples the ready pods (again at each sync as more become
// ready); a queue of 50 against an average
// of 10 per pod wants 5 pods.
func TestCustomAndExternalMetrics(t *testing.T) {
	e := start(t)
	a := newMetricsAdapter(t, e)
	hpas := e.Client.Autoscaling.HorizontalPodAutoscalers(ns)
	qty := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	for name, m := range map[string]autoscalingv2.MetricSpec{
		"pods-qps": {Type: "Pods", Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "qps"},
			Target: autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: qty("10")}}},
		"object-rps": {Type: "Object", Object: &autoscalingv2.ObjectMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "requests-per-second"},
			DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Service", APIVersion: "v1", Name: "frontend"},
			Target:          autoscalingv2.MetricTarget{Type: "Value", Value: qty("100")}}},
		"external-queue": {Type: "External", External: &autoscalingv2.ExternalMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: "queue_depth", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"queue": "jobs"}}},
			Target: autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: qty("10")}}},
	} {
		if _, err := e.Client.Apps.Deployments(ns).Create(e.Ctx, deploymentOf(name, 1, "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		hpa := hpaFor("Deployment", "apps/v1", name, 50, 8)
		hpa.Spec.Metrics = []autoscalingv2.MetricSpec{m}
		if _, err := hpas.Create(e.Ctx, hpa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]int32{"pods-qps": 3, "object-rps": 3, "external-queue": 5} {
		clustertest.Eventually(t, 30*time.Second, func() error {
			d, err := e.Client.Apps.Deployments(ns).Get(e.Ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			// A Value target of an Object metric scales the ready pods
			// by usage over target at every sync, as upstream: once the
			// first 3 are ready, the next sync triples them again (up to
			// the maximum), so only the first step is certain.
			if got := *d.Spec.Replicas; got != want && (name != "object-rps" || got < want) {
				return fmt.Errorf("%s: replicas %d, want %d", name, got, want)
			}
			return nil
		})
	}
	c, _ := waitCondition(t, e, "pods-qps", autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound")
	if c.Message != "the HPA was able to successfully calculate a replica count from pods metric qps" {
		t.Errorf("pods-qps ScalingActive: %q", c.Message)
	}
	// Once the 3 pods share the load: 10 each.
	clustertest.Eventually(t, 30*time.Second, func() error {
		h, err := hpas.Get(e.Ctx, "pods-qps", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm := h.Status.CurrentMetrics; len(cm) != 1 || cm[0].Pods == nil || cm[0].Pods.Current.AverageValue.String() != "10" {
			return fmt.Errorf("pods-qps current metrics %+v, want an average of 10", cm)
		}
		return nil
	})
	_, hpa := waitCondition(t, e, "object-rps", autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound")
	if cm := hpa.Status.CurrentMetrics; len(cm) != 1 || cm[0].Object == nil || cm[0].Object.Current.Value.String() != "300" || cm[0].Object.DescribedObject.Name != "frontend" {
		t.Errorf("object-rps current metrics %+v, want frontend's 300", cm)
	}
	_, hpa = waitCondition(t, e, "external-queue", autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound")
	if cm := hpa.Status.CurrentMetrics; len(cm) != 1 || cm[0].External == nil || cm[0].External.Current.AverageValue == nil {
		t.Errorf("external-queue current metrics %+v", cm)
	}
	if !a.asked("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/%2A/qps?labelSelector=app%3Dpods-qps") &&
		!a.asked("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/qps?labelSelector=app%3Dpods-qps") {
		a.mu.Lock()
		t.Errorf("the pods metric was not asked for the HPA's pods: %q", a.queries)
		a.mu.Unlock()
	}

	// An Object metric the adapter does not have: upstream's condition.
	if _, err := e.Client.Apps.Deployments(ns).Create(e.Ctx, deploymentOf("unknown", 1, "100m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hpa = hpaFor("Deployment", "apps/v1", "unknown", 50, 3)
	hpa.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: "Object", Object: &autoscalingv2.ObjectMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "latency"},
		DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Service", APIVersion: "v1", Name: "frontend"},
		Target:          autoscalingv2.MetricTarget{Type: "Value", Value: qty("1")}}}}
	if _, err := hpas.Create(e.Ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ = waitCondition(t, e, "unknown", autoscalingv2.ScalingActive, corev1.ConditionFalse, "FailedGetObjectMetric")
	if !strings.HasPrefix(c.Message, "the HPA was unable to compute the replica count: unable to get metric latency: Service on default Service/frontend: unable to fetch metrics from custom metrics API: ") {
		t.Errorf("ScalingActive of a missing object metric: %q", c.Message)
	}
}
