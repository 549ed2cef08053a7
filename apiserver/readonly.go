package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

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
		format, o, err := listRequest(r, res)
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
	return listTyped[*corev1.Node](ctx, m.s, gvr("", "v1", "nodes"), "")
}

func (m metricsObjects) Pods(ctx context.Context, namespace string) ([]*corev1.Pod, error) {
	return listTyped[*corev1.Pod](ctx, m.s, gvr("", "v1", "pods"), namespace)
}

// listTyped is every stored object of a built-in resource in namespace.
func listTyped[T runtime.Object](ctx context.Context, s *Server, g schema.GroupVersionResource, namespace string) ([]T, error) {
	items, _, err := s.listObjects(ctx, s.reg.byGVR[g], namespace, listOptions{labels: labels.Everything()})
	out := make([]T, 0, len(items))
	for _, o := range items {
		out = append(out, o.(T))
	}
	return out, err
}

var _ metricsapi.Objects = metricsObjects{}

// readOnlyResources are the table's rows of the kinds the server
// computes rather than stores: metrics.k8s.io's and ComponentStatuses.
func (s *Server) readOnlyResources() []*resource {
	kinds := append(s.resourceMetrics.Kinds(), componentStatusKind(s))
	out := make([]*resource, len(kinds))
	for i := range kinds {
		out[i] = newResource(&kinds[i])
	}
	return out
}

// kubeletSummaries is the metrics API's source: local (this host's
// node, in-process) when it has the node's figures, else the node's
// kubelet API over HTTPS with the API server's kubelet-client identity,
// as nodes/proxy reaches it (agents' nodes).
type kubeletSummaries struct {
	s     *Server
	local metricsapi.Source
}

// kubeletRequestTimeout is metrics-server's --kubelet-request-timeout.
const kubeletRequestTimeout = 10 * time.Second

func (k kubeletSummaries) Summary(ctx context.Context, node string) (*statsapi.Summary, error) {
	if k.local != nil {
		if sum, err := k.local.Summary(ctx, node); err == nil && sum != nil {
			return sum, nil
		}
	}
	host, err := k.s.kubeletHost(ctx, node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, kubeletRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "https://"+host+"/stats/summary?only_cpu_and_memory=true", nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.s.kubelet.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet of node %s: GET /stats/summary: %s", node, resp.Status)
	}
	var sum statsapi.Summary
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&sum); err != nil {
		return nil, fmt.Errorf("kubelet of node %s: /stats/summary: %w", node, err)
	}
	return &sum, nil
}
