package main

import (
	"errors"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/spf13/pflag"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/admission"
	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/encryption"
	"bonsai.dev/bonsai/apiserver/metricsapi"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/controllers"
	"bonsai.dev/bonsai/deviceplugin/generic"
	"bonsai.dev/bonsai/kubelet"
	"bonsai.dev/bonsai/kubelet/containerd"
	"bonsai.dev/bonsai/netplugin/cni"
	"bonsai.dev/bonsai/scheduler"
	"bonsai.dev/bonsai/store"
)

// defaultConfigFile is read when it exists and --config is not given; a
// variable so tests do not depend on the machine's /etc.
var defaultConfigFile = "/etc/bonsai/config.yaml"

// serverOptions are `bonsai server`'s flags as typed.
type serverOptions struct {
	metricResolution  time.Duration
	housekeeping      time.Duration
	volumeStatsPeriod time.Duration
	configFile        string
	dataDir           string
	bindAddress       string
	port              int
	disableAgent      bool
	profiling         bool
	cleanup           bool
	writeKubeconfig   string
	tlsSANs           []string
	tokenFile         string
	datastoreEndpoint string
	datastoreCAFile   string
	datastoreCertFile string
	datastoreKeyFile  string
	serviceCIDR       string
	clusterCIDR       string
	nodePortRange     string
	nodePortAddresses []string
	clusterDomain     string
	logFormat         string
	logLevel          string
	runtime           string
	nodeName          string
	nodeLabels        []string
	nodeTaints        []string
	maxPods           int
	podMaxPids        int64
	runtimeEndpoint   string
	noDefaultRegistry bool
	podBridge         string
	podNetwork        string
	cniConfDir        string
	cniBinDirs        []string
	cdiSpecDirs       []string
	podManifestPath   string
	nodeCIDRMaskSize  int
	nodeCIDRMaskIPv4  int
	nodeCIDRMaskIPv6  int
	simulatedNodes    int
	kubeletPort       int
	disableIngress    bool
	ingressBind       string
	ingressHTTPPort   int
	ingressHTTPSPort  int
	nodeLifecycle     nodeLifecycleOptions
	hpa               hpaOptions
	eviction          evictionOptions
	schedulerConfig   string
	disableScheduler  bool
	snapshotSchedule  string
	snapshotRetention int
	snapshotDir       string
	maxEndpoints      int
	maxObjectSize     int
	eventTTL          time.Duration
	quotaBackendBytes int64
	authorizationMode string
	auditLogPath      string
	auditLogRotation  audit.Rotation
	limits            apiserver.Limits
	minRequestTimeout int
	auditPolicyFile   string
	admissionConfig   string
	encryptionConfig  string
	secretsEncryption bool
	kubeletRootDir    string
	deviceConfig      string
	shutdownGrace     time.Duration
	shutdownCritical  time.Duration
	shutdownByPrio    []string
	manifestsDir      string
	disable           []string
	disableHelm       bool
}

const defaultPodBridge = "bonsai0"

// minQuotaBytes is the smallest --quota-backend-bytes.
const minQuotaBytes = 64 << 20

