// Package dns is bonsai's cluster DNS: an in-process server that answers
// the cluster domain the way CoreDNS with the kubernetes plugin does in
// the Corefile k3s and kubeadm deploy (kubernetes <domain> in-addr.arpa
// ip6.arpa { pods insecure; fallthrough in-addr.arpa ip6.arpa }, forward
// . /etc/resolv.conf, cache 30), following Kubernetes' DNS-based service
// discovery specification (schema 1.1.0).
//
// Answers for the cluster domain are precomputed from the Service,
// EndpointSlice and Namespace informers into maps keyed by owner name, so
// a query is a map lookup under a read lock. Reverse lookups for Service
// and endpoint IPs are answered here; everything else, and reverse names
// this package does not know, go to the upstream resolvers through a
// bounded response cache.
//
// It owns the UDP and TCP sockets on Config.Address and, through
// EnsureService, creates the kube-system/kube-dns Service when it is
// missing. It writes nothing else to the API and must not touch the
// network configuration of the host: making Config.Address reachable
// (an address on a local interface, service-proxy rules) is the caller's
// job. PodResolvConf builds the resolv.conf a pod gets, and
// HostResolvConfPath picks the node's resolv.conf it starts from, for the
// kubelet.
package dns
