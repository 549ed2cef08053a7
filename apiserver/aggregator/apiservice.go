package aggregator

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kube-aggregator/pkg/apis/apiregistration"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiservicehelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	apiservicevalidation "k8s.io/kube-aggregator/pkg/apis/apiregistration/validation"

	"bonsai.dev/bonsai/apiserver/registry"
)

// APIServices (apiregistration.k8s.io/v1) claim a group version: without
// a service it is served by the API server (the built-in ones, made on
// start as kube-apiserver's autoregister makes them), with one every
// request under it is proxied to that service (Aggregator). Their
// validation is upstream's, from k8s.io/kube-aggregator's own validation
// package.

func init() {
	// The API server's codecs, protobuf included, read the global scheme.
	if err := apiregistrationv1.AddToScheme(scheme.Scheme); err != nil {
		panic(err)
	}
}

// GVR is the APIServices' resource.
var GVR = registry.GVR("apiregistration.k8s.io", "v1", "apiservices")

// apiServiceScheme converts APIServices to the internal version upstream's
// validation takes.
var apiServiceScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := apiregistration.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := apiregistrationv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

func internalAPIService(a *apiregistrationv1.APIService) (*apiregistration.APIService, error) {
	out := &apiregistration.APIService{}
	if err := apiServiceScheme.Convert(a, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// Strategy is the APIService's: status only through the status
// subresource, spec defaulted (service port 443) and validated upstream's
// way.
type Strategy struct {
	registry.DefaultStrategy
	// BuiltinGroup reports a group the API server serves itself, which no
	// service may take over.
	BuiltinGroup func(group string) bool
}

func (st Strategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	scheme.Scheme.Default(obj)
	return st.DefaultStrategy.PrepareForCreate(w, obj)
}

func (st Strategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	scheme.Scheme.Default(obj)
	return st.DefaultStrategy.PrepareForUpdate(w, obj, old)
}

func (st Strategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	a := obj.(*apiregistrationv1.APIService)
	in, err := internalAPIService(a)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	// The generic handlers check metadata; upstream's one extra rule on
	// it is the name.
	errs := registry.WithoutMetadataErrors(apiservicevalidation.ValidateAPIService(context.Background(), in))
	if want := a.Spec.Version + "." + a.Spec.Group; a.Name != want {
		errs = append(field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), a.Name, fmt.Sprintf("must be `spec.version+\".\"+spec.group`: %q", want))}, errs...)
	}
	// A service for a group the server serves would never get a request.
	if a.Spec.Service != nil && st.BuiltinGroup(a.Spec.Group) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "service"), fmt.Sprintf("%q is served by the API server itself and cannot be delegated to a service", a.Spec.Group)))
	}
	return errs
}

func (st Strategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return st.Validate(w, obj)
}

func (Strategy) ValidateStatusUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	in, err := internalAPIService(obj.(*apiregistrationv1.APIService))
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("status"), err)}
	}
	return apiservicevalidation.ValidateAPIServiceStatus(&in.Status, field.NewPath("status"))
}

// Autoregistration, as kube-apiserver's: every group version the server
// serves gets a local APIService, labelled as made on start, with
// upstream's priorities (groups it does not list get 1000/15, CRD groups'
// value).
const (
	autoManagedLabel   = "kube-aggregator.kubernetes.io/automanaged"
	autoManagedOnStart = "onstart"
)

// builtinPriorities are kube-apiserver's groupPriorityMinimum and
// versionPriority of its own groups.
var builtinPriorities = map[string]struct{ group, version int32 }{
	"v1":                              {18000, 1},
	"apps/v1":                         {17800, 15},
	"events.k8s.io/v1":                {17750, 15},
	"authentication.k8s.io/v1":        {17700, 15},
	"authorization.k8s.io/v1":         {17600, 15},
	"autoscaling/v2":                  {17500, 30},
	"autoscaling/v1":                  {17500, 15},
	"batch/v1":                        {17400, 15},
	"certificates.k8s.io/v1":          {17300, 15},
	"networking.k8s.io/v1":            {17200, 15},
	"policy/v1":                       {17100, 15},
	"rbac.authorization.k8s.io/v1":    {17000, 15},
	"storage.k8s.io/v1":               {16800, 15},
	"apiextensions.k8s.io/v1":         {16700, 15},
	"admissionregistration.k8s.io/v1": {16700, 15},
	"scheduling.k8s.io/v1":            {16600, 15},
	"coordination.k8s.io/v1":          {16500, 15},
	"node.k8s.io/v1":                  {16300, 15},
	"discovery.k8s.io/v1":             {16200, 15},
	"flowcontrol.apiserver.k8s.io/v1": {16100, 21},
	"apiregistration.k8s.io/v1":       {18000, 15},
	// metrics-server's own APIService's.
	"metrics.k8s.io/v1beta1": {100, 100},
}

// LocalAPIService is the local APIService of a built-in group version,
// made on start (an existing one is left as it is).
func LocalAPIService(gv schema.GroupVersion) *apiregistrationv1.APIService {
	p, ok := builtinPriorities[gv.String()]
	if !ok {
		p.group, p.version = 1000, 15
	}
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: gv.Version + "." + gv.Group, Labels: map[string]string{autoManagedLabel: autoManagedOnStart}},
		Spec:       apiregistrationv1.APIServiceSpec{Group: gv.Group, Version: gv.Version, GroupPriorityMinimum: p.group, VersionPriority: p.version},
	}
}

// Printer has kube-aggregator's columns: where the API is
// served and whether it is available (with the reason when it is not).
var Printer = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Service", registry.TString, "The reference to the service that hosts this API endpoint."),
		registry.Col("Available", registry.TString, "Whether this service is available."),
		registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		a := o.(*apiregistrationv1.APIService)
		service := "Local"
		if a.Spec.Service != nil {
			service = a.Spec.Service.Namespace + "/" + a.Spec.Service.Name
		}
		available := string(apiregistrationv1.ConditionUnknown)
		if c := apiservicehelper.GetAPIServiceConditionByType(a, apiregistrationv1.Available); c != nil {
			switch {
			case c.Status == apiregistrationv1.ConditionTrue:
				available = string(c.Status)
			case c.Reason != "":
				available = fmt.Sprintf("%s (%s)", c.Status, c.Reason)
			default:
				available = string(c.Status)
			}
		}
		return []any{a.Name, service, available, registry.Age(a)}
	},
}