func (o *serverOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.configFile, "config", defaultConfigFile, "YAML file whose keys are these flags' names (read only if it exists unless given explicitly); flags given on the command line win")
	fs.StringVar(&o.dataDir, "data-dir", "/var/lib/bonsai", "directory for the store, certificates and the admin kubeconfig")
	fs.StringVar(&o.bindAddress, "bind-address", "0.0.0.0", "IP address the API server listens on")
	fs.IntVar(&o.port, "https-listen-port", 6443, "port the API server listens on (HTTPS)")
	fs.BoolVar(&o.disableAgent, "disable-agent", false, "run the control plane only, without a kubelet on this host (default false)")
	fs.BoolVar(&o.cleanup, "cleanup", false, "for uninstall, with bonsai stopped: delete the service proxy's and network policy tables (<pod-bridge>-svc, <pod-bridge>-netpol), and with the data dir the containers bonsai's own containerd still runs, the pods' mounts, the pod network's table and bridge, and exit (default false)")
	fs.StringVar(&o.writeKubeconfig, "write-kubeconfig", "", "also write the admin kubeconfig to this path (default: only <data-dir>/kubeconfig.yaml)")
	fs.StringSliceVar(&o.tlsSANs, "tls-san", nil, "extra host name or IP for the serving certificate; repeatable (default none)")
	fs.StringVar(&o.tokenFile, "token-file", "", "Kubernetes static token file (token,user,uid[,\"group1,group2\"]) for bearer-token authentication (default none)")
	fs.StringVar(&o.authorizationMode, "authorization-mode", "RBAC", "how requests are authorized: RBAC (Kubernetes' Node,RBAC: nodes limited to their own objects, everyone else by Roles and bindings) or AlwaysAllow")
	fs.BoolVar(&o.profiling, "profiling", true, "serve Go's CPU, heap and goroutine profiles under /debug/pprof/ (to cluster-admin only, by the default roles)")
	fs.IntVar(&o.limits.MaxRequestsInFlight, "max-requests-inflight", 400, "non-mutating requests served at once to clients other than nodes and system:masters; past it, 429 with Retry-After")
	fs.IntVar(&o.limits.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", 200, "mutating requests served at once to clients other than nodes and system:masters; past it, 429 with Retry-After")
	fs.DurationVar(&o.limits.RequestTimeout, "request-timeout", 60*time.Second, "longest a request other than a watch, log or stream may take; past it, 504")
	fs.IntVar(&o.minRequestTimeout, "min-request-timeout", 1800, "seconds: a watch without timeoutSeconds ends after a random time between this and twice this")
	fs.IntVar(&o.limits.MaxWatchesPerUser, "max-watches-per-user", 1000, "concurrent watches one user (other than a node or system:masters) may hold; past it, 429")
	fs.IntVar(&o.auditLogRotation.MaxSizeMB, "audit-log-maxsize", 100, "megabytes the audit log file may reach before it is rotated")
	fs.IntVar(&o.auditLogRotation.MaxBackups, "audit-log-maxbackup", 10, "rotated audit log files kept; 0: all")
	fs.IntVar(&o.auditLogRotation.MaxAgeDays, "audit-log-maxage", 0, "days a rotated audit log file is kept; 0: no limit by age")
	fs.StringVar(&o.auditLogPath, "audit-log-path", "", "write audit events (audit.k8s.io/v1, one JSON object per line) to this file, \"-\" for standard output; needs --audit-policy-file (default none)")
	fs.StringVar(&o.auditPolicyFile, "audit-policy-file", "", "audit.k8s.io/v1 Policy file choosing which requests are audited, at what level (default none)")
	fs.StringVar(&o.admissionConfig, "admission-control-config-file", "", "AdmissionConfiguration file (apiserver.config.k8s.io/v1) configuring admission plugins: PodSecurity's PodSecurityConfiguration (pod-security.admission.config.k8s.io/v1) sets the default levels and the exempt users, namespaces and runtime classes (default: privileged, no exemptions)")
	fs.StringVar(&o.encryptionConfig, "encryption-provider-config", "", "EncryptionConfiguration file (apiserver.config.k8s.io/v1) saying which resources are encrypted in the store and with which providers and keys (aescbc, aesgcm, secretbox, identity); it holds keys, so it is made mode 0600 at start (default none: values stored as they are)")
	fs.BoolVar(&o.secretsEncryption, "secrets-encryption", false, "encrypt Secrets in the store with an aescbc key bonsai makes, in <data-dir>/encryption-config.yaml (mode 0600; rotate with bonsai secrets-encrypt rotate) (default false)")
	fs.StringVar(&o.datastoreEndpoint, "datastore-endpoint", "", "comma-separated etcd http(s) URLs (default: embedded badger store in <data-dir>/db)")
	fs.StringVar(&o.datastoreCAFile, "datastore-cafile", "", "CA bundle to verify the etcd servers (default: system roots)")
	fs.StringVar(&o.datastoreCertFile, "datastore-certfile", "", "client certificate for etcd (default none)")
	fs.StringVar(&o.datastoreKeyFile, "datastore-keyfile", "", "client key for etcd (default none)")
	fs.StringVar(&o.serviceCIDR, "service-cidr", "10.43.0.0/16", "range of ClusterIPs, or one IPv4 and one IPv6 range, comma-separated, for dual-stack Services (e.g. 10.43.0.0/16,fd43::/112); the first is the primary family, and its first address is the kubernetes service")
	fs.StringVar(&o.clusterCIDR, "cluster-cidr", "10.42.0.0/16", "range of pod IPs, or one IPv4 and one IPv6 range, comma-separated (e.g. 10.42.0.0/16,fd42::/56); each node gets a pod CIDR of each")
	fs.StringVar(&o.nodePortRange, "service-node-port-range", "30000-32767", "range of NodePorts (first-last, inclusive)")
	fs.StringSliceVar(&o.nodePortAddresses, "nodeport-addresses", nil, "CIDRs of the local addresses that serve NodePorts (and the health-check node ports of externalTrafficPolicy: Local Services), or \"primary\": the node's own address; repeatable (default: every local address, 127.0.0.1 too)")
	fs.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "DNS domain of the cluster")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.runtime, "runtime", "containerd", "container runtime of this host's node: containerd, or simulated (pods go Running at once, no containers)")
	fs.StringVar(&o.nodeName, "node-name", "", "name of this host's Node (default: the host name)")
	fs.StringSliceVar(&o.nodeLabels, "node-labels", nil, "extra labels for this host's Node, key=value; repeatable (default none)")
	fs.StringSliceVar(&o.nodeTaints, "node-taints", nil, "taints for this host's Node at registration, key=value:Effect; repeatable (default none)")
	fs.IntVar(&o.maxPods, "max-pods", 110, "pods this host's Node may run")
	fs.Int64Var(&o.podMaxPids, "pod-max-pids", -1, "the most processes each pod may run (its pod cgroup's pids.max); -1: no limit, as the kubelet's default")
	fs.StringVar(&o.runtimeEndpoint, "container-runtime-endpoint", "/run/containerd/containerd.sock", "containerd's socket; when absent, bonsai starts containerd itself under <data-dir>/containerd")
	fs.BoolVar(&o.noDefaultRegistry, "disable-default-registry-endpoint", false, "pull the images of a registry that registries.yaml lists mirrors for only from those mirrors, never from the registry itself (as k3s's flag of that name)")
	fs.StringVar(&o.podBridge, "pod-bridge", defaultPodBridge, "name of the pod network's bridge and of its nftables table")
	fs.StringVar(&o.podNetwork, "pod-network", "auto", "pod network of this host's node: builtin (bridge, veths, nftables), cni (the CNI plugins configured in --cni-conf-dir), or auto (cni when --cni-conf-dir holds a configuration at start, else builtin)")
	fs.StringVar(&o.cniConfDir, "cni-conf-dir", cni.DefaultConfDir, "directory of CNI network configurations; the first *.conflist, *.conf or *.json in lexical order is used")
	fs.StringSliceVar(&o.cniBinDirs, "cni-bin-dir", []string{cni.DefaultBinDir}, "directory of CNI plugin binaries, searched in order; repeatable (Debian's containernetworking-plugins installs to /usr/lib/cni)")
	fs.StringVar(&o.podManifestPath, "pod-manifest-path", "", "directory of static pod manifests (default <data-dir>/pod-manifests)")
	fs.IntVar(&o.nodeCIDRMaskSize, "node-cidr-mask-size", 0, "prefix length of each node's pod CIDR, cut from a single-stack --cluster-cidr (default 24 for IPv4, 64 for IPv6); not allowed with a dual-stack one")
	fs.IntVar(&o.nodeCIDRMaskIPv4, "node-cidr-mask-size-ipv4", 0, "prefix length of each node's IPv4 pod CIDR (default 24)")
	fs.IntVar(&o.nodeCIDRMaskIPv6, "node-cidr-mask-size-ipv6", 0, "prefix length of each node's IPv6 pod CIDR (default 64)")
	fs.IntVar(&o.simulatedNodes, "simulated-nodes", 0, "create this many simulated nodes, sim-0 ... sim-<N-1> (pods on them go Running at once, no containers)")
	fs.DurationVar(&o.housekeeping, "housekeeping-interval", kubelet.DefaultStatsInterval, "how often the kubelet samples its node's, pods' and containers' figures (cAdvisor's flag; the metrics benchmark's lever)")
	fs.MarkHidden("housekeeping-interval")
	fs.DurationVar(&o.volumeStatsPeriod, "volume-stats-agg-period", kubelet.DefaultVolumeStatsInterval, "how often the kubelet measures the disk its pods' volumes and containers' writable layers use (for /stats/summary and ephemeral-storage limits); negative: volumes are not measured (the kubelet's flag)")
	fs.DurationVar(&o.metricResolution, "metric-resolution", metricsapi.DefaultResolution, "how often the resource metrics API (metrics.k8s.io, kubectl top) scrapes each node's figures; at least 10s (metrics-server's --metric-resolution)")
	fs.IntVar(&o.kubeletPort, "kubelet-port", 10250, "port of this host's kubelet API (HTTPS), which serves logs, exec, attach and port-forward to the API server")
	o.nodeLifecycle.addFlags(fs)
	o.hpa.addFlags(fs)
	o.eviction.addFlags(fs)
	fs.StringVar(&o.schedulerConfig, "scheduler-config", "", "KubeSchedulerConfiguration file (YAML) for the default scheduler: score plugin weights, NodeResourcesFit scoring strategy, back-off (default: Kubernetes' default profile)")
	fs.IntVar(&o.maxEndpoints, "max-endpoints-per-slice", 100, "most endpoints the EndpointSlice controller puts in one EndpointSlice (1-1000)")
	fs.IntVar(&o.maxObjectSize, "max-object-size", apiserver.DefaultMaxObjectSize, "largest object the API server stores, in bytes of its stored encoding; larger writes are refused with 413 (etcd's --max-request-bytes default; with --datastore-endpoint, keep it within the etcd servers' own limit)")
	fs.DurationVar(&o.eventTTL, "event-ttl", apiserver.DefaultEventTTL, "how long an Event (core/v1 and events.k8s.io/v1) is kept after its last write; then the store deletes it (kube-apiserver's --event-ttl)")
	fs.Int64Var(&o.quotaBackendBytes, "quota-backend-bytes", 0, "bytes the store may hold; past it, writes other than deletes get a 500 \"database space exceeded\" until deletes and compaction bring it under (0: a quarter of the data dir's file system, at most 8 GiB; with --datastore-endpoint: 0 leaves it to etcd's own --quota-backend-bytes, a value is checked against etcd's bytes in use)")
	fs.StringVar(&o.kubeletRootDir, "kubelet-root-dir", "/var/lib/kubelet", "the node's kubelet root dir: device plugins register on <dir>/device-plugins/kubelet.sock, DRA drivers in <dir>/plugins_registry, monitoring agents read <dir>/pod-resources/kubelet.sock")
	fs.StringSliceVar(&o.cdiSpecDirs, "cdi-spec-dir", containerd.DefaultCDISpecDirs, "directory of CDI specs that CDI device names of device plugins and DRA drivers resolve against, later ones winning; repeatable")
	fs.StringVar(&o.deviceConfig, "device-config", "", "devices.yaml of the built-in generic device plugin: resource names mapped to host device paths or globs (default <data-dir>/devices.yaml, if it exists)")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace-period", 0, "graceful node shutdown: how long this host's node delays a system shutdown (a logind delay lock) to stop its pods; 0 = off (the kubelet's shutdownGracePeriod)")
	fs.DurationVar(&o.shutdownCritical, "shutdown-grace-period-critical-pods", 0, "of --shutdown-grace-period, the last part, kept for pods of system-critical priority; less than it (the kubelet's shutdownGracePeriodCriticalPods)")
	fs.StringSliceVar(&o.shutdownByPrio, "shutdown-grace-period-by-pod-priority", nil, "graceful node shutdown in phases by pod priority, instead of the two flags above: priority=period, repeatable; pods stop lowest priority first, each phase within its period (the kubelet's shutdownGracePeriodByPodPriority) (default none)")
	fs.BoolVar(&o.disableIngress, "disable-ingress", false, "do not run the built-in Ingress controller, which serves the Ingresses of IngressClass bonsai on this host's ports 80 and 443 (it never runs with --disable-agent) (default false)")
	fs.StringVar(&o.ingressBind, "ingress-bind-address", "", "IP address the built-in Ingress controller listens on (default: --bind-address)")
	fs.IntVar(&o.ingressHTTPPort, "ingress-http-port", 80, "port the built-in Ingress controller serves HTTP on; 0: no HTTP")
	fs.IntVar(&o.ingressHTTPSPort, "ingress-https-port", 443, "port the built-in Ingress controller serves HTTPS on; 0: no HTTPS")
	fs.BoolVar(&o.disableScheduler, "disable-scheduler", false, "do not run the built-in default-scheduler (another scheduler places pods, or they wait) (default false)")
	fs.StringVar(&o.snapshotSchedule, "snapshot-schedule", defaultSnapshotSchedule, "cron schedule (five fields, or a descriptor such as @daily, in the server's local time) of the embedded store's scheduled snapshots, named scheduled-<node>-<unix time> in --snapshot-dir; \"\": none (k3s's --etcd-snapshot-schedule-cron)")
	fs.IntVar(&o.snapshotRetention, "snapshot-retention", defaultSnapshotRetention, "scheduled snapshots kept; older ones are deleted after each new one (k3s's --etcd-snapshot-retention)")
	fs.StringVar(&o.snapshotDir, "snapshot-dir", "", "directory of the scheduled and pre-upgrade snapshots (default <data-dir>/snapshots)")
	o.addDeployFlags(fs)
}

