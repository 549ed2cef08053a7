package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/netplugin"
)

const (
	defaultBridge = "bonsai0"
	// defaultMinSyncInterval batches bursts of changes. kube-proxy's
	// nftables mode waits 1s; an incremental sync here takes a few ms, so
	// a tenth of that keeps a pod's Ready → its rule well under 200 ms
	// while a burst still costs at most ten syncs a second.
	defaultMinSyncInterval = 100 * time.Millisecond
	fullSyncInterval       = time.Hour // repairs what someone else changed in the table
)

// Config is what the proxy needs; Client, Informers and NodeName are
// required.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	NodeName  string
	// NodeIPs are this node's addresses. LoadBalancer Services get the
	// InternalIPs of the cluster's Nodes as ingress; NodeIPs stand in
	// while no Node lists one (the first start of a one-node cluster).
	NodeIPs []netip.Addr
	// ClusterCIDR is the pod network. Traffic from outside it to a
	// cluster IP is masqueraded; invalid: it is not.
	ClusterCIDR netip.Prefix
	// ServiceCIDR is where cluster IPs come from: traffic to one of its
	// addresses that no Service has is dropped; invalid: it is not.
	ServiceCIDR netip.Prefix
	// NodePortAddresses limits the local addresses that serve NodePorts
	// (and whose traffic counts as external) to these prefixes, like
	// kube-proxy's --nodeport-addresses; empty: every local address,
	// 127.0.0.1 included.
	NodePortAddresses []netip.Prefix
	// Bridge is the pod network's bridge; the table is "<Bridge>-svc".
	// Service connections that come in through it and go out through
	// it again, to a pod of this node, are masqueraded. Default
	// "bonsai0".
	Bridge string
	// MinSyncInterval is the least time between two writes of the
	// table, which batches bursts of changes; default 100ms.
	MinSyncInterval time.Duration
	Logger          *slog.Logger // nil: slog.Default()
	// Metrics, when set, gets kube-proxy's sync metrics.
	Metrics prometheus.Registerer
}

// TableName is the nftables table (family ip) of the proxy for a bridge.
func TableName(bridge string) string {
	if bridge == "" {
		bridge = defaultBridge
	}
	return bridge + "-svc"
}

// Proxier keeps the table in step with the Services and EndpointSlices.
type Proxier struct {
	log      *slog.Logger
	nodeName string
	rc       ruleConfig
	minSync  time.Duration
	table    *kernelTable
	services cache.Indexer
	slices   cache.Indexer
	synced   []cache.InformerSynced
	lb       *lbStatusController
	// conntrack talks rtnetlink's conntrack to the proxy's namespace.
	conntrack *netlink.Handle

	metrics *proxyMetrics

	// health serves the health-check node ports.
	health *healthServer
	// netns is the network namespace New ran in, where the health
	// server listens; New's caller's (-1 without New).
	netns netns.NsHandle

	mu       sync.Mutex
	dirty    map[string]bool // service keys changed since the last sync
	needFull bool
	// zone is this node's topology.kubernetes.io/zone label, for
	// topology hints; syncZone is what the sync under way uses (only
	// sync touches it).
	zone, syncZone string
	// pendingSince is when the oldest change not yet in the kernel
	// came (zero: none); one older than healthTimeout makes the proxy
	// unhealthy.
	pendingSince time.Time
	// triggers are the last-change-trigger-times of the EndpointSlices
	// changed since the last sync, for the network programming latency.
	triggers []time.Time
	wake     chan struct{}

	// programmed is what the table holds for each Service, by key, and
	// conflicted the Services that lack a map key another holds (see
	// claims.go), and owners who holds each map key of programmed; only
	// sync touches them.
	programmed map[string]objects
	conflicted map[string]bool
	owners     keyOwners
	// choosers numbers the chains that choose endpoints; only sync
	// touches it.
	choosers *chooserIDs
}

