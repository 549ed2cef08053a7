package apiserver

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/store"

	"bonsai.dev/bonsai/apiserver/registry"
	"bonsai.dev/bonsai/apiserver/registry/core"
)

// Service allocations live in the store, each taken with a create that
// fails if the key exists, so that two creates in flight (on one server or
// on two servers over one etcd) can never hand out the same IP or port.
// They are taken before the Service is written and given back when the
// write fails, the Service lets go of them, or the Service is deleted.
//
// Cluster IPs are networking.k8s.io/v1 IPAddress objects named by the IP,
// as kube-apiserver's IPAddress-backed allocator keeps them. Node ports are
// one key per port under nodePortPrefix holding a nodePortRecord: a bitmap
// in one key (upstream's RangeAllocation) would serialise every allocation
// on one compare-and-swap, and it could not say who holds a port, which
// the repair loop needs to tell a leak from a Service being created.

const (
	// ipAllocatorName is the managed-by label value of the IPAddresses
	// the allocator owns, as kube-apiserver sets it.
	ipAllocatorName = "ipallocator.k8s.io"
	nodePortPrefix  = "/registry/ranges/servicenodeports/"
)

var errRangeFull = errors.New("range is full")

// nodePortRecord says which Service holds a node port and since when.
type nodePortRecord struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Allocated time.Time `json:"allocated"`
}

func nodePortKey(port int32) string { return nodePortPrefix + strconv.Itoa(int(port)) }

func (r nodePortRecord) heldBy(svc *corev1.Service) bool {
	return r.Namespace == svc.Namespace && r.Name == svc.Name && r.UID == svc.UID
}

func containsAddr(xs []netip.Addr, x netip.Addr) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func containsPort(xs []int32, x int32) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// newIPAddress is the record of ip held by svc.
func newIPAddress(ip netip.Addr, svc *corev1.Service) *networkingv1.IPAddress {
	family := corev1.IPv4Protocol
	if ip.Is6() {
		family = corev1.IPv6Protocol
	}
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name: ip.String(),
			Labels: map[string]string{
				networkingv1.LabelIPAddressFamily: string(family),
				networkingv1.LabelManagedBy:       ipAllocatorName,
			},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: svc.Namespace, Name: svc.Name}},
	}
}

func ipAddressRefersTo(a *networkingv1.IPAddress, namespace, name string) bool {
	r := a.Spec.ParentRef
	return r != nil && r.Group == "" && r.Resource == "services" && r.Namespace == namespace && r.Name == name
}

// recordIP takes ip for svc: the IPAddress is created only if absent, so
// an AlreadyExists error means someone else holds it.
func (s *Server) recordIP(ctx context.Context, ip netip.Addr, svc *corev1.Service) error {
	res := s.reg.byGVR[gvr("networking.k8s.io", "v1", "ipaddresses")]
	obj := newIPAddress(ip, svc)
	obj.GetObjectKind().SetGroupVersionKind(res.gvk())
	_, err := s.createObject(ctx, s.newWriteCtx(res, false), obj, "kube-apiserver", false)
	return err
}

// releaseIP deletes ip's record if it still names the Service.
func (s *Server) releaseIP(ctx context.Context, ip netip.Addr, namespace, name string) error {
	res := s.reg.byGVR[gvr("networking.k8s.io", "v1", "ipaddresses")]
	obj, rev, err := s.getObject(ctx, res, "", ip.String())
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ipAddressRefersTo(obj.(*networkingv1.IPAddress), namespace, name) {
		return nil
	}
	if _, err := s.cfg.Store.Delete(ctx, res.key("", ip.String()), rev); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("release cluster IP %s: %w", ip, err)
	}
	return nil
}

// allocatedIPs are the IPs recorded now: a hint of what to skip, the
// create being what decides.
func (s *Server) allocatedIPs(ctx context.Context) (map[netip.Addr]bool, error) {
	res := s.reg.byGVR[gvr("networking.k8s.io", "v1", "ipaddresses")]
	out := map[netip.Addr]bool{}
	err := s.listKeys(ctx, res.prefix(""), func(kv store.KeyValue) {
		if a, err := netip.ParseAddr(kv.Key[strings.LastIndexByte(kv.Key, '/')+1:]); err == nil {
			out[a] = true
		}
	})
	return out, err
}

