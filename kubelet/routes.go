package kubelet

import (
	"context"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/kubelet/simulator"
)

// routeSetter is the part of the built-in pod network that routes to
// other nodes' pod CIDRs (netplugin.Network.SetRoutes).
type routeSetter interface {
	SetRoutes(ctx context.Context, routes map[netip.Prefix]netip.Addr) error
}

// nodeRoutes is where this node sends traffic for other nodes' pods: each
// other node's pod CIDR via its first InternalIP of that family.
// Simulated nodes have no pods to reach, and nodes without a pod CIDR or
// an address of its family have nothing to route yet.
func nodeRoutes(self string, nodes []*corev1.Node) map[netip.Prefix]netip.Addr {
	out := map[netip.Prefix]netip.Addr{}
	for _, n := range nodes {
		if n.Name == self || n.Annotations[simulator.AnnotationSimulated] == "true" {
			continue
		}
		var gw4, gw6 netip.Addr
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if a.Type != corev1.NodeInternalIP || err != nil {
				continue
			}
			if ip = ip.Unmap(); ip.Is4() && !gw4.IsValid() {
				gw4 = ip
			} else if ip.Is6() && !gw6.IsValid() {
				gw6 = ip
			}
		}
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				continue
			}
			gw := gw4
			if p.Addr().Is6() {
				gw = gw6
			}
			if gw.IsValid() {
				out[p.Masked()] = gw
			}
		}
	}
	return out
}

// syncRoutes keeps the kernel's routes to other nodes' pod CIDRs in step
// with the Nodes until ctx ends. Changes are coalesced; a failed sync
// (an address not on a connected network, say) is logged once per
// distinct error and retried every 30 s.
func (a *Agent) syncRoutes(ctx context.Context, net routeSetter) {
	kick := make(chan struct{}, 1)
	wake := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	store, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: a.cfg.Client.nodeListWatch(),
		ObjectType:    &corev1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { wake() },
			UpdateFunc: func(old, cur any) {
				if routesDiffer(old.(*corev1.Node), cur.(*corev1.Node)) {
					wake()
				}
			},
			DeleteFunc: func(any) { wake() },
		},
	})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return
	}
	lastErr := ""
	retry := time.NewTicker(30 * time.Second)
	defer retry.Stop()
	for {
		var nodes []*corev1.Node
		for _, o := range store.List() {
			nodes = append(nodes, o.(*corev1.Node))
		}
		err := net.SetRoutes(ctx, nodeRoutes(a.cfg.NodeName, nodes))
		switch {
		case err != nil && err.Error() != lastErr:
			a.cfg.Logger.Warn("routes to other nodes' pod CIDRs", "err", err)
			lastErr = err.Error()
		case err == nil:
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-retry.C:
		}
	}
}

// routesDiffer: a Node update that can change its route (its pod CIDRs,
// addresses or simulation), not a heartbeat.
func routesDiffer(a, b *corev1.Node) bool {
	one := nodeRoutes("", []*corev1.Node{a})
	two := nodeRoutes("", []*corev1.Node{b})
	if len(one) != len(two) {
		return true
	}
	for k, v := range one {
		if two[k] != v {
			return true
		}
	}
	return false
}
