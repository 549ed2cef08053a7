package apiserver

import (
	"errors"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

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
const defaultServiceCIDRName = "kubernetes"

func (st serviceCIDRStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	c := obj.(*networkingv1.ServiceCIDR)
	if c.Name != defaultServiceCIDRName {
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

// defaultServiceCIDR is the ServiceCIDR that shows --service-cidr, Ready
// as kube-apiserver's default ServiceCIDR controller reports it.
func (s *Server) defaultServiceCIDR() *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: defaultServiceCIDRName},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{s.cfg.ServiceCIDR.Masked().String()}},
		Status: networkingv1.ServiceCIDRStatus{Conditions: []metav1.Condition{{
			Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionTrue,
			Message: "Kubernetes Service CIDR is ready", LastTransitionTime: storedNow(),
		}}},
	}
}
