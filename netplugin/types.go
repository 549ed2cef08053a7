package netplugin

import (
	"context"
	"log/slog"
	"net/netip"
)

// Config says where the pod network lives. Zero values get the defaults
// noted on each field.
type Config struct {
	DataDir     string       // IPAM state lives under DataDir/ipam (persisted, fsync'd)
	NetnsDir    string       // where pod netns are bind-mounted; default /run/bonsai/netns
	Bridge      string       // default "bonsai0"
	Table       string       // nftables table name (family ip); default "bonsai"
	ClusterCIDR netip.Prefix // traffic from pods leaving it is masqueraded
	PodCIDR     netip.Prefix // this node's share of ClusterCIDR; the gateway is its first host address, on the bridge
	// ClusterCIDRs and PodCIDRs are the cluster's and the node's prefixes,
	// at most one per family. A pod gets an address of each pod CIDR, in
	// their order (a Node's spec.podCIDRs, the primary first), and its
	// status.podIPs lists them so; each pod CIDR must lie in the cluster
	// CIDR of its family, and a cluster CIDR of a family the node has no
	// pod CIDR of is unused. Empty: ClusterCIDR and PodCIDR alone; when
	// set, ClusterCIDR and PodCIDR are ignored, and New sets them to the
	// first pod CIDR and its cluster CIDR.
	ClusterCIDRs []netip.Prefix
	PodCIDRs     []netip.Prefix
	MTU          int          // 0: the MTU of the host's default route, or 1500
	Logger       *slog.Logger // nil: slog.Default()
	// LocalAddrs are put on the bridge as /32s (/128s) beside the gateways: the
	// node serves pods there itself (the cluster DNS address), and pods
	// reach them through their default route.
	LocalAddrs []netip.Addr
}

// HostPort maps a port of the host to a port of the pod.
type HostPort struct {
	Protocol      string `json:"protocol,omitempty"` // "TCP" (also ""), "UDP" or "SCTP"
	HostIP        string `json:"hostIP,omitempty"`   // "" (or 0.0.0.0): every local address, 127.0.0.1 included
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
}

// Pod is what Setup needs to know of a pod sandbox.
type Pod struct {
	ID              string // sandbox ID, unique; 1-128 of [A-Za-z0-9_.-], not starting with '.'
	Namespace, Name string // for logs and error messages
	UID             string // the pod's UID, for network plugins (CNI_ARGS K8S_POD_UID)
	HostPorts       []HostPort
	// Annotations are the pod's: the CNI host reads the bandwidth and
	// address requests in them; the built-in network reads none.
	Annotations map[string]string
	// DNS is the pod's resolv.conf, for plugins with the dns capability.
	DNS DNS
}

// DNS is a pod's resolver configuration, as the CNI "dns" capability
// carries it.
type DNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// Attachment is a pod's place on the network.
type Attachment struct {
	NetnsPath string     // bind mount of the pod's network namespace, for the runtime
	IP        netip.Addr // the pod's address, on its eth0 (the first of IPs)
	// IPs are all the pod's addresses, IP first; the built-in network
	// gives one per pod CIDR, in their order, as may a CNI plugin chain.
	IPs     []netip.Addr
	Gateway netip.Addr // the pod's default gateway (of IP's family), when known
}

// PodNetwork gives pod sandboxes their network namespace and addresses.
// The kubelet holds one: the built-in Network of this package, or the CNI
// host of netplugin/cni, which runs standard CNI plugins instead.
//
// Setup makes the namespace and attaches the pod, undoing everything it
// did when it fails; for a pod already set up it returns what it has.
// Teardown removes all of it and is not an error for a pod that has no
// network. GC tears down every pod the network knows of for which live
// returns false. Ready is nil when pods can be networked; otherwise its
// error says why (the node's NetworkReady reason). Close releases what
// the network holds in memory; pods keep their network.
type PodNetwork interface {
	Setup(ctx context.Context, pod Pod) (Attachment, error)
	Teardown(ctx context.Context, id string) error
	GC(ctx context.Context, live func(id string) bool) error
	Ready(ctx context.Context) error
	Close() error
}
