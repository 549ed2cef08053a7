package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"bonsai.dev/bonsai/client"
)

// LoadBalancerClass is the spec.loadBalancerClass of bonsai's built-in
// load balancer: it serves LoadBalancer Services of no class (it is the
// cluster's default implementation) and of this one, and leaves those of
// any other class to their own implementation.
const LoadBalancerClass = "bonsai.dev/service-lb"

// ours reports whether the built-in load balancer serves svc's class.
func ours(svc *corev1.Service) bool {
	c := svc.Spec.LoadBalancerClass
	return c == nil || *c == LoadBalancerClass
}

// lbStatusController is bonsai's built-in load balancer, k3s' ServiceLB
// without its pods: a LoadBalancer Service of no class, or of its own,
// gets the Nodes' addresses as status.loadBalancer.ingress, and the proxy
// serves those addresses at the Service's ports (they are external IPs
// to it).
// Every node's proxy computes the same status from the same Nodes, so
// several of them agree rather than fight. As with ServiceLB, whose pods
// take the port on every node, a Service asking for a port that an older
// LoadBalancer Service has stays pending (no ingress) until it is free.
type lbStatusController struct {
	client   *client.Clientset
	services cache.Indexer
	nodes    cache.Indexer
	nodeIPs  []netip.Addr
	log      *slog.Logger
	queue    workqueue.TypedRateLimitingInterface[string]
}

func newLBStatusController(cfg Config, services, nodes cache.Indexer, log *slog.Logger) *lbStatusController {
	return &lbStatusController{
		client: cfg.Client, services: services, nodes: nodes, nodeIPs: cfg.NodeIPs, log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "proxy-lb-status"}),
	}
}

// enqueueAll queues every LoadBalancer Service, and every Service that
// still has an ingress: a Node or a Service changed, and with it maybe
// the addresses or the ports they get.
func (c *lbStatusController) enqueueAll() {
	for _, obj := range c.services.List() {
		svc := obj.(*corev1.Service)
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) > 0 {
			c.queue.Add(serviceKey(svc.Namespace, svc.Name))
		}
	}
}

func (c *lbStatusController) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		if err := c.sync(ctx, key); err != nil {
			c.log.Error("set load balancer status", "service", key, "err", err)
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

func (c *lbStatusController) sync(ctx context.Context, key string) error {
	obj, exists, err := c.services.GetByKey(key)
	if err != nil || !exists {
		return err
	}
	svc := obj.(*corev1.Service)
	// Another class is another implementation's to serve.
	if !ours(svc) {
		return nil
	}
	want := c.ingress()
	if len(want) == 0 {
		return nil // no address to give yet; a Node event brings one
	}
	// A Service that is no longer a LoadBalancer, or waits for a port,
	// loses what this controller gave it (and nothing else).
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || c.portTaken(svc) {
		if !equality.Semantic.DeepEqual(svc.Status.LoadBalancer.Ingress, want) {
			return nil
		}
		want = nil
	}
	if equality.Semantic.DeepEqual(svc.Status.LoadBalancer.Ingress, want) {
		return nil
	}
	update := svc.DeepCopy()
	update.Status.LoadBalancer.Ingress = want
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = c.client.Core.Services(svc.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // the informer brings the newer object, which syncs again
	}
	if err != nil {
		return fmt.Errorf("update status of Service %s: %w", key, err)
	}
	return nil
}

// portTaken reports whether an older LoadBalancer Service the built-in
// load balancer serves has one of svc's ports (protocol and number).
func (c *lbStatusController) portTaken(svc *corev1.Service) bool {
	for _, obj := range c.services.List() {
		o := obj.(*corev1.Service)
		if o.UID == svc.UID || o.Spec.Type != corev1.ServiceTypeLoadBalancer || !ours(o) || o.DeletionTimestamp != nil {
			continue
		}
		if !olderThan(o, svc) {
			continue
		}
		for _, p := range svc.Spec.Ports {
			for _, q := range o.Spec.Ports {
				if protocolOf(p.Protocol) == protocolOf(q.Protocol) && p.Port == q.Port {
					return true
				}
			}
		}
	}
	return false
}

func olderThan(a, b *corev1.Service) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return serviceKey(a.Namespace, a.Name) < serviceKey(b.Namespace, b.Name)
}

// ingress is one entry per Node InternalIP (IPv4), sorted; NodeIPs when
// no Node has one yet.
func (c *lbStatusController) ingress() []corev1.LoadBalancerIngress {
	var ips []netip.Addr
	for _, obj := range c.nodes.List() {
		n := obj.(*corev1.Node)
		if n.DeletionTimestamp != nil {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				ips = append(ips, ip)
			}
		}
	}
	if len(ips) == 0 {
		for _, ip := range c.nodeIPs {
			if ip.Is4() {
				ips = append(ips, ip)
			}
		}
	}
	slicesSortUnique(&ips)
	mode := corev1.LoadBalancerIPModeVIP
	out := make([]corev1.LoadBalancerIngress, 0, len(ips))
	for _, ip := range ips {
		out = append(out, corev1.LoadBalancerIngress{IP: ip.String(), IPMode: &mode})
	}
	return out
}
