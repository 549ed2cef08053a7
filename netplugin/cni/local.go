package cni

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ensureLocalLink makes a link of its own carrying addrs as /32s (/128s):
// addresses the node serves pods on itself (the cluster DNS address). A
// CNI network has no bonsai bridge to hold them; pods reach them through
// their default route to the host, whatever the plugins made. The link is
// a dummy, or a bridge without ports where the kernel has no dummy
// driver: either only holds local addresses.
func ensureLocalLink(name string, addrs []netip.Addr) error {
	link, err := netlink.LinkByName(name)
	if errors.As(err, &netlink.LinkNotFoundError{}) {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = name
		addErr := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: attrs})
		if errors.Is(addErr, unix.EOPNOTSUPP) {
			addErr = netlink.LinkAdd(&netlink.Bridge{LinkAttrs: attrs})
		}
		if addErr != nil && !errors.Is(addErr, unix.EEXIST) {
			return fmt.Errorf("create link %s: %w", name, addErr)
		}
		link, err = netlink.LinkByName(name)
	}
	if err != nil {
		return fmt.Errorf("look up link %s: %w", name, err)
	}
	if t := link.Type(); t != "dummy" && t != "bridge" {
		return fmt.Errorf("interface %s exists and is a %s, not a dummy or a bridge", name, t)
	}
	for _, a := range addrs {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}}
		if a.Is6() {
			// Usable at once: a tentative address cannot be bound.
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("add %s to %s: %w", a, name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}
