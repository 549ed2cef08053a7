package simulator

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	apiclient "bonsai.dev/bonsai/client"
)

// client is what the simulator uses of the API, over plain REST clients
// that speak protobuf: with 10,000 nodes it makes about a thousand calls a
// second, and JSON would cost most of a core. client-go's typed clientset
// would link every group's client for these few calls.
type client struct {
	core, coordination rest.Interface
}

func newClient(cfg *rest.Config) (*client, error) {
	core, coord, err := apiclient.CoreAndCoordination(cfg)
	if err != nil {
		return nil, err
	}
	return &client{core: core, coordination: coord}, nil
}

func (c *client) patchNodeStatus(ctx context.Context, name string, patch []byte) error {
	return c.core.Patch(types.StrategicMergePatchType).Resource("nodes").Name(name).SubResource("status").Body(patch).Do(ctx).Error()
}

// updatePodStatus writes a pod's status. Nothing of the answer is used:
// it asks for the pod's metadata only, which spares the server encoding
// (and this client reading) the whole pod on every status write.
func (c *client) updatePodStatus(ctx context.Context, p *corev1.Pod) error {
	return c.core.Put().Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("status").
		SetHeader("Accept", apiclient.AcceptPartialMetadata).Body(p).Do(ctx).Error()
}

// deletePod removes a pod whose deletion has begun, as a kubelet does once
// its containers are gone: grace 0, and only that very pod (UID).
func (c *client) deletePod(ctx context.Context, p *corev1.Pod) error {
	opts := &metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}}
	return c.core.Delete().Namespace(p.Namespace).Resource("pods").Name(p.Name).Body(opts).Do(ctx).Error()
}

func (c *client) getLease(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, c.coordination.Get().Namespace(corev1.NamespaceNodeLease).Resource("leases").Name(name).Do(ctx).Into(out)
}

// listLeases lists the node Leases, a page at a time.
func (c *client) listLeases(ctx context.Context) ([]coordinationv1.Lease, error) {
	var out []coordinationv1.Lease
	opts := metav1.ListOptions{Limit: 500}
	for {
		page := &coordinationv1.LeaseList{}
		if err := c.coordination.Get().Namespace(corev1.NamespaceNodeLease).Resource("leases").
			VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(page); err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if opts.Continue = page.Continue; opts.Continue == "" {
			return out, nil
		}
	}
}

func (c *client) createLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, c.coordination.Post().Namespace(corev1.NamespaceNodeLease).Resource("leases").Body(l).Do(ctx).Into(out)
}

func (c *client) updateLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, c.coordination.Put().Namespace(corev1.NamespaceNodeLease).Resource("leases").Name(l.Name).Body(l).Do(ctx).Into(out)
}
