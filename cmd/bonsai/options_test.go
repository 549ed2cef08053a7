package main

import (
	"bytes"
	"context"
	"io"
	corev1 "k8s.io/api/core/v1"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/robfig/cron/v3"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/admission"
	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/controllers"
	"bonsai.dev/bonsai/kubelet"
	"bonsai.dev/bonsai/kubelet/eviction"
)

// parseServer runs `bonsai server args...` up to the point where the server
// would start and returns the checked configuration.
func parseServer(t *testing.T, args ...string) (*serverConfig, error) {
	t.Helper()
	var got *serverConfig
	root := newRootCmd(io.Discard, io.Discard, func(_ context.Context, c *serverConfig, _ io.Writer) error {
		got = c
		return nil
	})
	root.SetArgs(append([]string{"server"}, args...))
	if err := root.Execute(); err != nil {
		return nil, err
	}
	return got, nil
}

// noDefaultConfig keeps a real /etc/bonsai/config.yaml out of the tests.
func noDefaultConfig(t *testing.T) {
	t.Helper()
	old := defaultConfigFile
	defaultConfigFile = filepath.Join(t.TempDir(), "absent.yaml")
	t.Cleanup(func() { defaultConfigFile = old })
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestServerDefaults(t *testing.T) {
	noDefaultConfig(t)
	got, err := parseServer(t)
	if err != nil {
		t.Fatal(err)
	}
	want := &serverConfig{
		DataDir:       "/var/lib/bonsai",
		BindAddress:   netip.MustParseAddr("0.0.0.0"),
		Port:          6443,
		ServiceCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.43.0.0/16")},
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.42.0.0/16")},
		ServiceCIDR:   netip.MustParsePrefix("10.43.0.0/16"),
		ClusterCIDR:   netip.MustParsePrefix("10.42.0.0/16"),
		NodePortRange: apiserver.PortRange{Base: 30000, Max: 32767},
		ClusterDomain: "cluster.local",
		LogFormat:     "text",
		LogLevel:      slog.LevelInfo,
		Runtime:       "containerd",
		NodeName:      hostName(t),
		NodeLabels:    map[string]string{},
		MaxPods:       110,
		PodMaxPids:    -1,

		RuntimeEndpoint:      "/run/containerd/containerd.sock",
		PodBridge:            "bonsai0",
		PodNetwork:           "auto",
		CNIConfDir:           "/etc/cni/net.d",
		CNIBinDirs:           []string{"/opt/cni/bin"},
		NodeCIDRMaskSize:     24,
		NodeCIDRMaskSizes:    []int{24},
		KubeletPort:          10250,
		MetricResolution:     15 * time.Second,
		HousekeepingInterval: 10 * time.Second,
		VolumeStatsPeriod:    time.Minute,
		Ingress:              ingressConfig{Enabled: true, BindAddress: netip.MustParseAddr("0.0.0.0"), HTTPPort: 80, HTTPSPort: 443},
		NodeLifecycle:        defaultNodeLifecycle,
		HPA:                  defaultHPA(),
		Eviction:             defaultEviction(t),

		MaxEndpointsPerSlice: 100,
		MaxObjectSize:        1572864,
		EventTTL:             time.Hour,
		AuthorizationMode:    "RBAC",
		Profiling:            true,
		KubeletRootDir:       "/var/lib/kubelet",
		CDISpecDirs:          []string{"/etc/cdi", "/var/run/cdi"},
		AuditLogRotation:     audit.Rotation{MaxSizeMB: 100, MaxBackups: 10},
		Limits:               apiserver.Limits{MaxRequestsInFlight: 400, MaxMutatingRequestsInFlight: 200, RequestTimeout: time.Minute, MinRequestTimeout: 30 * time.Minute, MaxWatchesPerUser: 1000},
		// No --admission-control-config-file: PodSecurity's defaults.
		Admission:         defaultAdmission(t),
		SnapshotSchedule:  mustCron(t, "0 */12 * * *"),
		SnapshotRetention: 5,
		SnapshotDir:       "/var/lib/bonsai/snapshots",
		ManifestsDir:      "/var/lib/bonsai/server/manifests",
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}), sameLocation); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func defaultAdmission(t *testing.T) *admission.Config {
	t.Helper()
	cfg, err := admission.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.PodSecurity.Defaults; d.Enforce != "privileged" || d.Audit != "privileged" || d.Warn != "privileged" {
		t.Fatalf("PodSecurity defaults: %+v", d)
	}
	return cfg
}

