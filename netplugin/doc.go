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
//   - the nftables tables Config.Table of family ip and (with an IPv6 pod
//     CIDR) ip6, rebuilt whole by New; New deletes the one of a family
//     the network no longer has;
//   - the namespaces bind-mounted under Config.NetnsDir, and that directory's
//     own mount (made a shared bind mount of itself, as ip-netns does);
//   - the IPAM state under Config.DataDir/ipam (IPv4) and ipam6 (IPv6);
//   - routes in the main table with protocol routeProtocol whose destination
//     lies in Config.ClusterCIDR;
//   - the sysctls net.ipv4.ip_forward and net.ipv4.conf.<bridge>.route_localnet
//     with an IPv4 pod CIDR, net.ipv6.conf.all.forwarding with an IPv6 one
//     (set to 1 by New, which logs a change and fails, naming the sysctl,
//     where it cannot set one; they are left set on Destroy, as other
//     software may rely on forwarding too).
//
// It must not touch the host's other interfaces, its default route, other
// nftables tables or iptables chains, and it does not run or stop
// containers: a pod's namespace lives on across bonsai restarts, and only
// Teardown or GC removes it. hostNetwork pods never reach this package.
//
// Bridge netfilter: the network works whatever the host's br_netfilter
// state, with the module absent, loaded with
// net.bridge.bridge-nf-call-iptables=0, or with it at 1, and it neither
// loads the module nor sets net.bridge.bridge-nf-call-iptables or
// -ip6tables (as k3s's agent does): that sysctl sends the bridged traffic
// of every bridge of the host, not only this one, through netfilter, and
// edge hosts may have no br_netfilter to load. What br_netfilter would
// do for the pod network (make the answer of a pod that another pod of
// the bridge reached through a DNAT, to a hostPort or, in the service
// proxy's table, a Service, pass the conntrack entry that undoes it) is
// done by masquerading such connections, DNAT'd and leaving through the
// bridge they came in on, to the gateway: the answer then comes back
// through the node. Where br_netfilter is on, the node bridges those
// packets itself, the masquerade rule does not see them, and the server
// sees the client pod's address; where it is off, it sees the gateway's.
// New logs the state it found ("bridgeNetfilter"). The bridge ports are
// in hairpin mode, which only br_netfilter's bridged DNAT of a pod to
// itself uses.
//
// Dual-stack: with a pod CIDR of each family (Config.PodCIDRs) a pod
// gets an address of each, in that order, and each family has its own
// gateway, IPAM and table; IPv6-only networks work the same with one.
// IPv6 addresses skip duplicate address detection (the prefixes are the
// node's own). IPv6 has no route_localnet: hostPorts are not served on
// ::1. Routes to other nodes' pod CIDRs (SetRoutes) go via a node
// address of the CIDR's family.
package netplugin
