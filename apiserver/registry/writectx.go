package registry

import (
	"context"
	"errors"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// WriteCtx is what a strategy may consult about the write in progress.
// The API server keeps its own state beside it, out of a strategy's reach.
type WriteCtx struct {
	// Kind is the kind written.
	Kind *Kind
	// Env is the server's configuration a strategy may read, and its
	// Service allocator.
	Env *Env
	// DryRun: nothing the write takes in the store may stay.
	DryRun bool
	// GeneratedName: the object's name was made from its generateName
	// by this request.
	GeneratedName bool
	// User is who creates the object, for the kinds that record it (a
	// CertificateSigningRequest's requester); set on create only.
	User UserInfo
	// undo gives back what the strategy took in the store for this write
	// (a Service's cluster IP and node ports) if the write fails; release
	// gives back what the stored object no longer holds once it is stored.
	undo, release []func() error
}

// OnFailure registers an undo step; a dry run takes nothing to undo.
func (w *WriteCtx) OnFailure(f func() error) {
	if !w.DryRun {
		w.undo = append(w.undo, f)
	}
}

// OnSuccess registers a release step, run once the write is stored.
func (w *WriteCtx) OnSuccess(f func() error) { w.release = append(w.release, f) }

// Finish runs the undo or the release steps of a write that failed or was
// stored, and reports the steps that failed to failed.
func (w *WriteCtx) Finish(stored bool, failed func(error)) {
	steps := w.undo
	if stored {
		steps = w.release
	}
	for _, f := range steps {
		if err := f(); err != nil {
			failed(err)
		}
	}
	w.undo, w.release = nil, nil
}

// GroupResource is the written kind's group and resource, as errors name
// it.
func (w *WriteCtx) GroupResource() schema.GroupResource { return w.Kind.GVR.GroupResource() }

// Invalid is the 422 Invalid error for the object named name.
func (w *WriteCtx) Invalid(name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: w.Kind.GVR.Group, Kind: w.Kind.Kind}, name, errs)
}

// UserInfo is an authenticated user as a strategy sees it.
type UserInfo struct {
	Name, UID string
	Groups    []string
	Extra     map[string][]string
}

// Env is the part of the server's configuration strategies may read, and
// the services they may use. The server makes one and shares it among all
// writes.
type Env struct {
	// ServiceCIDRs are the ranges of Service cluster IPs, one per
	// family, the primary (the family of single-stack Services) first.
	ServiceCIDRs []netip.Prefix
	// NodePortRange is the range of Service node ports.
	NodePortRange PortRange
	// ReservedHostPorts are the node's ports bonsai serves itself; no pod
	// may take one as a host port.
	ReservedHostPorts []ReservedPort
	// Services takes and gives back cluster IPs and node ports.
	Services ServiceAllocator
	// NamespaceLabels reads a namespace's labels (a claim asking for
	// admin access to devices needs its namespace labelled for it).
	NamespaceLabels func(name string) (map[string]string, error)
}

// ServiceCIDRFor is the service range of family, if the cluster has one.
func (e *Env) ServiceCIDRFor(family corev1.IPFamily) (netip.Prefix, bool) {
	for _, p := range e.ServiceCIDRs {
		if p.Addr().Is6() == (family == corev1.IPv6Protocol) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// PortRange is an inclusive range of ports.
type PortRange struct{ Base, Max int }

// ReservedPort is a port of the node that bonsai itself serves (its API,
// the kubelet API, cluster DNS): no pod may take it as a hostPort, where
// a DNAT rule would silently steal its traffic.
type ReservedPort struct {
	Port     int32
	Protocol corev1.Protocol
	// For names the server, for the message.
	For string
}

// ServiceAllocator records in the store which Service holds a cluster IP
// or a node port. A dry run takes nothing but still fails where the
// write would.
type ServiceAllocator interface {
	// TakeNextIP takes a free cluster IP of family for svc.
	TakeNextIP(ctx context.Context, svc *corev1.Service, family corev1.IPFamily, dryRun bool) (netip.Addr, error)
	// TakeIP takes ip for svc; ErrIPAllocated if another holds it.
	TakeIP(ctx context.Context, ip netip.Addr, svc *corev1.Service, dryRun bool) error
	ReleaseIP(ctx context.Context, ip netip.Addr, namespace, name string) error
	// TakeNextNodePort takes a free node port for svc, other than those
	// in held.
	TakeNextNodePort(ctx context.Context, svc *corev1.Service, held []int32, dryRun bool) (int32, error)
	// RecordNodePort takes port for svc; ErrPortAllocated if another
	// holds it.
	RecordNodePort(ctx context.Context, port int32, svc *corev1.Service, dryRun bool) error
	ReleaseNodePort(ctx context.Context, port int32, svc *corev1.Service) error
}

// The errors of a ServiceAllocator for what another Service holds.
var (
	ErrIPAllocated   = errors.New("provided IP is already allocated")
	ErrPortAllocated = errors.New("provided port is already allocated")
)
