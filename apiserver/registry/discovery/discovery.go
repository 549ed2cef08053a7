// Package discovery holds the kinds of discovery.k8s.io: their rules,
// defaults and table columns.
package discovery

import (
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("discovery.k8s.io", "v1", "endpointslices"), Kind: "EndpointSlice", Namespaced: true,
			Strategy: endpointSliceStrategy{}, Defaulter: defaultEndpointSlice, Printer: &endpointSlicePrinter},
	}
}

// EndpointSlice limits, kube-apiserver's: the API documents 1000
// endpoints, 1-100 addresses each and 8 zone or node hints; ports are
// capped as high as an Endpoints subset may have them.
const (
	maxSliceEndpoints = 1000
	maxSlicePorts     = 20000
	maxSliceAddresses = 100
	maxSliceHints     = 8
)

var (
	sliceAddressTypes = []string{string(discoveryv1.AddressTypeIPv4), string(discoveryv1.AddressTypeIPv6), string(discoveryv1.AddressTypeFQDN)}
	sliceProtocols    = []string{string(corev1.ProtocolTCP), string(corev1.ProtocolUDP), string(corev1.ProtocolSCTP)}
)

// endpointSliceStrategy validates EndpointSlices as kube-apiserver does;
// their address type is immutable.
type endpointSliceStrategy struct{ registry.DefaultStrategy }

func (endpointSliceStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	s := obj.(*discoveryv1.EndpointSlice)
	var errs field.ErrorList
	at := field.NewPath("addressType")
	switch {
	case s.AddressType == "":
		errs = append(errs, field.Required(at, ""))
	case !sets.New(sliceAddressTypes...).Has(string(s.AddressType)):
		errs = append(errs, field.NotSupported(at, s.AddressType, sliceAddressTypes))
	}
	errs = append(errs, validateSliceEndpoints(s.AddressType, s.Endpoints, field.NewPath("endpoints"))...)
	return append(errs, validateSlicePorts(s.Ports, field.NewPath("ports"))...)
}

func (st endpointSliceStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	s, o := obj.(*discoveryv1.EndpointSlice), old.(*discoveryv1.EndpointSlice)
	errs := st.Validate(w, obj)
	if s.AddressType != o.AddressType {
		errs = append(errs, field.Invalid(field.NewPath("addressType"), s.AddressType, "field is immutable"))
	}
	return errs
}

func validateSliceEndpoints(t discoveryv1.AddressType, eps []discoveryv1.Endpoint, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(eps) > maxSliceEndpoints {
		errs = append(errs, field.TooMany(p, len(eps), maxSliceEndpoints))
	}
	for i, ep := range eps {
		ip := p.Index(i)
		ap := ip.Child("addresses")
		switch n := len(ep.Addresses); {
		case n == 0:
			errs = append(errs, field.Required(ap, "must contain at least 1 address"))
		case n > maxSliceAddresses:
			errs = append(errs, field.TooMany(ap, n, maxSliceAddresses))
		}
		for j, a := range ep.Addresses {
			if msg := sliceAddressProblem(t, a); msg != "" {
				errs = append(errs, field.Invalid(ap.Index(j), a, msg))
			}
		}
		if ep.Hostname != nil {
			for _, msg := range validation.IsDNS1123Label(*ep.Hostname) {
				errs = append(errs, field.Invalid(ip.Child("hostname"), *ep.Hostname, msg))
			}
		}
		if ep.NodeName != nil {
			for _, msg := range validation.IsDNS1123Subdomain(*ep.NodeName) {
				errs = append(errs, field.Invalid(ip.Child("nodeName"), *ep.NodeName, msg))
			}
		}
		if h := ep.Hints; h != nil {
			hp := ip.Child("hints")
			if len(h.ForZones) > maxSliceHints {
				errs = append(errs, field.TooMany(hp.Child("forZones"), len(h.ForZones), maxSliceHints))
			}
			if len(h.ForNodes) > maxSliceHints {
				errs = append(errs, field.TooMany(hp.Child("forNodes"), len(h.ForNodes), maxSliceHints))
			}
		}
	}
	return errs
}

