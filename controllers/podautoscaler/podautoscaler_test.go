package podautoscaler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/deployment"
	"bonsai.dev/bonsai/controllers/replicaset"
	"bonsai.dev/bonsai/controllers/statefulset"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const ns = "default"

// start runs the API server with a simulated node (whose pods' metrics
// API figures are half their CPU request), the Deployment, ReplicaSet
// and StatefulSet controllers and the autoscaler syncing every 100 ms.
func start(t *testing.T) *clustertest.Env {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	clustertest.Start(e, func(inf *client.Informers) (*replicaset.Controller, error) {
		return replicaset.New(replicaset.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	clustertest.Start(e, func(inf *client.Informers) (*deployment.Controller, error) {
		return deployment.New(deployment.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	clustertest.Start(e, func(inf *client.Informers) (*statefulset.Controller, error) {
		return statefulset.New(statefulset.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	clustertest.Start(e, func(inf *client.Informers) (*Controller, error) {
		return New(Config{Client: e.Client, Informers: inf, RESTConfig: e.Config, Logger: e.Log, SyncPeriod: 100 * time.Millisecond,
			// Simulated figures start with the pod: no warm-up to wait out.
			CPUInitializationPeriod: time.Nanosecond})
	})
	return e
}

func deploymentOf(name string, replicas int32, cpu string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	c := corev1.Container{Name: "main", Image: "busybox"}
	if cpu != "" {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}},
	}
}

func hpaFor(kind, apiVersion, name string, target int32, maxReplicas int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: kind, APIVersion: apiVersion, Name: name},
			MaxReplicas:    maxReplicas,
			Metrics: []autoscalingv2.MetricSpec{{Type: "Resource", Resource: &autoscalingv2.ResourceMetricSource{Name: "cpu",
				Target: autoscalingv2.MetricTarget{Type: "Utilization", AverageUtilization: &target}}}},
		},
	}
}

// waitCondition waits until the autoscaler has the condition with the
// status and reason, and returns it.
func waitCondition(t *testing.T, e *clustertest.Env, name string, typ autoscalingv2.HorizontalPodAutoscalerConditionType, status corev1.ConditionStatus, reason string) (autoscalingv2.HorizontalPodAutoscalerCondition, *autoscalingv2.HorizontalPodAutoscaler) {
	t.Helper()
	var got autoscalingv2.HorizontalPodAutoscalerCondition
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	clustertest.Eventually(t, 30*time.Second, func() error {
		var err error
		hpa, err = e.Client.Autoscaling.HorizontalPodAutoscalers(ns).Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range hpa.Status.Conditions {
			if c.Type == typ && c.Status == status && c.Reason == reason {
				got = c
				return nil
			}
		}
		return fmt.Errorf("%s: no %s=%s %s in %+v", name, typ, status, reason, hpa.Status.Conditions)
	})
	return got, hpa
}

func waitEvent(t *testing.T, e *clustertest.Env, name, reason, message string) {
	t.Helper()
	clustertest.Eventually(t, 30*time.Second, func() error {
		evs, err := e.Client.Core.Events(ns).List(e.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return err
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.Reason == reason && strings.Contains(ev.Message, message) && ev.Source.Component == componentName {
				return nil
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		return fmt.Errorf("no %s event with %q among %q", reason, message, seen)
	})
}

// Against the real API server: a Deployment whose pods use 50 % of
// their CPU request, under an autoscaler aiming at 20 %, grows to its
// maximum of 4 in one step (within the old limit of double or 4), and
// the autoscaler reports it as upstream does.
func TestScalesDeployment(t *testing.T) {
	e := start(t)
	if _, err := e.Client.Apps.Deployments(ns).Create(e.Ctx, deploymentOf("web", 1, "100m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.Autoscaling.HorizontalPodAutoscalers(ns).Create(e.Ctx, hpaFor("Deployment", "apps/v1", "web", 20, 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		d, err := e.Client.Apps.Deployments(ns).Get(e.Ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if *d.Spec.Replicas != 4 {
			return fmt.Errorf("replicas %d", *d.Spec.Replicas)
		}
		return nil
	})
	waitEvent(t, e, "web", "SuccessfulRescale", "reason: cpu resource utilization (percentage of request) above target")
	c, hpa := waitCondition(t, e, "web", autoscalingv2.ScalingLimited, corev1.ConditionTrue, "TooManyReplicas")
	if c.Message != "the desired replica count is more than the maximum replica count" {
		t.Errorf("ScalingLimited: %+v", c)
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		hpa, _ = e.Client.Autoscaling.HorizontalPodAutoscalers(ns).Get(e.Ctx, "web", metav1.GetOptions{})
		if hpa.Status.CurrentReplicas != 4 || len(hpa.Status.CurrentMetrics) != 1 || hpa.Status.CurrentMetrics[0].Resource.Current.AverageUtilization == nil {
			return fmt.Errorf("status %+v", hpa.Status)
		}
		return nil
	})
	if u := *hpa.Status.CurrentMetrics[0].Resource.Current.AverageUtilization; u != 50 || hpa.Status.CurrentMetrics[0].Resource.Current.AverageValue.String() != "50m" ||
		hpa.Status.DesiredReplicas != 4 || hpa.Status.LastScaleTime == nil || hpa.Status.ObservedGeneration == nil || *hpa.Status.ObservedGeneration != hpa.Generation {
		t.Errorf("status: %+v", hpa.Status)
	}
}

// A StatefulSet is scaled through its scale subresource too; with a
// behavior allowing one pod per minute, one step at a time.
func TestScalesStatefulSetWithBehavior(t *testing.T) {
	e := start(t)
	d := deploymentOf("db", 1, "100m")
	ss := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: appsv1.StatefulSetSpec{Replicas: d.Spec.Replicas, Selector: d.Spec.Selector,
		Template: d.Spec.Template, PodManagementPolicy: appsv1.ParallelPodManagement}}
	if _, err := e.Client.Apps.StatefulSets(ns).Create(e.Ctx, ss, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := hpaFor("StatefulSet", "apps/v1", "db", 20, 5)
	h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{
		Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 60}}}}
	if _, err := e.Client.Autoscaling.HorizontalPodAutoscalers(ns).Create(e.Ctx, h, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		s, err := e.Client.Apps.StatefulSets(ns).Get(e.Ctx, "db", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if *s.Spec.Replicas != 2 {
			return fmt.Errorf("replicas %d", *s.Spec.Replicas)
		}
		return nil
	})
	c, _ := waitCondition(t, e, "db", autoscalingv2.ScalingLimited, corev1.ConditionTrue, "ScaleUpLimit")
	if c.Message != "the desired replica count is increasing faster than the maximum scale rate" {
		t.Errorf("ScalingLimited: %+v", c)
	}
	// Within the minute the policy holds it at 2.
	time.Sleep(time.Second)
	if s, _ := e.Client.Apps.StatefulSets(ns).Get(e.Ctx, "db", metav1.GetOptions{}); *s.Spec.Replicas != 2 {
		t.Errorf("replicas %d within the policy's period, want 2", *s.Spec.Replicas)
	}
}

// What goes wrong is told as upstream tells it: a missing target, a
// target scaled to zero, pods without CPU requests, two autoscalers of
// the same pods, a metric of an API nobody serves.
func TestConditionsOfFailures(t *testing.T) {
	e := start(t)
	hpas := e.Client.Autoscaling.HorizontalPodAutoscalers(ns)
	if _, err := hpas.Create(e.Ctx, hpaFor("Deployment", "apps/v1", "nope", 50, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ := waitCondition(t, e, "nope", autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedGetScale")
	if c.Message != `the HPA controller was unable to get the target's current scale: deployments.apps "nope" not found` {
		t.Errorf("AbleToScale: %q", c.Message)
	}
	waitEvent(t, e, "nope", "FailedGetScale", `deployments.apps "nope" not found`)

	if _, err := e.Client.Apps.Deployments(ns).Create(e.Ctx, deploymentOf("idle", 0, "100m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hpas.Create(e.Ctx, hpaFor("Deployment", "apps/v1", "idle", 50, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ = waitCondition(t, e, "idle", autoscalingv2.ScalingActive, corev1.ConditionFalse, "ScalingDisabled")
	if c.Message != "scaling is disabled since the replica count of the target is zero" {
		t.Errorf("ScalingActive: %q", c.Message)
	}

	if _, err := e.Client.Apps.Deployments(ns).Create(e.Ctx, deploymentOf("norequests", 1, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hpas.Create(e.Ctx, hpaFor("Deployment", "apps/v1", "norequests", 50, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ = waitCondition(t, e, "norequests", autoscalingv2.ScalingActive, corev1.ConditionFalse, "FailedGetResourceMetric")
	if !strings.HasPrefix(c.Message, "the HPA was unable to compute the replica count: failed to get cpu utilization: missing request for cpu in container main of Pod norequests-") {
		t.Errorf("ScalingActive: %q", c.Message)
	}
	waitEvent(t, e, "norequests", "FailedComputeMetricsReplicas", "invalid metrics (1 invalid out of 1), first error is: failed to get cpu utilization: missing request for cpu")

	// Two autoscalers of the same pods: neither scales.
	twin := hpaFor("Deployment", "apps/v1", "norequests", 50, 3)
	twin.Name = "twin"
	if _, err := hpas.Create(e.Ctx, twin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ = waitCondition(t, e, "twin", autoscalingv2.ScalingActive, corev1.ConditionFalse, "AmbiguousSelector")
	if c.Message != "pods by selector app=norequests are controlled by multiple HPAs: [default/norequests default/twin]" {
		t.Errorf("ScalingActive of twin autoscalers: %q", c.Message)
	}
	waitEvent(t, e, "twin", "AmbiguousSelector", "controlled by multiple HPAs")

	// A Pods metric needs custom.metrics.k8s.io, which only an adapter
	// serves.
	if _, err := e.Client.Apps.Deployments(ns).Create(e.Ctx, deploymentOf("custom", 1, "100m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := hpaFor("Deployment", "apps/v1", "custom", 50, 3)
	pods.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: "Pods", Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "qps"},
		Target: autoscalingv2.MetricTarget{Type: "AverageValue", AverageValue: ptr.To(resource.MustParse("10"))}}}}
	if _, err := hpas.Create(e.Ctx, pods, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ = waitCondition(t, e, "custom", autoscalingv2.ScalingActive, corev1.ConditionFalse, "FailedGetPodsMetric")
	if !strings.Contains(c.Message, "unable to get metric qps: unable to fetch metrics from custom metrics API: the server could not find the requested resource") {
		t.Errorf("ScalingActive of a Pods metric: %q", c.Message)
	}
}

// A custom resource with a scale subresource is scaled through it: the
// autoscaler finds its resource through discovery.
func TestScalesCustomResource(t *testing.T) {
	e := start(t)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale: &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas", LabelSelectorPath: ptr.To(".status.selector")}},
			}},
		},
	}
	if _, err := crdclient.NewForConfigOrDie(e.Config).CustomResourceDefinitions().Create(e.Ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	disc := discovery.NewDiscoveryClientForConfigOrDie(e.Config)
	clustertest.Eventually(t, 10*time.Second, func() error {
		_, err := disc.ServerResourcesForGroupVersion("example.com/v1")
		return err
	})
	dyn := dynamic.NewForConfigOrDie(e.Config).Resource(gvr).Namespace(ns)
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"},
		"spec": map[string]any{"replicas": int64(2)}}}
	w, err := dyn.Create(e.Ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Object["status"] = map[string]any{"replicas": int64(2), "selector": "app=widget"}
	if _, err := dyn.UpdateStatus(e.Ctx, w, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The widget's pods, made by hand: 50 % of their request each.
	for i := range 2 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("widget-%d", i), Labels: map[string]string{"app": "widget"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}}}}}}
		if _, err := e.Client.Core.Pods(ns).Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Client.Autoscaling.HorizontalPodAutoscalers(ns).Create(e.Ctx, hpaFor("Widget", "example.com/v1", "w", 25, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		got, err := dyn.Get(e.Ctx, "w", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if r, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); r != 3 {
			return fmt.Errorf("widget replicas %d", r)
		}
		return nil
	})
	waitEvent(t, e, "w", "SuccessfulRescale", "New size: 3; reason: cpu resource utilization (percentage of request) above target")
}
