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
// each prefix (inside the cluster CIDR, not this node's pod CIDR) via the
// node address that owns it, which must be reachable on a connected
// network. Routes of an earlier call that are not in routes are removed.
func (n *Network) SetRoutes(ctx context.Context, routes map[netip.Prefix]netip.Addr) error {
	if err := n.enter(); err != nil {
		return err
	}
	defer n.life.RUnlock()
	for dst, gw := range routes {
		if !dst.IsValid() || !dst.Addr().Is4() || dst != dst.Masked() {
			return fmt.Errorf("route %s: not an IPv4 prefix in canonical form", dst)
		}
		if dst.Bits() < n.cfg.ClusterCIDR.Bits() || !n.cfg.ClusterCIDR.Contains(dst.Addr()) {
			return fmt.Errorf("route %s: not inside the cluster CIDR %s", dst, n.cfg.ClusterCIDR)
		}
		if dst.Overlaps(n.cfg.PodCIDR) {
			return fmt.Errorf("route %s: overlaps this node's pod CIDR %s", dst, n.cfg.PodCIDR)
		}
		if !gw.Is4() {
			return fmt.Errorf("route %s: gateway %s is not an IPv4 address", dst, gw)
		}
	}

	n.routesMu.Lock()
	defer n.routesMu.Unlock()
	return n.setRoutesLocked(ctx, routes)
}

func (n *Network) setRoutesLocked(ctx context.Context, routes map[netip.Prefix]netip.Addr) error {
	existing, err := retryDump(func() ([]netlink.Route, error) {
		return n.nl.RouteListFiltered(unix.AF_INET,
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
		if !ok || !n.cfg.ClusterCIDR.Contains(dst.Addr()) || dst.Bits() < n.cfg.ClusterCIDR.Bits() {
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