// listKeys calls f for every key under prefix, page by page.
func (s *Server) listKeys(ctx context.Context, prefix string, f func(store.KeyValue)) error {
	opts := store.ListOptions{Limit: 1000}
	for {
		page, err := s.cfg.Store.List(ctx, prefix, opts)
		if err != nil {
			return err
		}
		for _, kv := range page.Items {
			f(kv)
		}
		if page.Continue == "" {
			return nil
		}
		opts.Continue = page.Continue
	}
}

// serviceIPRange is the --service-cidr as the allocator walks it.
type serviceIPRange struct {
	base netip.Addr
	// size is how many offsets are handed out dynamically (capped at 2^20
	// for huge ranges, as a walk of the range must stay cheap); lowBand is how many of the first ones are left to
	// static assignment until the rest is full (ServiceIPStaticSubrange).
	size, lowBand uint64
	v4            bool
}

func newServiceIPRange(cidr netip.Prefix) serviceIPRange {
	bits := cidr.Addr().BitLen() - cidr.Bits()
	size := uint64(1) << min(bits, 20)
	return serviceIPRange{
		base: cidr.Masked().Addr(), size: size, v4: cidr.Addr().Is4(),
		lowBand: min(max(16, size/16), 256),
	}
}

// usable reports whether offset may be handed out: never the network
// address, nor an IPv4 range's broadcast address.
func (r serviceIPRange) usable(off uint64) bool {
	return off != 0 && !(r.v4 && off == r.size-1)
}

func (r serviceIPRange) addr(off uint64) netip.Addr {
	b := r.base.As16()
	binary.BigEndian.PutUint64(b[8:], binary.BigEndian.Uint64(b[8:])+off)
	out := netip.AddrFrom16(b)
	if r.v4 {
		return out.Unmap()
	}
	return out
}

// candidates walks the upper band from a random start, then the lower
// band, calling try until it says stop.
func (r serviceIPRange) candidates(try func(netip.Addr) (stop bool, err error)) error {
	low := min(r.lowBand, r.size)
	for _, band := range [][2]uint64{{low, r.size}, {0, low}} {
		n := band[1] - band[0]
		if n == 0 {
			continue
		}
		start := rand.Uint64N(n)
		for k := range n {
			off := band[0] + (start+k)%n
			if !r.usable(off) {
				continue
			}
			if stop, err := try(r.addr(off)); stop || err != nil {
				return err
			}
		}
	}
	return errRangeFull
}

// takeNextIP records a free cluster IP of family for svc (or, on a dry
// run, finds one).
func (s *Server) takeNextIP(ctx context.Context, svc *corev1.Service, family corev1.IPFamily, dry bool) (netip.Addr, error) {
	cidr, ok := s.env.ServiceCIDRFor(family)
	if !ok {
		return netip.Addr{}, fmt.Errorf("no %s service range", family)
	}
	used, err := s.allocatedIPs(ctx)
	if err != nil {
		return netip.Addr{}, err
	}
	var got netip.Addr
	err = newServiceIPRange(cidr).candidates(func(a netip.Addr) (bool, error) {
		if used[a] {
			return false, nil
		}
		if !dry {
			if err := s.recordIP(ctx, a, svc); apierrors.IsAlreadyExists(err) {
				return false, nil
			} else if err != nil {
				return true, err
			}
		}
		got = a
		return true, nil
	})
	return got, err
}

// takeIP records the requested ip for svc, refusing it when held.
func (s *Server) takeIP(ctx context.Context, ip netip.Addr, svc *corev1.Service, dry bool) error {
	res := s.reg.byGVR[gvr("networking.k8s.io", "v1", "ipaddresses")]
	var err error
	if dry {
		if _, _, err = s.getObject(ctx, res, "", ip.String()); err == nil {
			err = apierrors.NewAlreadyExists(qualified(res), ip.String())
		} else if apierrors.IsNotFound(err) {
			err = nil
		}
	} else {
		err = s.recordIP(ctx, ip, svc)
	}
	if apierrors.IsAlreadyExists(err) {
		return errIPAllocated
	}
	return err
}

var (
	errIPAllocated   = registry.ErrIPAllocated
	errPortAllocated = registry.ErrPortAllocated
)

// readNodePort returns port's record and revision (0: free).
func (s *Server) readNodePort(ctx context.Context, port int32) (nodePortRecord, uint64, error) {
	kv, err := s.cfg.Store.Get(ctx, nodePortKey(port))
	if errors.Is(err, store.ErrNotFound) {
		return nodePortRecord{}, 0, nil
	}
	if err != nil {
		return nodePortRecord{}, 0, err
	}
	var rec nodePortRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return nodePortRecord{}, 0, fmt.Errorf("node port %d record: %w", port, err)
	}
	return rec, kv.Revision, nil
}