// serverConfig is serverOptions checked and parsed: everything `bonsai
// server` needs before it touches the network or the disk.
type serverConfig struct {
	DataDir         string
	BindAddress     netip.Addr
	Port            int
	DisableAgent    bool
	Profiling       bool // /debug/pprof/
	Cleanup         bool // delete the service proxy's table and exit
	WriteKubeconfig string
	TLSSANs         []string
	// Tokens is nil without --token-file.
	Tokens *authn.TokenFile
	// AuthorizationMode is apiserver.AuthorizationRBAC or
	// apiserver.AuthorizationAlwaysAllow.
	AuthorizationMode string
	// AuditLogPath and AuditPolicy are set together, or not at all.
	AuditLogPath string
	AuditPolicy  *audit.Policy
	// AuditLogRotation bounds the audit log file.
	AuditLogRotation audit.Rotation
	// Limits bound requests in flight, their time and users' watches.
	Limits apiserver.Limits
	// Admission is --admission-control-config-file, read and checked.
	Admission *admission.Config
	// Encryption is --encryption-provider-config, read and checked; nil
	// without it. SecretsEncryption is --secrets-encryption: the
	// configuration is <data-dir>/encryption-config.yaml, made at the
	// first start.
	Encryption        *encryption.Config
	SecretsEncryption bool

	Etcd store.EtcdOptions

	// ServiceCIDRs and ClusterCIDRs are --service-cidr and --cluster-cidr:
	// one prefix, or one per family, the primary first. ServiceCIDR and
	// ClusterCIDR are the primary ones, which the pod network, the
	// proxy and DNS use.
	ServiceCIDRs  []netip.Prefix
	ClusterCIDRs  []netip.Prefix
	ServiceCIDR   netip.Prefix
	ClusterCIDR   netip.Prefix
	NodePortRange apiserver.PortRange
	// NodePortAddresses is --nodeport-addresses: NodePorts are served on
	// the local addresses in these prefixes (empty: on every one), or,
	// with NodePortPrimary, on the node's own address only.
	NodePortAddresses []netip.Prefix
	NodePortPrimary   bool
	ClusterDomain     string
	LogFormat         string
	LogLevel          slog.Level
	Runtime           string
	NodeName          string
	NodeLabels        map[string]string
	NodeTaints        []corev1.Taint
	MaxPods           int
	PodMaxPids        int64
	// RuntimeEndpoint is containerd's socket; PodBridge names the pod
	// network's bridge and nftables table.
	RuntimeEndpoint string
	PodBridge       string
	// NoDefaultRegistry: registries with mirrors are pulled from those
	// only (--disable-default-registry-endpoint).
	NoDefaultRegistry bool
	// PodNetwork is builtin, cni or auto; CNIConfDir and CNIBinDirs are
	// where the CNI host looks.
	PodNetwork      string
	CNIConfDir      string
	CNIBinDirs      []string
	PodManifestPath string
	// NodeCIDRMaskSizes are the prefix lengths of each node's pod CIDRs,
	// one per ClusterCIDRs entry; NodeCIDRMaskSize is the first.
	NodeCIDRMaskSizes []int
	NodeCIDRMaskSize  int
	// SimulatedNodes is how many sim-<i> nodes to create.
	SimulatedNodes int
	KubeletPort    int
	// MetricResolution is --metric-resolution.
	MetricResolution time.Duration
	// HousekeepingInterval is how often the kubelet samples its figures
	// (hidden --housekeeping-interval).
	HousekeepingInterval time.Duration
	// VolumeStatsPeriod is how often volumes and writable layers are
	// measured (--volume-stats-agg-period).
	VolumeStatsPeriod time.Duration
	// Ingress is the built-in Ingress controller's listeners; it runs
	// when Ingress.Enabled (never without the agent).
	Ingress ingressConfig
	// NodeLifecycle tunes the node lifecycle controller and pod GC.
	NodeLifecycle nodeLifecycleConfig
	// HPA is the --horizontal-pod-autoscaler-* flags.
	HPA      controllers.HPAOptions
	Eviction evictionConfig
	// Scheduler is --scheduler-config, read and checked; zero without it.
	Scheduler        scheduler.Options
	DisableScheduler bool
	// MaxEndpointsPerSlice is --max-endpoints-per-slice.
	MaxEndpointsPerSlice int
	// MaxObjectSize is --max-object-size: the API server's limit and the
	// store's (Etcd.MaxValueBytes too, when etcd is the store).
	MaxObjectSize int
	// EventTTL is --event-ttl: Events expire this long after their last
	// write.
	EventTTL time.Duration
	// QuotaBytes is --quota-backend-bytes (Etcd.QuotaBytes too, when etcd
	// is the store); 0: the store's default.
	QuotaBytes int64
	// KubeletRootDir holds the device-plugin and pod-resources sockets.
	KubeletRootDir string
	// CDISpecDirs are where CDI device names are resolved.
	CDISpecDirs []string
	// Devices is the generic device plugin's configuration; nil = none.
	Devices *generic.Config
	// ShutdownGroups are graceful node shutdown's phases; nil = off.
	ShutdownGroups []kubelet.ShutdownGroup
	// SnapshotSchedule is --snapshot-schedule parsed; nil = none.
	// SnapshotRetention is how many scheduled snapshots are kept, in
	// SnapshotDir with the pre-upgrade ones.
	SnapshotSchedule  cron.Schedule
	SnapshotRetention int
	SnapshotDir       string
	// ManifestsDir is deployed, but for DisabledManifests (Addon names).
	ManifestsDir      string
	DisabledManifests []string
	// DisableHelmController runs no controller of HelmCharts.
	DisableHelmController bool
}

