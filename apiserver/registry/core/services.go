package core

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// serviceStrategy allocates cluster IPs and node ports and validates
// Services as kube-apiserver does.
type serviceStrategy struct{ registry.DefaultStrategy }

func (serviceStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	svc := obj.(*corev1.Service)
	svc.Status = corev1.ServiceStatus{}
	// clusterIP and clusterIPs[0] are one field, whichever the client set.
	if len(svc.Spec.ClusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	} else if svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) > 0 {
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	}
	errs := validateServiceSpec(w, svc)
	if len(errs) == 0 {
		errs = initIPFamilies(w, svc, nil)
	}
	if len(errs) > 0 {
		return w.Invalid(svc.Name, errs)
	}
	return allocateService(context.Background(), w, svc, nil)
}

func (serviceStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	svc, o := obj.(*corev1.Service), old.(*corev1.Service)
	svc.Status = o.Status
	// What the server allocated stays when the client leaves it out, as
	// kube-apiserver's patchAllocatedValues does.
	if svc.Spec.ClusterIP == "" && svc.Spec.Type != corev1.ServiceTypeExternalName {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = o.Spec.ClusterIP, o.Spec.ClusterIPs
	}
	// A client that sets only clusterIP (an old one) means clusterIPs[0]
	// to follow it, as kube-apiserver's normalizeClusterIPs reads it.
	switch {
	case len(svc.Spec.ClusterIPs) == 0 && svc.Spec.ClusterIP == o.Spec.ClusterIP:
		svc.Spec.ClusterIPs = o.Spec.ClusterIPs
	case svc.Spec.ClusterIP != o.Spec.ClusterIP && (len(svc.Spec.ClusterIPs) == 0 || slices.Equal(svc.Spec.ClusterIPs, o.Spec.ClusterIPs)):
		svc.Spec.ClusterIPs = nil
		if svc.Spec.ClusterIP != "" {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
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
	// The health check port follows its need: kept while the Service
	// still needs it, dropped with the need unless the client changed it.
	switch hc := &svc.Spec.HealthCheckNodePort; {
	case *hc == 0 && needsHealthCheck(svc) && needsHealthCheck(o):
		*hc = o.Spec.HealthCheckNodePort
	case *hc == o.Spec.HealthCheckNodePort && !needsHealthCheck(svc) && needsHealthCheck(o):
		*hc = 0
	}
	errs := validateServiceSpec(w, svc)
	if len(errs) == 0 {
		errs = initIPFamilies(w, svc, o)
	}
	if len(errs) > 0 {
		return w.Invalid(svc.Name, errs)
	}
	return allocateService(context.Background(), w, svc, o)
}

func (serviceStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	svc, o := obj.(*corev1.Service), old.(*corev1.Service)
	var errs field.ErrorList
	if o.Spec.ClusterIP != "" && svc.Spec.Type != corev1.ServiceTypeExternalName && o.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != o.Spec.ClusterIP {
		errs = append(errs, field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIP, "may not change once set"))
	}
	return append(errs, validateFamiliesUpdate(svc, o)...)
}

// validateFamiliesUpdate: a secondary cluster IP may be added or
// released, never changed, and the primary family never changes, as
// kube-apiserver's validateUpgradeDowngradeClusterIPs and
// validateUpgradeDowngradeIPFamilies.
func validateFamiliesUpdate(svc, o *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || o.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	headless := func(s *corev1.Service) bool { return s.Spec.ClusterIP == corev1.ClusterIPNone }
	p := field.NewPath("spec")
	var errs field.ErrorList
	ips, oips := svc.Spec.ClusterIPs, o.Spec.ClusterIPs
	if !(headless(svc) && headless(o)) && len(ips) == 2 && len(oips) == 2 && ips[1] != oips[1] {
		errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(1), ips, "may not change once set"))
	}
	if headless(svc) || headless(o) {
		return errs
	}
	fams, ofams := svc.Spec.IPFamilies, o.Spec.IPFamilies
	switch {
	case len(fams) == len(ofams):
		for i := range ofams {
			if fams[i] != ofams[i] {
				errs = append(errs, field.Invalid(p.Child("ipFamilies").Index(0), fams, "may not change once set"))
			}
		}
	case len(fams) > 0 && len(ofams) > 0 && fams[0] != ofams[0]:
		errs = append(errs, field.Invalid(p.Child("ipFamilies").Index(0), ips, "may not change once set"))
	}
	return errs
}