// sliceAddressProblem is what is wrong with an address of type t, or "".
func sliceAddressProblem(t discoveryv1.AddressType, a string) string {
	switch t {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			return "must be a valid IP address"
		}
		if is6 := ip.Is6() && !ip.Is4In6(); is6 != (t == discoveryv1.AddressTypeIPv6) {
			return "must be an " + string(t) + " address"
		}
	case discoveryv1.AddressTypeFQDN:
		if msgs := validation.IsDNS1123Subdomain(a); len(msgs) > 0 {
			return msgs[0]
		}
	}
	return ""
}

func validateSlicePorts(ports []discoveryv1.EndpointPort, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(ports) > maxSlicePorts {
		errs = append(errs, field.TooMany(p, len(ports), maxSlicePorts))
	}
	names := sets.New[string]()
	for i, port := range ports {
		pp := p.Index(i)
		if port.Name != nil && *port.Name != "" {
			for _, msg := range validation.IsDNS1123Label(*port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), *port.Name, msg))
			}
		}
		name := ""
		if port.Name != nil {
			name = *port.Name
		}
		if names.Has(name) {
			errs = append(errs, field.Duplicate(pp.Child("name"), name))
		}
		names.Insert(name)
		switch {
		case port.Protocol == nil:
			errs = append(errs, field.Required(pp.Child("protocol"), ""))
		case !sets.New(sliceProtocols...).Has(string(*port.Protocol)):
			errs = append(errs, field.NotSupported(pp.Child("protocol"), *port.Protocol, sliceProtocols))
		}
		if port.Port != nil && (*port.Port < 0 || *port.Port > 65535) {
			errs = append(errs, field.Invalid(pp.Child("port"), *port.Port, validation.InclusiveRangeError(0, 65535)))
		}
		if port.AppProtocol != nil {
			for _, msg := range validation.IsQualifiedName(*port.AppProtocol) {
				errs = append(errs, field.Invalid(pp.Child("appProtocol"), *port.AppProtocol, msg))
			}
		}
	}
	return errs
}

func defaultEndpointSlice(obj runtime.Object) {
	o := obj.(*discoveryv1.EndpointSlice)
	for i := range o.Ports {
		if o.Ports[i].Protocol == nil {
			o.Ports[i].Protocol = ptrTo(corev1.ProtocolTCP)
		}
		if o.Ports[i].Name == nil {
			o.Ports[i].Name = ptrTo("")
		}
	}
}

var endpointSlicePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("AddressType", registry.TString, discoveryv1.EndpointSlice{}.SwaggerDoc()["addressType"]),
		registry.Col("Ports", registry.TString, discoveryv1.EndpointSlice{}.SwaggerDoc()["ports"]),
		registry.Col("Endpoints", registry.TString, discoveryv1.EndpointSlice{}.SwaggerDoc()["endpoints"]),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		s := o.(*discoveryv1.EndpointSlice)
		var ports []string
		for _, p := range s.Ports {
			if len(ports) == 3 {
				break
			}
			switch {
			case p.Port != nil:
				ports = append(ports, strconv.Itoa(int(*p.Port)))
			case p.Name != nil:
				ports = append(ports, *p.Name)
			default:
				ports = append(ports, "*")
			}
		}
		var addrs []string
		total := 0
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if len(addrs) < 3 {
					addrs = append(addrs, a)
				}
				total++
			}
		}
		return []any{s.Name, string(s.AddressType), registry.MoreList(ports, len(s.Ports), "<unset>"), registry.MoreList(addrs, total, "<unset>"), registry.Age(s)}
	},
}

func ptrTo[T any](v T) *T { return &v }
