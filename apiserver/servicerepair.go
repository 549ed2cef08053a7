package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/registry/core"
	"bonsai.dev/bonsai/store"
)

// The repair loop reconciles the allocation records with the Services, as
// kube-apiserver's ipallocator and portallocator repair controllers do. It
// runs in the API server because node port records are store keys, not API
// objects. It runs once before the server serves (so a store written before
// allocations were recorded gets its records before anything new can
// collide with them) and then every serviceRepairInterval.

const (
	serviceRepairInterval = 3 * time.Minute
	// allocationGracePeriod is how long a record may lack its Service: a
	// create or update in flight takes it before the Service is stored.
	// Upstream waits 60 s, kube-apiserver's request timeout.
	allocationGracePeriod = 60 * time.Second

	ipRepairController   = "ipallocator-repair-controller"
	portRepairController = "portallocator-repair-controller"
)

func (s *Server) runServiceRepair(ctx context.Context) {
	t := time.NewTicker(serviceRepairInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.repairServiceAllocations(ctx, time.Now()); err != nil && ctx.Err() == nil {
				s.log.Warn("service allocation repair", "err", err)
			}
		}
	}
}

// repairPass is one reconciliation: the Services, then the records, read
// in that order so that a Service created in between shows as a young
// record without its Service, which the grace period covers.
type repairPass struct {
	s        *Server
	now      time.Time
	services map[string]*corev1.Service // by namespace/name
	ips      map[netip.Addr]*networkingv1.IPAddress
	ipRevs   map[netip.Addr]uint64
	ports    map[int32]nodePortRecord
	portRevs map[int32]uint64
}

// repairServiceAllocations records what Services hold and have no record
// of, and frees records no Service holds once they are older than the
// grace period, reporting problems as events with upstream's reasons.
func (s *Server) repairServiceAllocations(ctx context.Context, now time.Time) error {
	p := &repairPass{
		s: s, now: now, services: map[string]*corev1.Service{},
		ips: map[netip.Addr]*networkingv1.IPAddress{}, ipRevs: map[netip.Addr]uint64{},
		ports: map[int32]nodePortRecord{}, portRevs: map[int32]uint64{},
	}
	if err := p.read(ctx); err != nil {
		return err
	}
	var errs []error
	for _, svc := range p.services {
		errs = append(errs, p.repairServiceIPs(ctx, svc), p.repairServicePorts(ctx, svc))
	}
	for ip := range p.ips {
		errs = append(errs, p.freeLeakedIP(ctx, ip))
	}
	for port := range p.ports {
		errs = append(errs, p.freeLeakedPort(ctx, port))
	}
	return errors.Join(errs...)
}

func (p *repairPass) read(ctx context.Context) error {
	svcRes := p.s.reg.byGVR[gvr("", "v1", "services")]
	var errs []error
	err := p.s.listKeys(ctx, svcRes.prefix(""), func(kv store.KeyValue) {
		obj, err := decodeStored(svcRes, kv)
		if err != nil {
			errs = append(errs, err)
			return
		}
		svc := obj.(*corev1.Service)
		p.services[svc.Namespace+"/"+svc.Name] = svc
	})
	if err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	ipRes := p.s.reg.byGVR[gvr("networking.k8s.io", "v1", "ipaddresses")]
	err = p.s.listKeys(ctx, ipRes.prefix(""), func(kv store.KeyValue) {
		obj, err := decodeStored(ipRes, kv)
		if err != nil {
			errs = append(errs, err)
			return
		}
		a := obj.(*networkingv1.IPAddress)
		if ip, err := netip.ParseAddr(a.Name); err == nil {
			p.ips[ip], p.ipRevs[ip] = a, kv.Revision
		}
	})
	if err != nil {
		return fmt.Errorf("list ipaddresses: %w", err)
	}
	err = p.s.listKeys(ctx, nodePortPrefix, func(kv store.KeyValue) {
		var rec nodePortRecord
		var port int32
		if _, err := fmt.Sscan(kv.Key[len(nodePortPrefix):], &port); err != nil {
			errs = append(errs, fmt.Errorf("node port key %s: %w", kv.Key, err))
			return
		}
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			errs = append(errs, fmt.Errorf("node port record %s: %w", kv.Key, err))
			return
		}
		p.ports[port], p.portRevs[port] = rec, kv.Revision
	})
	if err != nil {
		return fmt.Errorf("list node ports: %w", err)
	}
	return errors.Join(errs...)
}

