package cni

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"bonsai.dev/bonsai/netplugin"
)

const (
	podInterface      = "eth0"
	defaultTimeout    = time.Minute
	defaultNetnsDir   = "/run/bonsai/netns"
	loopbackNetwork   = "cni-loopback"
	loopbackInterface = "lo"
)

// loopbackConf brings up lo in every pod: Kubernetes requires the
// standard loopback plugin beside the configured chain.
var loopbackConf = []byte(`{"cniVersion":"0.3.1","name":"` + loopbackNetwork + `","type":"loopback"}`)

// Config says where the CNI host finds networks and plugins and keeps its
// state. Zero values get the defaults noted on each field.
type Config struct {
	ConfDir  string   // network configurations; default /etc/cni/net.d
	BinDirs  []string // plugin binaries, searched in order; default /opt/cni/bin
	NetnsDir string   // where pod netns are bind-mounted; default /run/bonsai/netns
	CacheDir string   // libcni's result cache; required (persists across restarts)
	// Timeout bounds each plugin chain run (ADD, CHECK, DEL, STATUS, GC);
	// a plugin still running then is killed. Default 1 minute.
	Timeout time.Duration
	Logger  *slog.Logger // nil: slog.Default()
	// LocalAddrs are put as /32s (/128s) on the dummy link LocalLink: the node
	// serves pods there itself (the cluster DNS address).
	LocalLink  string
	LocalAddrs []netip.Addr
}

// Host networks pods with CNI plugins. Its methods are safe for
// concurrent use; calls for the same pod ID are serialized.
type Host struct {
	cfg  Config
	log  *slog.Logger
	cni  *libcni.CNIConfig
	lo   *libcni.NetworkConfigList
	locs netplugin.KeyedMutex
	// gc is held shared by Setup and Teardown and exclusively by a plugin
	// GC, whose list of valid attachments must not miss one being added.
	gc sync.RWMutex

	mu sync.Mutex
	// complete holds the pods set up in this process.
	complete map[string]netplugin.Attachment
	// chosen is the configuration file last used, to log a change.
	chosen string
}

var _ netplugin.PodNetwork = (*Host)(nil)

// New makes a CNI host. It needs no configuration yet: Ready says when
// one is there.
func New(cfg Config) (*Host, error) {
	if cfg.ConfDir == "" {
		cfg.ConfDir = DefaultConfDir
	}
	if len(cfg.BinDirs) == 0 {
		cfg.BinDirs = []string{DefaultBinDir}
	}
	if cfg.NetnsDir == "" {
		cfg.NetnsDir = defaultNetnsDir
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CacheDir == "" {
		return nil, errors.New("cni: CacheDir is required")
	}
	for _, d := range append([]string{cfg.ConfDir, cfg.NetnsDir, cfg.CacheDir}, cfg.BinDirs...) {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("cni: %q is not an absolute path", d)
		}
	}
	if err := netplugin.PrepareNetnsDir(cfg.NetnsDir); err != nil {
		return nil, fmt.Errorf("cni: %w", err)
	}
	if len(cfg.LocalAddrs) > 0 {
		// Pods can be networked without them: say so, and go on.
		if err := ensureLocalLink(cfg.LocalLink, cfg.LocalAddrs); err != nil {
			cfg.Logger.Warn("the node's own addresses for pods (cluster DNS) are not served", "component", "cni", "addrs", cfg.LocalAddrs, "err", err)
		}
	}
	lo, err := parseConfBytes(loopbackConf)
	if err != nil {
		return nil, fmt.Errorf("cni: loopback config: %w", err)
	}
	h := &Host{
		cfg: cfg, log: cfg.Logger.With("component", "cni"), lo: lo,
		cni:      libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, cfg.CacheDir, nil),
		complete: map[string]netplugin.Attachment{},
	}
	return h, nil
}

// network loads the configuration in force and logs which file it is
// when that changes.
func (h *Host) network() (*network, error) {
	nw, err := loadNetwork(h.cfg.ConfDir, h.cfg.BinDirs)
	h.mu.Lock()
	defer h.mu.Unlock()
	file := ""
	if err == nil {
		file = nw.file
	}
	if file != h.chosen {
		if err == nil {
			h.log.Info("using CNI network configuration", "file", nw.file, "network", nw.list.Name, "cniVersion", nw.list.CNIVersion, "plugins", pluginTypes(nw.list))
		} else {
			h.log.Warn("no usable CNI network configuration", "err", err)
		}
		h.chosen = file
	}
	return nw, err
}