// applyConfigFile sets every flag named in the YAML file that the command
// line did not set. A missing default file is fine; a missing explicit one
// is not.
func applyConfigFile(fs *pflag.FlagSet, path string, explicit bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !explicit {
			return nil
		}
		return fmt.Errorf("--config: %v", err)
	}
	var doc map[string]any
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return fmt.Errorf("config file %s: %v", path, oneLine(err.Error()))
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		f := fs.Lookup(key)
		if f == nil || key == "config" || key == "help" {
			return fmt.Errorf("config file %s: unknown key %q", path, key)
		}
		if f.Changed {
			continue
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			list, err := yamlList(doc[key])
			if err != nil {
				return fmt.Errorf("config file %s: %s: %v", path, key, err)
			}
			if err := sv.Replace(list); err != nil {
				return fmt.Errorf("config file %s: %s: %v", path, key, err)
			}
			continue
		}
		s, err := yamlScalar(doc[key])
		if err != nil {
			return fmt.Errorf("config file %s: %s: %v", path, key, err)
		}
		if err := fs.Set(key, s); err != nil {
			return fmt.Errorf("config file %s: %s: invalid value %q: %v", path, key, s, err)
		}
	}
	return nil
}

func yamlScalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		// YAML numbers arrive as JSON numbers; ports and the like are
		// integers and must not be printed as 6.443e+03.
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case nil:
		return "", errors.New("no value")
	default:
		return "", fmt.Errorf("want a single value, not %T", v)
	}
}