func TestServerFlags(t *testing.T) {
	noDefaultConfig(t)
	tokens := writeFile(t, "tokens.csv", "tok,alice,1\n")
	got, err := parseServer(t,
		"--data-dir", "/srv/bonsai/", "--bind-address", "::1", "--https-listen-port", "7443",
		"--disable-agent", "--tls-san", "API.example.com", "--tls-san", "192.0.2.1,b.example",
		"--token-file", tokens, "--datastore-endpoint", "http://127.0.0.1:2379",
		"--service-cidr", "fd00:43::/108", "--cluster-cidr", "10.244.0.0/16",
		"--service-node-port-range", "31000+99", "--cluster-domain", "edge.internal",
		"--log-format", "json", "--log-level", "debug",
		"--runtime", "simulated", "--node-name", "edge-1", "--node-labels", "site=plant-7,tier=edge",
		"--node-taints", "dedicated=cam:NoSchedule", "--node-taints", "gpu:NoExecute", "--max-pods", "50", "--pod-max-pids", "1024",
		"--container-runtime-endpoint", "unix:///run/k3s/containerd/containerd.sock", "--pod-bridge", "edge0",
		"--pod-network", "cni", "--cni-conf-dir", "/srv/cni/net.d/", "--cni-bin-dir", "/usr/lib/cni", "--cni-bin-dir", "/opt/cni/bin",
		"--node-cidr-mask-size", "26", "--kubelet-port", "11250", "--metric-resolution", "30s", "--shutdown-grace-period", "30s", "--shutdown-grace-period-critical-pods", "10s", "--max-endpoints-per-slice", "1000", "--horizontal-pod-autoscaler-sync-period", "5s", "--horizontal-pod-autoscaler-downscale-stabilization", "1m", "--horizontal-pod-autoscaler-tolerance", "0.05", "--max-object-size", "3145728", "--event-ttl", "30m", "--quota-backend-bytes", "4294967296", "--authorization-mode", "AlwaysAllow", "--profiling=false",
		"--audit-log-maxsize", "5", "--audit-log-maxbackup", "3", "--audit-log-maxage", "7",
		"--max-requests-inflight", "40", "--max-mutating-requests-inflight", "20", "--request-timeout", "30s", "--min-request-timeout", "600", "--max-watches-per-user", "50",
		"--audit-log-path", "/var/log/bonsai-audit.log", "--audit-policy-file", writeFile(t, "policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n"),
		"--snapshot-schedule", "@daily", "--snapshot-retention", "3", "--snapshot-dir", "/backup/bonsai/",
		"--manifests-dir", "/etc/bonsai/manifests/", "--disable", "traefik,Local_Storage", "--disable-helm-controller",
		"--admission-control-config-file", writeFile(t, "admission.yaml", admissionConfigYAML))
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Admission; a == nil || a.PodSecurity.Defaults.Enforce != "baseline" || a.PodSecurity.Defaults.Warn != "restricted" ||
		len(a.PodSecurity.Exemptions.Namespaces) != 1 || a.PodSecurity.Exemptions.Namespaces[0] != "ops" {
		t.Errorf("admission: %+v", a)
	}
	got.Admission = nil
	if got.Tokens == nil || got.Tokens.Len() != 1 {
		t.Errorf("tokens not loaded: %+v", got.Tokens)
	}
	got.Tokens = nil
	if got.AuditPolicy == nil || len(got.AuditPolicy.Rules) != 1 || got.AuditLogPath != "/var/log/bonsai-audit.log" {
		t.Errorf("audit: %q %+v", got.AuditLogPath, got.AuditPolicy)
	}
	got.AuditPolicy, got.AuditLogPath = nil, ""
	want := &serverConfig{
		DataDir:       "/srv/bonsai",
		BindAddress:   netip.MustParseAddr("::1"),
		Port:          7443,
		DisableAgent:  true,
		TLSSANs:       []string{"api.example.com", "192.0.2.1", "b.example"},
		ServiceCIDRs:  []netip.Prefix{netip.MustParsePrefix("fd00:43::/108")},
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ServiceCIDR:   netip.MustParsePrefix("fd00:43::/108"),
		ClusterCIDR:   netip.MustParsePrefix("10.244.0.0/16"),
		NodePortRange: apiserver.PortRange{Base: 31000, Max: 31099},
		ClusterDomain: "edge.internal",
		LogFormat:     "json",
		LogLevel:      slog.LevelDebug,
		Runtime:       "simulated",
		NodeName:      "edge-1",
		NodeLabels:    map[string]string{"site": "plant-7", "tier": "edge"},
		NodeTaints: []corev1.Taint{
			{Key: "dedicated", Value: "cam", Effect: corev1.TaintEffectNoSchedule},
			{Key: "gpu", Effect: corev1.TaintEffectNoExecute},
		},
		MaxPods:              50,
		PodMaxPids:           1024,
		KubeletPort:          11250,
		MetricResolution:     30 * time.Second,
		HousekeepingInterval: 10 * time.Second,
		VolumeStatsPeriod:    time.Minute,
		Ingress:              ingressConfig{BindAddress: netip.MustParseAddr("::1"), HTTPPort: 80, HTTPSPort: 443},
		RuntimeEndpoint:      "/run/k3s/containerd/containerd.sock",
		PodBridge:            "edge0",
		PodNetwork:           "cni",
		CNIConfDir:           "/srv/cni/net.d",
		CNIBinDirs:           []string{"/usr/lib/cni", "/opt/cni/bin"},

		NodeCIDRMaskSize:  26,
		NodeCIDRMaskSizes: []int{26},

		MaxEndpointsPerSlice: 1000,
		HPA: controllers.HPAOptions{SyncPeriod: 5 * time.Second, DownscaleStabilization: time.Minute, Tolerance: func() *float64 { f := 0.05; return &f }(),
			CPUInitializationPeriod: 5 * time.Minute, InitialReadinessDelay: 30 * time.Second},
		MaxObjectSize:         3145728,
		EventTTL:              30 * time.Minute,
		QuotaBytes:            4294967296,
		ShutdownGroups:        []kubelet.ShutdownGroup{{Priority: 0, Period: 20 * time.Second}, {Priority: 2000000000, Period: 10 * time.Second}},
		AuthorizationMode:     "AlwaysAllow",
		KubeletRootDir:        "/var/lib/kubelet",
		CDISpecDirs:           []string{"/etc/cdi", "/var/run/cdi"},
		NodeLifecycle:         defaultNodeLifecycle,
		Eviction:              defaultEviction(t),
		AuditLogRotation:      audit.Rotation{MaxSizeMB: 5, MaxBackups: 3, MaxAgeDays: 7},
		Limits:                apiserver.Limits{MaxRequestsInFlight: 40, MaxMutatingRequestsInFlight: 20, RequestTimeout: 30 * time.Second, MinRequestTimeout: 10 * time.Minute, MaxWatchesPerUser: 50},
		SnapshotSchedule:      mustCron(t, "@daily"),
		SnapshotRetention:     3,
		SnapshotDir:           "/backup/bonsai",
		ManifestsDir:          "/etc/bonsai/manifests",
		DisabledManifests:     []string{"traefik", "local-storage"},
		DisableHelmController: true,
	}
	want.Etcd.Endpoint = "http://127.0.0.1:2379"
	want.Etcd.MaxValueBytes = 3145728
	want.Etcd.QuotaBytes = 4294967296
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}), sameLocation); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

const admissionConfigYAML = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults: {enforce: baseline, warn: restricted}
    exemptions: {namespaces: [ops]}
