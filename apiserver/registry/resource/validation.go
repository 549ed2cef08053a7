package resource

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"bonsai.dev/bonsai/apiserver/registry"
)

// The rules below are kube-apiserver's for resource.k8s.io/v1 (its
// pkg/apis/resource/validation), with its field paths and messages, for
// the features on by default in the version bonsai reports.

// AdminNamespaceLabel is the label a namespace needs for its claims to
// ask for admin access to devices.
const AdminNamespaceLabel = "resource.kubernetes.io/admin-access"

// CELFeatures are the device-selector CEL features on by default:
// consumable capacity is beta and on, list-typed attributes alpha.
var CELFeatures = dracel.Features{EnableConsumableCapacity: true}

// ---- DeviceClass

type deviceClassStrategy struct{ registry.GenerationStrategy }

func (deviceClassStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validateDeviceClassSpec(&obj.(*resourcev1.DeviceClass).Spec, nil, field.NewPath("spec"))
}

func (deviceClassStrategy) ValidateUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return validateDeviceClassSpec(&obj.(*resourcev1.DeviceClass).Spec, &old.(*resourcev1.DeviceClass).Spec, field.NewPath("spec"))
}

func validateDeviceClassSpec(spec, oldSpec *resourcev1.DeviceClassSpec, p *field.Path) field.ErrorList {
	// Selectors and configs unchanged since they were stored are not
	// compiled again.
	stored := oldSpec != nil && equality.Semantic.DeepEqual(spec.Selectors, oldSpec.Selectors)
	errs := validateSlice(spec.Selectors, resourcev1.DeviceSelectorsMaxSize, func(s resourcev1.DeviceSelector, p *field.Path) field.ErrorList {
		return validateSelector(s, p, stored)
	}, p.Child("selectors"))
	stored = oldSpec != nil && equality.Semantic.DeepEqual(spec.Config, oldSpec.Config)
	errs = append(errs, validateSlice(spec.Config, resourcev1.DeviceConfigMaxSize, func(c resourcev1.DeviceClassConfiguration, p *field.Path) field.ErrorList {
		return validateDeviceConfiguration(c.DeviceConfiguration, p, stored)
	}, p.Child("config"))...)
	if n := spec.ExtendedResourceName; n != nil && !isExtendedResourceName(*n) {
		errs = append(errs, field.Invalid(p.Child("extendedResourceName"), *n, "must be a valid extended resource name"))
	}
	return errs
}

// isExtendedResourceName: a name with a domain outside kubernetes.io
// that also makes a valid requests.<name> quota name, as upstream's
// helper says.
func isExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") || strings.HasPrefix(name, "requests.") {
		return false
	}
	return len(validation.IsQualifiedName("requests."+name)) == 0
}

// ---- ResourceClaim and ResourceClaimTemplate

type claimStrategy struct{ registry.DefaultStrategy }

func (claimStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	c := obj.(*resourcev1.ResourceClaim)
	errs := authorizedForAdmin(w, c.Spec.Devices.Requests, c.Namespace)
	return append(errs, validateClaimSpec(&c.Spec, field.NewPath("spec"), false)...)
}

// ValidateUpdate: the spec is fixed once created; nothing else to check.
func (claimStrategy) ValidateUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return apivalidation.ValidateImmutableField(obj.(*resourcev1.ResourceClaim).Spec, old.(*resourcev1.ResourceClaim).Spec, field.NewPath("spec"))
}

// PrepareForStatusUpdate drops the device status of devices no longer
// allocated, as upstream does when a claim is deallocated.
func (claimStrategy) PrepareForStatusUpdate(_ *registry.WriteCtx, obj, old runtime.Object) error {
	c, was := obj.(*resourcev1.ResourceClaim), old.(*resourcev1.ResourceClaim)
	if was.Status.Allocation != nil && c.Status.Allocation == nil && len(c.Status.Devices) > 0 {
		c.Status.Devices = nil
	}
	return nil
}

func (claimStrategy) ValidateStatusUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	c, was := obj.(*resourcev1.ResourceClaim), old.(*resourcev1.ResourceClaim)
	var errs field.ErrorList
	if was.Status.Allocation == nil || !adminGranted(was.Status.Allocation.Devices.Results) {
		if c.Status.Allocation != nil {
			for i, r := range c.Status.Allocation.Devices.Results {
				if r.AdminAccess != nil && *r.AdminAccess {
					errs = append(errs, checkAdminNamespace(w, c.Namespace, field.NewPath("status", "allocation", "devices", "results").Index(i).Child("adminAccess"))...)
					break
				}
			}
		}
	}
	return append(errs, validateClaimStatusUpdate(&c.Status, &was.Status, c.DeletionTimestamp != nil, gatherRequestNames(&c.Spec.Devices), field.NewPath("status"))...)
}

func adminGranted(results []resourcev1.DeviceRequestAllocationResult) bool {
	for _, r := range results {
		if r.AdminAccess != nil && *r.AdminAccess {
			return true
		}
	}
	return false
}