// recordNodePort takes port for svc: errPortAllocated if held.
func (s *Server) recordNodePort(ctx context.Context, port int32, svc *corev1.Service, dry bool) error {
	if dry {
		_, rev, err := s.readNodePort(ctx, port)
		if err == nil && rev != 0 {
			return errPortAllocated
		}
		return err
	}
	data, err := json.Marshal(nodePortRecord{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, Allocated: time.Now()})
	if err != nil {
		return err
	}
	if _, err := s.cfg.Store.Create(ctx, nodePortKey(port), data); errors.Is(err, store.ErrExists) {
		return errPortAllocated
	} else if err != nil {
		return fmt.Errorf("record node port %d: %w", port, err)
	}
	return nil
}

// releaseNodePort deletes port's record if svc still holds it.
func (s *Server) releaseNodePort(ctx context.Context, port int32, svc *corev1.Service) error {
	rec, rev, err := s.readNodePort(ctx, port)
	if err != nil || rev == 0 || !rec.heldBy(svc) {
		return err
	}
	if _, err := s.cfg.Store.Delete(ctx, nodePortKey(port), rev); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("release node port %d: %w", port, err)
	}
	return nil
}

// allocatedNodePorts are the ports recorded now (a hint, as allocatedIPs).
func (s *Server) allocatedNodePorts(ctx context.Context) (map[int32]bool, error) {
	out := map[int32]bool{}
	err := s.listKeys(ctx, nodePortPrefix, func(kv store.KeyValue) {
		if p, err := strconv.Atoi(strings.TrimPrefix(kv.Key, nodePortPrefix)); err == nil {
			out[int32(p)] = true
		}
	})
	return out, err
}

// takeNextNodePort records a free node port for svc, skipping mine (the
// ports this write already holds).
func (s *Server) takeNextNodePort(ctx context.Context, svc *corev1.Service, mine []int32, dry bool) (int32, error) {
	used, err := s.allocatedNodePorts(ctx)
	if err != nil {
		return 0, err
	}
	r := s.cfg.NodePortRange
	n := r.Max - r.Base + 1
	start := rand.IntN(n)
	for k := range n {
		p := int32(r.Base + (start+k)%n)
		if used[p] || containsPort(mine, p) {
			continue
		}
		switch err := s.recordNodePort(ctx, p, svc, dry); {
		case errors.Is(err, errPortAllocated):
			continue
		case err != nil:
			return 0, err
		}
		return p, nil
	}
	return 0, errRangeFull
}

// serviceAllocator is the Service allocator as strategies see it.
type serviceAllocator struct{ s *Server }

func (a serviceAllocator) TakeNextIP(ctx context.Context, svc *corev1.Service, family corev1.IPFamily, dryRun bool) (netip.Addr, error) {
	return a.s.takeNextIP(ctx, svc, family, dryRun)
}

func (a serviceAllocator) TakeIP(ctx context.Context, ip netip.Addr, svc *corev1.Service, dryRun bool) error {
	return a.s.takeIP(ctx, ip, svc, dryRun)
}

func (a serviceAllocator) ReleaseIP(ctx context.Context, ip netip.Addr, namespace, name string) error {
	return a.s.releaseIP(ctx, ip, namespace, name)
}

func (a serviceAllocator) TakeNextNodePort(ctx context.Context, svc *corev1.Service, held []int32, dryRun bool) (int32, error) {
	return a.s.takeNextNodePort(ctx, svc, held, dryRun)
}

func (a serviceAllocator) RecordNodePort(ctx context.Context, port int32, svc *corev1.Service, dryRun bool) error {
	return a.s.recordNodePort(ctx, port, svc, dryRun)
}

func (a serviceAllocator) ReleaseNodePort(ctx context.Context, port int32, svc *corev1.Service) error {
	return a.s.releaseNodePort(ctx, port, svc)
}

// bindServiceOnRead has Services read from the store get the dual-stack
// fields older ones lack, with the primary service range's family.
func (s *Server) bindServiceOnRead() {
	primary := ipFamilyOf(s.cfg.ServiceCIDRs[0].Addr())
	s.reg.byGVR[gvr("", "v1", "services")].onRead = func(obj runtime.Object) {
		core.DefaultServiceOnRead(obj.(*corev1.Service), primary)
	}
}
