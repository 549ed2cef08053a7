package netplugin

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// routeProtocol marks the routes this package installs (the rtm_protocol
// field; `ip route` shows it as "proto 181"), so SetRoutes can find its own
// routes again after a restart and leave everyone else's alone. 181 is not
// assigned in iproute2's rt_protos.
const routeProtocol netlink.RouteProtocol = 181

// SetRoutes makes the routes to other nodes' pod CIDRs exactly routes:
// each prefix (inside the cluster CIDR of its family, not this node's pod
// CIDR) via the node address of that family that owns it, which must be
// reachable on a connected network. Routes of an earlier call that are
// not in routes are removed.
func (n *Network) SetRoutes(ctx context.Context, routes map[netip.Prefix]netip.Addr) error {
	if err := n.enter(); err != nil {
		return err
	}
	defer n.life.RUnlock()
	for dst, gw := range routes {
		if !dst.IsValid() || dst != dst.Masked() {
			return fmt.Errorf("route %s: not a prefix in canonical form", dst)
		}
		f := n.familyOf(dst.Addr())
		if f == nil || dst.Bits() < f.cluster.Bits() || !f.cluster.Contains(dst.Addr()) {
			return fmt.Errorf("route %s: not inside the cluster CIDRs %v", dst, n.cfg.ClusterCIDRs)
		}
		if dst.Overlaps(f.pod) {
			return fmt.Errorf("route %s: overlaps this node's pod CIDR %s", dst, f.pod)
		}
		if gw.Is4() != dst.Addr().Is4() || !gw.IsValid() {
			return fmt.Errorf("route %s: gateway %s is not an %s address", dst, gw, familyLabel(dst.Addr().Is6()))
		}
	}

	n.routesMu.Lock()
	defer n.routesMu.Unlock()
	return n.setRoutesLocked(ctx, routes)
}

func (n *Network) setRoutesLocked(ctx context.Context, routes map[netip.Prefix]netip.Addr) error {
	existing, err := retryDump(func() ([]netlink.Route, error) {
		return n.nl.RouteListFiltered(netlink.FAMILY_ALL,
			&netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: routeProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	})
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	var errs []error
	for dst, gw := range routes {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := &netlink.Route{
			Dst:      prefixToIPNet(dst),
			Gw:       gw.AsSlice(),
			Protocol: routeProtocol,
			Table:    unix.RT_TABLE_MAIN,
		}
		if err := n.nl.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", dst, gw, err))
		}
	}
	for _, r := range existing {
		if r.Dst == nil {
			continue
		}
		dst, ok := ipNetToPrefix(r.Dst)
		f := n.familyOf(dst.Addr())
		if !ok || f == nil || !f.cluster.Contains(dst.Addr()) || dst.Bits() < f.cluster.Bits() {
			continue // same protocol number, not ours
		}
		if _, want := routes[dst]; want {
			continue
		}
		if err := n.nl.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", dst, err))
		}
	}
	return errors.Join(errs...)
}

// familyOf is the network's family of a, nil if it has none.
func (n *Network) familyOf(a netip.Addr) *family {
	for _, f := range n.fams {
		if f.v6() == a.Is6() {
			return f
		}
	}
	return nil
}
