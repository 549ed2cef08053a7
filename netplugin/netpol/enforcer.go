package netpol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
)

const (
	defaultBridge = "bonsai0"
	// defaultMinSyncInterval batches bursts of changes while keeping a
	// change's enforcement within the 100 ms Kubernetes users can
	// expect of a node: an incremental sync itself takes a few ms.
	defaultMinSyncInterval = 20 * time.Millisecond
	fullSyncInterval       = time.Hour // repairs what someone else changed in the tables
	// bridgeCheckInterval is how often the bridge's address is looked
	// at between syncs: the bridge appears once the node has a pod
	// CIDR, after the enforcer started.
	bridgeCheckInterval = 2 * time.Second
	// attachTimeout bounds how long a new pod's sandbox waits for its
	// policies to be in the kernel before its containers may run.
	attachTimeout = 10 * time.Second
)

// TableName is the name of the enforcer's two nftables tables (families
// ip and bridge) for a pod bridge ("" for the default).
func TableName(bridge string) string {
	if bridge == "" {
		bridge = defaultBridge
	}
	return bridge + "-netpol"
}

// Config is what the enforcer needs; Informers and NodeName are
// required.
type Config struct {
	Informers *client.Informers
	NodeName  string
	// Bridge is the pod network's bridge; the tables are named after it
	// (TableName). Default "bonsai0".
	Bridge string
	// PortName names the bridge port (the host end of the veth) of the
	// local pod with this UID, on the built-in network.
	PortName func(uid string) string
	// NetnsDir, with PortName nil, is where a CNI host mounts pods'
	// network namespaces (by UID): each local pod's link to the node is
	// found in its namespace, the bridge with it (Bridge "": the bridge
	// of the first pod on one). A pod whose traffic need not pass the
	// node is logged as not policed.
	NetnsDir string
	// Table names the tables; default TableName(Bridge).
	Table string
	// MinSyncInterval is the least time between two writes of the
	// tables, which batches bursts of changes; default 20ms.
	MinSyncInterval time.Duration
	Logger          *slog.Logger // nil: slog.Default()
}

// Enforcer keeps the tables in step with the NetworkPolicies, Pods and
// Namespaces.
type Enforcer struct {
	log      *slog.Logger
	nodeName string
	bridge   string
	portName func(uid string) string
	netnsDir string
	minSync  time.Duration
	tables   *kernelTables
	// nl looks the bridge up, in the namespace the enforcer was made in.
	nl      *netlink.Handle
	podsIdx cache.Indexer
	synced  []cache.InformerSynced

	mu       sync.Mutex
	events   []event
	needFull bool
	wake     chan struct{}
	// attached are the addresses the pod network gave local pods whose
	// status may not show them yet, by pod UID; links, where CNI pods
	// meet the node (see links.go).
	attached map[string]netip.Addr
	links    map[string]podLink
	// queued counts the events ever queued; applied, those a finished
	// sync wrote to the kernel (or found nothing to write for). done is
	// closed and replaced at each sync's end.
	queued, applied uint64
	done            chan struct{}
	lastErr         error
	// urgent: a sandbox waits for the next sync (see Attach).
	urgent bool

	// Only sync touches the rest.
	world    *world
	policies map[string]*parsedPolicy
	compiled map[string]*compiledPolicy
	byNS     map[string]map[string]*compiledPolicy
	// sets are the selections and peer sets the policies use, portSets
	// their port sets, users the policies using each set, by key.
	sets     *sharedSets
	portSets map[string]portSet
	users    map[string]map[string]bool
	// selTypes counts the policies using each selection, by the
	// directions they isolate in; selsByNS are the selections in use
	// in each namespace.
	selTypes  map[string]*[2]int
	selsByNS  map[string]map[string]bool
	localByIP map[netip.Addr]map[string]*pod // local pods by address, then namespace/name
	podUnits  map[netip.Addr]*pod            // the local pod that owns each address
	ids       *ruleIDs
	namedKeys map[string][]string // the named ports' number keys each policy uses
	// programmed is what the tables hold, by unit key; programmedMAC
	// the bridge address they send frames to.
	programmed    map[string]objects
	programmedMAC string
}

// event is one change an informer saw, as the model sees it.
type event struct {
	kind eventKind
	// namespace and name of the pod, namespace or policy.
	namespace, name string
	pod             *pod                        // podEvent: nil when gone or taking no part
	labels          labels.Set                  // namespaceEvent: nil when gone
	policy          *networkingv1.NetworkPolicy // policyEvent: nil when gone
}

type eventKind uint8

const (
	podEvent eventKind = iota
	namespaceEvent
	policyEvent
)