// New builds the proxy and registers its informer handlers; it changes
// nothing in the kernel until Run. Call it before Informers.Start.
func New(cfg Config) (*Proxier, error) {
	if cfg.Client == nil || cfg.Informers == nil || cfg.NodeName == "" {
		return nil, errors.New("proxy: Client, Informers and NodeName are required")
	}
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	conn, err := openConn(-1)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	ct, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("proxy: open conntrack netlink socket: %w", err)
	}
	svcInf := cfg.Informers.For(&corev1.Service{})
	sliceInf := cfg.Informers.For(&discoveryv1.EndpointSlice{})
	nodeInf := cfg.Informers.For(&corev1.Node{})
	p := newProxier(cfg, newKernelTable(conn, TableName(cfg.Bridge)), svcInf.GetIndexer(), sliceInf.GetIndexer())
	p.conntrack = ct
	// Health-check ports are listened on where the table is, in the
	// namespace New runs in (the host's; a test's own).
	if p.netns, err = netns.Get(); err != nil {
		conn.Close()
		ct.Close()
		return nil, fmt.Errorf("proxy: open the current network namespace: %w", err)
	}
	p.health.within = func(fn func() error) error { return netplugin.Within(p.netns, fn) }
	if cfg.Metrics != nil {
		if err := p.metrics.register(cfg.Metrics); err != nil {
			conn.Close()
			ct.Close()
			return nil, fmt.Errorf("proxy: register metrics: %w", err)
		}
	}
	p.synced = []cache.InformerSynced{svcInf.HasSynced, sliceInf.HasSynced, nodeInf.HasSynced}
	p.lb = newLBStatusController(cfg, svcInf.GetIndexer(), nodeInf.GetIndexer(), p.log)
	if err := p.watch(svcInf, sliceInf, nodeInf); err != nil {
		conn.Close()
		ct.Close()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return p, nil
}

// validateConfig rejects what the IPv4-only table cannot express, and
// a bridge name no interface can have, which its rules would never match.
func validateConfig(cfg Config) error {
	if len(cfg.Bridge) >= unix.IFNAMSIZ {
		return fmt.Errorf("proxy: bridge name %q is longer than an interface name can be", cfg.Bridge)
	}
	for _, p := range cfg.NodePortAddresses {
		if !p.IsValid() {
			return errors.New("proxy: a node port address is not a valid prefix")
		}
	}
	for _, p := range append([]netip.Prefix{cfg.ClusterCIDR, cfg.ServiceCIDR}, cfg.NodePortAddresses...) {
		if p.IsValid() && !p.Addr().Is4() {
			return fmt.Errorf("proxy: %s: only IPv4 is supported", p)
		}
	}
	return nil
}

// watch indexes slices by Service and registers the event handlers.
func (p *Proxier) watch(services, slices, nodes cache.SharedIndexInformer) error {
	if err := client.IndexSlicesByService(slices); err != nil {
		return fmt.Errorf("index EndpointSlices by Service: %w", err)
	}
	svcReg, err := services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.serviceChanged(obj) },
		UpdateFunc: func(_, obj any) { p.serviceChanged(obj) },
		DeleteFunc: func(obj any) { p.serviceChanged(obj) },
	})
	if err != nil {
		return fmt.Errorf("watch Services: %w", err)
	}
	sliceReg, err := slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.sliceChanged(obj) },
		UpdateFunc: func(_, obj any) { p.sliceChanged(obj) },
		DeleteFunc: func(obj any) { p.sliceChanged(obj) },
	})
	if err != nil {
		return fmt.Errorf("watch EndpointSlices: %w", err)
	}
	// The first sync waits until the handlers have seen every object of
	// the initial lists, not only the caches: it is a full one, and
	// objects marked dirty after it would be synced again, one by one
	// (1,000 Services: a 50 ms partial sync right after the full one).
	p.synced = append(p.synced, svcReg.HasSynced, sliceReg.HasSynced)
	nodeReg, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.nodeChanged(obj); p.lb.enqueueAll() },
		UpdateFunc: func(_, obj any) { p.nodeChanged(obj); p.lb.enqueueAll() },
		DeleteFunc: func(any) { p.lb.enqueueAll() },
	})
	if err != nil {
		return fmt.Errorf("watch Nodes: %w", err)
	}
	// The first sync knows this node's zone.
	p.synced = append(p.synced, nodeReg.HasSynced)
	return nil
}

