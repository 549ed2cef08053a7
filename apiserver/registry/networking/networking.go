// Package networking holds the kinds of networking.k8s.io: their rules,
// defaults and table columns.
package networking

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("networking.k8s.io", "v1", "ingresses"), Kind: "Ingress", Namespaced: true, ShortNames: []string{"ing"}, Subresources: []string{"status"},
			Strategy: ingressStrategy{}, Printer: &ingressPrinter},
		{GVR: registry.GVR("networking.k8s.io", "v1", "ingressclasses"), Kind: "IngressClass", Printer: &ingressClassPrinter},
		{GVR: registry.GVR("networking.k8s.io", "v1", "ipaddresses"), Kind: "IPAddress", ShortNames: []string{"ip"}, Strategy: ipAddressStrategy{}, Printer: &ipAddressPrinter},
		{GVR: registry.GVR("networking.k8s.io", "v1", "networkpolicies"), Kind: "NetworkPolicy", Namespaced: true, ShortNames: []string{"netpol"},
			Strategy: networkPolicyStrategy{}, Defaulter: defaultNetworkPolicy, Printer: &networkPolicyPrinter},
		{GVR: registry.GVR("networking.k8s.io", "v1", "servicecidrs"), Kind: "ServiceCIDR", Subresources: []string{"status"}, Strategy: serviceCIDRStrategy{}, Printer: &serviceCIDRPrinter},
	}
}

// ipAddressStrategy holds the rules of IPAddress objects, the cluster IP
// allocator's records: the name is the address, the parent is fixed.
type ipAddressStrategy struct{ registry.DefaultStrategy }

func (ipAddressStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	a := obj.(*networkingv1.IPAddress)
	var errs field.ErrorList
	if ip, err := netip.ParseAddr(a.Name); err != nil || ip.String() != a.Name || ip.Zone() != "" {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), a.Name, "must be a canonical format IP address"))
	}
	p := field.NewPath("spec", "parentRef")
	switch r := a.Spec.ParentRef; {
	case r == nil:
		errs = append(errs, field.Required(p, ""))
	default:
		if r.Resource == "" {
			errs = append(errs, field.Required(p.Child("resource"), ""))
		}
		if r.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
	}
	return errs
}

func (st ipAddressStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	a, o := obj.(*networkingv1.IPAddress), old.(*networkingv1.IPAddress)
	if !apiequality.Semantic.DeepEqual(a.Spec.ParentRef, o.Spec.ParentRef) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "parentRef"), a.Spec.ParentRef, "field is immutable"))
	}
	return errs
}

// serviceCIDRStrategy holds the rules of ServiceCIDRs. bonsai allocates
// from --service-cidr only, which its "kubernetes" ServiceCIDR shows: other
// ServiceCIDRs are refused rather than accepted and never used.
type serviceCIDRStrategy struct{ registry.DefaultStrategy }

// defaultServiceCIDRName is the ServiceCIDR of --service-cidr, as
// kube-apiserver names it.
const DefaultServiceCIDRName = "kubernetes"

func (st serviceCIDRStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	c := obj.(*networkingv1.ServiceCIDR)
	if c.Name != DefaultServiceCIDRName {
		return apierrors.NewForbidden(w.GroupResource(), c.Name, errors.New("this server allocates Service cluster IPs from --service-cidr only; it serves no other ServiceCIDR"))
	}
	return st.DefaultStrategy.PrepareForCreate(w, obj)
}

func (serviceCIDRStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	c := obj.(*networkingv1.ServiceCIDR)
	p := field.NewPath("spec", "cidrs")
	var errs field.ErrorList
	switch n := len(c.Spec.CIDRs); {
	case n == 0:
		errs = append(errs, field.Required(p, ""))
	case n > 2:
		errs = append(errs, field.TooMany(p, n, 2))
	}
	var families []bool
	for i, s := range c.Spec.CIDRs {
		pr, err := netip.ParsePrefix(s)
		if err != nil || pr.Masked() != pr {
			errs = append(errs, field.Invalid(p.Index(i), s, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"))
			continue
		}
		families = append(families, pr.Addr().Is4())
	}
	if len(families) == 2 && families[0] == families[1] {
		errs = append(errs, field.Invalid(p, c.Spec.CIDRs, "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"))
	}
	return errs
}

func (st serviceCIDRStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	c, o := obj.(*networkingv1.ServiceCIDR), old.(*networkingv1.ServiceCIDR)
	// A single-stack range may gain its other family; nothing else moves.
	grows := len(o.Spec.CIDRs) == 1 && len(c.Spec.CIDRs) == 2 && c.Spec.CIDRs[0] == o.Spec.CIDRs[0]
	if !grows && !apiequality.Semantic.DeepEqual(c.Spec.CIDRs, o.Spec.CIDRs) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "cidrs"), c.Spec.CIDRs, "field is immutable"))
	}
	return errs
}

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

