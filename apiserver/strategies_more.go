package apiserver

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Validation for the kinds whose rules are short, with Kubernetes' messages.

// ---- ingresses

type ingressStrategy struct{ registry.GenerationStrategy }

func (ingressStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	ing := obj.(*networkingv1.Ingress)
	p := field.NewPath("spec")
	var errs field.ErrorList
	if ing.Spec.DefaultBackend == nil && len(ing.Spec.Rules) == 0 {
		errs = append(errs, field.Invalid(p, ing.Spec, "either `defaultBackend` or `rules` must be specified"))
	}
	if b := ing.Spec.DefaultBackend; b != nil {
		errs = append(errs, validateIngressBackend(b, p.Child("defaultBackend"))...)
	}
	for i, r := range ing.Spec.Rules {
		rp := p.Child("rules").Index(i)
		if r.Host != "" {
			host := strings.TrimPrefix(r.Host, "*.")
			for _, msg := range validation.IsDNS1123Subdomain(host) {
				errs = append(errs, field.Invalid(rp.Child("host"), r.Host, msg))
			}
			if _, err := netip.ParseAddr(r.Host); err == nil {
				errs = append(errs, field.Invalid(rp.Child("host"), r.Host, "must be a DNS name, not an IP address"))
			}
		}
		if r.HTTP == nil {
			continue
		}
		if len(r.HTTP.Paths) == 0 {
			errs = append(errs, field.Required(rp.Child("http", "paths"), ""))
		}
		for j, path := range r.HTTP.Paths {
			pp := rp.Child("http", "paths").Index(j)
			switch {
			case path.PathType == nil:
				errs = append(errs, field.Required(pp.Child("pathType"), "pathType must be specified"))
			case *path.PathType == networkingv1.PathTypeExact || *path.PathType == networkingv1.PathTypePrefix:
				if !strings.HasPrefix(path.Path, "/") {
					errs = append(errs, field.Invalid(pp.Child("path"), path.Path, "must be an absolute path"))
				}
			case *path.PathType != networkingv1.PathTypeImplementationSpecific:
				errs = append(errs, field.NotSupported(pp.Child("pathType"), *path.PathType, []string{"Exact", "ImplementationSpecific", "Prefix"}))
			}
			errs = append(errs, validateIngressBackend(&path.Backend, pp.Child("backend"))...)
		}
	}
	return errs
}

func (st ingressStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return st.Validate(w, obj)
}

func validateIngressBackend(b *networkingv1.IngressBackend, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case b.Service != nil && b.Resource != nil:
		errs = append(errs, field.Invalid(p, "", "cannot set both resource and service backends"))
	case b.Service != nil:
		sp := p.Child("service")
		if b.Service.Name == "" {
			errs = append(errs, field.Required(sp.Child("name"), ""))
		} else {
			for _, msg := range validation.IsDNS1035Label(b.Service.Name) {
				errs = append(errs, field.Invalid(sp.Child("name"), b.Service.Name, msg))
			}
		}
		port := b.Service.Port
		switch {
		case port.Name != "" && port.Number != 0:
			errs = append(errs, field.Invalid(sp.Child("port"), port, "cannot specify both port name and port number"))
		case port.Name != "":
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(sp.Child("port", "name"), port.Name, msg))
			}
		default:
			for _, msg := range validation.IsValidPortNum(int(port.Number)) {
				errs = append(errs, field.Invalid(sp.Child("port", "number"), port.Number, msg))
			}
		}
	case b.Resource == nil:
		errs = append(errs, field.Invalid(p, "", "resource or service backend is required"))
	}
	return errs
}

// ---- network policies

type networkPolicyStrategy struct{ registry.GenerationStrategy }

func (networkPolicyStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	np := obj.(*networkingv1.NetworkPolicy)
	p := field.NewPath("spec")
	errs := validateLabelSelector(&np.Spec.PodSelector, p.Child("podSelector"))
	check := func(ports []networkingv1.NetworkPolicyPort, peers []networkingv1.NetworkPolicyPeer, rp *field.Path, peerName string) {
		for i, port := range ports {
			pp := rp.Child("ports").Index(i)
			if port.Protocol != nil {
				switch *port.Protocol {
				case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
				default:
					errs = append(errs, field.NotSupported(pp.Child("protocol"), *port.Protocol, []string{"SCTP", "TCP", "UDP"}))
				}
			}
			switch {
			case port.Port != nil && port.Port.Type == intstr.Int:
				for _, msg := range validation.IsValidPortNum(port.Port.IntValue()) {
					errs = append(errs, field.Invalid(pp.Child("port"), port.Port.IntValue(), msg))
				}
				if port.EndPort != nil {
					if *port.EndPort < port.Port.IntVal {
						errs = append(errs, field.Invalid(pp.Child("endPort"), *port.EndPort, "must be greater than or equal to `port`"))
					}
					for _, msg := range validation.IsValidPortNum(int(*port.EndPort)) {
						errs = append(errs, field.Invalid(pp.Child("endPort"), *port.EndPort, msg))
					}
				}
			case port.Port != nil:
				for _, msg := range validation.IsValidPortName(port.Port.StrVal) {
					errs = append(errs, field.Invalid(pp.Child("port"), port.Port.StrVal, msg))
				}
				if port.EndPort != nil {
					errs = append(errs, field.Invalid(pp.Child("endPort"), *port.EndPort, "may not be specified when `port` is non-numeric"))
				}
			case port.EndPort != nil:
				errs = append(errs, field.Invalid(pp.Child("endPort"), *port.EndPort, "may not be specified when `port` is not specified"))
			}
		}
		for i, peer := range peers {
			pp := rp.Child(peerName).Index(i)
			if peer.PodSelector != nil {
				errs = append(errs, validateLabelSelector(peer.PodSelector, pp.Child("podSelector"))...)
			}
			if peer.NamespaceSelector != nil {
				errs = append(errs, validateLabelSelector(peer.NamespaceSelector, pp.Child("namespaceSelector"))...)
			}
			if b := peer.IPBlock; b != nil {
				if peer.PodSelector != nil || peer.NamespaceSelector != nil {
					errs = append(errs, field.Forbidden(pp, "may not specify more than 1 peer type"))
				}
				cidr, err := netip.ParsePrefix(b.CIDR)
				if err != nil {
					errs = append(errs, field.Invalid(pp.Child("ipBlock", "cidr"), b.CIDR, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"))
					continue
				}
				for j, ex := range b.Except {
					e, err := netip.ParsePrefix(ex)
					if err != nil || !cidr.Contains(e.Addr()) || e.Bits() <= cidr.Bits() {
						errs = append(errs, field.Invalid(pp.Child("ipBlock", "except").Index(j), ex, "must be a strict subset of `cidr`"))
					}
				}
			}
		}
	}
	for i, r := range np.Spec.Ingress {
		check(r.Ports, r.From, p.Child("ingress").Index(i), "from")
	}
	for i, r := range np.Spec.Egress {
		check(r.Ports, r.To, p.Child("egress").Index(i), "to")
	}
	for i, t := range np.Spec.PolicyTypes {
		if t != networkingv1.PolicyTypeIngress && t != networkingv1.PolicyTypeEgress {
			errs = append(errs, field.NotSupported(p.Child("policyTypes").Index(i), t, []string{"Egress", "Ingress"}))
		}
	}
	return errs
}

func (st networkPolicyStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return st.Validate(w, obj)
}

func validateLabelSelector(sel *metav1.LabelSelector, p *field.Path) field.ErrorList {
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return field.ErrorList{field.Invalid(p, sel, err.Error())}
	}
	return nil
}