// New builds the enforcer and registers its informer handlers; it
// changes nothing in the kernel until Run. Call it before
// Informers.Start, in the network namespace whose tables it is to keep.
func New(cfg Config) (*Enforcer, error) {
	if cfg.Informers == nil || cfg.NodeName == "" {
		return nil, errors.New("netpol: Informers and NodeName are required")
	}
	if len(cfg.Bridge) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("netpol: bridge name %q is longer than an interface name can be", cfg.Bridge)
	}
	conn, err := openConn(-1)
	if err != nil {
		return nil, fmt.Errorf("netpol: %w", err)
	}
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("netpol: open rtnetlink socket: %w", err)
	}
	table := cfg.Table
	if table == "" {
		table = TableName(cfg.Bridge)
	}
	e := newEnforcer(cfg, newKernelTables(conn, table))
	e.nl = nl
	podInf := cfg.Informers.For(&corev1.Pod{})
	nsInf := cfg.Informers.For(&corev1.Namespace{})
	npInf := cfg.Informers.For(&networkingv1.NetworkPolicy{})
	// The enforcer keeps its own view of every pod of the cluster:
	// the informer's copy needs no more than the view is made from.
	_ = podInf.SetTransform(slimPod)
	e.podsIdx = podInf.GetIndexer()
	e.synced = []cache.InformerSynced{podInf.HasSynced, nsInf.HasSynced, npInf.HasSynced}
	if err := e.watch(podInf, nsInf, npInf); err != nil {
		conn.Close()
		nl.Close()
		return nil, fmt.Errorf("netpol: %w", err)
	}
	return e, nil
}

func newEnforcer(cfg Config, tables *kernelTables) *Enforcer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinSyncInterval <= 0 {
		cfg.MinSyncInterval = defaultMinSyncInterval
	}
	if cfg.Bridge == "" && (cfg.PortName != nil || cfg.NetnsDir == "") {
		cfg.Bridge = defaultBridge
	}
	e := &Enforcer{
		log:        cfg.Logger.With("component", "netpol"),
		nodeName:   cfg.NodeName,
		bridge:     cfg.Bridge,
		portName:   cfg.PortName,
		netnsDir:   cfg.NetnsDir,
		minSync:    cfg.MinSyncInterval,
		tables:     tables,
		needFull:   true,
		wake:       make(chan struct{}, 1),
		attached:   map[string]netip.Addr{},
		links:      map[string]podLink{},
		done:       make(chan struct{}),
		world:      newWorld(),
		policies:   map[string]*parsedPolicy{},
		programmed: map[string]objects{},
		ids:        newRuleIDs(),
		namedKeys:  map[string][]string{},
		localByIP:  map[netip.Addr]map[string]*pod{},
	}
	e.resetSets()
	return e
}

// slimPod keeps of a pod what the enforcer reads.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{}
	out.Namespace, out.Name, out.UID, out.Labels = p.Namespace, p.Name, p.UID, p.Labels
	if h := p.Annotations[mirrorAnnotation]; h != "" {
		out.Annotations = map[string]string{mirrorAnnotation: h}
	}
	out.ResourceVersion = p.ResourceVersion
	out.Spec.NodeName, out.Spec.HostNetwork = p.Spec.NodeName, p.Spec.HostNetwork
	slim := func(cs []corev1.Container) []corev1.Container {
		var out []corev1.Container
		for _, c := range cs {
			var ports []corev1.ContainerPort
			for _, cp := range c.Ports {
				if cp.Name != "" {
					ports = append(ports, corev1.ContainerPort{Name: cp.Name, Protocol: cp.Protocol, ContainerPort: cp.ContainerPort})
				}
			}
			if len(ports) > 0 {
				out = append(out, corev1.Container{Name: c.Name, Ports: ports})
			}
		}
		return out
	}
	out.Spec.InitContainers, out.Spec.Containers = slim(p.Spec.InitContainers), slim(p.Spec.Containers)
	out.Status.Phase, out.Status.PodIP, out.Status.PodIPs = p.Status.Phase, p.Status.PodIP, p.Status.PodIPs
	return out, nil
}

func (e *Enforcer) watch(pods, namespaces, policies cache.SharedIndexInformer) error {
	handlers := func(changed func(obj any, gone bool)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { changed(obj, false) },
			UpdateFunc: func(_, obj any) { changed(obj, false) },
			DeleteFunc: func(obj any) { changed(obj, true) },
		}
	}
	podReg, err := pods.AddEventHandler(handlers(e.podChanged))
	if err != nil {
		return fmt.Errorf("watch Pods: %w", err)
	}
	nsReg, err := namespaces.AddEventHandler(handlers(e.namespaceChanged))
	if err != nil {
		return fmt.Errorf("watch Namespaces: %w", err)
	}
	npReg, err := policies.AddEventHandler(handlers(e.policyChanged))
	if err != nil {
		return fmt.Errorf("watch NetworkPolicies: %w", err)
	}
	// The first sync, a full one, waits until the handlers have seen
	// every object of the initial lists.
	e.synced = append(e.synced, podReg.HasSynced, nsReg.HasSynced, npReg.HasSynced)
	return nil
}