`

func TestServerBadFlags(t *testing.T) {
	noDefaultConfig(t)
	badLevel := writeFile(t, "admission.yaml", strings.Replace(admissionConfigYAML, "enforce: baseline", "enforce: strict", 1))
	badKind := writeFile(t, "admission.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfig\n")
	badTokens := writeFile(t, "tokens.csv", "ok,alice,1\nbroken\n")
	badPolicy := writeFile(t, "policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]\n")
	goodPolicy := writeFile(t, "policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n")
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want []string // all must appear in the error
	}{
		{[]string{"--service-cidr", "10.43.0.0/33"}, []string{"--service-cidr", "not a CIDR"}},
		{[]string{"--shutdown-grace-period", "10s", "--shutdown-grace-period-critical-pods", "10s"}, []string{"graceful node shutdown", "must be less than shutdownGracePeriod 10s"}},
		{[]string{"--shutdown-grace-period-critical-pods", "10s"}, []string{"graceful node shutdown", "needs a shutdownGracePeriod"}},
		{[]string{"--shutdown-grace-period", "-1s"}, []string{"graceful node shutdown", "negative"}},
		{[]string{"--shutdown-grace-period", "soon"}, []string{"--shutdown-grace-period"}},
		{[]string{"--shutdown-grace-period-by-pod-priority", "100000:10s"}, []string{"--shutdown-grace-period-by-pod-priority", "priority=period"}},
		{[]string{"--shutdown-grace-period-by-pod-priority", "high=10s"}, []string{"--shutdown-grace-period-by-pod-priority", "priority=period"}},
		{[]string{"--shutdown-grace-period-by-pod-priority", "100000=10s", "--shutdown-grace-period", "30s"}, []string{"graceful node shutdown", "cannot be set together"}},
		{[]string{"--kubelet-root-dir", "var/lib/kubelet"}, []string{"--kubelet-root-dir", "absolute"}},
		{[]string{"--device-config", filepath.Join(dir, "absent.yaml")}, []string{"--device-config", "absent.yaml", "no such file"}},
		{[]string{"--device-config", writeFile(t, "devices.yaml", "resources:\n- name: serial\n  devices: [/dev/ttyUSB*]\n")}, []string{"--device-config", "resources[0]", "vendor-domain/resourcetype"}},
		{[]string{"--service-cidr", "banana"}, []string{"--service-cidr"}},
		{[]string{"--max-object-size", "1000"}, []string{"--max-object-size 1000", "between 65536 (64 KiB) and 8388608 (8 MiB)"}},
		{[]string{"--max-object-size", "16777216"}, []string{"--max-object-size", "between"}},
		{[]string{"--max-object-size", "big"}, []string{"--max-object-size"}},
		{[]string{"--event-ttl", "0s"}, []string{"--event-ttl 0s", "at least 1s"}},
		{[]string{"--event-ttl", "-1h"}, []string{"--event-ttl", "at least 1s"}},
		{[]string{"--event-ttl", "an hour"}, []string{"--event-ttl"}},
		{[]string{"--quota-backend-bytes", "-1"}, []string{"--quota-backend-bytes -1", "at least 67108864 (64 MiB)"}},
		{[]string{"--quota-backend-bytes", "1000"}, []string{"--quota-backend-bytes 1000", "0 (the default)"}},
		{[]string{"--quota-backend-bytes", "8Gi"}, []string{"--quota-backend-bytes"}},
		{[]string{"--service-cidr", "10.43.0.1/16"}, []string{"--service-cidr", "10.43.0.0/16"}},
		{[]string{"--service-cidr", "10.0.0.0/8"}, []string{"specified --service-cidr is too large; for 32-bit addresses, the mask must be >= 12"}},
		// Dual-stack: one range per family, with kube-apiserver's and
		// kube-controller-manager's messages.
		{[]string{"--service-cidr", "10.43.0.0/16,fd43::/64"}, []string{"specified --service-cidr[1] is too large; for 128-bit addresses, the mask must be >= 108"}},
		{[]string{"--service-cidr", "fd43::/64"}, []string{"specified --service-cidr is too large; for 128-bit addresses, the mask must be >= 108"}},
		{[]string{"--service-cidr", "10.43.0.0/16,10.44.0.0/16"}, []string{"--service-cidr[0] and --service-cidr[1] must be of different IP family"}},
		{[]string{"--service-cidr", "10.43.0.0/16,fd43::/112,10.44.0.0/16"}, []string{"--service-cidr must not contain more than two entries"}},
		{[]string{"--service-cidr", "10.43.0.0/16,"}, []string{"--service-cidr", "not a CIDR"}},
		{[]string{"--cluster-cidr", "10.42.0.0/16,10.44.0.0/16"}, []string{"--cluster-cidr", "not configured as dual stack"}},
		{[]string{"--cluster-cidr", "10.42.0.0/16,fd42::/56,fd44::/56"}, []string{"--cluster-cidr", "more than max allowed of 2"}},
		{[]string{"--cluster-cidr", "10.42.0.0/16,fd43::/56", "--service-cidr", "10.43.0.0/16,fd43::/112"}, []string{"--cluster-cidr fd43::/56 overlaps --service-cidr fd43::/112"}},
		{[]string{"--cluster-cidr", "10.42.0.0/16,fd42::/56", "--node-cidr-mask-size", "24"}, []string{"usage of --node-cidr-mask-size is not allowed with dual-stack clusters"}},
		{[]string{"--node-cidr-mask-size", "24", "--node-cidr-mask-size-ipv4", "24"}, []string{"usage of --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 is not allowed if --node-cidr-mask-size is set"}},
		{[]string{"--node-cidr-mask-size-ipv6", "64"}, []string{"usage of --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster"}},
		{[]string{"--cluster-cidr", "fd42::/56", "--service-cidr", "fd43::/112", "--node-cidr-mask-size-ipv4", "24"}, []string{"usage of --node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster"}},
		{[]string{"--cluster-cidr", "10.42.0.0/16,fd42::/56", "--node-cidr-mask-size-ipv6", "48"}, []string{"--cluster-cidr fd42::/56: too small for --node-cidr-mask-size-ipv6 48"}},
		{[]string{"--cluster-cidr", "10.42.0.0/16,fd42::/56", "--node-cidr-mask-size-ipv4", "31"}, []string{"--node-cidr-mask-size-ipv4 31", "between 1 and 30"}},
		{[]string{"--service-cidr", "10.43.0.0/31"}, []string{"--service-cidr"}},
		{[]string{"--cluster-cidr", "10.42.0.0/25"}, []string{"--cluster-cidr", "too small"}},
		{[]string{"--cluster-cidr", "10.43.0.0/16"}, []string{"--cluster-cidr", "overlaps --service-cidr"}},
		{[]string{"--cluster-cidr", "x/y"}, []string{"--cluster-cidr"}},
		{[]string{"--node-cidr-mask-size", "31"}, []string{"--node-cidr-mask-size", "between 1 and 30"}},
		{[]string{"--node-cidr-mask-size", "-1"}, []string{"--node-cidr-mask-size"}},
		{[]string{"--node-cidr-mask-size", "x"}, []string{"--node-cidr-mask-size"}},
		{[]string{"--node-cidr-mask-size", "15"}, []string{"--cluster-cidr", "too small", "--node-cidr-mask-size 15"}},
		{[]string{"--cluster-cidr", "fd00:42::/56", "--node-cidr-mask-size", "127"}, []string{"--node-cidr-mask-size", "IPv6"}},
		{[]string{"--cluster-cidr", "fd00:42::/32", "--node-cidr-mask-size", "64"}, []string{"--node-cidr-mask-size", "2^24"}},
		{[]string{"--simulated-nodes", "-1"}, []string{"--simulated-nodes", "between 0 and 100000"}},
		{[]string{"--simulated-nodes", "1000000"}, []string{"--simulated-nodes", "between 0 and 100000"}},
		{[]string{"--simulated-nodes", "ten"}, []string{"--simulated-nodes"}},
		{[]string{"--simulated-nodes", "256"}, []string{"--simulated-nodes 256", "--cluster-cidr 10.42.0.0/16 holds only 256"}},
		{[]string{"--simulated-nodes", "300", "--cluster-cidr", "10.128.0.0/9,fd42::/56"}, []string{"--simulated-nodes 300", "--cluster-cidr fd42::/56 holds only 256"}},
		{[]string{"--service-node-port-range", "5-2"}, []string{"--service-node-port-range", "5-2"}},
		{[]string{"--service-node-port-range", "30000-70000"}, []string{"--service-node-port-range", "65535"}},
		{[]string{"--service-node-port-range", "0-100"}, []string{"--service-node-port-range"}},
		{[]string{"--service-node-port-range", "a-b"}, []string{"--service-node-port-range"}},
		{[]string{"--service-node-port-range", ""}, []string{"--service-node-port-range"}},
		{[]string{"--https-listen-port", "70000"}, []string{"--https-listen-port", "70000"}},
		{[]string{"--https-listen-port", "0"}, []string{"--https-listen-port"}},
		{[]string{"--https-listen-port", "https"}, []string{"--https-listen-port"}},
		{[]string{"--cluster-domain", "Cluster_Local"}, []string{"--cluster-domain"}},
		{[]string{"--cluster-domain", "-bad.local"}, []string{"--cluster-domain"}},
		{[]string{"--cluster-domain", ""}, []string{"--cluster-domain"}},
		{[]string{"--log-level", "verbose"}, []string{"--log-level", "verbose"}},
		{[]string{"--runtime", "docker"}, []string{"--runtime", "docker"}},
		{[]string{"--node-name", "Not_A_Name"}, []string{"--node-name"}},
		{[]string{"--max-pods", "0"}, []string{"--max-pods"}},
		{[]string{"--audit-log-maxsize", "0"}, []string{"--audit-log-maxsize 0: must be at least 1"}},
		{[]string{"--max-requests-inflight", "0"}, []string{"--max-requests-inflight 0: must be at least 1"}},
		{[]string{"--request-timeout", "0s"}, []string{"--request-timeout 0s: must be more than 0"}},
		{[]string{"--audit-log-maxbackup", "-1"}, []string{"--audit-log-maxbackup -1: must be at least 0"}},
		{[]string{"--pod-max-pids", "0"}, []string{"--pod-max-pids", "-1 (no limit) or at least 1"}},
		{[]string{"--pod-max-pids", "-5"}, []string{"--pod-max-pids"}},
		{[]string{"--eviction-hard", "memory.avail<1Gi"}, []string{"--eviction-hard: unsupported eviction signal memory.avail"}},
		{[]string{"--eviction-hard", "memory.available=1Gi"}, []string{"--eviction-hard", "malformed pair, expect string<string"}},
		{[]string{"--eviction-hard", "nodefs.available<120%"}, []string{"--eviction-hard: eviction percentage threshold nodefs.available must be <= 100%: 120%"}},
		{[]string{"--eviction-soft", "memory.available<1Gi"}, []string{"grace period must be specified for the soft eviction threshold memory.available"}},
		{[]string{"--eviction-minimum-reclaim", "memory.available=-1Mi"}, []string{"--eviction-minimum-reclaim: negative eviction minimum reclaim specified for memory.available"}},
		{[]string{"--system-reserved", "gpu=1"}, []string{"--system-reserved: cannot reserve \"gpu\" resource"}},
		{[]string{"--kube-reserved", "memory=-1Gi"}, []string{"--kube-reserved: resource quantity for \"memory\" cannot be negative: -1Gi"}},
		{[]string{"--audit-log-path", "/tmp/audit.log"}, []string{"--audit-log-path", "needs --audit-policy-file"}},
		{[]string{"--audit-policy-file", goodPolicy}, []string{"--audit-policy-file", "needs --audit-log-path"}},
		{[]string{"--audit-policy-file", badPolicy, "--audit-log-path", "-"}, []string{"--audit-policy-file", `rules[0].level: Unsupported value: "Loud"`}},
		{[]string{"--audit-policy-file", "/nonexistent/policy.yaml", "--audit-log-path", "-"}, []string{"--audit-policy-file", "no such file"}},
		{[]string{"--admission-control-config-file", badLevel}, []string{"--admission-control-config-file", "plugin PodSecurity", `defaults.enforce: Invalid value: "strict": must be one of privileged, baseline, restricted`}},
		{[]string{"--admission-control-config-file", badKind}, []string{"--admission-control-config-file", `no kind "AdmissionConfig" is registered`}},
		{[]string{"--admission-control-config-file", filepath.Join(dir, "absent.yaml")}, []string{"--admission-control-config-file", "absent.yaml", "no such file"}},
		{[]string{"--encryption-provider-config", writeFile(t, "enc.yaml", encryptionYAML("aescbc", "c2hvcnQ="))}, []string{"--encryption-provider-config", "enc.yaml", `resources[0].providers[0].aescbc.keys[0].secret: Invalid value: "REDACTED": secret is not of the expected length, got 5, expected one of [16 24 32]`}},
		{[]string{"--encryption-provider-config", writeFile(t, "enc.yaml", encryptionYAML("secretbox", testKey16))}, []string{"--encryption-provider-config", "got 16, expected one of [32]"}},
		{[]string{"--encryption-provider-config", writeFile(t, "enc.yaml", encryptionYAML("aesgcm", "not base64!"))}, []string{"--encryption-provider-config", "secrets must be base64 encoded"}},
		{[]string{"--encryption-provider-config", writeFile(t, "enc.yaml", strings.Replace(encryptionYAML("aescbc", testKey32), "aescbc", "kms", 1))}, []string{"--encryption-provider-config", "kms"}},
		{[]string{"--encryption-provider-config", writeFile(t, "enc.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{kms: {apiVersion: v2, name: x, endpoint: unix:///k.sock}}]\n")}, []string{"--encryption-provider-config", "KMS providers are not supported by bonsai"}},
		{[]string{"--encryption-provider-config", writeFile(t, "enc.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: ['*']\n  providers: [{identity: {}}]\n")}, []string{"--encryption-provider-config", "use '*.' to encrypt all the resources from core API group"}},
		{[]string{"--encryption-provider-config", writeFile(t, "enc.yaml", "")}, []string{"--encryption-provider-config", "is empty"}},
		{[]string{"--encryption-provider-config", filepath.Join(dir, "absent.yaml")}, []string{"--encryption-provider-config", "absent.yaml", "no such file"}},
		{[]string{"--encryption-provider-config", writeFile(t, "enc.yaml", encryptionYAML("aescbc", testKey32)), "--secrets-encryption"}, []string{"--secrets-encryption", "encryption-config.yaml", "not both"}},
		{[]string{"--authorization-mode", "Webhook"}, []string{"--authorization-mode", "RBAC or AlwaysAllow"}},
		{[]string{"--max-endpoints-per-slice", "0"}, []string{"--max-endpoints-per-slice", "between 1 and 1000"}},
		{[]string{"--horizontal-pod-autoscaler-sync-period", "0s"}, []string{"--horizontal-pod-autoscaler-sync-period", "must be positive"}},
		{[]string{"--horizontal-pod-autoscaler-tolerance", "-0.1"}, []string{"--horizontal-pod-autoscaler-tolerance", "must not be negative"}},
		{[]string{"--max-endpoints-per-slice", "1001"}, []string{"--max-endpoints-per-slice", "between 1 and 1000"}},
		{[]string{"--kubelet-port", "0"}, []string{"--kubelet-port", "between 1 and 65535"}},
		{[]string{"--metric-resolution", "5s"}, []string{"Metric-resolution should be a time duration at least 10s, but value 5s provided"}},
		{[]string{"--housekeeping-interval", "100ms"}, []string{"--housekeeping-interval 100ms: must be at least 1s"}},
		{[]string{"--kubelet-port", "70000"}, []string{"--kubelet-port", "between 1 and 65535"}},
		{[]string{"--kubelet-port", "6443"}, []string{"--kubelet-port", "--https-listen-port"}},
		{[]string{"--ingress-http-port", "-1"}, []string{"--ingress-http-port", "between 0 (off) and 65535"}},
		{[]string{"--ingress-https-port", "65536"}, []string{"--ingress-https-port", "between 0 (off) and 65535"}},
		{[]string{"--ingress-http-port", "6443"}, []string{"--ingress-http-port 6443", "--https-listen-port"}},
		{[]string{"--ingress-https-port", "10250"}, []string{"--ingress-https-port 10250", "--kubelet-port"}},
		{[]string{"--ingress-http-port", "8080", "--ingress-https-port", "8080"}, []string{"both 8080"}},
		{[]string{"--ingress-http-port", "0", "--ingress-https-port", "0"}, []string{"--disable-ingress"}},
		{[]string{"--ingress-bind-address", "eth0"}, []string{"--ingress-bind-address", "not an IP address"}},
		{[]string{"--container-runtime-endpoint", "containerd.sock"}, []string{"--container-runtime-endpoint", "absolute"}},
		{[]string{"--node-monitor-period", "0s"}, []string{"--node-monitor-period", "positive"}},
		{[]string{"--node-monitor-period", "5"}, []string{"--node-monitor-period"}},
		{[]string{"--node-monitor-grace-period", "-1s"}, []string{"--node-monitor-grace-period", "positive"}},
		{[]string{"--node-monitor-grace-period", "2s"}, []string{"--node-monitor-grace-period 2s", "--node-monitor-period 5s"}},
		{[]string{"--node-eviction-rate", "0"}, []string{"--node-eviction-rate", "positive"}},
		{[]string{"--node-eviction-rate", "NaN"}, []string{"--node-eviction-rate"}},
		{[]string{"--secondary-node-eviction-rate", "-0.1"}, []string{"--secondary-node-eviction-rate", "negative"}},
		{[]string{"--unhealthy-zone-threshold", "0"}, []string{"--unhealthy-zone-threshold", "at most 1"}},
		{[]string{"--unhealthy-zone-threshold", "1.5"}, []string{"--unhealthy-zone-threshold", "at most 1"}},
		{[]string{"--large-cluster-size-threshold", "-1"}, []string{"--large-cluster-size-threshold", "negative"}},
		{[]string{"--terminated-pod-gc-threshold", "many"}, []string{"--terminated-pod-gc-threshold"}},
		{[]string{"--pod-bridge", "a-very-long-bridge-name"}, []string{"--pod-bridge", "15"}},
		{[]string{"--pod-bridge", "Bad_Name"}, []string{"--pod-bridge"}},
		{[]string{"--pod-network", "flannel"}, []string{"--pod-network", "builtin, cni or auto"}},
		{[]string{"--cni-conf-dir", "net.d"}, []string{"--cni-conf-dir", "absolute"}},
		{[]string{"--cni-bin-dir", "/opt/cni/bin", "--cni-bin-dir", "bin"}, []string{"--cni-bin-dir", "absolute"}},
		{[]string{"--pod-manifest-path", "manifests"}, []string{"--pod-manifest-path", "absolute"}},
		{[]string{"--node-labels", "novalue"}, []string{"--node-labels", "key=value"}},
		{[]string{"--node-labels", "bad key=x"}, []string{"--node-labels"}},
		{[]string{"--node-taints", "k=v"}, []string{"--node-taints", "key=value:Effect"}},
		{[]string{"--node-taints", "k=v:Sometimes"}, []string{"--node-taints", "effect"}},
		{[]string{"--log-format", "xml"}, []string{"--log-format", "xml"}},
		{[]string{"--token-file", filepath.Join(dir, "missing.csv")}, []string{"--token-file", "missing.csv"}},
		{[]string{"--token-file", dir}, []string{"--token-file"}},
		{[]string{"--token-file", badTokens}, []string{"--token-file", "tokens.csv line 2"}},
		{[]string{"--bind-address", "example.com"}, []string{"--bind-address"}},
		{[]string{"--tls-san", "bad name!"}, []string{"--tls-san", "bad name!"}},
		{[]string{"--datastore-endpoint", "ftp://127.0.0.1:2379"}, []string{"--datastore-endpoint", "scheme"}},
		{[]string{"--datastore-cafile", badTokens}, []string{"--datastore-cafile", "--datastore-endpoint"}},
		{[]string{"--datastore-endpoint", "https://127.0.0.1:2379", "--datastore-cafile", filepath.Join(dir, "nope.pem")}, []string{"--datastore-cafile"}},
		{[]string{"--datastore-endpoint", "https://127.0.0.1:2379", "--datastore-certfile", badTokens}, []string{"--datastore-keyfile"}},
		{[]string{"--write-kubeconfig", filepath.Join(dir, "no/such/dir/kubeconfig")}, []string{"--write-kubeconfig"}},
		{[]string{"--write-kubeconfig", dir}, []string{"--write-kubeconfig", "directory"}},
		{[]string{"--data-dir", ""}, []string{"--data-dir"}},
		{[]string{"--snapshot-schedule", "twice a day"}, []string{"--snapshot-schedule \"twice a day\""}},
		{[]string{"--snapshot-schedule", "0 */12 * *"}, []string{"--snapshot-schedule", "expected exactly 5 fields"}},
		{[]string{"--snapshot-retention", "0"}, []string{"--snapshot-retention 0", "at least 1"}},
		{[]string{"--manifests-dir", "manifests"}, []string{"--manifests-dir", "absolute"}},
		{[]string{"--disable", "addons/traefik"}, []string{"--disable", "without directory"}},
		{[]string{"--no-such-flag"}, []string{"--no-such-flag"}},
		{[]string{"extra-arg"}, []string{"extra-arg"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseServer(t, tc.args...)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.HasPrefix(tc.args[0], "--encryption-provider-config") && strings.Contains(err.Error(), "\n") {
				t.Errorf("error of more than one line: %q", err)
			}
			msg := oneLine(err.Error())
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
}

func TestConfigFile(t *testing.T) {
	noDefaultConfig(t)
	file := writeFile(t, "config.yaml", `