func pluginTypes(l *libcni.NetworkConfigList) []string {
	out := make([]string, len(l.Plugins))
	for i, p := range l.Plugins {
		out[i] = p.Network.Type
	}
	return out
}

// Ready is nil when a valid configuration exists whose plugins are all
// installed and, for spec 1.1.0, answer STATUS.
func (h *Host) Ready(ctx context.Context) error {
	nw, err := h.network()
	if err != nil {
		return err
	}
	if _, err := invoke.FindInPath("loopback", h.cfg.BinDirs); err != nil {
		return fmt.Errorf("%w: %v", ErrUninitialized, err)
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	if err := h.cni.GetStatusNetworkList(ctx, nw.list); err != nil {
		return fmt.Errorf("network %s is not ready: %w", nw.list.Name, err)
	}
	return nil
}

func (h *Host) netnsPath(id string) string { return filepath.Join(h.cfg.NetnsDir, id) }

func (h *Host) runtimeConf(pod netplugin.Pod, ifName string, caps map[string]any) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: pod.ID, NetNS: h.netnsPath(pod.ID), IfName: ifName,
		Args: cniArgs(pod), CapabilityArgs: caps,
	}
}

// Setup makes the pod's namespace, runs the loopback plugin for lo and
// the configured chain (ADD) for eth0, and returns the addresses the
// chain reported. A failure undoes all of it (DEL, namespace removed) and
// says what the plugin said.
func (h *Host) Setup(ctx context.Context, pod netplugin.Pod) (netplugin.Attachment, error) {
	if err := netplugin.ValidateID(pod.ID); err != nil {
		return netplugin.Attachment{}, err
	}
	caps, err := capabilityArgs(pod)
	if err != nil {
		return netplugin.Attachment{}, err
	}
	h.gc.RLock()
	defer h.gc.RUnlock()
	unlock := h.locs.Lock(pod.ID)
	defer unlock()

	h.mu.Lock()
	att, done := h.complete[pod.ID]
	h.mu.Unlock()
	if done {
		return att, nil
	}
	nw, err := h.network()
	if err != nil {
		return netplugin.Attachment{}, fmt.Errorf("network plugin is not ready: %w", err)
	}
	nsPath := h.netnsPath(pod.ID)
	if att, ok := h.readopt(ctx, pod, nw); ok {
		return att, nil
	}

	start := time.Now()
	if netplugin.IsNetnsMount(nsPath) {
		// Left by a crash or a failed check: start from a clean slate.
		h.teardownLocked(ctx, pod.ID)
	}
	if err := netplugin.RemoveNetns(nsPath); err != nil { // an empty file left by a crash
		return netplugin.Attachment{}, err
	}
	if err := netplugin.CreateNetns(nsPath); err != nil {
		return netplugin.Attachment{}, fmt.Errorf("create netns for pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	att, err = h.add(ctx, pod, nw, caps)
	if err != nil {
		if uerr := h.teardownLocked(context.WithoutCancel(ctx), pod.ID); uerr != nil {
			h.log.Warn("undo a failed CNI ADD", "pod", pod.Namespace+"/"+pod.Name, "id", pod.ID, "err", uerr)
		}
		return netplugin.Attachment{}, err
	}
	h.mu.Lock()
	h.complete[pod.ID] = att
	h.mu.Unlock()
	h.log.Debug("pod network set up", "pod", pod.Namespace+"/"+pod.Name, "id", pod.ID, "ips", att.IPs, "network", nw.list.Name, "took", time.Since(start))
	return att, nil
}

// add runs ADD for lo and eth0.
func (h *Host) add(ctx context.Context, pod netplugin.Pod, nw *network, caps map[string]any) (netplugin.Attachment, error) {
	lctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	if _, err := h.cni.AddNetworkList(lctx, h.lo, h.runtimeConf(pod, loopbackInterface, nil)); err != nil {
		return netplugin.Attachment{}, h.pluginErr(lctx, "set up loopback", err)
	}
	cancel()
	actx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	res, err := h.cni.AddNetworkList(actx, nw.list, h.runtimeConf(pod, podInterface, caps))
	if err != nil {
		return netplugin.Attachment{}, h.pluginErr(actx, fmt.Sprintf("set up network %s (%s)", nw.list.Name, filepath.Base(nw.file)), err)
	}
	return h.attachment(pod.ID, res)
}

// pluginErr says which step failed and, when the plugin ran out of time,
// that it was killed for it.
func (h *Host) pluginErr(ctx context.Context, what string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: timed out after %s: %w", what, h.cfg.Timeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// attachment reads the pod's addresses out of a chain's result: those on
// interfaces inside the pod's namespace (or on none named), IPv4 first.
func (h *Host) attachment(id string, res types.Result) (netplugin.Attachment, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return netplugin.Attachment{}, fmt.Errorf("read the plugins' result: %w", err)
	}
	att := netplugin.Attachment{NetnsPath: h.netnsPath(id)}
	for _, ipc := range r.IPs {
		if ipc.Interface != nil && *ipc.Interface >= 0 && *ipc.Interface < len(r.Interfaces) && r.Interfaces[*ipc.Interface].Sandbox == "" {
			continue // a host-side interface's address
		}
		ip, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			continue
		}
		att.IPs = append(att.IPs, ip.Unmap())
		if !att.Gateway.IsValid() && ipc.Gateway != nil {
			att.Gateway, _ = netip.AddrFromSlice(ipc.Gateway)
			att.Gateway = att.Gateway.Unmap()
		}
	}
	if len(att.IPs) == 0 {
		return netplugin.Attachment{}, errors.New("the network plugins reported no IP address for the pod")
	}
	slices.SortStableFunc(att.IPs, func(a, b netip.Addr) int {
		switch {
		case a.Is4() == b.Is4():
			return 0
		case a.Is4():
			return -1
		}
		return 1
	})
	att.IP = att.IPs[0]
	return att, nil
}

// readopt takes over a pod whose network was set up before a restart:
// its namespace is there and the cache has its result. When the network
// supports it (0.4.0 and later), CHECK confirms it is intact.
func (h *Host) readopt(ctx context.Context, pod netplugin.Pod, nw *network) (netplugin.Attachment, bool) {
	if !netplugin.IsNetnsMount(h.netnsPath(pod.ID)) {
		return netplugin.Attachment{}, false
	}
	atts, err := h.cachedAttachments(pod.ID)
	if err != nil {
		return netplugin.Attachment{}, false
	}
	for _, a := range atts {
		if a.IfName != podInterface || a.Network != nw.list.Name {
			continue
		}
		list, err := parseConfBytes(a.Config)
		if err != nil {
			return netplugin.Attachment{}, false
		}
		rt := cachedRuntimeConf(a)
		res, err := h.cni.GetNetworkListCachedResult(list, rt)
		if err != nil || res == nil {
			return netplugin.Attachment{}, false
		}
		if ok, _ := version.GreaterThanOrEqualTo(list.CNIVersion, "0.4.0"); ok && !list.DisableCheck {
			cctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
			err := h.cni.CheckNetworkList(cctx, list, rt)
			cancel()
			if err != nil {
				h.log.Warn("CNI CHECK failed; setting the pod's network up again", "pod", pod.Namespace+"/"+pod.Name, "id", pod.ID, "err", err)
				return netplugin.Attachment{}, false
			}
		}
		att, err := h.attachment(pod.ID, res)
		if err != nil {
			return netplugin.Attachment{}, false
		}
		h.mu.Lock()
		h.complete[pod.ID] = att
		h.mu.Unlock()
		return att, true
	}
	return netplugin.Attachment{}, false
}

// cachedAttachments are the attachments libcni cached for exactly this
// container ID.
func (h *Host) cachedAttachments(id string) ([]*libcni.NetworkAttachment, error) {
	all, err := h.cni.GetCachedAttachments(id)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, a := range all {
		if a.ContainerID == id {
			out = append(out, a)
		}
	}
	return out, nil
}

func cachedRuntimeConf(a *libcni.NetworkAttachment) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName, Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs}
}

