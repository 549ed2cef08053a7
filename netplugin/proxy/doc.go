// Package proxy is bonsai's service proxy: kube-proxy's nftables mode
// (Kubernetes v1.33) in-process, written through netlink with
// github.com/google/nftables. It runs no nft or iptables binary.
//
// It owns, and changes nothing outside of, one nftables table of family
// ip named "<bridge>-svc" (TableName): a table of its own rather than
// chains in netplugin's table, so that a full sync can replace it whole,
// atomically, without touching the pod network's rules, and named after
// the pod bridge so that two bonsai networks on one host (as in tests)
// never share one. It also runs a small controller that writes the
// status.loadBalancer.ingress of LoadBalancer Services of no class or
// of its own, LoadBalancerClass.
//
// The table, as kube-proxy lays out its own:
//
//	nat-prerouting, nat-output (nat, dstnat)    jump services
//	nat-postrouting (nat, srcnat)               hairpin mark (ct status dnat
//	                                            ip saddr . ip daddr @hairpin),
//	                                            same-bridge mark (ct status dnat
//	                                            iifname <bridge> oifname <bridge>),
//	                                            jump masquerading
//	filter-input (filter)                       ct state new: nodeport-endpoints-check, service-endpoints-check
//	filter-forward, filter-output (filter)      ct state new: service-endpoints-check, cluster-ips-check
//	filter-prerouting-pre-dnat, filter-output-pre-dnat (filter, dstnat - 10)
//	                                            ct state new: firewall-check
//	firewall-check  ip daddr . meta l4proto . th dport vmap @firewall-ips:
//	                a Service's load-balancer addresses and ports go to
//	                its firewall-<port> chain, which returns for each of
//	                its loadBalancerSourceRanges and drops the rest
//	services        masquerade mark for off-cluster sources to a cluster
//	                IP (ip daddr @cluster-ips ip saddr != <cluster CIDR>)
//	                ip daddr . meta l4proto . th dport vmap @service-ips
//	                fib daddr type local meta l4proto . th dport vmap @service-nodeports
//	service-<port>  dnat to <n> . numgen random mod 2^32-1 map
//	                @endpoint-targets-<n % 32>, where n is the chooser's
//	                own number (see chooserIDs), and the interval map
//	                gives endpoint i of N the i-th of N equal ranges
//	                "n . lo-hi" of the random number, with its address .
//	                port (see choiceRange);
//	                or, with ClientIP affinity, affinity lookups and
//	                <n> . numgen random mod <count> vmap
//	                @endpoint-chains-<n % 32> to endpoint chains
//	local-<port>    the same over this node's endpoints (Local policies)
//	external-<port> NodePort, externalIPs and load-balancer IPs: mark for
//	                masquerade and go to service-<port> (Cluster policy),
//	                or keep the client address and go to local-<port>
//	                (Local policy; pods and the node itself still get
//	                every endpoint)
//	endpoint-<port>__<ip:port>  (ClientIP affinity only) affinity update,
//	                dnat to the endpoint
//	hairpin set     "a . a" for every endpoint address a: a pod that
//	                reaches itself through a Service is masqueraded (only
//	                DNAT'd flows: a host connection to 127.0.0.1, the
//	                kubernetes Service's endpoint, that conntrack first
//	                sees mid-stream must keep its address and port)
//	no-endpoint-services, no-endpoint-nodeports maps: goto reject-chain
//	                (no endpoint at all: ICMP port unreachable, which a TCP
//	                client sees as "connection refused") or drop (a Local
//	                policy and no endpoint on this node)
//	cluster-ips set: a cluster IP's unserved ports are rejected; the rest
//	                of the service CIDR is dropped
//
// where <port> is namespace/name/protocol/port-name. Masquerading is by
// packet mark 0x4000, kube-proxy's bit. As kube-proxy does, the proxy
// also deletes the conntrack entries of UDP endpoints that leave a
// Service, and leaves alone Services labelled
// service.kubernetes.io/service-proxy-name.
//
// Deliberate differences from kube-proxy:
//   - Services work whatever the host's bridge netfilter state, with no
//     br_netfilter module at all. kube-proxy relies on
//     bridge-nf-call-iptables=1 (its iptables mode logs "proxy may not
//     work as intended" without it): a pod's connection to a Service
//     whose endpoint is a pod on the same bridge is DNAT'd and routed
//     back out of the bridge, and the endpoint's answer is bridged
//     straight to the pod, past the conntrack entry that would undo the
//     DNAT. Here such a connection (DNAT'd, in and out through
//     Config.Bridge) is masqueraded to the node's bridge address, so the
//     answer comes back through the node. The rule sees only packets the
//     node routes: where br_netfilter is on, it bridges the DNAT'd packet
//     itself, postrouting sees no input interface, and the endpoint sees
//     the pod's own address as under kube-proxy. With it off, the
//     endpoint sees the node's bridge address: the client address of
//     same-node pod-to-Service-to-pod traffic is lost, as under
//     kube-proxy's --masquerade-all, and only there.
//   - NodePorts are served on every local address, 127.0.0.1 included,
//     unless NodePortAddresses says otherwise (kube-proxy's nftables mode
//     serves none on loopback). `curl 127.0.0.1:<nodePort>` on the host
//     works because netplugin sets route_localnet on the pod bridge (the
//     DNAT'd packet leaves with source 127.0.0.1 until masqueraded) and
//     drops packets from pods to 127.0.0.0/8 that were not DNAT'd, closing
//     the hole route_localnet opens (CVE-2020-8558).
//   - The endpoint maps are shared by the Services, in 32 shards, rather
//     than an anonymous map in each Service's rule: a set per Service
//     made a full sync of 1,000 Services slow (the kernel finds a set by
//     walking the table's list of sets, comparing names, for every new
//     set, rule lookup and element write; it binds an anonymous set to
//     its rule with a walk of the whole transaction), and one map for
//     all made it check each element added against each rule using the
//     map (see choiceShards).
//   - Two Services asking for the same address, protocol and port (two
//     LoadBalancer Services on one port both get the node's address;
//     externalIPs are free-form) would make the kernel refuse every
//     transaction. The older Service holds the key, the other goes
//     without until it is free, and the load-balancer controller leaves
//     the newer LoadBalancer Service pending, as k3s' ServiceLB does.
//   - Endpoints have no chains of their own unless ClientIP affinity
//     needs them to record the client: the DNAT takes its address from
//     a map, and hairpin traffic is found in postrouting by one set
//     lookup. Any change of a Service's endpoints without affinity, of
//     who or how many, writes map elements only (kube-proxy rewrites the
//     Service's chain, with "mod N" in its rule): a rule written anew
//     makes the kernel revalidate every jump of the table, about a
//     millisecond with 1,000 Services, an element of a map without
//     verdicts does not.
//   - The masquerade mark for off-cluster clients of a cluster IP is one
//     rule in the services chain, not one in each Service's chain: the
//     mark matters only to a connection a Service's rule then DNATs.
//   - NodePortAddresses is matched by rules, "fib daddr type local ip
//     daddr <CIDR>", not by a set of the node's addresses that
//     kube-proxy lists from the interfaces on each sync: an address
//     that comes later (DHCP on an edge box) is served at once.
//   - IPv4 only.
//
// Topology: under the Cluster policies a Service's chooser takes only
// the endpoints hinted for this node, or for its zone (the Node's
// topology.kubernetes.io/zone), when every ready endpoint has such a
// hint and one is for it, as kube-proxy does (see clusterEndpoints);
// never under a Local policy.
//
// Health checks: for each LoadBalancer Service with
// externalTrafficPolicy: Local the proxy serves, as kube-proxy does,
// HTTP on spec.healthCheckNodePort (on the NodePortAddresses, or on
// every address): 200 when this node has ready endpoints of the
// Service, 503 when not or when a change has waited more than a minute
// for the kernel, with kube-proxy's JSON body (see healthServer).
//
// Syncs: Run programs the whole table in one transaction (delete and
// rebuild), then rewrites only the chains, sets and map elements of
// Services that changed, all changes of a sync in one transaction, at
// most once per MinSyncInterval; every hour, and after any failed write,
// the next sync is a full one. When Run's context ends the table stays,
// as kube-proxy leaves its rules: Services keep working while bonsai
// restarts, and the next Run replaces the table whole. Cleanup deletes it
// (`bonsai server --cleanup`, uninstall).
package proxy