// authorizedForAdmin: a claim asking for admin access must live in a
// namespace labelled for it.
func authorizedForAdmin(w *registry.WriteCtx, reqs []resourcev1.DeviceRequest, namespace string) field.ErrorList {
	for i, r := range reqs {
		if r.Exactly != nil && r.Exactly.AdminAccess != nil && *r.Exactly.AdminAccess {
			return checkAdminNamespace(w, namespace, field.NewPath("spec", "devices", "requests").Index(i).Child("adminAccess"))
		}
	}
	return nil
}

func checkAdminNamespace(w *registry.WriteCtx, namespace string, p *field.Path) field.ErrorList {
	if w == nil || w.Env == nil || w.Env.NamespaceLabels == nil {
		return field.ErrorList{field.InternalError(p, errors.New("could not retrieve namespace to verify admin access"))}
	}
	labels, err := w.Env.NamespaceLabels(namespace)
	if err != nil {
		return field.ErrorList{field.InternalError(p, fmt.Errorf("could not retrieve namespace to verify admin access: %w", err))}
	}
	if labels[AdminNamespaceLabel] != "true" {
		return field.ErrorList{field.Forbidden(p, fmt.Sprintf("admin access to devices requires the `%s: true` label on the containing namespace", AdminNamespaceLabel))}
	}
	return nil
}

type claimTemplateStrategy struct{ registry.DefaultStrategy }

func (claimTemplateStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	t := obj.(*resourcev1.ResourceClaimTemplate)
	p := field.NewPath("spec")
	errs := validateTemplateMeta(&t.Spec.ObjectMeta, p.Child("metadata"))
	errs = append(errs, authorizedForAdmin(w, t.Spec.Spec.Devices.Requests, t.Namespace)...)
	return append(errs, validateClaimSpec(&t.Spec.Spec, p.Child("spec"), false)...)
}

func (claimTemplateStrategy) ValidateUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return apivalidation.ValidateImmutableField(obj.(*resourcev1.ResourceClaimTemplate).Spec, old.(*resourcev1.ResourceClaimTemplate).Spec, field.NewPath("spec"))
}

// validateTemplateMeta: a template's metadata may carry labels and
// annotations for the claims it makes.
func validateTemplateMeta(m *metav1.ObjectMeta, p *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabels(m.Labels, p.Child("labels"))
	return append(errs, apivalidation.ValidateAnnotations(m.Annotations, p.Child("annotations"))...)
}

// requestNames maps a claim's requests to their subrequests' names.
type requestNames map[string]map[string]bool

func (r requestNames) Has(s string) bool {
	seg := strings.Split(s, "/")
	if len(seg) > 2 {
		return false
	}
	subs, ok := r[seg[0]]
	if !ok {
		return false
	}
	return len(seg) == 1 || subs[seg[1]]
}

func gatherRequestNames(c *resourcev1.DeviceClaim) requestNames {
	out := requestNames{}
	for _, r := range c.Requests {
		subs := map[string]bool{}
		for _, s := range r.FirstAvailable {
			subs[s.Name] = true
		}
		out[r.Name] = subs
	}
	return out
}

func validateClaimSpec(spec *resourcev1.ResourceClaimSpec, p *field.Path, stored bool) field.ErrorList {
	c := &spec.Devices
	p = p.Child("devices")
	names := gatherRequestNames(c)
	errs := validateSet(c.Requests, resourcev1.DeviceRequestsMaxSize, func(r resourcev1.DeviceRequest, p *field.Path) field.ErrorList {
		return validateDeviceRequest(r, p, stored)
	}, func(r resourcev1.DeviceRequest) string { return r.Name }, p.Child("requests"))
	errs = append(errs, validateSlice(c.Constraints, resourcev1.DeviceConstraintsMaxSize, func(con resourcev1.DeviceConstraint, p *field.Path) field.ErrorList {
		return validateConstraint(con, p, names)
	}, p.Child("constraints"))...)
	errs = append(errs, validateSlice(c.Config, resourcev1.DeviceConfigMaxSize, func(cfg resourcev1.DeviceClaimConfiguration, p *field.Path) field.ErrorList {
		errs := validateRequestRefs(cfg.Requests, p.Child("requests"), names)
		return append(errs, validateDeviceConfiguration(cfg.DeviceConfiguration, p, stored)...)
	}, p.Child("config"))...)
	return errs
}

func validateDeviceRequest(r resourcev1.DeviceRequest, p *field.Path, stored bool) field.ErrorList {
	errs := validateDNSLabel(r.Name, p.Child("name"))
	switch {
	case r.Exactly == nil && len(r.FirstAvailable) == 0:
		errs = append(errs, field.Required(p, "exactly one of `exactly` or `firstAvailable` is required"))
	case r.Exactly != nil && len(r.FirstAvailable) > 0:
		errs = append(errs, field.Invalid(p, nil, "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set"))
	case r.Exactly != nil:
		e, ep := r.Exactly, p.Child("exactly")
		errs = append(errs, validateRequestBody(e.DeviceClassName, e.Selectors, e.AllocationMode, e.Count, e.Tolerations, ep, stored)...)
	default:
		errs = append(errs, validateSet(r.FirstAvailable, resourcev1.FirstAvailableDeviceRequestMaxSize, func(s resourcev1.DeviceSubRequest, p *field.Path) field.ErrorList {
			errs := validateDNSLabel(s.Name, p.Child("name"))
			return append(errs, validateRequestBody(s.DeviceClassName, s.Selectors, s.AllocationMode, s.Count, s.Tolerations, p, stored)...)
		}, func(s resourcev1.DeviceSubRequest) string { return s.Name }, p.Child("firstAvailable"))...)
	}
	return errs
}