func needsNodePorts(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeNodePort ||
		(s.Spec.Type == corev1.ServiceTypeLoadBalancer && (s.Spec.AllocateLoadBalancerNodePorts == nil || *s.Spec.AllocateLoadBalancerNodePorts))
}

// needsHealthCheck: a LoadBalancer that keeps traffic on the node gets a
// node port for the load balancer's health checks.
func needsHealthCheck(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func validateServiceSpec(w *registry.WriteCtx, svc *corev1.Service) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	if hc := svc.Spec.HealthCheckNodePort; hc != 0 {
		r := w.Env.NodePortRange
		if !needsHealthCheck(svc) {
			errs = append(errs, field.Forbidden(p.Child("healthCheckNodePort"), "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		} else if int(hc) < r.Base || int(hc) > r.Max {
			errs = append(errs, field.Invalid(p.Child("healthCheckNodePort"), hc, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", r.Base, r.Max)))
		}
	}
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
	errs = append(errs, validateSessionAffinity(svc)...)
	if svc.Spec.Type == corev1.ServiceTypeNodePort && svc.Spec.ClusterIP == corev1.ClusterIPNone {
		errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), svc.Spec.ClusterIP, "may not be set to 'None' for NodePort services"))
	}
	seen := map[string]bool{}
	names := map[string]bool{}
	nodePorts := map[corev1.ServicePort]bool{}
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
			r := w.Env.NodePortRange
			np := corev1.ServicePort{NodePort: port.NodePort, Protocol: port.Protocol}
			if nodePorts[np] {
				errs = append(errs, field.Duplicate(pp.Child("nodePort"), port.NodePort))
			}
			nodePorts[np] = true
			if svc.Spec.Type == corev1.ServiceTypeClusterIP {
				errs = append(errs, field.Forbidden(pp.Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
			} else if int(port.NodePort) < r.Base || int(port.NodePort) > r.Max {
				errs = append(errs, field.Invalid(pp.Child("nodePort"), port.NodePort, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", r.Base, r.Max)))
			}
		}
		if port.TargetPort.IntValue() == 0 && port.TargetPort.StrVal == "" {
			errs = append(errs, field.Required(pp.Child("targetPort"), ""))
		}
	}
	errs = append(errs, validateClusterIPs(w, svc)...)
	return errs
}

// maxClientIPServiceAffinitySeconds caps ClientIP affinity at a day, as
// Kubernetes does.
const maxClientIPServiceAffinitySeconds = 86400

func validateSessionAffinity(svc *corev1.Service) field.ErrorList {
	p := field.NewPath("spec")
	cfg := svc.Spec.SessionAffinityConfig
	switch svc.Spec.SessionAffinity {
	case corev1.ServiceAffinityNone:
		if cfg != nil {
			return field.ErrorList{field.Invalid(p.Child("sessionAffinityConfig"), cfg, "must not be set when session affinity is None")}
		}
	case corev1.ServiceAffinityClientIP:
		t := cfg.ClientIP.TimeoutSeconds // defaulted
		if *t <= 0 || *t > maxClientIPServiceAffinitySeconds {
			return field.ErrorList{field.Invalid(p.Child("sessionAffinityConfig", "clientIP", "timeoutSeconds"), *t, fmt.Sprintf("must be greater than 0 and less than %d", maxClientIPServiceAffinitySeconds))}
		}
	default:
		return field.ErrorList{field.NotSupported(p.Child("sessionAffinity"), svc.Spec.SessionAffinity, []string{"ClientIP", "None"})}
	}
	return nil
}

// otherFamily is the family that is not f.
func otherFamily(f corev1.IPFamily) corev1.IPFamily {
	if f == corev1.IPv4Protocol {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// validateClusterIPs checks clusterIP, clusterIPs, ipFamilies and
// ipFamilyPolicy against each other, as kube-apiserver's
// ValidateServiceClusterIPsRelatedFields does, and the requested IPs
// against the service ranges.
func validateClusterIPs(w *registry.WriteCtx, svc *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	p := field.NewPath("spec")
	ipsPath := p.Child("clusterIPs")
	var errs field.ErrorList
	ips := svc.Spec.ClusterIPs
	if svc.Spec.ClusterIP != "" && len(ips) > 0 && ips[0] != svc.Spec.ClusterIP {
		errs = append(errs, field.Invalid(ipsPath, ips, "first value must match `clusterIP`"))
	}
	seen := map[corev1.IPFamily]bool{}
	for i, f := range svc.Spec.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			errs = append(errs, field.NotSupported(p.Child("ipFamilies").Index(i), f, []string{"IPv4", "IPv6"}))
		}
		if seen[f] {
			errs = append(errs, field.Duplicate(p.Child("ipFamilies").Index(i), f))
		}
		seen[f] = true
	}
	if pol := svc.Spec.IPFamilyPolicy; pol != nil {
		switch *pol {
		case corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack:
		default:
			errs = append(errs, field.NotSupported(p.Child("ipFamilyPolicy"), *pol, []string{"PreferDualStack", "RequireDualStack", "SingleStack"}))
		}
	}
	bad := false
	var addrs []netip.Addr
	for i, ip := range ips {
		if i == 0 && ip == corev1.ClusterIPNone {
			if len(ips) > 1 {
				bad = true
				errs = append(errs, field.Invalid(ipsPath, ips, "'None' must be the first and only value"))
			}
			continue
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			bad = true
			errs = append(errs, field.Invalid(ipsPath.Index(i), ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
			continue
		}
		addrs = append(addrs, a)
	}
	if len(ips) > 2 {
		errs = append(errs, field.Invalid(ipsPath, ips, "may only hold up to 2 values"))
	}
	if bad {
		return errs
	}
	if len(addrs) == 2 && addrs[0].Is4() == addrs[1].Is4() {
		return append(errs, field.Invalid(ipsPath, ips, "may specify no more than one IP for each IP family"))
	}
	for i, a := range addrs {
		if i < len(svc.Spec.IPFamilies) && svc.Spec.IPFamilies[i] != ipFamilyOf(a) && (svc.Spec.IPFamilies[i] == corev1.IPv4Protocol || svc.Spec.IPFamilies[i] == corev1.IPv6Protocol) {
			errs = append(errs, field.Invalid(ipsPath.Index(i), ips[i], fmt.Sprintf("expected an %s value as indicated by `ipFamilies[%d]`", svc.Spec.IPFamilies[i], i)))
			continue
		}
		// An IP of a family the cluster lacks is initIPFamilies' to refuse.
		if r, ok := w.Env.ServiceCIDRFor(ipFamilyOf(a)); ok && !r.Contains(a) {
			errs = append(errs, field.Invalid(ipsPath.Index(i), ips[i], fmt.Sprintf("failed to allocate IP %s: the provided network does not match the current range", ips[i])))
		}
	}
	return errs
}

// preferDualStackUnchanged: an update that leaves a PreferDualStack
// Service's type, cluster IPs and families as they were keeps them, even
// if the cluster has gained a family since, as kube-apiserver's
// isMatchingPreferDualStackClusterIPFields.
func preferDualStackUnchanged(svc, old *corev1.Service) bool {
	prefer := func(s *corev1.Service) bool {
		return s.Spec.IPFamilyPolicy != nil && *s.Spec.IPFamilyPolicy == corev1.IPFamilyPolicyPreferDualStack
	}
	return old != nil && svc.Spec.Type == old.Spec.Type && svc.Spec.Type != corev1.ServiceTypeExternalName &&
		prefer(svc) && prefer(old) &&
		slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) && slices.Equal(svc.Spec.IPFamilies, old.Spec.IPFamilies)
}

// initIPFamilies defaults ipFamilyPolicy and ipFamilies and refuses what
// the cluster cannot give, as kube-apiserver's initIPFamilyFields: no
// policy is SingleStack (RequireDualStack for a headless Service without
// selector); no families is the primary service range's family, with the
// other appended when the policy wants two and the cluster has them. On
// an update, SingleStack with the clusterIPs and families left as they
// were drops the secondary ones (the downgrade).
func initIPFamilies(w *registry.WriteCtx, svc, old *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || preferDualStackUnchanged(svc, old) {
		return nil
	}
	family := ipFamilyOf(w.Env.ServiceCIDRs[0].Addr())
	_, dualStack := w.Env.ServiceCIDRFor(otherFamily(family))
	headlessNoSelector := svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0
	if svc.Spec.IPFamilyPolicy == nil {
		switch {
		case old != nil && old.Spec.IPFamilyPolicy != nil:
			svc.Spec.IPFamilyPolicy = old.Spec.IPFamilyPolicy
		case headlessNoSelector:
			svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack)
		default:
			svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicySingleStack)
		}
	}
	p := field.NewPath("spec")
	policy := *svc.Spec.IPFamilyPolicy
	var errs field.ErrorList
	if old != nil {
		if policy == corev1.IPFamilyPolicySingleStack {
			// Asking for one family with the rest as it was is a
			// downgrade; clusterIPs[0] is immutable, so it stays.
			if slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) && len(svc.Spec.ClusterIPs) > 1 {
				svc.Spec.ClusterIPs = svc.Spec.ClusterIPs[:1]
			}
			if slices.Equal(svc.Spec.IPFamilies, old.Spec.IPFamilies) && len(svc.Spec.IPFamilies) > 1 {
				svc.Spec.IPFamilies = svc.Spec.IPFamilies[:1]
			}
		} else {
			if len(svc.Spec.ClusterIPs) < len(old.Spec.ClusterIPs) && len(svc.Spec.ClusterIPs) > 0 {
				errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), policy, "must be 'SingleStack' to release the secondary cluster IP"))
			}
			if len(svc.Spec.IPFamilies) < len(old.Spec.IPFamilies) && len(svc.Spec.IPFamilies) > 0 {
				errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), policy, "must be 'SingleStack' to release the secondary IP family"))
			}
		}
	}
	if policy == corev1.IPFamilyPolicySingleStack {
		if len(svc.Spec.ClusterIPs) == 2 {
			errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), policy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
		}
		if len(svc.Spec.IPFamilies) == 2 {
			errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), policy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"))
		}
	}
	// Families follow the IPs asked for.
	for i, ip := range svc.Spec.ClusterIPs {
		if ip == corev1.ClusterIPNone {
			break
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || i < len(svc.Spec.IPFamilies) {
			continue
		}
		if _, ok := w.Env.ServiceCIDRFor(ipFamilyOf(a)); !ok {
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(i), svc.Spec.ClusterIPs, fmt.Sprintf("%s is not configured on this cluster", ipFamilyOf(a))))
		} else {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, ipFamilyOf(a))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if headlessNoSelector {
		// A headless Service without selector may name families the
		// cluster lacks: its endpoints are the user's.
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = []corev1.IPFamily{family}
		}
		if len(svc.Spec.IPFamilies) == 1 && policy != corev1.IPFamilyPolicySingleStack {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, otherFamily(svc.Spec.IPFamilies[0]))
		}
		return nil
	}
	if policy == corev1.IPFamilyPolicyRequireDualStack && !dualStack {
		errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), policy, "this cluster is not configured for dual-stack services"))
	}
	for i, f := range svc.Spec.IPFamilies {
		if _, ok := w.Env.ServiceCIDRFor(f); !ok {
			errs = append(errs, field.Invalid(p.Child("ipFamilies").Index(i), f, "not configured on this cluster"))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if len(svc.Spec.IPFamilies) == 0 {
		svc.Spec.IPFamilies = []corev1.IPFamily{family}
	}
	if policy != corev1.IPFamilyPolicySingleStack && len(svc.Spec.IPFamilies) == 1 && dualStack {
		svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, otherFamily(svc.Spec.IPFamilies[0]))
	}
	return nil
}