func ipFamilyOf(ip netip.Addr) corev1.IPFamily {
	if ip.Is6() {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// repairServiceIPs makes sure each cluster IP of svc has its record.
func (p *repairPass) repairServiceIPs(ctx context.Context, svc *corev1.Service) error {
	var errs []error
	for _, ip := range core.ServiceIPs(svc) {
		fam := ipFamilyOf(ip)
		if r, ok := p.s.env.ServiceCIDRFor(fam); !ok || !r.Contains(ip) {
			p.s.repairEvent(ctx, ipRepairController, svc, "ClusterIPOutOfRange", "ClusterIPAllocation",
				fmt.Sprintf("Cluster IP [%s]: %s is not within any configured Service CIDR; please recreate service", fam, ip))
			continue
		}
		rec := p.ips[ip]
		switch {
		case rec == nil:
			p.s.repairEvent(ctx, ipRepairController, svc, "ClusterIPNotAllocated", "ClusterIPAllocation",
				fmt.Sprintf("Cluster IP [%s]: %s is not allocated; repairing", fam, ip))
			errs = append(errs, p.recordIP(ctx, ip, svc))
		case ipAddressRefersTo(rec, svc.Namespace, svc.Name):
		case p.holdsIP(rec, ip):
			p.s.repairEvent(ctx, ipRepairController, svc, "ClusterIPAlreadyAllocated", "ClusterIPAllocation",
				fmt.Sprintf("Cluster IP [%s]:%s was assigned to multiple services; please recreate service", fam, ip))
		default:
			p.s.repairEvent(ctx, ipRepairController, svc, "ClusterIPNotAllocated", "ClusterIPAllocation",
				fmt.Sprintf("the ClusterIP [%s]: %s for Service %s/%s has a wrong reference; repairing", fam, ip, svc.Namespace, svc.Name))
			errs = append(errs, p.deleteIP(ctx, ip), p.recordIP(ctx, ip, svc))
		}
	}
	return errors.Join(errs...)
}

// holdsIP reports whether rec's parent Service exists and holds ip.
func (p *repairPass) holdsIP(rec *networkingv1.IPAddress, ip netip.Addr) bool {
	r := rec.Spec.ParentRef
	if r == nil || r.Group != "" || r.Resource != "services" {
		return false
	}
	parent := p.services[r.Namespace+"/"+r.Name]
	return parent != nil && containsAddr(core.ServiceIPs(parent), ip)
}

func (p *repairPass) recordIP(ctx context.Context, ip netip.Addr, svc *corev1.Service) error {
	err := p.s.recordIP(ctx, ip, svc)
	if apierrors.IsAlreadyExists(err) {
		return nil // recorded in the meantime; the next pass checks whose
	}
	if err == nil {
		// Services later in this pass see it held.
		p.ips[ip] = newIPAddress(ip, svc)
	}
	return err
}

func (p *repairPass) deleteIP(ctx context.Context, ip netip.Addr) error {
	res := p.s.reg.byGVR[gvr("networking.k8s.io", "v1", "ipaddresses")]
	_, err := p.s.cfg.Store.Delete(ctx, res.key("", ip.String()), p.ipRevs[ip])
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("delete IPAddress %s: %w", ip, err)
	}
	delete(p.ips, ip)
	return nil
}

// freeLeakedIP deletes an allocator-owned record no Service holds, once it
// is older than the grace period.
func (p *repairPass) freeLeakedIP(ctx context.Context, ip netip.Addr) error {
	rec := p.ips[ip]
	if rec == nil || rec.Labels[networkingv1.LabelManagedBy] != ipAllocatorName || p.holdsIP(rec, ip) {
		return nil
	}
	if p.now.Sub(rec.CreationTimestamp.Time) <= allocationGracePeriod {
		return nil
	}
	reason := "IPAddressNotAllocated"
	msg := fmt.Sprintf("IPAddress %s appears to have been modified, not referencing a Service %v: cleaning up", ip, rec.Spec.ParentRef)
	if r := rec.Spec.ParentRef; r != nil && r.Group == "" && r.Resource == "services" {
		msg = fmt.Sprintf("IPAddress: %s for Service %s/%s appears to have leaked: cleaning up", ip, r.Namespace, r.Name)
		if p.services[r.Namespace+"/"+r.Name] != nil {
			reason = "IPAddressWrongReference"
			msg = fmt.Sprintf("IPAddress: %s for Service %s/%s has a wrong reference; cleaning up", ip, r.Namespace, r.Name)
		}
	}
	p.s.repairEvent(ctx, ipRepairController, rec, reason, "IPAddressAllocation", msg)
	return p.deleteIP(ctx, ip)
}

// repairServicePorts makes sure each node port of svc has its record.
func (p *repairPass) repairServicePorts(ctx context.Context, svc *corev1.Service) error {
	r := p.s.cfg.NodePortRange
	var errs []error
	for _, port := range core.ServiceNodePorts(svc) {
		if int(port) < r.Base || int(port) > r.Max {
			p.s.repairEvent(ctx, portRepairController, svc, "PortOutOfRange", "PortAllocation",
				fmt.Sprintf("Port %d is not within the port range %d-%d; please recreate service", port, r.Base, r.Max))
			continue
		}
		rec, recorded := p.ports[port]
		switch {
		case recorded && rec.heldBy(svc):
		case recorded && p.holdsPort(rec, port):
			p.s.repairEvent(ctx, portRepairController, svc, "PortAlreadyAllocated", "PortAllocation",
				fmt.Sprintf("Port %d was assigned to multiple services; please recreate service", port))
		default:
			p.s.repairEvent(ctx, portRepairController, svc, "PortNotAllocated", "PortAllocation",
				fmt.Sprintf("Port %d is not allocated; repairing", port))
			errs = append(errs, p.recordPort(ctx, port, svc))
		}
	}
	return errors.Join(errs...)
}

// holdsPort reports whether rec's Service exists and holds port.
func (p *repairPass) holdsPort(rec nodePortRecord, port int32) bool {
	svc := p.services[rec.Namespace+"/"+rec.Name]
	return svc != nil && rec.heldBy(svc) && containsPort(core.ServiceNodePorts(svc), port)
}

// recordPort gives port to svc: a new record, or one replacing a record
// whose Service is gone or has let go of the port.
func (p *repairPass) recordPort(ctx context.Context, port int32, svc *corev1.Service) error {
	rec := nodePortRecord{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, Allocated: p.now}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	var rev uint64
	if old, ok := p.portRevs[port]; ok {
		rev, err = p.s.cfg.Store.Update(ctx, nodePortKey(port), data, old)
	} else {
		rev, err = p.s.cfg.Store.Create(ctx, nodePortKey(port), data)
	}
	switch {
	case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		return nil // changed in the meantime; the next pass looks again
	case err != nil:
		return fmt.Errorf("record node port %d: %w", port, err)
	}
	// Services later in this pass see it held.
	p.ports[port], p.portRevs[port] = rec, rev
	return nil
}

// freeLeakedPort deletes a record no Service holds, once it is older than
// the grace period.
func (p *repairPass) freeLeakedPort(ctx context.Context, port int32) error {
	rec, ok := p.ports[port]
	if !ok || p.holdsPort(rec, port) || p.now.Sub(rec.Allocated) <= allocationGracePeriod {
		return nil
	}
	p.s.log.Info("node port appears to have leaked: cleaning up", "port", port, "service", rec.Namespace+"/"+rec.Name)
	_, err := p.s.cfg.Store.Delete(ctx, nodePortKey(port), p.portRevs[port])
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("free node port %d: %w", port, err)
	}
	return nil
}

