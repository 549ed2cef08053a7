package apiserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// serviceStrategy allocates cluster IPs and node ports and validates
// Services as kube-apiserver does.
type serviceStrategy struct{ defaultStrategy }

func (serviceStrategy) prepareForCreate(w *writeCtx, obj runtime.Object) error {
	svc := obj.(*corev1.Service)
	svc.Status = corev1.ServiceStatus{}
	if errs := validateServiceSpec(w, svc); len(errs) > 0 {
		return invalid(w.res, svc.Name, errs)
	}
	return w.s.allocateService(context.Background(), svc, nil, w.dryRun)
}

func (serviceStrategy) prepareForUpdate(w *writeCtx, obj, old runtime.Object) error {
	svc, o := obj.(*corev1.Service), old.(*corev1.Service)
	svc.Status = o.Status
	// What the server allocated stays when the client leaves it out, as
	// kube-apiserver's patchAllocatedValues does.
	if svc.Spec.ClusterIP == "" && svc.Spec.Type != corev1.ServiceTypeExternalName {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = o.Spec.ClusterIP, o.Spec.ClusterIPs
	}
	if len(svc.Spec.ClusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		svc.Spec.ClusterIPs = o.Spec.ClusterIPs
	}
	if svc.Spec.IPFamilyPolicy == nil {
		svc.Spec.IPFamilyPolicy = o.Spec.IPFamilyPolicy
	}
	if len(svc.Spec.IPFamilies) == 0 {
		svc.Spec.IPFamilies = o.Spec.IPFamilies
	}
	if needsNodePorts(svc) && needsNodePorts(o) {
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].NodePort != 0 {
				continue
			}
			for _, op := range o.Spec.Ports {
				if op.Port == svc.Spec.Ports[i].Port && op.Protocol == svc.Spec.Ports[i].Protocol {
					svc.Spec.Ports[i].NodePort = op.NodePort
				}
			}
		}
	}
	if errs := validateServiceSpec(w, svc); len(errs) > 0 {
		return invalid(w.res, svc.Name, errs)
	}
	return w.s.allocateService(context.Background(), svc, o, w.dryRun)
}

func (serviceStrategy) validateUpdate(w *writeCtx, obj, old runtime.Object) field.ErrorList {
	svc, o := obj.(*corev1.Service), old.(*corev1.Service)
	var errs field.ErrorList
	if o.Spec.ClusterIP != "" && svc.Spec.Type != corev1.ServiceTypeExternalName && o.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != o.Spec.ClusterIP {
		errs = append(errs, field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIP, "may not change once set"))
	}
	return errs
}

func needsNodePorts(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeNodePort ||
		(s.Spec.Type == corev1.ServiceTypeLoadBalancer && (s.Spec.AllocateLoadBalancerNodePorts == nil || *s.Spec.AllocateLoadBalancerNodePorts))
}

func validateServiceSpec(w *writeCtx, svc *corev1.Service) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		if len(svc.Spec.Ports) == 0 && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			errs = append(errs, field.Required(p.Child("ports"), ""))
		}
	case corev1.ServiceTypeExternalName:
		if svc.Spec.ExternalName == "" {
			errs = append(errs, field.Required(p.Child("externalName"), ""))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), svc.Spec.Type, []string{"ClusterIP", "ExternalName", "LoadBalancer", "NodePort"}))
	}
	if svc.Spec.Type == corev1.ServiceTypeNodePort && svc.Spec.ClusterIP == corev1.ClusterIPNone {
		errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), svc.Spec.ClusterIP, "may not be set to 'None' for NodePort services"))
	}
	seen := map[string]bool{}
	names := map[string]bool{}
	for i, port := range svc.Spec.Ports {
		pp := p.Child("ports").Index(i)
		for _, msg := range validation.IsValidPortNum(int(port.Port)) {
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, msg))
		}
		if len(svc.Spec.Ports) > 1 && port.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), ""))
		}
		if port.Name != "" {
			for _, msg := range validation.IsDNS1123Label(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if names[port.Name] {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			names[port.Name] = true
		}
		switch port.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"SCTP", "TCP", "UDP"}))
		}
		key := fmt.Sprintf("%d/%s", port.Port, port.Protocol)
		if seen[key] {
			errs = append(errs, field.Duplicate(pp, key))
		}
		seen[key] = true
		if port.NodePort != 0 {
			r := w.s.cfg.NodePortRange
			if !needsNodePorts(svc) {
				errs = append(errs, field.Forbidden(pp.Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
			} else if int(port.NodePort) < r.Base || int(port.NodePort) > r.Max {
				errs = append(errs, field.Invalid(pp.Child("nodePort"), port.NodePort, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", r.Base, r.Max)))
			}
		}
		if port.TargetPort.IntValue() == 0 && port.TargetPort.StrVal == "" {
			errs = append(errs, field.Required(pp.Child("targetPort"), ""))
		}
	}
	if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
		addr, err := netip.ParseAddr(ip)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
		case !w.s.cfg.ServiceCIDR.Contains(addr):
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), ip, fmt.Sprintf("failed to allocate IP %s: the provided network does not match the current range", ip)))
		}
	}
	return errs
}

