// Package netplugin is bonsai's built-in pod network: a Linux bridge, a veth
// per pod into a network namespace, addresses from the node's pod CIDR,
// masquerade for traffic leaving the cluster CIDR, routes to the other
// nodes' pod CIDRs and hostPort mappings. It talks to the kernel through
// rtnetlink and nftables from Go; it runs no ip, nft or iptables binary and
// no CNI plugin (package netplugin/cni is the CNI host that runs them
// instead, behind the same PodNetwork interface).
//
// It owns, and changes nothing outside of:
//   - the bridge named in Config.Bridge and the veths attached to it (the
//     host end of each is named after a hash of the bridge and pod ID);
//   - the nftables table Config.Table (family ip), rebuilt whole by New;
//   - the namespaces bind-mounted under Config.NetnsDir, and that directory's
//     own mount (made a shared bind mount of itself, as ip-netns does);
//   - the IPAM state under Config.DataDir/ipam;
//   - routes in the main table with protocol routeProtocol whose destination
//     lies in Config.ClusterCIDR;
//   - the sysctls net.ipv4.ip_forward and net.ipv4.conf.<bridge>.route_localnet
//     (set to 1; they are left set on Destroy, as other software may rely on
//     forwarding too).
//
// It must not touch the host's other interfaces, its default route, other
// nftables tables or iptables chains, and it does not run or stop
// containers: a pod's namespace lives on across bonsai restarts, and only
// Teardown or GC removes it. hostNetwork pods never reach this package.
//
// Only IPv4 pod networks are supported.
package netplugin
