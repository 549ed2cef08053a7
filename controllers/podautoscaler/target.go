package podautoscaler

import (
	"context"
	"encoding/json"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// targets reads and writes the scale subresource of any kind that has
// one (Deployments, ReplicaSets, StatefulSets, custom resources), found
// through discovery, and the pods' figures from the resource metrics
// API, as JSON: custom resources' subresources speak nothing else.
type targets struct {
	rest   rest.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newTargets(cfg *rest.Config) (*targets, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	c.GroupVersion = &schema.GroupVersion{}
	c.ContentType, c.AcceptContentTypes = "application/json", "application/json"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &targets{rest: rc, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// mappings are the resources of kind gk; discovery is read again once
// when it names none (a CRD made since).
func (t *targets) mappings(gk schema.GroupKind) ([]*meta.RESTMapping, error) {
	m, err := t.mapper.RESTMappings(gk)
	if err != nil || len(m) == 0 {
		t.mapper.Reset()
		m, err = t.mapper.RESTMappings(gk)
	}
	return m, err
}

func scalePath(gvr schema.GroupVersionResource, ns, name string) string {
	prefix := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		prefix = "/api/" + gvr.Version
	}
	return prefix + "/namespaces/" + ns + "/" + gvr.Resource + "/" + name + "/scale"
}

// scale reads the scale of the first of mappings that answers, as
// upstream's scaleForResourceMappings does; the first error otherwise.
func (t *targets) scale(ctx context.Context, ns, name string, mappings []*meta.RESTMapping) (*autoscalingv1.Scale, schema.GroupVersionResource, error) {
	var firstErr error
	for _, m := range mappings {
		var sc autoscalingv1.Scale
		err := t.rest.Get().AbsPath(scalePath(m.Resource, ns, name)).Do(ctx).Into(&sc)
		if err == nil {
			return &sc, m.Resource, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("unrecognized resource")
	}
	return nil, schema.GroupVersionResource{}, firstErr
}

func (t *targets) updateScale(ctx context.Context, gvr schema.GroupVersionResource, sc *autoscalingv1.Scale) error {
	body, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	return t.rest.Put().AbsPath(scalePath(gvr, sc.Namespace, sc.Name)).Body(body).Do(ctx).Error()
}

// podMetrics lists the pods' figures of res (of one container if set)
// from metrics.k8s.io, as upstream's resource metrics client does: a pod
// whose containers lack the figure is left out; the time is the first
// pod's.
func (t *targets) podMetrics(ctx context.Context, ns string, sel labels.Selector, res corev1.ResourceName, container string) (podMetrics, error) {
	raw, err := t.rest.Get().AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces/"+ns+"/pods").
		Param("labelSelector", sel.String()).Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("unable to fetch metrics from resource metrics API: %v", err)
	}
	var list metricsv1beta1.PodMetricsList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("unable to fetch metrics from resource metrics API: %v", err)
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no metrics returned from resource metrics API")
	}
	out := make(podMetrics, len(list.Items))
	for _, m := range list.Items {
		var sum int64
		found := false
		missing := len(m.Containers) == 0
		for _, c := range m.Containers {
			if container != "" && c.Name != container {
				continue
			}
			found = true
			q, ok := c.Usage[res]
			if !ok {
				missing = true
				break
			}
			sum += q.MilliValue()
		}
		if container != "" && !found {
			return nil, fmt.Errorf("failed to get container metrics: container %s not present in metrics for pod %s/%s", container, m.Namespace, m.Name)
		}
		if !missing {
			out[m.Name] = podMetric{Timestamp: m.Timestamp.Time, Window: m.Window.Duration, Value: sum}
		}
	}
	return out, nil
}