data-dir: /x
https-listen-port: 7443
tls-san: [a.example, 192.0.2.1]
disable-agent: true
log-level: debug
service-node-port-range: 31000-31999
`)
	got, err := parseServer(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if got.DataDir != "/x" || got.Port != 7443 || !got.DisableAgent || got.LogLevel != slog.LevelDebug ||
		got.NodePortRange != (apiserver.PortRange{Base: 31000, Max: 31999}) {
		t.Errorf("config file not honoured: %+v", got)
	}
	if diff := cmp.Diff([]string{"a.example", "192.0.2.1"}, got.TLSSANs); diff != "" {
		t.Errorf("tls-san (-want +got):\n%s", diff)
	}

	got, err = parseServer(t, "--config", file, "--https-listen-port", "8443", "--tls-san", "b.example", "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	if got.Port != 8443 || got.LogLevel != slog.LevelWarn || got.DataDir != "/x" {
		t.Errorf("flags do not override the file: %+v", got)
	}
	if diff := cmp.Diff([]string{"b.example"}, got.TLSSANs); diff != "" {
		t.Errorf("tls-san (-want +got):\n%s", diff)
	}
}

func TestDefaultConfigFile(t *testing.T) {
	old := defaultConfigFile
	t.Cleanup(func() { defaultConfigFile = old })
	defaultConfigFile = writeFile(t, "config.yaml", "cluster-domain: edge.local\ntls-san: single.example\n")
	got, err := parseServer(t)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClusterDomain != "edge.local" || !cmp.Equal(got.TLSSANs, []string{"single.example"}) {
		t.Errorf("default config file not read: %+v", got)
	}
}

func TestConfigFileErrors(t *testing.T) {
	noDefaultConfig(t)
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"unknown key", "data-dir: /x\nbogus-key: 1\n", []string{"unknown key", "bogus-key"}},
		{"config key", "config: /other.yaml\n", []string{"unknown key", "config"}},
		{"bad value", "https-listen-port: many\n", []string{"https-listen-port", "many"}},
		{"validated value", "https-listen-port: 70000\n", []string{"--https-listen-port", "70000"}},
		{"list for a scalar", "data-dir: [a, b]\n", []string{"data-dir", "single value"}},
		{"map for a list", "tls-san: {a: b}\n", []string{"tls-san"}},
		{"not yaml", "data-dir: [\n", []string{"config file"}},
		{"duplicate key", "data-dir: /a\ndata-dir: /b\n", []string{"config file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseServer(t, "--config", writeFile(t, "config.yaml", tc.content))
			if err == nil {
				t.Fatal("accepted")
			}
			msg := oneLine(err.Error())
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
	if _, err := parseServer(t, "--config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("missing explicit config file: %v", err)
	}
}

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd(&out, &out, nil)
	root.SetArgs([]string{"server", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, want := range []string{
		`--data-dir string`, `(default "/var/lib/bonsai")`,
		`--bind-address string`, `(default "0.0.0.0")`,
		`--https-listen-port int`, `(default 6443)`,
		`--disable-agent`, `--write-kubeconfig string`, `--tls-san strings`, `--token-file string`,
		`--datastore-endpoint string`, `--datastore-cafile string`, `--datastore-certfile string`, `--datastore-keyfile string`,
		`--service-cidr string`, `(default "10.43.0.0/16")`,
		`--cluster-cidr string`, `(default "10.42.0.0/16")`,
		`--service-node-port-range string`, `(default "30000-32767")`, `--nodeport-addresses strings`,
		`--cluster-domain string`, `(default "cluster.local")`,
		`--log-format string`, `(default "text")`,
		`--log-level string`, `(default "info")`,
		`--config string`, `(default "/etc/bonsai/config.yaml")`,
		`--runtime string`, `(default "containerd")`, `--node-name string`, `--node-labels strings`,
		`--node-taints strings`, `--max-pods int`, `(default 110)`, `--kubelet-port int`, `(default 10250)`,
		`--node-taints strings`, `--max-pods int`, `(default 110)`,
		`--node-cidr-mask-size int`, `(default 24 for IPv4, 64 for IPv6)`, `--simulated-nodes int`,
		`--scheduler-config string`, `--disable-scheduler`, `--admission-control-config-file string`,
		`--encryption-provider-config string`, `--secrets-encryption`,
		`--snapshot-schedule string`, `(default "0 */12 * * *")`, `--snapshot-retention int`, `(default 5)`, `--snapshot-dir string`,
		`--manifests-dir string`, `--disable strings`, `--disable-helm-controller`,
		`--disable-ingress`, `--ingress-bind-address string`, `--ingress-http-port int`, `(default 80)`, `--ingress-https-port int`, `(default 443)`,
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd(&out, io.Discard, nil)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{version, apiserver.KubernetesVersion(), runtime.Version()} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output %q lacks %q", out.String(), want)
		}
	}
}

func TestListenPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = listen(netip.MustParseAddr("127.0.0.1"), port)
	want := "port " + strconv.Itoa(port) + " on 127.0.0.1 is already in use"
	if err == nil || err.Error() != want {
		t.Errorf("listen on a busy port: %v, want %q", err, want)
	}
}

func TestLockDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	f, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("data dir %v %v, want mode 0700", st, err)
	}
	_, err = lockDataDir(dir)
	if err == nil || !strings.Contains(err.Error(), "in use by another bonsai") {
		t.Errorf("second lock: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("locking left files behind: %v", entries)
	}

	file := writeFile(t, "plain", "x")
	if _, err := lockDataDir(filepath.Join(file, "data")); err == nil || !strings.Contains(err.Error(), "data dir") {
		t.Errorf("data dir under a file: %v", err)
	}
	if _, err := lockDataDir(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("data dir that is a file: %v", err)
	}
}

func hostName(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return strings.ToLower(h)
}

func TestNodeCIDRMaskSizeDefaults(t *testing.T) {
	noDefaultConfig(t)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 24},
		{[]string{"--cluster-cidr", "10.128.0.0/9"}, 24},
		{[]string{"--cluster-cidr", "10.128.0.0/9", "--node-cidr-mask-size", "30"}, 30},
		{[]string{"--cluster-cidr", "10.42.0.0/24", "--node-cidr-mask-size", "24"}, 24},
		{[]string{"--cluster-cidr", "fd00:42::/48", "--service-cidr", "fd00:43::/108"}, 64},
		{[]string{"--cluster-cidr", "fd00:42::/112", "--service-cidr", "fd00:43::/108", "--node-cidr-mask-size", "120"}, 120},
	} {
		got, err := parseServer(t, tc.args...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got.NodeCIDRMaskSize != tc.want {
			t.Errorf("%v: mask size %d, want %d", tc.args, got.NodeCIDRMaskSize, tc.want)
		}
	}
}

func TestSimulatedNodesFlag(t *testing.T) {
	noDefaultConfig(t)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 0},
		{[]string{"--simulated-nodes", "255"}, 255},
		{[]string{"--simulated-nodes", "10000", "--cluster-cidr", "10.128.0.0/9"}, 10000},
		{[]string{"--simulated-nodes", "1000", "--node-cidr-mask-size", "26"}, 1000},
	} {
		got, err := parseServer(t, tc.args...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got.SimulatedNodes != tc.want {
			t.Errorf("%v: %d simulated nodes, want %d", tc.args, got.SimulatedNodes, tc.want)
		}
	}
}

// TestNodePortAddressesFlag: CIDRs, or "primary" alone, as kube-proxy's
// --nodeport-addresses; a CIDR of every address is the default.
func TestNodePortAddressesFlag(t *testing.T) {
	noDefaultConfig(t)
	for _, tc := range []struct {
		args    []string
		want    []netip.Prefix
		primary bool
		err     string
	}{
		{args: nil},
		{args: []string{"--nodeport-addresses", "192.168.1.0/24,127.0.0.0/8"},
			want: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24"), netip.MustParsePrefix("127.0.0.0/8")}},
		{args: []string{"--nodeport-addresses", "10.0.0.0/8", "--nodeport-addresses", "fd00::/64"},
			want: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/64")}},
		{args: []string{"--nodeport-addresses", "primary"}, primary: true},
		{args: []string{"--nodeport-addresses", "10.0.0.0/8,0.0.0.0/0"}},
		{args: []string{"--nodeport-addresses", "primary,10.0.0.0/8"}, err: "cannot be combined"},
		{args: []string{"--nodeport-addresses", "10.0.0.1/8"}, err: "host bits set"},
		{args: []string{"--nodeport-addresses", "lan"}, err: "not a CIDR"},
	} {
		got, err := parseServer(t, tc.args...)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), "--nodeport-addresses") || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want one naming the flag and saying %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got.NodePortAddresses, cmpopts.EquateComparable(netip.Prefix{})); diff != "" || got.NodePortPrimary != tc.primary {
			t.Errorf("%v: primary %v, want %v; prefixes (-want +got):\n%s", tc.args, got.NodePortPrimary, tc.primary, diff)
		}
	}
}

// TestNodePortPrefixes: what the IPv4 proxy gets of --nodeport-addresses.
func TestNodePortPrefixes(t *testing.T) {
	node := netip.MustParseAddr("192.168.1.5")
	v4, v6 := netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/64")
	for _, tc := range []struct {
		cfg  serverConfig
		want []netip.Prefix
	}{
		{serverConfig{}, nil},
		{serverConfig{NodePortPrimary: true}, []netip.Prefix{netip.MustParsePrefix("192.168.1.5/32")}},
		{serverConfig{NodePortAddresses: []netip.Prefix{v4, v6}}, []netip.Prefix{v4}},
		{serverConfig{NodePortAddresses: []netip.Prefix{v6}}, nil},
	} {
		got := nodePortPrefixes(&tc.cfg, node, slog.New(slog.DiscardHandler))
		if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.Prefix{})); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", tc.cfg, diff)
		}
	}
}

// defaultNodeLifecycle is kube-controller-manager's defaults (with the
// seed's 40 s grace period).
var defaultNodeLifecycle = nodeLifecycleConfig{
	MonitorPeriod: 5 * time.Second, GracePeriod: 40 * time.Second,
	EvictionRate: 0.1, SecondaryRate: 0.01, UnhealthyZoneThreshold: 0.55,
	LargeClusterSize: 50, TerminatedPodGC: 12500,
}

func TestNodeLifecycleFlags(t *testing.T) {
	noDefaultConfig(t)
	got, err := parseServer(t, "--node-monitor-period", "1s", "--node-monitor-grace-period", "4s",
		"--node-eviction-rate", "0.5", "--secondary-node-eviction-rate", "0", "--unhealthy-zone-threshold", "0.7",
		"--large-cluster-size-threshold", "10", "--terminated-pod-gc-threshold", "0")
	if err != nil {
		t.Fatal(err)
	}
	want := nodeLifecycleConfig{MonitorPeriod: time.Second, GracePeriod: 4 * time.Second, EvictionRate: 0.5,
		UnhealthyZoneThreshold: 0.7, LargeClusterSize: 10}
	if diff := cmp.Diff(want, got.NodeLifecycle); diff != "" {
		t.Errorf("node lifecycle config (-want +got):\n%s", diff)
	}
}

// TestDeviceConfig reads <data-dir>/devices.yaml when it is there, and
// --device-config over it.
func TestDeviceConfig(t *testing.T) {
	noDefaultConfig(t)
	dir := t.TempDir()
	got, err := parseServer(t, "--data-dir", dir)
	if err != nil || got.Devices != nil {
		t.Fatalf("no devices.yaml: %v, %+v", err, got.Devices)
	}
	os.WriteFile(filepath.Join(dir, "devices.yaml"), []byte("resources:\n- name: bonsai.dev/serial\n  devices: [/dev/ttyUSB*]\n"), 0o600)
	got, err = parseServer(t, "--data-dir", dir)
	if err != nil || got.Devices == nil || got.Devices.Resources[0].Name != "bonsai.dev/serial" {
		t.Fatalf("<data-dir>/devices.yaml: %v, %+v", err, got)
	}
	other := writeFile(t, "other.yaml", "resources:\n- name: bonsai.dev/camera\n  devices: [/dev/video*]\n  shared: 2\n")
	got, err = parseServer(t, "--data-dir", dir, "--device-config", other, "--kubelet-root-dir", "/srv/kubelet/")
	if err != nil || got.Devices.Resources[0].Name != "bonsai.dev/camera" || got.Devices.Resources[0].Shared != 2 || got.KubeletRootDir != "/srv/kubelet" {
		t.Fatalf("--device-config: %v, %+v", err, got)
	}
	if !slices.Equal(got.CDISpecDirs, []string{"/etc/cdi", "/var/run/cdi"}) {
		t.Errorf("default CDI spec dirs %v", got.CDISpecDirs)
	}
	got, err = parseServer(t, "--data-dir", dir, "--cdi-spec-dir", "/srv/cdi/", "--cdi-spec-dir", "/run/cdi")
	if err != nil || !slices.Equal(got.CDISpecDirs, []string{"/srv/cdi", "/run/cdi"}) {
		t.Errorf("--cdi-spec-dir twice: %v, %v", err, got.CDISpecDirs)
	}
	if _, err := parseServer(t, "--data-dir", dir, "--cdi-spec-dir", "cdi"); err == nil || !strings.Contains(err.Error(), "--cdi-spec-dir") {
		t.Errorf("a relative --cdi-spec-dir: %v", err)
	}
}

// A data dir and keys left readable by others are made private at start,
// and each change is logged.
func TestTightenDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(dir, "tls"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Join(dir, "tls"), 0o750)
	files := map[string]os.FileMode{"tls/ca.key": 0o644, "tls/serving.key": 0o600, "tls/ca.crt": 0o644, "kubeconfig.yaml": 0o640}
	for name, mode := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, name), mode)
	}
	var logged strings.Builder
	if err := tightenDataDir(dir, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{".": 0o700, "tls": 0o700, "tls/ca.key": 0o600, "tls/serving.key": 0o600, "tls/ca.crt": 0o644, "kubeconfig.yaml": 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", name, got, want)
		}
	}
	for _, p := range []string{"path=" + dir + " ", "tls/ca.key", "kubeconfig.yaml", "was=0755"} {
		if !strings.Contains(logged.String(), p) {
			t.Errorf("log does not name %q:\n%s", p, logged.String())
		}
	}
	if strings.Contains(logged.String(), "serving.key") || strings.Contains(logged.String(), "ca.crt") {
		t.Errorf("files already private, or not secret, were logged:\n%s", logged.String())
	}
}

const (
	testKey16 = "MDEyMzQ1Njc4OWFiY2RlZg=="                     // 16 bytes
	testKey32 = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes
)

func encryptionYAML(provider, secret string) string {
	return "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - " + provider + ":\n      keys:\n      - {name: key1, secret: " + secret + "}\n  - identity: {}\n"
}

// TestEncryptionFlags: --encryption-provider-config is read and checked
// with the other flags; at start its file (it holds keys) is made 0600
// if it was looser, and that is logged; --secrets-encryption makes the
// data dir's configuration, 0600, once, and reads it at every start.
func TestEncryptionFlags(t *testing.T) {
	noDefaultConfig(t)
	path := writeFile(t, "enc.yaml", encryptionYAML("aesgcm", testKey32))
	os.Chmod(path, 0o644)
	got, err := parseServer(t, "--encryption-provider-config", path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Encryption == nil || got.Encryption.Path != path || got.SecretsEncryption {
		t.Fatalf("config: %+v", got)
	}
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	enc, err := setupEncryption(got, log)
	if err != nil || enc != got.Encryption {
		t.Fatalf("setup: %v %v", enc, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("--encryption-provider-config left mode %04o", st.Mode().Perm())
	}
	if !strings.Contains(logged.String(), "tightened the mode of a key file") || !strings.Contains(logged.String(), "was=0644") {
		t.Errorf("the mode change was not logged:\n%s", logged.String())
	}

	dataDir := t.TempDir()
	got, err = parseServer(t, "--secrets-encryption", "--data-dir", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Encryption != nil || !got.SecretsEncryption {
		t.Fatalf("config: %+v", got)
	}
	enc, err = setupEncryption(got, log)
	if err != nil {
		t.Fatal(err)
	}
	made := encryptionConfigPath(dataDir)
	first, err := os.ReadFile(made)
	if err != nil || enc.Path != made {
		t.Fatalf("%s: %v (config at %s)", made, err, enc.Path)
	}
	if st, _ := os.Stat(made); st.Mode().Perm() != 0o600 {
		t.Errorf("made with mode %04o", st.Mode().Perm())
	}
	if !strings.Contains(string(first), "aescbc") || !strings.Contains(string(first), "identity") {
		t.Errorf("made:\n%s", first)
	}
	// The next start reads the same keys, even loosened by hand.
	os.Chmod(made, 0o640)
	if _, err := setupEncryption(got, log); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(made); !bytes.Equal(first, again) {
		t.Error("a second start made new keys")
	}
	if st, _ := os.Stat(made); st.Mode().Perm() != 0o600 {
		t.Errorf("left with mode %04o", st.Mode().Perm())
	}
	// A broken file stops the start, in one line naming it.
	os.WriteFile(made, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n"), 0o600)
	if _, err := setupEncryption(got, log); err == nil || !strings.Contains(err.Error(), made) || strings.Contains(err.Error(), "\n") {
		t.Errorf("broken data dir configuration: %v", err)
	}
}

// TestSecretsEncryptCommandErrors: the command's failures are one line
// naming what failed, and a failure (exit 1 from main).
func TestSecretsEncryptCommandErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--data-dir", dir}, "secrets-encrypt status: --kubeconfig " + filepath.Join(dir, "kubeconfig.yaml")},
		{[]string{"rotate", "--kubeconfig", filepath.Join(dir, "nope")}, "secrets-encrypt rotate: --kubeconfig " + filepath.Join(dir, "nope")},
		{[]string{"rotate-keys", "--kubeconfig", filepath.Join(dir, "nope")}, "secrets-encrypt rotate: "},
		{[]string{"reencrypt", "--kubeconfig", filepath.Join(dir, "nope")}, "secrets-encrypt reencrypt: "},
		{[]string{"status", "extra"}, "unknown command"},
	} {
		var out bytes.Buffer
		root := newRootCmd(&out, &out, nil)
		root.SetArgs(append([]string{"secrets-encrypt"}, tc.args...))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line with %q", tc.args, err, tc.want)
		}
	}
}

// TestUnknownSubcommands: a word that is no subcommand of a command that
// groups others fails in one line, as at the root; alone, such a command
// prints its help and succeeds.
func TestUnknownSubcommands(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"images", "bogus"}, {"token", "bogus"}, {"secrets-encrypt", "bogus"}, {"snapshot", "bogus"}} {
		var out bytes.Buffer
		root := newRootCmd(&out, &out, nil)
		root.SetArgs(args)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), `unknown command "bogus"`) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line: unknown command \"bogus\"", args, err)
		}
	}
	var out bytes.Buffer
	root := newRootCmd(&out, &out, nil)
	root.SetArgs([]string{"secrets-encrypt"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "Available Commands") {
		t.Errorf("secrets-encrypt alone: %v, output %q, want its help", err, out.String())
	}
}

func mustCron(t *testing.T, spec string) cron.Schedule {
	t.Helper()
	s, err := cron.ParseStandard(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sameLocation compares the zones of parsed cron schedules by identity:
// time.Location has no exported fields to compare.
var sameLocation = cmp.Comparer(func(a, b *time.Location) bool { return a == b })

// defaultHPA is the horizontal pod autoscaler's settings without flags:
// kube-controller-manager's defaults.
func defaultHPA() controllers.HPAOptions {
	tol := 0.1
	return controllers.HPAOptions{SyncPeriod: 15 * time.Second, DownscaleStabilization: 5 * time.Minute, Tolerance: &tol,
		CPUInitializationPeriod: 5 * time.Minute, InitialReadinessDelay: 30 * time.Second}
}

// defaultEviction is the kubelet's default eviction policy.
func defaultEviction(t *testing.T) evictionConfig {
	t.Helper()
	ts, err := eviction.Parse(eviction.DefaultHard, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return evictionConfig{Policy: eviction.Config{Thresholds: ts, PressureTransitionPeriod: 5 * time.Minute}}
}

// TestServerDualStackFlags: --service-cidr and --cluster-cidr take one
// range per family, the primary first, and each family's node mask comes
// from its own flag (defaults /24 and /64, as kube-controller-manager).
func TestServerDualStackFlags(t *testing.T) {
	noDefaultConfig(t)
	pfx := netip.MustParsePrefix
	for _, tc := range []struct {
		name           string
		args           []string
		service, pods  []netip.Prefix
		masks          []int
		primaryService netip.Prefix
	}{
		{"dual-stack, IPv4 primary", []string{"--service-cidr", "10.43.0.0/16,fd43::/112", "--cluster-cidr", "10.42.0.0/16,fd42::/56"},
			[]netip.Prefix{pfx("10.43.0.0/16"), pfx("fd43::/112")}, []netip.Prefix{pfx("10.42.0.0/16"), pfx("fd42::/56")}, []int{24, 64}, pfx("10.43.0.0/16")},
		{"dual-stack, IPv6 primary, own masks", []string{"--service-cidr", " fd43::/108, 10.43.0.0/16", "--cluster-cidr", "fd42::/48,10.42.0.0/16", "--node-cidr-mask-size-ipv4", "26", "--node-cidr-mask-size-ipv6", "60"},
			[]netip.Prefix{pfx("fd43::/108"), pfx("10.43.0.0/16")}, []netip.Prefix{pfx("fd42::/48"), pfx("10.42.0.0/16")}, []int{60, 26}, pfx("fd43::/108")},
		{"IPv6 only", []string{"--service-cidr", "fd43::/112", "--cluster-cidr", "fd42::/56"},
			[]netip.Prefix{pfx("fd43::/112")}, []netip.Prefix{pfx("fd42::/56")}, []int{64}, pfx("fd43::/112")},
		{"IPv6 only, -ipv6 mask", []string{"--service-cidr", "fd43::/112", "--cluster-cidr", "fd42::/56", "--node-cidr-mask-size-ipv6", "80"},
			[]netip.Prefix{pfx("fd43::/112")}, []netip.Prefix{pfx("fd42::/56")}, []int{80}, pfx("fd43::/112")},
		{"IPv4 only, -ipv4 mask", []string{"--node-cidr-mask-size-ipv4", "25"},
			[]netip.Prefix{pfx("10.43.0.0/16")}, []netip.Prefix{pfx("10.42.0.0/16")}, []int{25}, pfx("10.43.0.0/16")},
	} {
		got, err := parseServer(t, tc.args...)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !slices.Equal(tc.service, got.ServiceCIDRs) {
			t.Errorf("%s: ServiceCIDRs %v, want %v", tc.name, got.ServiceCIDRs, tc.service)
		}
		if !slices.Equal(tc.pods, got.ClusterCIDRs) {
			t.Errorf("%s: ClusterCIDRs %v, want %v", tc.name, got.ClusterCIDRs, tc.pods)
		}
		if diff := cmp.Diff(tc.masks, got.NodeCIDRMaskSizes); diff != "" {
			t.Errorf("%s: NodeCIDRMaskSizes (-want +got):\n%s", tc.name, diff)
		}
		// The single-prefix fields the pod network, proxy and DNS read
		// are the primary family's.
		if got.ServiceCIDR != tc.primaryService || got.ClusterCIDR != tc.pods[0] || got.NodeCIDRMaskSize != tc.masks[0] {
			t.Errorf("%s: primary %s %s /%d", tc.name, got.ServiceCIDR, got.ClusterCIDR, got.NodeCIDRMaskSize)
		}
	}
}