// Teardown runs DEL for every network the pod was added to, with the
// configuration and runtime config cached at ADD (so a changed or
// removed configuration file does not matter), then removes the pod's
// namespace. The namespace goes even when a plugin fails: the cache
// entry stays, and GC runs that DEL again later.
func (h *Host) Teardown(ctx context.Context, id string) error {
	if err := netplugin.ValidateID(id); err != nil {
		return err
	}
	h.gc.RLock()
	defer h.gc.RUnlock()
	unlock := h.locs.Lock(id)
	defer unlock()
	return h.teardownLocked(ctx, id)
}

func (h *Host) teardownLocked(ctx context.Context, id string) error {
	h.mu.Lock()
	delete(h.complete, id)
	h.mu.Unlock()
	nsPath := h.netnsPath(id)
	var errs []error
	atts, err := h.cachedAttachments(id)
	if err != nil {
		errs = append(errs, err)
	}
	sawPod := false
	// eth0's network before lo, the reverse of ADD.
	slices.SortStableFunc(atts, func(a, b *libcni.NetworkAttachment) int {
		return boolInt(a.IfName == loopbackInterface) - boolInt(b.IfName == loopbackInterface)
	})
	for _, a := range atts {
		sawPod = sawPod || a.IfName == podInterface
		list, err := parseConfBytes(a.Config)
		if err != nil {
			errs = append(errs, fmt.Errorf("cached config of network %s: %w", a.Network, err))
			continue
		}
		if err := h.del(ctx, list, cachedRuntimeConf(a)); err != nil {
			errs = append(errs, err)
		}
	}
	if !sawPod && netplugin.IsNetnsMount(nsPath) {
		// ADD failed half-way (nothing cached) or the cache was lost:
		// DEL with the configuration in force, which plugins accept for
		// what they never set up.
		if nw, err := loadNetwork(h.cfg.ConfDir, h.cfg.BinDirs); err == nil {
			rt := &libcni.RuntimeConf{ContainerID: id, NetNS: nsPath, IfName: podInterface, Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_INFRA_CONTAINER_ID", id}}}
			if err := h.del(ctx, nw.list, rt); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := netplugin.RemoveNetns(nsPath); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("tear down the network of sandbox %s: %w", id, errors.Join(errs...))
	}
	return nil
}

// del runs DEL over a chain, last plugin first. When one fails the rest
// still run, one at a time, so that an earlier plugin's state (an IPAM
// address) is released all the same.
func (h *Host) del(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	dctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	err := h.cni.DelNetworkList(dctx, list, rt)
	cancel()
	if err == nil {
		return nil
	}
	if len(list.Plugins) == 1 {
		return h.pluginErr(dctx, "delete network "+list.Name, err)
	}
	var errs []error
	for i := len(list.Plugins) - 1; i >= 0; i-- {
		one := *list
		one.Plugins = list.Plugins[i : i+1]
		pctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
		if err := h.cni.DelNetworkList(pctx, &one, rt); err != nil {
			errs = append(errs, h.pluginErr(pctx, "delete network "+list.Name, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// GC tears down every pod with a namespace under NetnsDir or a cached
// attachment for which live returns false, then lets the plugins of a
// 1.1.0 network collect what belongs to no live attachment.
func (h *Host) GC(ctx context.Context, live func(id string) bool) error {
	ids := map[string]bool{}
	var errs []error
	entries, err := os.ReadDir(h.cfg.NetnsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("list netns dir: %w", err))
	}
	for _, e := range entries {
		if netplugin.ValidateID(e.Name()) == nil {
			ids[e.Name()] = true
		}
	}
	atts, err := h.cni.GetCachedAttachments("")
	if err != nil {
		errs = append(errs, err)
	}
	for _, a := range atts {
		if netplugin.ValidateID(a.ContainerID) == nil {
			ids[a.ContainerID] = true
		}
	}
	lock := func(id string) func() {
		h.gc.RLock()
		unlock := h.locs.Lock(id)
		return func() {
			unlock()
			h.gc.RUnlock()
		}
	}
	errs = append(errs, netplugin.TeardownDead(ctx, ids, live, lock, h.teardownLocked, h.log))
	if err := ctx.Err(); err != nil {
		return errors.Join(errs...)
	}
	if nw, err := loadNetwork(h.cfg.ConfDir, h.cfg.BinDirs); err == nil {
		if ok, _ := version.GreaterThanOrEqualTo(nw.list.CNIVersion, "1.1.0"); ok {
			errs = append(errs, h.pluginGC(ctx, nw.list))
		}
	}
	return errors.Join(errs...)
}

// pluginGC sends GC with every attachment still cached as valid: the
// ones just collected are gone from the cache.
func (h *Host) pluginGC(ctx context.Context, list *libcni.NetworkConfigList) error {
	h.gc.Lock()
	defer h.gc.Unlock()
	atts, err := h.cni.GetCachedAttachments("")
	if err != nil {
		return err
	}
	args := &libcni.GCArgs{}
	for _, a := range atts {
		if a.Network == list.Name {
			args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
	}
	gctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	if err := h.cni.GCNetworkList(gctx, list, args); err != nil {
		return h.pluginErr(gctx, "garbage-collect network "+list.Name, err)
	}
	return nil
}

// Close releases nothing: pods keep their network, and a new Host on the
// same directories takes them over.
func (h *Host) Close() error { return nil }
