package netplugin

import (
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
	MTU         int          // 0: the MTU of the host's default route, or 1500
	Logger      *slog.Logger // nil: slog.Default()
	// LocalAddrs are put on the bridge as /32s beside the gateway: the
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
	HostPorts       []HostPort
}

// Attachment is a pod's place on the network.
type Attachment struct {
	NetnsPath string     // bind mount of the pod's network namespace, for the runtime
	IP        netip.Addr // the pod's address, on its eth0
	Gateway   netip.Addr // the bridge's address, the pod's default route
}