func validateRequestBody(class string, selectors []resourcev1.DeviceSelector, mode resourcev1.DeviceAllocationMode, count int64, tolerations []resourcev1.DeviceToleration, p *field.Path, stored bool) field.ErrorList {
	var errs field.ErrorList
	if class == "" {
		errs = append(errs, field.Required(p.Child("deviceClassName"), ""))
	} else {
		errs = append(errs, validateDNSSubdomain(class, p.Child("deviceClassName"))...)
	}
	errs = append(errs, validateSlice(selectors, resourcev1.DeviceSelectorsMaxSize, func(s resourcev1.DeviceSelector, p *field.Path) field.ErrorList {
		return validateSelector(s, p, stored)
	}, p.Child("selectors"))...)
	switch mode {
	case resourcev1.DeviceAllocationModeAll:
		if count != 0 {
			errs = append(errs, field.Invalid(p.Child("count"), count, fmt.Sprintf("must not be specified when allocationMode is '%s'", mode)))
		}
	case resourcev1.DeviceAllocationModeExactCount:
		if count <= 0 {
			errs = append(errs, field.Invalid(p.Child("count"), count, "must be greater than zero"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("allocationMode"), mode, []resourcev1.DeviceAllocationMode{resourcev1.DeviceAllocationModeAll, resourcev1.DeviceAllocationModeExactCount}))
	}
	if len(tolerations) > resourcev1.DeviceTolerationsMaxLength {
		errs = append(errs, field.TooMany(p.Child("tolerations"), len(tolerations), resourcev1.DeviceTolerationsMaxLength))
	} else {
		for i, t := range tolerations {
			errs = append(errs, validateToleration(t, p.Child("tolerations").Index(i))...)
		}
	}
	return errs
}

func validateSelector(s resourcev1.DeviceSelector, p *field.Path, stored bool) field.ErrorList {
	if s.CEL == nil {
		return field.ErrorList{field.Required(p.Child("cel"), "")}
	}
	return validateCEL(s.CEL.Expression, p.Child("cel", "expression"), stored)
}

// validateCEL compiles a device selector with upstream's compiler and
// cost estimator: an expression that cannot compile, is not a bool, or
// could cost more than a selector may is refused, as kube-apiserver
// refuses it. A stored expression was valid when stored and stays so.
func validateCEL(expr string, p *field.Path, stored bool) field.ErrorList {
	if stored {
		return nil
	}
	if len(expr) > resourcev1.CELSelectorExpressionMaxLength {
		return field.ErrorList{field.TooLong(p, "", resourcev1.CELSelectorExpressionMaxLength)}
	}
	envType := environment.NewExpressions
	res := dracel.GetCompiler(CELFeatures).CompileCELExpression(expr, dracel.Options{EnvType: &envType})
	if res.Error != nil {
		return field.ErrorList{celError(p, expr, res.Error)}
	}
	if res.MaxCost > resourcev1.CELSelectorExpressionMaxCost {
		return field.ErrorList{field.Forbidden(p, "too complex, exceeds cost limit")}
	}
	return nil
}

func celError(p *field.Path, expr string, err *apiservercel.Error) *field.Error {
	switch err.Type {
	case apiservercel.ErrorTypeRequired:
		return field.Required(p, err.Detail)
	case apiservercel.ErrorTypeInvalid:
		return field.Invalid(p, expr, err.Detail)
	case apiservercel.ErrorTypeInternal:
		return field.InternalError(p, err)
	}
	return field.InternalError(p, fmt.Errorf("unsupported error type: %w", err))
}

func validateConstraint(c resourcev1.DeviceConstraint, p *field.Path, names requestNames) field.ErrorList {
	errs := validateRequestRefs(c.Requests, p.Child("requests"), names)
	switch {
	case c.MatchAttribute != nil:
		errs = append(errs, validateFullyQualifiedName(*c.MatchAttribute, p.Child("matchAttribute"))...)
	case c.DistinctAttribute != nil:
		errs = append(errs, validateFullyQualifiedName(*c.DistinctAttribute, p.Child("distinctAttribute"))...)
	default:
		errs = append(errs, field.Required(p, `exactly one of "matchAttribute" or "distinctAttribute" is required, but multiple fields are set`))
	}
	return errs
}

// validateRequestRefs checks a list of references to a claim's requests
// ("req" or "req/subreq"): unique, and each naming one.
func validateRequestRefs(refs []string, p *field.Path, names requestNames) field.ErrorList {
	return validateSet(refs, resourcev1.DeviceRequestsMaxSize, func(name string, p *field.Path) field.ErrorList {
		const msg = "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"
		seg := strings.Split(name, "/")
		if len(seg) > 2 {
			return field.ErrorList{field.Invalid(p, name, msg)}
		}
		var errs field.ErrorList
		for _, s := range seg {
			errs = append(errs, validateDNSLabel(s, p)...)
		}
		if !names.Has(name) {
			errs = append(errs, field.Invalid(p, name, msg))
		}
		return errs
	}, func(s string) string { return s }, p)
}

func validateDeviceConfiguration(c resourcev1.DeviceConfiguration, p *field.Path, stored bool) field.ErrorList {
	if c.Opaque == nil {
		return field.ErrorList{field.Required(p.Child("opaque"), "")}
	}
	p = p.Child("opaque")
	errs := validateDriverName(c.Opaque.Driver, p.Child("driver"))
	return append(errs, validateRawJSONObject(c.Opaque.Parameters, p.Child("parameters"), stored, resourcev1.OpaqueParametersMaxLength)...)
}

func validateRawJSONObject(raw runtime.RawExtension, p *field.Path, stored bool, max int) field.ErrorList {
	var v any
	switch {
	case len(raw.Raw) == 0:
		return field.ErrorList{field.Required(p, "")}
	case !stored && len(raw.Raw) > max:
		return field.ErrorList{field.TooLong(p, "", max)}
	}
	if err := json.Unmarshal(raw.Raw, &v); err != nil {
		return field.ErrorList{field.Invalid(p, "<value omitted>", fmt.Sprintf("error parsing data as JSON: %v", err.Error()))}
	}
	if v == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	if _, ok := v.(map[string]any); !ok {
		return field.ErrorList{field.Invalid(p, "<value omitted>", "must be a valid JSON object")}
	}
	return nil
}

func validateClaimStatusUpdate(s, was *resourcev1.ResourceClaimStatus, deleted bool, names requestNames, p *field.Path) field.ErrorList {
	errs := validateSet(s.ReservedFor, resourcev1.ResourceClaimReservedForMaxSize, func(r resourcev1.ResourceClaimConsumerReference, p *field.Path) field.ErrorList {
		var errs field.ErrorList
		if r.Resource == "" {
			errs = append(errs, field.Required(p.Child("resource"), ""))
		}
		if r.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		if r.UID == "" {
			errs = append(errs, field.Required(p.Child("uid"), ""))
		}
		return errs
	}, func(r resourcev1.ResourceClaimConsumerReference) types.UID { return r.UID }, p.Child("reservedFor"))

	allocated := map[string]bool{}
	if s.Allocation != nil {
		for _, r := range s.Allocation.Devices.Results {
			allocated[sharedDeviceID(r.Driver, r.Pool, r.Device, r.ShareID)] = true
		}
	}
	errs = append(errs, validateSet(s.Devices, -1, func(d resourcev1.AllocatedDeviceStatus, p *field.Path) field.ErrorList {
		errs := validateDriverName(d.Driver, p.Child("driver"))
		errs = append(errs, validatePoolName(d.Pool, p.Child("pool"))...)
		errs = append(errs, validateDNSLabel(d.Device, p.Child("device"))...)
		id := sharedDeviceID(d.Driver, d.Pool, d.Device, (*types.UID)(d.ShareID))
		if !allocated[id] {
			errs = append(errs, field.Invalid(p, id, "must be an allocated device in the claim"))
		}
		if len(d.Conditions) > 8 {
			errs = append(errs, field.TooMany(p.Child("conditions"), len(d.Conditions), 8))
		}
		errs = append(errs, metav1validation.ValidateConditions(d.Conditions, p.Child("conditions"))...)
		if d.Data != nil {
			errs = append(errs, validateRawJSONObject(*d.Data, p.Child("data"), false, 10*1024)...)
		}
		return errs
	}, func(d resourcev1.AllocatedDeviceStatus) string {
		return sharedDeviceID(d.Driver, d.Pool, d.Device, (*types.UID)(d.ShareID))
	}, p.Child("devices"))...)

	if len(s.ReservedFor) > 0 {
		if s.Allocation == nil {
			errs = append(errs, field.Forbidden(p.Child("reservedFor"), "may not be specified when `allocated` is not set"))
		} else if deleted {
			had := map[resourcev1.ResourceClaimConsumerReference]bool{}
			for _, r := range was.ReservedFor {
				had[r] = true
			}
			for _, r := range s.ReservedFor {
				if !had[r] {
					errs = append(errs, field.Forbidden(p.Child("reservedFor"), "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set"))
					break
				}
			}
		}
	}
	switch {
	case was.Allocation != nil && s.Allocation != nil:
		errs = append(errs, apivalidation.ValidateImmutableField(s.Allocation, was.Allocation, p.Child("allocation"))...)
	case s.Allocation != nil:
		errs = append(errs, validateAllocation(s.Allocation, p.Child("allocation"), names)...)
	}
	return errs
}

// sharedDeviceID names a device, and its share if shared, as upstream's
// allocator does ("driver/pool/device", "driver/pool/device/share").
func sharedDeviceID(driver, pool, device string, share *types.UID) string {
	id := driver + "/" + pool + "/" + device
	if share != nil {
		id += "/" + string(*share)
	}
	return id
}

func validateAllocation(a *resourcev1.AllocationResult, p *field.Path, names requestNames) field.ErrorList {
	dp := p.Child("devices")
	errs := validateSlice(a.Devices.Results, resourcev1.AllocationResultsMaxSize, func(r resourcev1.DeviceRequestAllocationResult, p *field.Path) field.ErrorList {
		errs := validateRequestRefs([]string{r.Request}, p.Child("request"), names)
		for i := range errs {
			errs[i].Field = p.Child("request").String()
		}
		errs = append(errs, validateDriverName(r.Driver, p.Child("driver"))...)
		errs = append(errs, validatePoolName(r.Pool, p.Child("pool"))...)
		errs = append(errs, validateDNSLabel(r.Device, p.Child("device"))...)
		for i, t := range r.Tolerations {
			errs = append(errs, validateToleration(t, p.Child("tolerations").Index(i))...)
		}
		if r.ShareID != nil {
			errs = append(errs, validateUID(string(*r.ShareID), p.Child("shareID"))...)
		}
		return errs
	}, dp.Child("results"))
	errs = append(errs, validateSlice(a.Devices.Config, 2*resourcev1.DeviceConfigMaxSize, func(c resourcev1.DeviceAllocationConfiguration, p *field.Path) field.ErrorList {
		var errs field.ErrorList
		switch c.Source {
		case "":
			errs = append(errs, field.Required(p.Child("source"), ""))
		case resourcev1.AllocationConfigSourceClaim, resourcev1.AllocationConfigSourceClass:
		default:
			errs = append(errs, field.NotSupported(p.Child("source"), c.Source, []resourcev1.AllocationConfigSource{resourcev1.AllocationConfigSourceClaim, resourcev1.AllocationConfigSourceClass}))
		}
		errs = append(errs, validateRequestRefs(c.Requests, p.Child("requests"), names)...)
		return append(errs, validateDeviceConfiguration(c.DeviceConfiguration, p, false)...)
	}, dp.Child("config"))...)
	if a.NodeSelector != nil {
		errs = append(errs, validateNodeSelector(a.NodeSelector, p.Child("nodeSelector"))...)
	}
	return errs
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func validateUID(uid string, p *field.Path) field.ErrorList {
	if !uuidRE.MatchString(uid) {
		return field.ErrorList{field.Invalid(p, uid, "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with lowercase hexadecimal characters")}
	}
	return nil
}

// ---- ResourceSlice

type sliceStrategy struct{ registry.GenerationStrategy }

func (sliceStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validateSliceSpec(&obj.(*resourcev1.ResourceSlice).Spec, nil, field.NewPath("spec"))
}

func (sliceStrategy) ValidateUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return validateSliceSpec(&obj.(*resourcev1.ResourceSlice).Spec, &old.(*resourcev1.ResourceSlice).Spec, field.NewPath("spec"))
}

func validateSliceSpec(spec, old *resourcev1.ResourceSliceSpec, p *field.Path) field.ErrorList {
	errs := validateDriverName(spec.Driver, p.Child("driver"))
	pp := p.Child("pool")
	errs = append(errs, validatePoolName(spec.Pool.Name, pp.Child("name"))...)
	if spec.Pool.ResourceSliceCount <= 0 {
		errs = append(errs, field.Invalid(pp.Child("resourceSliceCount"), spec.Pool.ResourceSliceCount, "must be greater than zero"))
	}
	if spec.Pool.Generation < 0 {
		errs = append(errs, field.Invalid(pp.Child("generation"), spec.Pool.Generation, "must be greater than or equal to zero"))
	}
	if old != nil {
		errs = append(errs, apivalidation.ValidateImmutableField(spec.Pool.Name, old.Pool.Name, pp.Child("name"))...)
		errs = append(errs, apivalidation.ValidateImmutableField(spec.Driver, old.Driver, p.Child("driver"))...)
		errs = append(errs, apivalidation.ValidateImmutableField(spec.NodeName, old.NodeName, p.Child("nodeName"))...)
	}
	var set []string
	if n := spec.NodeName; n != nil {
		if *n != "" {
			set = append(set, "`nodeName`")
			errs = append(errs, validateNodeName(*n, p.Child("nodeName"))...)
		} else {
			errs = append(errs, field.Invalid(p.Child("nodeName"), *n, "must be either unset or set to a non-empty string"))
		}
	}
	if spec.NodeSelector != nil {
		set = append(set, "`nodeSelector`")
		errs = append(errs, validateNodeSelector(spec.NodeSelector, p.Child("nodeSelector"))...)
		if len(spec.NodeSelector.NodeSelectorTerms) != 1 {
			errs = append(errs, field.Invalid(p.Child("nodeSelector", "nodeSelectorTerms"), spec.NodeSelector.NodeSelectorTerms, "must have exactly one node selector term"))
		}
	}
	for _, b := range []struct {
		v    *bool
		name string
	}{{spec.AllNodes, "allNodes"}, {spec.PerDeviceNodeSelection, "perDeviceNodeSelection"}} {
		if b.v == nil {
			continue
		}
		if *b.v {
			set = append(set, "`"+b.name+"`")
		} else {
			errs = append(errs, field.Invalid(p.Child(b.name), *b.v, "must be either unset or set to true"))
		}
	}
	switch len(set) {
	case 0:
		errs = append(errs, field.Required(p, "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"))
	case 1:
	default:
		errs = append(errs, field.Invalid(p, fmt.Sprintf("{%s}", strings.Join(set, ", ")), "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set"))
	}
	if spec.SharedCounters != nil && spec.Devices != nil {
		errs = append(errs, field.Invalid(p, "", "only one of `sharedCounters` or `devices` is allowed"))
	}
	max := resourcev1.ResourceSliceMaxDevices
	for _, d := range spec.Devices {
		if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
			max = resourcev1.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
	}
	perDevice := spec.PerDeviceNodeSelection != nil && *spec.PerDeviceNodeSelection
	errs = append(errs, validateSet(spec.Devices, max, func(d resourcev1.Device, p *field.Path) field.ErrorList {
		return validateDevice(d, p, perDevice)
	}, func(d resourcev1.Device) string { return d.Name }, p.Child("devices"))...)
	errs = append(errs, validateSet(spec.SharedCounters, resourcev1.ResourceSliceMaxCounterSets, func(c resourcev1.CounterSet, p *field.Path) field.ErrorList {
		var errs field.ErrorList
		if c.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		} else {
			errs = append(errs, validateDNSLabel(c.Name, p.Child("name"))...)
		}
		if len(c.Counters) == 0 {
			errs = append(errs, field.Required(p.Child("counters"), ""))
		} else if len(c.Counters) > resourcev1.ResourceSliceMaxCountersPerCounterSet {
			errs = append(errs, field.TooMany(p.Child("counters"), len(c.Counters), resourcev1.ResourceSliceMaxCountersPerCounterSet))
		}
		return errs
	}, func(c resourcev1.CounterSet) string { return c.Name }, p.Child("sharedCounters"))...)
	return errs
}