// allocateClusterIPs gives svc one cluster IP per family in ipFamilies:
// the one asked for in clusterIPs (or held by the old Service), else a
// free one of that family's range. What it takes is given back if the
// write fails.
func allocateClusterIPs(ctx context.Context, w *registry.WriteCtx, svc *corev1.Service, oldIPs []netip.Addr) error {
	s := w.Env.Services
	out := make([]string, 0, len(svc.Spec.IPFamilies))
	for i, fam := range svc.Spec.IPFamilies {
		want := ""
		if i < len(svc.Spec.ClusterIPs) {
			want = svc.Spec.ClusterIPs[i]
		}
		ip, err := netip.ParseAddr(want)
		switch {
		case want == "":
			if ip, err = s.TakeNextIP(ctx, svc, fam, w.DryRun); err != nil {
				return apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP: %w", err))
			}
			w.OnFailure(func() error { return s.ReleaseIP(ctx, ip, svc.Namespace, svc.Name) })
		case err != nil || slices.Contains(oldIPs, ip):
			// Validation has refused a malformed IP; a held one stays.
		default:
			if err := s.TakeIP(ctx, ip, svc, w.DryRun); err != nil {
				if errors.Is(err, registry.ErrIPAllocated) {
					return w.Invalid(svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), svc.Spec.ClusterIPs, fmt.Sprintf("failed to allocate IP %s: %v", ip, err))})
				}
				return apierrors.NewInternalError(err)
			}
			w.OnFailure(func() error { return s.ReleaseIP(ctx, ip, svc.Namespace, svc.Name) })
		}
		out = append(out, ip.String())
	}
	svc.Spec.ClusterIPs = out
	svc.Spec.ClusterIP = out[0]
	return nil
}

