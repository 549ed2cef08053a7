package apiserver

import (
	"context"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/apiserver/metricsapi"
)

// serveRead serves a kind that is computed rather than stored (its
// registry.Reader): get and list, with label and field selectors, in
// every format the stored kinds have; any other verb is refused as the
// kind's own server (metrics-server) refuses it.
func (s *Server) serveRead(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	if ri.subresource != "" {
		return methodNotSupported(res, ri.verb)
	}
	switch ri.verb {
	case "get":
		if res.namespaced && ri.namespace == "" {
			return notFoundPath()
		}
		format, err := negotiate(r, res, false)
		if err != nil {
			return err
		}
		obj, err := res.reader.Get(r.Context(), ri.namespace, ri.name)
		if err != nil {
			return err
		}
		return s.respond(w, r, http.StatusOK, res, obj, format)
	case "list":
		format, err := negotiate(r, res, false)
		if err != nil {
			return err
		}
		o, err := parseListOptions(r, res, false)
		if err != nil {
			return err
		}
		all, err := res.reader.List(r.Context(), ri.namespace)
		if err != nil {
			return err
		}
		items := make([]runtime.Object, 0, len(all))
		for _, obj := range all {
			if res.matches(&o, obj) {
				obj.GetObjectKind().SetGroupVersionKind(res.gvk())
				items = append(items, obj)
			}
		}
		return s.writeList(w, r, res, format, items, metav1.ListMeta{})
	}
	return methodNotSupported(res, ri.verb)
}

// metricsObjects is what the metrics API reads of the cluster: nodes
// and pods, from the store.
type metricsObjects struct{ s *Server }

func (m metricsObjects) Nodes(ctx context.Context) ([]*corev1.Node, error) {
	objs, err := m.list(ctx, gvr("", "v1", "nodes"), "")
	out := make([]*corev1.Node, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Node))
	}
	return out, err
}

func (m metricsObjects) Pods(ctx context.Context, namespace string) ([]*corev1.Pod, error) {
	objs, err := m.list(ctx, gvr("", "v1", "pods"), namespace)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out, err
}

func (m metricsObjects) list(ctx context.Context, g schema.GroupVersionResource, namespace string) ([]runtime.Object, error) {
	items, _, err := m.s.listObjects(ctx, m.s.reg.byGVR[g], namespace, listOptions{labels: labels.Everything()})
	return items, err
}

var _ metricsapi.Objects = metricsObjects{}

// readOnlyResources are the table's rows of the kinds the server
// computes rather than stores: metrics.k8s.io's.
func (s *Server) readOnlyResources() []*resource {
	kinds := s.resourceMetrics.Kinds()
	out := make([]*resource, len(kinds))
	for i := range kinds {
		out[i] = newResource(&kinds[i])
	}
	return out
}