// maxKeyLen is the longest attribute or capacity name: a domain, a
// slash and an identifier.
const maxKeyLen = resourcev1.DeviceMaxDomainLength + 1 + resourcev1.DeviceMaxIDLength

func validateDevice(d resourcev1.Device, p *field.Path, perDevice bool) field.ErrorList {
	errs := validateDNSLabel(d.Name, p.Child("name"))
	if n := len(d.Attributes) + len(d.Capacity); n > resourcev1.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		errs = append(errs, field.Invalid(p, n, fmt.Sprintf("the total number of attributes and capacities must not exceed %d", resourcev1.ResourceSliceMaxAttributesAndCapacitiesPerDevice)))
	}
	for name, a := range d.Attributes {
		errs = append(errs, validateQualifiedName(string(name), p.Child("attributes"))...)
		errs = append(errs, validateAttribute(a, p.Child("attributes").Key(truncate(string(name), maxKeyLen)))...)
	}
	multi := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
	for name, c := range d.Capacity {
		errs = append(errs, validateQualifiedName(string(name), p.Child("capacity"))...)
		if !multi && c.RequestPolicy != nil {
			errs = append(errs, field.Forbidden(p.Child("capacity").Key(truncate(string(name), maxKeyLen)).Child("requestPolicy"), "allowMultipleAllocations must be true"))
		}
	}
	errs = append(errs, validateSlice(d.Taints, resourcev1.DeviceTaintsMaxLength, validateTaint, p.Child("taints"))...)
	if perDevice {
		var set []string
		if d.NodeName != nil {
			if *d.NodeName != "" {
				set = append(set, "`nodeName`")
				errs = append(errs, validateNodeName(*d.NodeName, p.Child("nodeName"))...)
			} else {
				errs = append(errs, field.Invalid(p.Child("nodeName"), *d.NodeName, "must not be empty"))
			}
		}
		if d.NodeSelector != nil {
			set = append(set, "`nodeSelector`")
			errs = append(errs, validateNodeSelector(d.NodeSelector, p.Child("nodeSelector"))...)
		}
		if d.AllNodes != nil {
			if *d.AllNodes {
				set = append(set, "`allNodes`")
			} else {
				errs = append(errs, field.Invalid(p.Child("allNodes"), *d.AllNodes, "must be either unset or set to true"))
			}
		}
		const msg = "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` is set to true in the ResourceSlice spec"
		switch len(set) {
		case 0:
			errs = append(errs, field.Required(p, msg))
		case 1:
		default:
			errs = append(errs, field.Invalid(p, fmt.Sprintf("{%s}", strings.Join(set, ", ")), msg))
		}
	} else if d.NodeName != nil || d.NodeSelector != nil || d.AllNodes != nil {
		errs = append(errs, field.Invalid(p, nil, "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set to true in the ResourceSlice spec"))
	}
	return errs
}