type networkPolicyStrategy struct{ registry.GenerationStrategy }

func (networkPolicyStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	np := obj.(*networkingv1.NetworkPolicy)
	p := field.NewPath("spec")
	errs := registry.ValidateLabelSelector(&np.Spec.PodSelector, p.Child("podSelector"))
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
				errs = append(errs, registry.ValidateLabelSelector(peer.PodSelector, pp.Child("podSelector"))...)
			}
			if peer.NamespaceSelector != nil {
				errs = append(errs, registry.ValidateLabelSelector(peer.NamespaceSelector, pp.Child("namespaceSelector"))...)
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

// defaultNetworkPolicy: policyTypes says Ingress, plus Egress when egress
// rules are given, and ports default to TCP.
func defaultNetworkPolicy(obj runtime.Object) {
	np := obj.(*networkingv1.NetworkPolicy)
	if len(np.Spec.PolicyTypes) == 0 {
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) > 0 {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
	tcp := func(ports []networkingv1.NetworkPolicyPort) {
		for i := range ports {
			if ports[i].Protocol == nil {
				ports[i].Protocol = ptrTo(corev1.ProtocolTCP)
			}
		}
	}
	for i := range np.Spec.Ingress {
		tcp(np.Spec.Ingress[i].Ports)
	}
	for i := range np.Spec.Egress {
		tcp(np.Spec.Egress[i].Ports)
	}
}

var ingressPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Class", registry.TString, "The name of the IngressClass resource that should be used for additional configuration"),
		registry.Col("Hosts", registry.TString, "Hosts that incoming requests are matched against before the ingress rule"),
		registry.Col("Address", registry.TString, "Address is a list containing ingress points for the load-balancer"),
		registry.Col("Ports", registry.TString, "Ports of TLS configurations that open"),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		in := o.(*networkingv1.Ingress)
		// Up to three hosts; "more" counts every rule after them, with a
		// host or not.
		var hosts []string
		more := false
		for _, r := range in.Spec.Rules {
			if len(hosts) == 3 {
				more = true
				break
			}
			if r.Host != "" {
				hosts = append(hosts, r.Host)
			}
		}
		h := strings.Join(hosts, ",")
		switch {
		case len(hosts) == 0:
			h = "*"
		case more:
			h += fmt.Sprintf(" + %d more...", len(in.Spec.Rules)-3)
		}
		var lb []string
		for _, x := range in.Status.LoadBalancer.Ingress {
			lb = append(lb, registry.OrDefault(x.IP, x.Hostname))
		}
		ports := "80"
		if len(in.Spec.TLS) > 0 {
			ports = "80, 443"
		}
		return []any{in.Name, registry.StrOr(in.Spec.IngressClassName, "<none>"), h, strings.Join(registry.UniqueSorted(lb), ","), ports, registry.Age(in)}
	},
}

var ingressClassPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Controller", registry.TString, "Controller that is responsible for handling this class"),
		registry.Col("Parameters", registry.TString, "A reference to a resource with additional parameters"),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		c := o.(*networkingv1.IngressClass)
		params := "<none>"
		if p := c.Spec.Parameters; p != nil {
			params = p.Kind
			if p.APIGroup != nil {
				params += "." + *p.APIGroup
			}
			params += "/" + p.Name
		}
		return []any{c.Name, c.Spec.Controller, params, registry.Age(c)}
	},
}

var ipAddressPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("ParentRef", registry.TString, networkingv1.IPAddressSpec{}.SwaggerDoc()["parentRef"])),
	Cells: func(o runtime.Object) []any {
		a := o.(*networkingv1.IPAddress)
		parent := "<none>"
		if r := a.Spec.ParentRef; r != nil {
			parent = strings.ToLower(schema.GroupResource{Group: r.Group, Resource: r.Resource}.String())
			if r.Namespace != "" {
				parent += "/" + r.Namespace
			}
			parent += "/" + r.Name
		}
		return []any{a.Name, parent}
	},
}

var serviceCIDRPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("CIDRs", registry.TString, networkingv1.ServiceCIDRSpec{}.SwaggerDoc()["cidrs"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		c := o.(*networkingv1.ServiceCIDR)
		return []any{c.Name, strings.Join(c.Spec.CIDRs, ","), registry.Age(c)}
	},
}

var networkPolicyPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Pod-Selector", registry.TString, networkingv1.NetworkPolicySpec{}.SwaggerDoc()["podSelector"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		n := o.(*networkingv1.NetworkPolicy)
		return []any{n.Name, metav1.FormatLabelSelector(&n.Spec.PodSelector), registry.Age(n)}
	},
}

func ptrTo[T any](v T) *T { return &v }
