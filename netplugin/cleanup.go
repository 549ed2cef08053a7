package netplugin

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
)

// Cleanup deletes what the pod network leaves on the host while bonsai
// is stopped: the built-in network's nftables tables (named table) and
// links (its bridge, the CNI mode's link of the node's own addresses).
// Pods' veths go with their network namespaces. What is not there is not
// an error.
func Cleanup(table string, links ...string) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("pod network: open nftables: %w", err)
	}
	defer conn.CloseLasting()
	// Both families' tables: the ip6 one exists with an IPv6 pod CIDR.
	for _, family := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		t := &nftables.Table{Name: table, Family: family}
		// Adding first makes the delete succeed whether or not it existed.
		conn.AddTable(t)
		conn.DelTable(t)
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("pod network: delete nftables tables ip and ip6 %s: %w", table, err)
	}
	for _, name := range links {
		l, err := netlink.LinkByName(name)
		if errors.As(err, &netlink.LinkNotFoundError{}) {
			continue
		}
		if err != nil {
			return fmt.Errorf("pod network: link %s: %w", name, err)
		}
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("pod network: delete link %s: %w", name, err)
		}
	}
	return nil
}