var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
	`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

func validateAttribute(a resourcev1.DeviceAttribute, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if a.BoolValue != nil {
		n++
	}
	if a.IntValue != nil {
		n++
	}
	if s := a.StringValue; s != nil {
		n++
		if len(*s) > resourcev1.DeviceAttributeMaxValueLength {
			errs = append(errs, field.TooLong(p.Child("string"), "", resourcev1.DeviceAttributeMaxValueLength))
		}
	}
	if v := a.VersionValue; v != nil {
		n++
		if !semverRE.MatchString(*v) {
			errs = append(errs, field.Invalid(p.Child("version"), *v, "must be a string compatible with semver.org spec 2.0.0"))
		}
		if len(*v) > resourcev1.DeviceAttributeMaxValueLength {
			errs = append(errs, field.TooLong(p.Child("version"), "", resourcev1.DeviceAttributeMaxValueLength))
		}
	}
	for _, l := range []struct {
		set   bool
		empty bool
		name  string
		v     any
	}{
		{a.BoolValues != nil, len(a.BoolValues) == 0, "bools", a.BoolValues},
		{a.IntValues != nil, len(a.IntValues) == 0, "ints", a.IntValues},
		{a.StringValues != nil, len(a.StringValues) == 0, "strings", a.StringValues},
		{a.VersionValues != nil, len(a.VersionValues) == 0, "versions", a.VersionValues},
	} {
		if l.set {
			n++
			if l.empty {
				errs = append(errs, field.Invalid(p.Child(l.name), l.v, "must not be empty if specified"))
			}
		}
	}
	switch n {
	case 0:
		errs = append(errs, field.Invalid(p, "", "exactly one value must be specified"))
	case 1:
	default:
		errs = append(errs, field.Invalid(p, a, "exactly one value must be specified"))
	}
	return errs
}

// validateQualifiedName: an attribute or capacity name is a C identifier,
// optionally under a domain ("dra.example.com/model").
func validateQualifiedName(name string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	parts := strings.Split(name, "/")
	switch len(parts) {
	case 1:
		errs = append(errs, validateCIdentifier(parts[0], p)...)
	case 2:
		if parts[0] == "" {
			errs = append(errs, field.Invalid(p, "", "the domain must not be empty"))
		} else {
			errs = append(errs, validateDriverName(parts[0], p)...)
		}
		if parts[1] == "" {
			errs = append(errs, field.Invalid(p, "", "the name must not be empty"))
		} else {
			errs = append(errs, validateCIdentifier(parts[1], p)...)
		}
	}
	return errs
}

func validateFullyQualifiedName(name resourcev1.FullyQualifiedName, p *field.Path) field.ErrorList {
	errs := validateQualifiedName(string(name), p)
	if !strings.Contains(string(name), "/") {
		errs = append(errs, field.Invalid(p, name, "a fully qualified name must be a domain and a name separated by a slash"))
	}
	return errs
}

func validateCIdentifier(id string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(id) > resourcev1.DeviceMaxIDLength {
		errs = append(errs, field.TooLong(p, "", resourcev1.DeviceMaxIDLength))
	}
	for _, msg := range content.IsCIdentifier(id) {
		errs = append(errs, field.Invalid(p, id, msg))
	}
	return errs
}

func truncate(s string, max int) string {
	if max < 16 {
		max = 16
	}
	if len(s) <= max {
		return s
	}
	rest := max - 3
	return s[:(rest+1)/2] + "..." + s[len(s)-rest/2:]
}

// ---- DeviceTaintRule

type deviceTaintRuleStrategy struct{ registry.GenerationStrategy }

func (deviceTaintRuleStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validateTaintRuleSpec(&obj.(*resourcev1.DeviceTaintRule).Spec, nil)
}

func (deviceTaintRuleStrategy) ValidateUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return validateTaintRuleSpec(&obj.(*resourcev1.DeviceTaintRule).Spec, &old.(*resourcev1.DeviceTaintRule).Spec)
}

func (deviceTaintRuleStrategy) ValidateStatusUpdate(_ *registry.WriteCtx, obj, _ runtime.Object) field.ErrorList {
	conds := obj.(*resourcev1.DeviceTaintRule).Status.Conditions
	p := field.NewPath("status", "conditions")
	errs := metav1validation.ValidateConditions(conds, p)
	if len(conds) > resourcev1.DeviceTaintRuleStatusMaxConditions {
		errs = append(errs, field.TooMany(p, len(conds), resourcev1.DeviceTaintRuleStatusMaxConditions))
	}
	return errs
}

func validateTaintRuleSpec(spec, old *resourcev1.DeviceTaintRuleSpec) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	if s := spec.DeviceSelector; s != nil {
		sp := p.Child("deviceSelector")
		if s.Driver != nil {
			errs = append(errs, validateDriverName(*s.Driver, sp.Child("driver"))...)
		}
		if s.Pool != nil {
			errs = append(errs, validatePoolName(*s.Pool, sp.Child("pool"))...)
		}
		if s.Device != nil {
			errs = append(errs, validateDNSLabel(*s.Device, sp.Child("device"))...)
		}
	}
	if old != nil && old.Taint.Effect == spec.Taint.Effect {
		// An effect stored is not checked again.
		t := spec.Taint
		t.Effect = resourcev1.DeviceTaintEffectNoSchedule
		return append(errs, validateTaint(t, p.Child("taint"))...)
	}
	return append(errs, validateTaint(spec.Taint, p.Child("taint"))...)
}

var taintEffects = []resourcev1.DeviceTaintEffect{resourcev1.DeviceTaintEffectNoExecute, resourcev1.DeviceTaintEffectNoSchedule, resourcev1.DeviceTaintEffectNone}

func validTaintEffect(e resourcev1.DeviceTaintEffect) bool {
	for _, x := range taintEffects {
		if x == e {
			return true
		}
	}
	return false
}

func validateTaint(t resourcev1.DeviceTaint, p *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabelName(t.Key, p.Child("key"))
	if t.Value != "" {
		errs = append(errs, validateLabelValue(t.Value, p.Child("value"))...)
	}
	switch {
	case t.Effect == "":
		errs = append(errs, field.Required(p.Child("effect"), ""))
	case !validTaintEffect(t.Effect):
		errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, taintEffects))
	}
	return errs
}

func validateToleration(t resourcev1.DeviceToleration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Key != "" {
		errs = append(errs, metav1validation.ValidateLabelName(t.Key, p.Child("key"))...)
	}
	switch t.Operator {
	case resourcev1.DeviceTolerationOpExists:
		if t.Value != "" {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, "must be empty for operator `Exists`"))
		}
	case resourcev1.DeviceTolerationOpEqual:
		errs = append(errs, validateLabelValue(t.Value, p.Child("value"))...)
	case "":
		errs = append(errs, field.Required(p.Child("operator"), ""))
	default:
		errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []resourcev1.DeviceTolerationOperator{resourcev1.DeviceTolerationOpEqual, resourcev1.DeviceTolerationOpExists}))
	}
	if t.Effect != "" && !validTaintEffect(t.Effect) {
		errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, taintEffects))
	}
	return errs
}

// ---- names and shared helpers

// validateDriverName: a driver is named as a CSI driver is.
func validateDriverName(name string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	if len(name) > resourcev1.DriverNameMaxLength {
		errs = append(errs, field.TooLong(p, "", resourcev1.DriverNameMaxLength))
	}
	for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(name)) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

// validatePoolName: DNS subdomains separated by slashes.
func validatePoolName(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	if len(name) > resourcev1.PoolNameMaxLength {
		errs = append(errs, field.TooLong(p, "", resourcev1.PoolNameMaxLength))
	}
	for _, part := range strings.Split(name, "/") {
		errs = append(errs, validateDNSSubdomain(part, p)...)
	}
	return errs
}

func validateDNSLabel(v string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

func validateDNSSubdomain(v string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

func validateNodeName(name string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

func validateLabelValue(v string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsValidLabelValue(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

// validateNodeSelector: at least one term; each requirement a qualified
// key with an operator and values that fit it, as core's node selectors.
func validateNodeSelector(s *corev1.NodeSelector, p *field.Path) field.ErrorList {
	tp := p.Child("nodeSelectorTerms")
	if len(s.NodeSelectorTerms) == 0 {
		return field.ErrorList{field.Required(tp, "must have at least one node selector term")}
	}
	var errs field.ErrorList
	for i, t := range s.NodeSelectorTerms {
		for j, r := range t.MatchExpressions {
			rp := tp.Index(i).Child("matchExpressions").Index(j)
			errs = append(errs, metav1validation.ValidateLabelName(r.Key, rp.Child("key"))...)
			errs = append(errs, validateRequirementValues(r, rp)...)
		}
		for j, r := range t.MatchFields {
			rp := tp.Index(i).Child("matchFields").Index(j)
			if r.Key != "metadata.name" {
				errs = append(errs, field.Invalid(rp.Child("key"), r.Key, "not a valid field selector key"))
			}
			if (r.Operator == corev1.NodeSelectorOpIn || r.Operator == corev1.NodeSelectorOpNotIn) && len(r.Values) != 1 {
				errs = append(errs, field.Required(rp.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
			} else if r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn {
				errs = append(errs, field.Invalid(rp.Child("operator"), r.Operator, "not a valid selector operator"))
			}
		}
	}
	return errs
}

func validateRequirementValues(r corev1.NodeSelectorRequirement, p *field.Path) field.ErrorList {
	switch r.Operator {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(r.Values) == 0 {
			return field.ErrorList{field.Required(p.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'")}
		}
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(r.Values) > 0 {
			return field.ErrorList{field.Forbidden(p.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")}
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(r.Values) != 1 {
			return field.ErrorList{field.Required(p.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'")}
		}
	default:
		return field.ErrorList{field.Invalid(p.Child("operator"), r.Operator, "not a valid selector operator")}
	}
	return nil
}

// validateSlice: at most max items (max < 0: any number), each valid.
func validateSlice[T any](items []T, max int, item func(T, *field.Path) field.ErrorList, p *field.Path) field.ErrorList {
	if max >= 0 && len(items) > max {
		return field.ErrorList{field.TooMany(p, len(items), max)}
	}
	var errs field.ErrorList
	for i, x := range items {
		errs = append(errs, item(x, p.Index(i))...)
	}
	return errs
}

// validateSet is validateSlice with each key once.
func validateSet[T any, K comparable](items []T, max int, item func(T, *field.Path) field.ErrorList, key func(T) K, p *field.Path) field.ErrorList {
	errs := validateSlice(items, max, item, p)
	if max >= 0 && len(items) > max {
		return errs
	}
	seen := map[K]bool{}
	for i, x := range items {
		k := key(x)
		if seen[k] {
			errs = append(errs, field.Duplicate(p.Index(i), k))
		}
		seen[k] = true
	}
	return errs
}
