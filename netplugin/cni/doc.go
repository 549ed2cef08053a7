// Package cni is bonsai's CNI host: it networks pod sandboxes by running
// standard CNI plugins (bridge, host-local, portmap, bandwidth, macvlan,
// Flannel, Calico ...) as the kubelet's runtime would, instead of the
// built-in network of package netplugin. The protocol (configuration
// loading, plugin execution, the result cache) is libcni's.
//
// The network configuration is the first .conflist, .conf or .json file
// of Config.ConfDir in lexical order, as the kubelet chooses it; it is
// read again at every sandbox setup, so a network installed later (a
// Flannel DaemonSet writing its file) is picked up without a restart.
// Every pod gets the loopback plugin's lo first, then the configuration's
// chain on eth0, with the runtime config Kubernetes passes: portMappings
// for hostPorts, bandwidth from the kubernetes.io/ingress-bandwidth and
// kubernetes.io/egress-bandwidth annotations, ips and mac when the pod
// asks, and its dns.
//
// It owns, and changes nothing outside of:
//   - the namespaces bind-mounted under Config.NetnsDir (one per pod,
//     named after the sandbox ID) and that directory's own mount;
//   - libcni's result cache under Config.CacheDir, from which a pod's
//     network is deleted with the configuration it was added with, even
//     after a restart and a change of configuration;
//   - the link Config.LocalLink (a dummy, or a bridge without ports)
//     and its addresses, which it makes
//     when Config.LocalAddrs is set and leaves in place.
//
// What the plugins do on the host (bridges, iptables rules, IPAM state)
// is theirs: this package only asks them, and never edits their state.
package cni