func (e *Enforcer) push(ev event) {
	e.mu.Lock()
	e.events = append(e.events, ev)
	e.queued++
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// deleted unwraps the object of a delete whose last state the informer
// missed.
func deleted(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

func (e *Enforcer) podChanged(obj any, gone bool) {
	p, ok := deleted(obj).(*corev1.Pod)
	if !ok {
		return
	}
	ev := event{kind: podEvent, namespace: p.Namespace, name: p.Name}
	e.mu.Lock()
	if gone {
		delete(e.attached, sandboxUID(p))
		delete(e.links, sandboxUID(p))
	} else {
		ev.pod = e.viewOf(p)
	}
	e.mu.Unlock()
	e.push(ev)
}

// viewOf is the model's pod for p; e.mu held. A local pod's address is
// the one its sandbox was given (see Attach) while it has one: the
// status may still show none, or a former sandbox's.
func (e *Enforcer) viewOf(p *corev1.Pod) *pod {
	var ip netip.Addr
	if p.Spec.NodeName == e.nodeName {
		ip = e.attached[sandboxUID(p)]
	}
	if ip.IsValid() {
		q := p.DeepCopy()
		q.Status.PodIP, q.Status.PodIPs = "", nil
		p = q
	}
	v, ok := podFromAPI(p, e.nodeName, ip)
	if !ok {
		return nil
	}
	return v
}

func (e *Enforcer) namespaceChanged(obj any, gone bool) {
	ns, ok := deleted(obj).(*corev1.Namespace)
	if !ok {
		return
	}
	ev := event{kind: namespaceEvent, name: ns.Name}
	if !gone {
		ev.labels = labels.Set(ns.Labels)
		if ev.labels == nil {
			ev.labels = labels.Set{}
		}
	}
	e.push(ev)
}

func (e *Enforcer) policyChanged(obj any, gone bool) {
	np, ok := deleted(obj).(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	ev := event{kind: policyEvent, namespace: np.Namespace, name: np.Name}
	if !gone {
		ev.policy = np
	}
	e.push(ev)
}

// Run programs the tables whole, then keeps them up to date until ctx
// ends: each change rewrites only what it changes, at most once per
// MinSyncInterval, and every hour the tables are rebuilt whole. When ctx
// ends the tables stay: policies hold while bonsai restarts, and the
// next Run replaces them. Cleanup removes them.
func (e *Enforcer) Run(ctx context.Context) error {
	defer e.tables.conn.Close()
	if e.nl != nil {
		defer e.nl.Close()
	}
	if !cache.WaitForCacheSync(ctx.Done(), e.synced...) {
		return nil
	}
	full := time.NewTicker(fullSyncInterval)
	defer full.Stop()
	bridge := time.NewTicker(bridgeCheckInterval)
	defer bridge.Stop()
	retry := time.NewTimer(0) // the first, full, sync
	defer retry.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-full.C:
			e.mu.Lock()
			e.needFull = true
			e.mu.Unlock()
		case <-bridge.C:
			if !e.bridgeChanged() {
				continue
			}
		case <-e.wake:
		case <-retry.C:
		}
		e.mu.Lock()
		urgent := e.urgent
		e.urgent = false
		e.mu.Unlock()
		// A sandbox waiting in Attach holds its pod's start: its sync
		// does not wait out the interval.
		if wait := e.minSync - time.Since(last); wait > 0 && !urgent {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		last = time.Now()
		if err := e.sync(); err != nil {
			e.log.Error("sync network policy rules; retrying", "err", err)
			retry.Reset(e.minSync)
		}
	}
}

// bridgeMAC is the bridge's address; nil when there is no bridge.
func (e *Enforcer) bridgeMAC() net.HardwareAddr {
	if e.nl == nil || e.bridge == "" {
		return nil
	}
	l, err := e.nl.LinkByName(e.bridge)
	if err != nil || l.Type() != "bridge" {
		return nil
	}
	return l.Attrs().HardwareAddr
}

// bridgeChanged says whether the bridge's address is no longer the one
// the tables send frames to.
func (e *Enforcer) bridgeChanged() bool {
	return e.bridgeMAC().String() != e.programmedMAC
}

// Cleanup deletes the enforcer's tables for bridge ("" for the
// default), for `bonsai server --cleanup` and uninstall. Tables that are
// not there are not an error.
func Cleanup(bridge string) error {
	conn, err := openConn(-1)
	if err != nil {
		return fmt.Errorf("netpol: %w", err)
	}
	defer conn.Close()
	return newKernelTables(conn, TableName(bridge)).delete()
}