// allocateService takes in the store the cluster IP and node ports svc
// needs and old (nil on create) does not hold, and arranges with w that
// they are given back if the write fails and that what old held and svc
// no longer does is given back once the write is stored.
func allocateService(ctx context.Context, w *registry.WriteCtx, svc, old *corev1.Service) error {
	s := w.Env.Services
	ctx = context.WithoutCancel(ctx)
	var oldIPs []netip.Addr
	var oldPorts []int32
	if old != nil {
		oldIPs, oldPorts = ServiceIPs(old), ServiceNodePorts(old)
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
		svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = nil, nil
	} else if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		if err := allocateClusterIPs(ctx, w, svc, oldIPs); err != nil {
			return err
		}
	} else {
		// Headless: nothing to allocate.
		svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	}
	kept, err := allocateNodePorts(ctx, w, svc, oldPorts)
	if err != nil {
		return err
	}
	if old == nil {
		return nil
	}
	// What the stored Service no longer holds goes once it is stored.
	newIPs := ServiceIPs(svc)
	for _, ip := range oldIPs {
		if !slices.Contains(newIPs, ip) {
			w.OnSuccess(func() error { return s.ReleaseIP(ctx, ip, old.Namespace, old.Name) })
		}
	}
	for _, p := range oldPorts {
		if !slices.Contains(kept, p) {
			w.OnSuccess(func() error { return s.ReleaseNodePort(ctx, p, old) })
		}
	}
	return nil
}