// repairEvent records a Warning event about obj from one of the repair
// controllers, as their event recorders do. An event that cannot be
// written is logged: the repair itself goes on.
func (s *Server) repairEvent(ctx context.Context, controller string, obj runtime.Object, reason, action, msg string) {
	m, _ := metaOf(obj)
	ns := m.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	var kind, apiVersion string
	switch obj.(type) {
	case *corev1.Service:
		kind, apiVersion = "Service", "v1"
	case *networkingv1.IPAddress:
		kind, apiVersion = "IPAddress", "networking.k8s.io/v1"
	}
	now := time.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", m.GetName(), now.UnixNano()), Namespace: ns},
		InvolvedObject: corev1.ObjectReference{
			Kind: kind, APIVersion: apiVersion, Namespace: m.GetNamespace(), Name: m.GetName(),
			UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
		},
		Reason: reason, Message: msg, Type: corev1.EventTypeWarning, Action: action,
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: controller, ReportingInstance: controller,
		Source: corev1.EventSource{Component: controller},
	}
	res := s.reg.byGVR[gvr("", "v1", "events")]
	ev.GetObjectKind().SetGroupVersionKind(res.gvk())
	if _, err := s.createObject(ctx, s.newWriteCtx(res, false), ev, controller, false); err != nil {
		s.log.Warn("service repair event not recorded", "reason", reason, "message", msg, "err", err)
	}
	s.log.Info("service allocation repair", "reason", reason, "message", msg)
}
