package kubelet

import (
	"bonsai.dev/bonsai/client"

	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Client is the node agent's view of the API: the handful of calls it
// makes on its Node and Lease, over plain REST clients. client-go's typed
// clientset would link every group's client into the binary and cost
// megabytes of resident memory for a few calls.
type Client struct {
	core, coordination rest.Interface
}

// NewClient builds the agent's client from a rest config.
func NewClient(cfg *rest.Config) (*Client, error) {
	core, coord, err := client.CoreAndCoordination(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{core: core, coordination: coord}, nil
}

func (c *Client) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	return out, c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(out)
}

func (c *Client) createNode(ctx context.Context, n *corev1.Node) (*corev1.Node, error) {
	out := &corev1.Node{}
	return out, c.core.Post().Resource("nodes").Body(n).Do(ctx).Into(out)
}

func (c *Client) updateNode(ctx context.Context, n *corev1.Node) (*corev1.Node, error) {
	out := &corev1.Node{}
	return out, c.core.Put().Resource("nodes").Name(n.Name).Body(n).Do(ctx).Into(out)
}

func (c *Client) updateNodeStatus(ctx context.Context, n *corev1.Node) (*corev1.Node, error) {
	out := &corev1.Node{}
	return out, c.core.Put().Resource("nodes").Name(n.Name).SubResource("status").Body(n).Do(ctx).Into(out)
}

func (c *Client) getLease(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, c.coordination.Get().Namespace(corev1.NamespaceNodeLease).Resource("leases").Name(name).Do(ctx).Into(out)
}

func (c *Client) createLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, c.coordination.Post().Namespace(corev1.NamespaceNodeLease).Resource("leases").Body(l).Do(ctx).Into(out)
}

func (c *Client) updateLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, c.coordination.Put().Namespace(corev1.NamespaceNodeLease).Resource("leases").Name(l.Name).Body(l).Do(ctx).Into(out)
}

func (c *Client) getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	return out, c.core.Get().Namespace(ns).Resource("pods").Name(name).Do(ctx).Into(out)
}

func (c *Client) createPod(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	return out, c.core.Post().Namespace(p.Namespace).Resource("pods").Body(p).Do(ctx).Into(out)
}

func (c *Client) updatePodStatus(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	return out, c.core.Put().Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("status").Body(p).Do(ctx).Into(out)
}

// deletePod finishes a pod's deletion once its containers are gone: grace
// 0, and only the instance this kubelet ran (a UID precondition), so a new
// pod of the same name is never deleted by mistake.
func (c *Client) deletePod(ctx context.Context, p *corev1.Pod) error {
	zero := int64(0)
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}}
	return c.core.Delete().Namespace(p.Namespace).Resource("pods").Name(p.Name).Body(opts).Do(ctx).Error()
}

func (c *Client) getConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	return out, c.core.Get().Namespace(ns).Resource("configmaps").Name(name).Do(ctx).Into(out)
}

func (c *Client) getSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	return out, c.core.Get().Namespace(ns).Resource("secrets").Name(name).Do(ctx).Into(out)
}

func (c *Client) createEvent(ctx context.Context, e *corev1.Event) error {
	return c.core.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Error()
}

func (c *Client) listServices(ctx context.Context, ns string) (*corev1.ServiceList, error) {
	out := &corev1.ServiceList{}
	return out, c.core.Get().Namespace(ns).Resource("services").Do(ctx).Into(out)
}

// podListWatch lists and watches the pods bound to one node.
func (c *Client) podListWatch(node string) *cache.ListWatch {
	return cache.NewListWatchFromClient(c.core, "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
}

// nodeListWatch lists and watches every Node (for routes to their pod
// CIDRs).
func (c *Client) nodeListWatch() *cache.ListWatch {
	return cache.NewListWatchFromClient(c.core, "nodes", metav1.NamespaceAll, fields.Everything())
}
