package kubelet

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
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
	core, err := restClientFor(cfg, "/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	coord, err := restClientFor(cfg, "/apis", coordinationv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Client{core: core, coordination: coord}, nil
}

func restClientFor(cfg *rest.Config, apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = apiPath, &gv
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
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