func yamlList(v any) ([]string, error) {
	items, ok := v.([]any)
	if !ok {
		s, err := yamlScalar(v)
		if err != nil {
			return nil, err
		}
		return []string{s}, nil
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, err := yamlScalar(it)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// validate checks every value and parses it. Each error names its flag.
func (o *serverOptions) validate() (*serverConfig, error) {
	c := &serverConfig{
		DataDir:         o.dataDir,
		Port:            o.port,
		DisableAgent:    o.disableAgent,
		Profiling:       o.profiling,
		Cleanup:         o.cleanup,
		WriteKubeconfig: o.writeKubeconfig,
		ClusterDomain:   o.clusterDomain,
		LogFormat:       o.logFormat,
	}
	if strings.TrimSpace(o.dataDir) == "" {
		return nil, errors.New("--data-dir: must not be empty")
	}
	c.DataDir = filepath.Clean(o.dataDir)

	addr, err := netip.ParseAddr(o.bindAddress)
	if err != nil || addr.Zone() != "" {
		return nil, fmt.Errorf("--bind-address %q: not an IP address", o.bindAddress)
	}
	c.BindAddress = addr.Unmap()

	if o.port < 1 || o.port > 65535 {
		return nil, fmt.Errorf("--https-listen-port %d: must be between 1 and 65535", o.port)
	}

	if c.ServiceCIDRs, err = parseServiceCIDRs(o.serviceCIDR); err != nil {
		return nil, err
	}
	c.ServiceCIDR = c.ServiceCIDRs[0]
	if c.ClusterCIDRs, err = parseClusterCIDRs(o.clusterCIDR); err != nil {
		return nil, err
	}
	c.ClusterCIDR = c.ClusterCIDRs[0]
	if err := o.validateNodeCIDRMask(c); err != nil {
		return nil, err
	}
	for _, sc := range c.ServiceCIDRs {
		for _, cc := range c.ClusterCIDRs {
			if sc.Overlaps(cc) {
				return nil, fmt.Errorf("--cluster-cidr %s overlaps --service-cidr %s", cc, sc)
			}
		}
	}

	pr, err := utilnet.ParsePortRange(strings.TrimSpace(o.nodePortRange))
	if err != nil {
		return nil, fmt.Errorf("--service-node-port-range %q: %v", o.nodePortRange, err)
	}
	if pr.Size == 0 || pr.Base < 1 {
		return nil, fmt.Errorf("--service-node-port-range %q: want first-last with ports between 1 and 65535", o.nodePortRange)
	}
	c.NodePortRange = apiserver.PortRange{Base: pr.Base, Max: pr.Base + pr.Size - 1}
	if err := o.validateNodePortAddresses(c); err != nil {
		return nil, err
	}

	if errs := validation.IsDNS1123Subdomain(o.clusterDomain); len(errs) > 0 {
		return nil, fmt.Errorf("--cluster-domain %q: %s", o.clusterDomain, strings.Join(errs, "; "))
	}
	if err := o.validateNode(c); err != nil {
		return nil, err
	}
	if err := o.validateIngress(c); err != nil {
		return nil, err
	}
	if err := o.validateSimulated(c); err != nil {
		return nil, err
	}
	if c.Eviction, err = o.eviction.validate(); err != nil {
		return nil, err
	}
	if c.NodeLifecycle, err = o.nodeLifecycle.validate(); err != nil {
		return nil, err
	}
	if c.HPA, err = o.hpa.validate(); err != nil {
		return nil, err
	}
	if err := o.validateScheduler(c); err != nil {
		return nil, err
	}
	if o.maxEndpoints < 1 || o.maxEndpoints > 1000 {
		return nil, fmt.Errorf("--max-endpoints-per-slice %d: must be between 1 and 1000", o.maxEndpoints)
	}
	c.MaxEndpointsPerSlice = o.maxEndpoints
	// Badger cannot hold a value the size of its value-log file (16 MiB);
	// half of that leaves room and is already past what etcd is advised
	// to take. Under 64 KiB, bootstrap objects (the default ClusterRoles)
	// would not fit.
	if o.maxObjectSize < 64<<10 || o.maxObjectSize > 8<<20 {
		return nil, fmt.Errorf("--max-object-size %d: must be between %d (64 KiB) and %d (8 MiB)", o.maxObjectSize, 64<<10, 8<<20)
	}
	c.MaxObjectSize = o.maxObjectSize
	// A TTL under a second would outrun the store's expiry sweep (and
	// etcd's leases, which count whole seconds).
	if o.eventTTL < time.Second {
		return nil, fmt.Errorf("--event-ttl %v: must be at least 1s", o.eventTTL)
	}
	c.EventTTL = o.eventTTL
	if err := o.validateSnapshots(c); err != nil {
		return nil, err
	}
	if err := o.validateDeploy(c); err != nil {
		return nil, err
	}
	// Under 64 MiB the embedded store would be refused writes while
	// nearly empty: its logs are allocated ahead (some 30 MB).
	if o.quotaBackendBytes != 0 && o.quotaBackendBytes < minQuotaBytes {
		return nil, fmt.Errorf("--quota-backend-bytes %d: must be 0 (the default) or at least %d (64 MiB)", o.quotaBackendBytes, minQuotaBytes)
	}
	c.QuotaBytes = o.quotaBackendBytes

	for _, san := range o.tlsSANs {
		san = strings.TrimSpace(san)
		if _, err := netip.ParseAddr(san); err == nil {
			c.TLSSANs = append(c.TLSSANs, san)
			continue
		}
		name := strings.ToLower(san)
		if errs := validation.IsDNS1123Subdomain(strings.TrimPrefix(name, "*.")); len(errs) > 0 {
			return nil, fmt.Errorf("--tls-san %q: neither an IP address nor a DNS name: %s", san, strings.Join(errs, "; "))
		}
		c.TLSSANs = append(c.TLSSANs, name)
	}

	if o.writeKubeconfig != "" {
		// Checked now so that a typo fails before anything is written.
		dir := filepath.Dir(o.writeKubeconfig)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--write-kubeconfig %s: directory %s does not exist", o.writeKubeconfig, dir)
		}
		if st, err := os.Stat(o.writeKubeconfig); err == nil && st.IsDir() {
			return nil, fmt.Errorf("--write-kubeconfig %s: is a directory", o.writeKubeconfig)
		}
	}

	if o.tokenFile != "" {
		tf, err := authn.LoadTokenFile(o.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %v", err)
		}
		c.Tokens = tf
	}

	switch o.authorizationMode {
	case "RBAC", "Node,RBAC", "RBAC,Node":
		c.AuthorizationMode = apiserver.AuthorizationRBAC
	case "AlwaysAllow":
		c.AuthorizationMode = apiserver.AuthorizationAlwaysAllow
	default:
		return nil, fmt.Errorf("--authorization-mode %q: must be RBAC or AlwaysAllow", o.authorizationMode)
	}

	switch {
	case o.auditLogPath != "" && o.auditPolicyFile == "":
		return nil, errors.New("--audit-log-path: needs --audit-policy-file (without a policy nothing is audited)")
	case o.auditLogPath == "" && o.auditPolicyFile != "":
		return nil, errors.New("--audit-policy-file: needs --audit-log-path to write the events to")
	case o.auditPolicyFile != "":
		p, err := audit.LoadPolicy(o.auditPolicyFile)
		if err != nil {
			return nil, fmt.Errorf("--audit-policy-file %s: %v", o.auditPolicyFile, err)
		}
		c.AuditLogPath, c.AuditPolicy = o.auditLogPath, p
	}
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{{"--audit-log-maxsize", o.auditLogRotation.MaxSizeMB, 1}, {"--audit-log-maxbackup", o.auditLogRotation.MaxBackups, 0}, {"--audit-log-maxage", o.auditLogRotation.MaxAgeDays, 0}} {
		if f.v < f.min {
			return nil, fmt.Errorf("%s %d: must be at least %d", f.name, f.v, f.min)
		}
	}
	c.AuditLogRotation = o.auditLogRotation
	for _, f := range []struct {
		name string
		v    int
	}{{"--max-requests-inflight", o.limits.MaxRequestsInFlight}, {"--max-mutating-requests-inflight", o.limits.MaxMutatingRequestsInFlight},
		{"--min-request-timeout", o.minRequestTimeout}, {"--max-watches-per-user", o.limits.MaxWatchesPerUser}} {
		if f.v < 1 {
			return nil, fmt.Errorf("%s %d: must be at least 1", f.name, f.v)
		}
	}
	if o.limits.RequestTimeout <= 0 {
		return nil, fmt.Errorf("--request-timeout %v: must be more than 0", o.limits.RequestTimeout)
	}
	c.Limits = o.limits
	c.Limits.MinRequestTimeout = time.Duration(o.minRequestTimeout) * time.Second

	adm, err := admission.LoadConfig(o.admissionConfig)
	if err != nil {
		return nil, fmt.Errorf("--admission-control-config-file %s: %v", o.admissionConfig, err)
	}
	c.Admission = adm

	switch {
	case o.encryptionConfig != "" && o.secretsEncryption:
		return nil, fmt.Errorf("--secrets-encryption: bonsai keeps its own configuration in %s; give it or --encryption-provider-config, not both", encryptionConfigPath(c.DataDir))
	case o.encryptionConfig != "":
		enc, err := encryption.Load(o.encryptionConfig)
		if err != nil {
			return nil, fmt.Errorf("--encryption-provider-config %s: %v", o.encryptionConfig, err)
		}
		c.Encryption = enc
	}
	c.SecretsEncryption = o.secretsEncryption

	if o.datastoreEndpoint != "" {
		if _, err := store.ParseEtcdEndpoints(o.datastoreEndpoint); err != nil {
			return nil, fmt.Errorf("--datastore-endpoint: %v", err)
		}
		c.Etcd = store.EtcdOptions{
			Endpoint:      o.datastoreEndpoint,
			CAFile:        o.datastoreCAFile,
			CertFile:      o.datastoreCertFile,
			KeyFile:       o.datastoreKeyFile,
			MaxValueBytes: o.maxObjectSize,
			QuotaBytes:    o.quotaBackendBytes,
		}
	}
	for _, f := range []struct{ flag, path string }{
		{"--datastore-cafile", o.datastoreCAFile},
		{"--datastore-certfile", o.datastoreCertFile},
		{"--datastore-keyfile", o.datastoreKeyFile},
	} {
		if f.path == "" {
			continue
		}
		if o.datastoreEndpoint == "" {
			return nil, fmt.Errorf("%s: only used with --datastore-endpoint", f.flag)
		}
		if _, err := os.ReadFile(f.path); err != nil {
			return nil, fmt.Errorf("%s: %v", f.flag, err)
		}
	}
	if (o.datastoreCertFile == "") != (o.datastoreKeyFile == "") {
		return nil, errors.New("--datastore-certfile and --datastore-keyfile: give both or neither")
	}

	switch o.logFormat {
	case "text", "json":
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	switch o.logLevel {
	case "debug":
		c.LogLevel = slog.LevelDebug
	case "info":
		c.LogLevel = slog.LevelInfo
	case "warn":
		c.LogLevel = slog.LevelWarn
	case "error":
		c.LogLevel = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	return c, nil
}

func parseCIDR(flag, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s %q: not a CIDR (like 10.43.0.0/16)", flag, s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%s %q: write IPv4 ranges as IPv4", flag, s)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("%s %q: host bits set; did you mean %s?", flag, s, m)
	}
	if flag == "--service-cidr" {
		if _, err := pki.FirstServiceIP(p); err != nil {
			return netip.Prefix{}, fmt.Errorf("%s %q: %v", flag, s, err)
		}
	}
	return p, nil
}

// validateNodePortAddresses checks --nodeport-addresses as kube-proxy
// does: CIDRs, or "primary" alone. A CIDR of every address (0.0.0.0/0)
// is the same as none.
func (o *serverOptions) validateNodePortAddresses(c *serverConfig) error {
	if len(o.nodePortAddresses) == 1 && strings.TrimSpace(o.nodePortAddresses[0]) == "primary" {
		c.NodePortPrimary = true
		return nil
	}
	all := false
	for _, s := range o.nodePortAddresses {
		s = strings.TrimSpace(s)
		if s == "primary" {
			return errors.New(`--nodeport-addresses: "primary" cannot be combined with CIDRs`)
		}
		p, err := parseCIDR("--nodeport-addresses", s)
		if err != nil {
			return err
		}
		all = all || p.Bits() == 0
		c.NodePortAddresses = append(c.NodePortAddresses, p)
	}
	if all {
		c.NodePortAddresses = nil
	}
	return nil
}

// oneLine keeps an error on the single stderr line bonsai promises.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// validateNode checks the flags of this host's node agent.
func (o *serverOptions) validateNode(c *serverConfig) error {
	switch o.runtime {
	case "containerd", "simulated":
		c.Runtime = o.runtime
	default:
		return fmt.Errorf("--runtime %q: must be containerd or simulated", o.runtime)
	}
	c.NodeName = o.nodeName
	if c.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node-name: not given and the host name is unknown: %v", err)
		}
		c.NodeName = strings.ToLower(h)
	}
	if errs := validation.IsDNS1123Subdomain(c.NodeName); len(errs) > 0 {
		return fmt.Errorf("--node-name %q: %s", c.NodeName, strings.Join(errs, "; "))
	}
	if o.maxPods < 1 {
		return fmt.Errorf("--max-pods %d: must be at least 1", o.maxPods)
	}
	c.MaxPods = o.maxPods
	if o.podMaxPids == 0 || o.podMaxPids < -1 {
		return fmt.Errorf("--pod-max-pids %d: must be -1 (no limit) or at least 1", o.podMaxPids)
	}
	c.PodMaxPids = o.podMaxPids
	groups, err := o.shutdownGroups()
	if err != nil {
		return err
	}
	c.ShutdownGroups = groups
	if o.kubeletPort < 1 || o.kubeletPort > 65535 {
		return fmt.Errorf("--kubelet-port %d: must be between 1 and 65535", o.kubeletPort)
	}
	if o.kubeletPort == o.port {
		return fmt.Errorf("--kubelet-port %d: the API server listens there (--https-listen-port)", o.kubeletPort)
	}
	c.KubeletPort = o.kubeletPort
	if o.metricResolution < 10*time.Second {
		return fmt.Errorf("Metric-resolution should be a time duration at least 10s, but value %v provided", o.metricResolution)
	}
	c.MetricResolution = o.metricResolution
	if o.housekeeping < time.Second {
		return fmt.Errorf("--housekeeping-interval %v: must be at least 1s", o.housekeeping)
	}
	c.HousekeepingInterval = o.housekeeping
	c.VolumeStatsPeriod = o.volumeStatsPeriod
	c.RuntimeEndpoint = strings.TrimPrefix(o.runtimeEndpoint, "unix://")
	c.NoDefaultRegistry = o.noDefaultRegistry
	if c.RuntimeEndpoint == "" || !filepath.IsAbs(c.RuntimeEndpoint) {
		return fmt.Errorf("--container-runtime-endpoint %q: must be an absolute path to a unix socket", o.runtimeEndpoint)
	}
	if errs := validation.IsDNS1123Label(o.podBridge); len(o.podBridge) > 15 || len(errs) > 0 {
		return fmt.Errorf("--pod-bridge %q: must be a lower-case name of at most 15 letters, digits and '-'", o.podBridge)
	}
	c.PodBridge = o.podBridge
	if err := o.validateDevices(c); err != nil {
		return err
	}
	switch o.podNetwork {
	case "builtin", "cni", "auto":
		c.PodNetwork = o.podNetwork
	default:
		return fmt.Errorf("--pod-network %q: must be builtin, cni or auto", o.podNetwork)
	}
	if !filepath.IsAbs(o.cniConfDir) {
		return fmt.Errorf("--cni-conf-dir %q: must be an absolute path", o.cniConfDir)
	}
	c.CNIConfDir = filepath.Clean(o.cniConfDir)
	if len(o.cniBinDirs) == 0 {
		return errors.New("--cni-bin-dir: give at least one directory")
	}
	c.CNIBinDirs = nil
	for _, d := range o.cniBinDirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("--cni-bin-dir %q: must be an absolute path", d)
		}
		c.CNIBinDirs = append(c.CNIBinDirs, filepath.Clean(d))
	}
	c.PodManifestPath = o.podManifestPath
	if c.PodManifestPath != "" && !filepath.IsAbs(c.PodManifestPath) {
		return fmt.Errorf("--pod-manifest-path %q: must be an absolute path", o.podManifestPath)
	}
	c.NodeLabels = map[string]string{}
	for _, l := range o.nodeLabels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("--node-labels %q: want key=value", l)
		}
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			return fmt.Errorf("--node-labels %q: %s", l, strings.Join(errs, "; "))
		}
		c.NodeLabels[k] = v
	}
	for _, t := range o.nodeTaints {
		kv, effect, ok := strings.Cut(t, ":")
		if !ok {
			return fmt.Errorf("--node-taints %q: want key=value:Effect", t)
		}
		k, v, _ := strings.Cut(kv, "=")
		switch corev1.TaintEffect(effect) {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return fmt.Errorf("--node-taints %q: effect must be NoSchedule, PreferNoSchedule or NoExecute", t)
		}
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			return fmt.Errorf("--node-taints %q: %s", t, strings.Join(errs, "; "))
		}
		c.NodeTaints = append(c.NodeTaints, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)})
	}
	return nil
}