// nodeChanged follows this node's zone: when it changes, every Service
// is written again with the hints for the new zone.
func (p *Proxier) nodeChanged(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || n.Name != p.nodeName {
		return
	}
	zone := n.Labels[corev1.LabelTopologyZone]
	p.mu.Lock()
	changed := zone != p.zone
	if changed {
		p.zone, p.needFull = zone, true
	}
	p.mu.Unlock()
	if changed {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func newProxier(cfg Config, table *kernelTable, services, slices cache.Indexer) *Proxier {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinSyncInterval <= 0 {
		cfg.MinSyncInterval = defaultMinSyncInterval
	}
	if cfg.Bridge == "" {
		cfg.Bridge = defaultBridge
	}
	p := &Proxier{
		log:      cfg.Logger.With("component", "proxy"),
		netns:    -1,
		nodeName: cfg.NodeName,
		rc: ruleConfig{
			bridge:        cfg.Bridge,
			clusterCIDR:   cfg.ClusterCIDR.Masked(),
			serviceCIDR:   cfg.ServiceCIDR.Masked(),
			nodePortCIDRs: cfg.NodePortAddresses,
			nodeIPs:       cfg.NodeIPs,
		},
		minSync:    cfg.MinSyncInterval,
		metrics:    newProxyMetrics(),
		table:      table,
		services:   services,
		slices:     slices,
		dirty:      map[string]bool{},
		needFull:   true,
		wake:       make(chan struct{}, 1),
		programmed: map[string]objects{},
		owners:     keyOwners{},
		conflicted: map[string]bool{},
		choosers:   newChooserIDs(),
	}
	p.health = newHealthServer(p.log, cfg.NodePortAddresses, p.healthy)
	return p
}

// healthy is serviceProxyHealthy of the health checks: false once a
// change has waited more than healthTimeout for the kernel.
func (p *Proxier) healthy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pendingSince.IsZero() || time.Since(p.pendingSince) < healthTimeout
}

func (p *Proxier) serviceChanged(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	p.markDirty(key)
	// Every LoadBalancer Service: this one may have freed or taken a
	// port another waits for.
	p.lb.enqueueAll()
}

func (p *Proxier) sliceChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	keys, _ := client.SliceServiceKeys(obj)
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok && len(keys) > 0 {
		if t, err := time.Parse(time.RFC3339Nano, s.Annotations[corev1.EndpointsLastChangeTriggerTime]); err == nil {
			p.mu.Lock()
			p.triggers = append(p.triggers, t)
			p.mu.Unlock()
		}
	}
	for _, k := range keys {
		p.markDirty(k)
	}
}

func (p *Proxier) markDirty(key string) {
	p.mu.Lock()
	p.dirty[key] = true
	if p.pendingSince.IsZero() {
		p.pendingSince = time.Now()
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run programs the table whole, then keeps it up to date until ctx ends:
// each change rewrites only the changed Services' parts, at most once per
// MinSyncInterval, and every hour the table is rebuilt whole. When ctx
// ends the table stays, as kube-proxy leaves its rules: Services keep
// working while bonsai restarts, and the next Run replaces the table.
// Cleanup removes it.
func (p *Proxier) Run(ctx context.Context) error {
	defer p.table.conn.Close()
	defer p.conntrack.Close()
	defer p.netns.Close()
	defer p.health.stop()
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return nil
	}
	go p.lb.run(ctx)
	full := time.NewTicker(fullSyncInterval)
	defer full.Stop()
	retry := time.NewTimer(0) // the first, full, sync
	defer retry.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-full.C:
			p.mu.Lock()
			p.needFull = true
			p.mu.Unlock()
		case <-p.wake:
		case <-retry.C:
		}
		if wait := p.minSync - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		last = time.Now()
		if err := p.sync(); err != nil {
			p.log.Error("sync service rules; retrying", "err", err)
			retry.Reset(p.minSync)
		}
	}
}

// Cleanup deletes the proxy's table for bridge ("" for the default), for
// `bonsai server --cleanup` and uninstall. A table that is not there is
// not an error.
func Cleanup(bridge string) error {
	conn, err := openConn(-1)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	defer conn.Close()
	return newKernelTable(conn, TableName(bridge)).delete()
}