// allocateNodePorts records the node ports svc asks for, then gives the
// ports that lack one a free port (a port number served over several
// protocols shares one node port, as upstream). It returns the node ports
// svc holds after the write.
func allocateNodePorts(ctx context.Context, w *registry.WriteCtx, svc *corev1.Service, oldPorts []int32) ([]int32, error) {
	s := w.Env.Services
	if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
		return nil, nil
	}
	var held []int32
	for i, sp := range svc.Spec.Ports {
		if sp.NodePort == 0 || slices.Contains(held, sp.NodePort) {
			continue
		}
		if !slices.Contains(oldPorts, sp.NodePort) {
			if err := s.RecordNodePort(ctx, sp.NodePort, svc, w.DryRun); err != nil {
				if errors.Is(err, registry.ErrPortAllocated) {
					return nil, w.Invalid(svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "ports").Index(i).Child("nodePort"), sp.NodePort, err.Error())})
				}
				return nil, apierrors.NewInternalError(err)
			}
			p := sp.NodePort
			w.OnFailure(func() error { return s.ReleaseNodePort(ctx, p, svc) })
		}
		held = append(held, sp.NodePort)
	}
	if needsNodePorts(svc) {
		var err error
		if held, err = allocateMissingNodePorts(ctx, w, svc, held); err != nil {
			return nil, err
		}
	}
	if !needsHealthCheck(svc) {
		return held, nil
	}
	hc := &svc.Spec.HealthCheckNodePort
	switch {
	case *hc == 0:
		p, err := s.TakeNextNodePort(ctx, svc, held, w.DryRun)
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("failed to allocate a HealthCheck NodePort %d: %w", p, err))
		}
		w.OnFailure(func() error { return s.ReleaseNodePort(ctx, p, svc) })
		*hc = p
	case !slices.Contains(oldPorts, *hc):
		if err := s.RecordNodePort(ctx, *hc, svc, w.DryRun); err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("failed to allocate requested HealthCheck NodePort %d: %w", *hc, err))
		}
		p := *hc
		w.OnFailure(func() error { return s.ReleaseNodePort(ctx, p, svc) })
	}
	return append(held, *hc), nil
}

