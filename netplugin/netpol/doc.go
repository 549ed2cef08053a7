// Package netpol enforces networking.k8s.io/v1 NetworkPolicy for the
// pods of this node, in nftables written through netlink with
// github.com/google/nftables, as the service proxy writes its table. It
// runs no nft or iptables binary.
//
// It owns, and changes nothing outside of, two tables named
// "<bridge>-netpol" (TableName): one of family ip, which holds the
// policies, and one of family bridge, which makes the pod bridge's
// traffic meet them. Tables of their own, so that a full sync replaces
// them whole, atomically, without touching the pod network's or the
// proxy's; both are written in one transaction every time.
//
// What a policy means is worked out in the model (model.go), apart from
// the kernel: a policy compiles, against the pods and namespaces the
// node knows of, into the local pods it selects and, for each rule,
// the peer address ranges and the ports it allows, named ports resolved
// on the pod they name (the selected pod for ingress, the peer for
// egress). Only this node's pods are selected: each node enforces the
// policies of its own pods, for both directions, and a connection
// between pods of two nodes passes the source's egress on one and the
// destination's ingress on the other.
//
// The ip table:
//
//	egress-hook  (filter, forward, 0)   ct state established,related accept
//	                                    ip saddr . ip daddr @hairpin accept
//	                                    ip saddr vmap @egress-pods
//	ingress-hook (filter, forward, 1)   the same for ip daddr and @ingress-pods
//	input-hook   (filter, input, 0)     established accept; ip saddr vmap @egress-pods
//	output-hook  (filter, output, 0)    ICMP redirects to the bridge dropped (see below)
//	ingress:<ns>, egress:<ns>           <policy id> . ip daddr (saddr) @selected
//	                                    jump <dir>:<ns>/<policy>, for each policy
//	                                    of the namespace; then drop
//	ingress:<ns>/<policy>               one rule per way a rule of the policy
//	                                    matches, accept:
//	                                    [<rule id> . ip saddr @peers]
//	                                    [<rule id> . meta l4proto . th dport @ports]
//	                                    or <rule id> . ip daddr . meta l4proto . th dport @named
//	egress:<ns>/<policy>                the same with the peer as destination
//
// The pod maps hold the local pods isolated in a direction, each going
// to its namespace's chain; a pod no policy isolates is in neither and
// passes. The two forward chains are apart so that the first's accept
// (the source's egress allows) leaves the packet to the second (the
// destination's ingress); a drop in either is final. Policies add up:
// the namespace chain tries each policy that selects the pod, and drops
// what none accepts. Replies and related packets (ICMP errors) of an
// allowed connection pass on conntrack's word; so does a pod that
// reaches itself through a Service (loopback follows no policy). The
// node's own traffic to its pods (kubelet probes) goes through output,
// not forward, and is never filtered, as Kubernetes wants; a pod's
// traffic to the node (the cluster DNS address on the bridge, the API)
// passes input, where its egress policies apply.
//
// The shared sets hold every policy's elements, told apart by the
// number in front of each key ("id . address"): a policy's chains
// depend on the policy alone, so a pod that comes, goes or changes its
// labels or ports, or a namespace that changes labels, changes set
// elements only, and a policy edit rewrites that policy's chains. The
// peer and port sets are interval sets of one wide key rather than
// concatenations, which keeps them in the kernel's rbtree (a
// concatenation of ranges would make it pick pipapo, which copies the
// whole set in every transaction).
//
// Service DNAT happens in prerouting (the proxy's table), before the
// forward hook: policies see the pod a Service sent the packet to, so a
// Service in front of a pod is no way around its policies. They also
// see the client before the proxy's masquerade (postrouting), the one
// the proxy applies to Service traffic that leaves through the bridge
// it came in on.
//
// Bridge netfilter: the network works whether
// net.bridge.bridge-nf-call-iptables is 0, 1 or br_netfilter absent
// (see netplugin's doc), and so must policies. With it at 1, bridged
// IPv4 between two pods of the bridge passes the ip family's forward
// hook, with conntrack; at 0, or without br_netfilter, it never leaves
// the bridge. A bridge-family table with conntrack could filter it
// there, but the bridge family's conntrack (nf_conntrack_bridge) is an
// optional part of the kernel that this one, for one, lacks; a netdev
// hook on each veth has no conntrack at all. So the bridge table's
// prerouting chain (priority -300, before br_netfilter's own hook)
// readdresses each unicast IPv4 frame between pods of the bridge that a
// policed pod (one isolated either way) sends or receives to the
// bridge's own MAC address, as the host's, and the node routes it back
// out of the bridge: through the ip family's hooks and conntrack,
// whatever the bridge netfilter state, the same path both ways. The
// cost is a routing hop, for policed pods' traffic only. The node then
// would send an ICMP redirect for each (in and out of one interface),
// which output-hook drops. What a policed pod's port would still
// bridge, but ARP and unicast IPv4 (which only br_netfilter's bridged
// DNAT leaves on the bridge, after the ip hooks saw it), is dropped in
// the bridge's forward hook: IPv6 (a pod's link-local address),
// multicast and broadcast would pass no policy. The bridge table finds
// the bridge's ports by name: a bridge-family chain sees every bridge of
// the host. On the built-in network a pod's port is named after its
// sandbox (Config.PortName); with CNI plugins (Config.NetnsDir) the
// enforcer looks in each pod's namespace for where it meets the node
// (links.go): a veth on a Linux bridge is policed as above (one bridge,
// the first a pod is on), a veth the node routes (ptp) needs the ip
// table alone, and any other pod (macvlan, ipvlan, a moved device)
// reaches the wire past the node, so its policies are not enforced,
// which is logged.
//
// New pods: a pod's status shows its address only after the kubelet
// writes it, and until then nothing but the kubelet knows it. Guard
// wraps the pod network so that a sandbox's address goes to the
// enforcer (Attach) and its policies are in the kernel before Setup
// returns, and so before any container of the pod runs.
//
// Syncs: Run programs both tables whole, in one transaction, then
// writes only what changed, all changes of a sync in one transaction
// (packets see the tables before or after it, never a mix, so no
// connection a policy denies is allowed while it changes), at most once
// per MinSyncInterval; every hour, and after any failed write, the next
// sync is a full one. When Run's context ends the tables stay: policies
// hold while bonsai restarts, and the next Run replaces them.
// Connections already established when a policy starts to deny them
// keep going, as conntrack remembers them. Cleanup deletes the tables
// (`bonsai server --cleanup`, uninstall).
//
// A pod may not pass for another: the bridge table drops IPv4 frames
// from a pod's port whose source is not the pod's address, which would
// otherwise take the other pod's place in peers' rules, or leave by a
// pod no policy isolates. Pods on a routed veth (CNI) get no such check
// beyond the host's rp_filter.
//
// IPv6: policies are enforced for IPv4 only (IPv6 ipBlocks match
// nothing, pod selectors match pods' IPv4 addresses). On a dual-stack
// pod network a pod that any policy isolates gets no IPv6 at all: the
// bridge table drops IPv6 frames from its port before the node routes
// them (prerouting) and to its port whatever sent them (postrouting), so
// IPv6 is no way around a policy; pods no policy isolates keep theirs.
// Pods on a routed veth (CNI) with IPv6 addresses get no such guard.
package netpol