// splitCIDRs cuts a comma-separated flag value into its CIDRs.
func splitCIDRs(flag, s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(strings.TrimSpace(s), ",") {
		p, err := parseCIDR(flag, f)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// parseServiceCIDRs reads --service-cidr as kube-apiserver reads
// --service-cluster-ip-range: one CIDR, or one of each family, each at
// most 2^20 addresses (the rule kube-apiserver applies with its bitmap
// allocators; bonsai's allocator keeps it), with kube-apiserver's
// messages.
func parseServiceCIDRs(s string) ([]netip.Prefix, error) {
	if strings.Count(s, ",") > 1 {
		return nil, errors.New("--service-cidr must not contain more than two entries")
	}
	cidrs, err := splitCIDRs("--service-cidr", s)
	if err != nil {
		return nil, err
	}
	for i, p := range cidrs {
		flag := "--service-cidr"
		if i > 0 {
			flag += "[1]"
		}
		bits := p.Addr().BitLen()
		if hostBits := bits - p.Bits(); hostBits > 20 {
			return nil, fmt.Errorf("specified %s is too large; for %d-bit addresses, the mask must be >= %d", flag, bits, bits-20)
		} else if hostBits < 2 {
			return nil, fmt.Errorf("%s %s: too small; it needs room for the kubernetes service and others", flag, p)
		}
	}
	if len(cidrs) == 2 && cidrs[0].Addr().Is4() == cidrs[1].Addr().Is4() {
		return nil, errors.New("--service-cidr[0] and --service-cidr[1] must be of different IP family")
	}
	return cidrs, nil
}

// parseClusterCIDRs reads --cluster-cidr as kube-controller-manager
// does: one CIDR, or one of each family.
func parseClusterCIDRs(s string) ([]netip.Prefix, error) {
	cidrs, err := splitCIDRs("--cluster-cidr", s)
	if err != nil {
		return nil, err
	}
	switch {
	case len(cidrs) > 2:
		return nil, fmt.Errorf("--cluster-cidr: length of clusterCIDRs is:%d more than max allowed of 2", len(cidrs))
	case len(cidrs) == 2 && cidrs[0].Addr().Is4() == cidrs[1].Addr().Is4():
		return nil, fmt.Errorf("--cluster-cidr: len of ClusterCIDRs==%d and they are not configured as dual stack (at least one from each IPFamily", len(cidrs))
	}
	return cidrs, nil
}

// validateNodeCIDRMask picks each --cluster-cidr's node mask from
// --node-cidr-mask-size, --node-cidr-mask-size-ipv4 and -ipv6 as
// kube-controller-manager does (defaults: a /24 for IPv4, a /64 for IPv6
// per node), and checks it against its cluster CIDR.
func (o *serverOptions) validateNodeCIDRMask(c *serverConfig) error {
	v4Mask, v6Mask := 24, 64
	dual := len(c.ClusterCIDRs) > 1
	singleV6 := !dual && c.ClusterCIDR.Addr().Is6()
	switch {
	case dual && o.nodeCIDRMaskSize != 0:
		return errors.New("usage of --node-cidr-mask-size is not allowed with dual-stack clusters")
	case o.nodeCIDRMaskSize != 0 && (o.nodeCIDRMaskIPv4 != 0 || o.nodeCIDRMaskIPv6 != 0):
		return errors.New("usage of --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 is not allowed if --node-cidr-mask-size is set. For dual-stack clusters please unset it and use IPFamily specific flags")
	case o.nodeCIDRMaskSize != 0:
		v4Mask, v6Mask = o.nodeCIDRMaskSize, o.nodeCIDRMaskSize
	case !dual && singleV6 && o.nodeCIDRMaskIPv4 != 0:
		return errors.New("usage of --node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster")
	case !dual && !singleV6 && o.nodeCIDRMaskIPv6 != 0:
		return errors.New("usage of --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster")
	}
	if o.nodeCIDRMaskSize == 0 {
		if o.nodeCIDRMaskIPv4 != 0 {
			v4Mask = o.nodeCIDRMaskIPv4
		}
		if o.nodeCIDRMaskIPv6 != 0 {
			v6Mask = o.nodeCIDRMaskIPv6
		}
	}
	c.NodeCIDRMaskSizes = nil
	for _, cc := range c.ClusterCIDRs {
		v6 := cc.Addr().Is6()
		mask, maxMask, flag := v4Mask, 30, "--node-cidr-mask-size-ipv4"
		if v6 {
			mask, maxMask, flag = v6Mask, 126, "--node-cidr-mask-size-ipv6"
		}
		if o.nodeCIDRMaskSize != 0 {
			flag = "--node-cidr-mask-size"
		}
		if mask < 1 || mask > maxMask {
			return fmt.Errorf("%s %d: must be between 1 and %d for an %s --cluster-cidr (a node CIDR needs room for pods)", flag, mask, maxMask, map[bool]string{false: "IPv4", true: "IPv6"}[v6])
		}
		if cc.Bits() > mask {
			return fmt.Errorf("--cluster-cidr %s: too small for %s %d; each node takes a /%d", cc, flag, mask, mask)
		}
		// The allocator keeps a bitmap of node CIDRs: 2^24 of them is 2 MB.
		if mask-cc.Bits() > 24 {
			return fmt.Errorf("%s %d: --cluster-cidr %s would hold more than 2^24 node CIDRs; use a longer --cluster-cidr prefix or a shorter mask", flag, mask, cc)
		}
		c.NodeCIDRMaskSizes = append(c.NodeCIDRMaskSizes, mask)
	}
	c.NodeCIDRMaskSize = c.NodeCIDRMaskSizes[0]
	return nil
}

// validateDevices checks --kubelet-root-dir and reads the generic device
// plugin's devices.yaml: an explicit --device-config must exist, the
// default one is read only if present.
func (o *serverOptions) validateDevices(c *serverConfig) error {
	if o.kubeletRootDir == "" || !filepath.IsAbs(o.kubeletRootDir) {
		return fmt.Errorf("--kubelet-root-dir %q: must be an absolute path", o.kubeletRootDir)
	}
	c.KubeletRootDir = filepath.Clean(o.kubeletRootDir)
	c.CDISpecDirs = nil
	for _, d := range o.cdiSpecDirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("--cdi-spec-dir %q: must be an absolute path", d)
		}
		c.CDISpecDirs = append(c.CDISpecDirs, filepath.Clean(d))
	}
	path := o.deviceConfig
	if path == "" {
		path = filepath.Join(o.dataDir, "devices.yaml")
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	cfg, err := generic.Load(path)
	if err != nil {
		return fmt.Errorf("--device-config: %v", err)
	}
	c.Devices = cfg
	return nil
}

// shutdownGroups checks the graceful node shutdown flags.
func (o *serverOptions) shutdownGroups() ([]kubelet.ShutdownGroup, error) {
	var byPrio []kubelet.ShutdownGroup
	for _, e := range o.shutdownByPrio {
		p, d, ok := strings.Cut(e, "=")
		prio, perr := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		period, derr := time.ParseDuration(strings.TrimSpace(d))
		if !ok || perr != nil || derr != nil {
			return nil, fmt.Errorf("--shutdown-grace-period-by-pod-priority %q: want priority=period, such as 100000=10s", e)
		}
		byPrio = append(byPrio, kubelet.ShutdownGroup{Priority: int32(prio), Period: period})
	}
	groups, err := kubelet.ShutdownGroups(o.shutdownGrace, o.shutdownCritical, byPrio)
	if err != nil {
		return nil, fmt.Errorf("graceful node shutdown: %v", err)
	}
	return groups, nil
}

// ingressConfig is where the built-in Ingress controller listens.
type ingressConfig struct {
	Enabled             bool
	BindAddress         netip.Addr
	HTTPPort, HTTPSPort int
}

func (o *serverOptions) validateIngress(c *serverConfig) error {
	c.Ingress = ingressConfig{BindAddress: c.BindAddress, HTTPPort: o.ingressHTTPPort, HTTPSPort: o.ingressHTTPSPort}
	if o.ingressBind != "" {
		addr, err := netip.ParseAddr(o.ingressBind)
		if err != nil || addr.Zone() != "" {
			return fmt.Errorf("--ingress-bind-address %q: not an IP address", o.ingressBind)
		}
		c.Ingress.BindAddress = addr.Unmap()
	}
	for _, f := range []struct {
		name string
		port int
	}{{"--ingress-http-port", o.ingressHTTPPort}, {"--ingress-https-port", o.ingressHTTPSPort}} {
		if f.port < 0 || f.port > 65535 {
			return fmt.Errorf("%s %d: must be between 0 (off) and 65535", f.name, f.port)
		}
		if f.port == 0 {
			continue
		}
		shared := sameListenAddress(c.Ingress.BindAddress, c.BindAddress)
		if f.port == o.port && shared {
			return fmt.Errorf("%s %d: the API server listens there (--https-listen-port)", f.name, f.port)
		}
		if f.port == o.kubeletPort && !o.disableAgent && shared {
			return fmt.Errorf("%s %d: the kubelet API listens there (--kubelet-port)", f.name, f.port)
		}
	}
	if o.ingressHTTPPort != 0 && o.ingressHTTPPort == o.ingressHTTPSPort {
		return fmt.Errorf("--ingress-http-port and --ingress-https-port: both %d", o.ingressHTTPPort)
	}
	if o.ingressHTTPPort == 0 && o.ingressHTTPSPort == 0 && !o.disableIngress {
		return errors.New("--ingress-http-port and --ingress-https-port are both 0: use --disable-ingress to run no Ingress controller")
	}
	c.Ingress.Enabled = !o.disableIngress && !o.disableAgent
	return nil
}

// sameListenAddress reports whether listeners on a and b at one port
// would collide.
func sameListenAddress(a, b netip.Addr) bool {
	return a == b || a.IsUnspecified() || b.IsUnspecified()
}

func (o *serverOptions) validateSnapshots(c *serverConfig) error {
	if o.snapshotSchedule != "" {
		sched, err := cron.ParseStandard(o.snapshotSchedule)
		if err != nil {
			return fmt.Errorf("--snapshot-schedule %q: %v", o.snapshotSchedule, err)
		}
		c.SnapshotSchedule = sched
	}
	if o.snapshotRetention < 1 {
		return fmt.Errorf("--snapshot-retention %d: must be at least 1", o.snapshotRetention)
	}
	c.SnapshotRetention = o.snapshotRetention
	c.SnapshotDir = snapshotDirOf(c.DataDir)
	if o.snapshotDir != "" {
		c.SnapshotDir = filepath.Clean(o.snapshotDir)
	}
	return nil
}