// allocateMissingNodePorts gives each port without a node port one,
// returning held with the ports it took.
func allocateMissingNodePorts(ctx context.Context, w *registry.WriteCtx, svc *corev1.Service, held []int32) ([]int32, error) {
	s := w.Env.Services
	byPort := map[int32]int32{}
	for _, sp := range svc.Spec.Ports {
		if sp.NodePort != 0 {
			byPort[sp.Port] = sp.NodePort
		}
	}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		if sp.NodePort != 0 {
			continue
		}
		if np, ok := byPort[sp.Port]; ok {
			sp.NodePort = np
			continue
		}
		p, err := s.TakeNextNodePort(ctx, svc, held, w.DryRun)
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: %w", err))
		}
		w.OnFailure(func() error { return s.ReleaseNodePort(ctx, p, svc) })
		sp.NodePort, byPort[sp.Port] = p, p
		held = append(held, p)
	}
	return held, nil
}

func ipFamilyOf(ip netip.Addr) corev1.IPFamily {
	if ip.Is6() {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// ServiceIPs are the cluster IPs a Service holds ("None" and "" hold none).
func ServiceIPs(svc *corev1.Service) []netip.Addr {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	var out []netip.Addr
	for _, ip := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
		if a, err := netip.ParseAddr(ip); err == nil && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// ServiceNodePorts are the node ports a Service holds, its health check
// port included: one port number may serve several protocols of one
// Service, as upstream allows.
func ServiceNodePorts(svc *corev1.Service) []int32 {
	var out []int32
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 && !slices.Contains(out, p.NodePort) {
			out = append(out, p.NodePort)
		}
	}
	if hc := svc.Spec.HealthCheckNodePort; hc != 0 && !slices.Contains(out, hc) {
		out = append(out, hc)
	}
	return out
}

// DefaultServiceOnRead fills in, on a Service read from the store, the
// dual-stack fields one written before them lacks, as kube-apiserver's
// defaultOnRead: clusterIPs from clusterIP, ipFamilies from the cluster
// IPs (a headless Service: the primary family, and both without a
// selector) and the matching ipFamilyPolicy.
func DefaultServiceOnRead(svc *corev1.Service, primary corev1.IPFamily) {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	if svc.Spec.ClusterIP != "" && len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	}
	if len(svc.Spec.IPFamilies) > 0 || svc.Spec.ClusterIP == "" {
		return
	}
	switch {
	case svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0:
		svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack)
		svc.Spec.IPFamilies = []corev1.IPFamily{primary, otherFamily(primary)}
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicySingleStack)
		svc.Spec.IPFamilies = []corev1.IPFamily{primary}
	default:
		for _, ip := range svc.Spec.ClusterIPs {
			a, _ := netip.ParseAddr(ip)
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, ipFamilyOf(a))
		}
		svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicySingleStack)
		if len(svc.Spec.IPFamilies) == 2 {
			svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack)
		}
	}
}