// allocateService assigns the cluster IP and node ports a Service lacks,
// refusing taken ones. Allocation is serialised; what is taken is read
// from the stored Services, so a restart or another server sees the same.
func (s *Server) allocateService(ctx context.Context, svc, old *corev1.Service, dry bool) error {
	s.allocMu.Lock()
	defer s.allocMu.Unlock()
	res := s.reg.byGVR[gvr("", "v1", "services")]
	items, _, err := s.listObjects(ctx, res, "", listOptions{labels: labels.Everything(), fields: fields.Everything()})
	if err != nil {
		return err
	}
	usedIPs := map[netip.Addr]string{}
	usedPorts := map[int32]string{}
	for _, o := range items {
		other := o.(*corev1.Service)
		if other.Namespace == svc.Namespace && other.Name == svc.Name {
			continue
		}
		if a, err := netip.ParseAddr(other.Spec.ClusterIP); err == nil {
			usedIPs[a] = other.Namespace + "/" + other.Name
		}
		for _, p := range other.Spec.Ports {
			if p.NodePort != 0 {
				usedPorts[p.NodePort] = other.Namespace + "/" + other.Name
			}
		}
	}
	fp := field.NewPath("spec")
	if svc.Spec.Type != corev1.ServiceTypeExternalName {
		if svc.Spec.ClusterIP == "" {
			ip, err := pickIP(s.cfg.ServiceCIDR, usedIPs)
			if err != nil {
				return apierrors.NewInternalError(err)
			}
			svc.Spec.ClusterIP = ip.String()
		} else if a, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
			if _, taken := usedIPs[a]; taken {
				return invalid(s.reg.byGVR[gvr("", "v1", "services")], svc.Name, field.ErrorList{field.Invalid(fp.Child("clusterIPs").Index(0), svc.Spec.ClusterIP, "failed to allocate IP "+svc.Spec.ClusterIP+": provided IP is already allocated")})
			}
		}
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.IPFamilies) == 0 {
			if len(svc.Spec.IPFamilies) == 0 {
				svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
				if s.cfg.ServiceCIDR.Addr().Is6() {
					svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
				}
			}
		}
		if svc.Spec.IPFamilyPolicy == nil {
			svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicySingleStack)
		}
	} else {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	}
	if needsNodePorts(svc) {
		r := s.cfg.NodePortRange
		mine := map[int32]bool{}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if p.NodePort != 0 {
				if _, taken := usedPorts[p.NodePort]; taken || mine[p.NodePort] {
					return invalid(s.reg.byGVR[gvr("", "v1", "services")], svc.Name, field.ErrorList{field.Invalid(fp.Child("ports").Index(i).Child("nodePort"), p.NodePort, "provided port is already allocated")})
				}
				mine[p.NodePort] = true
				continue
			}
			n := r.Max - r.Base + 1
			start := rand.IntN(n)
			for k := 0; k < n; k++ {
				cand := int32(r.Base + (start+k)%n)
				if _, taken := usedPorts[cand]; !taken && !mine[cand] {
					p.NodePort, mine[cand] = cand, true
					break
				}
			}
			if p.NodePort == 0 {
				return apierrors.NewInternalError(fmt.Errorf("no free node port in %d-%d", r.Base, r.Max))
			}
		}
	} else if svc.Spec.Type == corev1.ServiceTypeClusterIP {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
	}
	return nil
}

// pickIP chooses a free address of cidr at random, skipping the network
// address, the first address (the kubernetes Service's, given only on
// request) and the broadcast address.
func pickIP(cidr netip.Prefix, used map[netip.Addr]string) (netip.Addr, error) {
	bits := cidr.Addr().BitLen() - cidr.Bits()
	if bits > 20 {
		bits = 20
	}
	size := 1 << bits
	start := rand.IntN(size)
	for k := 0; k < size; k++ {
		off := (start + k) % size
		if off < 2 || off == size-1 {
			continue
		}
		a := addOffset(cidr.Masked().Addr(), uint64(off))
		if _, taken := used[a]; !taken {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("service CIDR %s is full", cidr)
}

func addOffset(a netip.Addr, off uint64) netip.Addr {
	b := a.As16()
	lo := binary.BigEndian.Uint64(b[8:]) + off
	binary.BigEndian.PutUint64(b[8:], lo)
	out := netip.AddrFrom16(b)
	if a.Is4() {
		return out.Unmap()
	}
	return out
}
