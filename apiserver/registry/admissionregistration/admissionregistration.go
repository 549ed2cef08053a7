// Package admissionregistration holds the kinds of
// admissionregistration.k8s.io: defaults and validation of webhook
// configurations, ValidatingAdmissionPolicies and their bindings, with
// kube-apiserver's rules and messages, and their table columns.
package admissionregistration

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

const group = "admissionregistration.k8s.io"

// Kinds are the group's rows of the table of served kinds; compile checks
// the CEL expressions of webhooks and policies.
func Kinds(compile CELCompiler) []registry.Kind {
	st := admissionConfigStrategy{compile: compile}
	apiExtensions := []string{"api-extensions"}
	return []registry.Kind{
		{GVR: registry.GVR(group, "v1", "mutatingwebhookconfigurations"), Kind: "MutatingWebhookConfiguration", Categories: apiExtensions, Strategy: st, Printer: &mutatingWebhooksPrinter},
		{GVR: registry.GVR(group, "v1", "validatingwebhookconfigurations"), Kind: "ValidatingWebhookConfiguration", Categories: apiExtensions, Strategy: st, Printer: &validatingWebhooksPrinter},
		{GVR: registry.GVR(group, "v1", "validatingadmissionpolicies"), Kind: "ValidatingAdmissionPolicy", Categories: apiExtensions, Subresources: []string{"status"}, Strategy: st, Printer: &policyPrinter},
		{GVR: registry.GVR(group, "v1", "validatingadmissionpolicybindings"), Kind: "ValidatingAdmissionPolicyBinding", Categories: apiExtensions, Strategy: st, Printer: &bindingPrinter},
	}
}

// Strategies of admissionregistration.k8s.io/v1: defaults and validation
// of webhook configurations, ValidatingAdmissionPolicies and their
// bindings, with kube-apiserver's rules and messages.

// admissionConfigStrategy defaults and validates the four kinds; their
// generation counts changes, as upstream.
type admissionConfigStrategy struct {
	registry.GenerationStrategy
	// compile checks a CEL expression as admission will compile it.
	compile CELCompiler
}

// CELCompiler checks that expr compiles in the environment admission
// gives expressions; want is the result type it must have (cel.BoolType,
// cel.StringType) or nil for any.
type CELCompiler func(expr string, want *cel.Type) error

func (admissionConfigStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	defaultAdmissionConfig(obj)
	if p, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok {
		p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
	}
	return nil
}

func (admissionConfigStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	defaultAdmissionConfig(obj)
	if p, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok {
		p.Status = old.(*admissionregistrationv1.ValidatingAdmissionPolicy).Status
	}
	return nil
}

func (st admissionConfigStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	switch o := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		var errs field.ErrorList
		names := sets.New[string]()
		for i, h := range o.Webhooks {
			p := field.NewPath("webhooks").Index(i)
			errs = append(errs, st.validateWebhook(p, MutatingAsValidating(h), names)...)
			if r := h.ReinvocationPolicy; r != nil && *r != admissionregistrationv1.NeverReinvocationPolicy && *r != admissionregistrationv1.IfNeededReinvocationPolicy {
				errs = append(errs, field.NotSupported(p.Child("reinvocationPolicy"), *r, []string{string(admissionregistrationv1.NeverReinvocationPolicy), string(admissionregistrationv1.IfNeededReinvocationPolicy)}))
			}
		}
		return errs
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		var errs field.ErrorList
		names := sets.New[string]()
		for i, h := range o.Webhooks {
			errs = append(errs, st.validateWebhook(field.NewPath("webhooks").Index(i), h, names)...)
		}
		return errs
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		return st.validatePolicySpec(field.NewPath("spec"), &o.Spec)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		return st.validateBindingSpec(field.NewPath("spec"), &o.Spec)
	}
	return nil
}

func (st admissionConfigStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return st.Validate(w, obj)
}

// defaultAdmissionConfig applies the v1 defaults.
func defaultAdmissionConfig(obj runtime.Object) {
	switch o := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i := range o.Webhooks {
			h := &o.Webhooks[i]
			defaultWebhookCommon(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds, h.Rules, &h.ClientConfig)
			if h.ReinvocationPolicy == nil {
				h.ReinvocationPolicy = ptrTo(admissionregistrationv1.NeverReinvocationPolicy)
			}
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i := range o.Webhooks {
			h := &o.Webhooks[i]
			defaultWebhookCommon(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds, h.Rules, &h.ClientConfig)
		}
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		if o.Spec.FailurePolicy == nil {
			o.Spec.FailurePolicy = ptrTo(admissionregistrationv1.Fail)
		}
		defaultMatchResources(o.Spec.MatchConstraints)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		defaultMatchResources(o.Spec.MatchResources)
	}
}

func defaultWebhookCommon(fp **admissionregistrationv1.FailurePolicyType, mp **admissionregistrationv1.MatchPolicyType, nsSel, objSel **metav1.LabelSelector, timeout **int32, rules []admissionregistrationv1.RuleWithOperations, cc *admissionregistrationv1.WebhookClientConfig) {
	if *fp == nil {
		*fp = ptrTo(admissionregistrationv1.Fail)
	}
	if *mp == nil {
		*mp = ptrTo(admissionregistrationv1.Equivalent)
	}
	if *nsSel == nil {
		*nsSel = &metav1.LabelSelector{}
	}
	if *objSel == nil {
		*objSel = &metav1.LabelSelector{}
	}
	if *timeout == nil {
		*timeout = ptrTo[int32](10)
	}
	for i := range rules {
		if rules[i].Scope == nil {
			rules[i].Scope = ptrTo(admissionregistrationv1.AllScopes)
		}
	}
	if cc.Service != nil && cc.Service.Port == nil {
		cc.Service.Port = ptrTo[int32](443)
	}
}

func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		m.MatchPolicy = ptrTo(admissionregistrationv1.Equivalent)
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rs := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rs {
			if rs[i].Scope == nil {
				rs[i].Scope = ptrTo(admissionregistrationv1.AllScopes)
			}
		}
	}
}

func (st admissionConfigStrategy) validateWebhook(p *field.Path, h admissionregistrationv1.ValidatingWebhook, names sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	if h.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		errs = append(errs, utilvalidation.IsFullyQualifiedName(p.Child("name"), h.Name)...)
		if names.Has(h.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), h.Name))
		}
		names.Insert(h.Name)
	}
	for i, r := range h.Rules {
		errs = append(errs, validateRule(p.Child("rules").Index(i), r)...)
	}
	errs = append(errs, validateEnum(p.Child("failurePolicy"), h.FailurePolicy, admissionregistrationv1.Ignore, admissionregistrationv1.Fail)...)
	errs = append(errs, validateEnum(p.Child("matchPolicy"), h.MatchPolicy, admissionregistrationv1.Exact, admissionregistrationv1.Equivalent)...)
	if h.SideEffects == nil {
		errs = append(errs, field.Required(p.Child("sideEffects"), "must specify one of None, NoneOnDryRun"))
	} else {
		errs = append(errs, validateEnum(p.Child("sideEffects"), h.SideEffects, admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.SideEffectClassNoneOnDryRun)...)
	}
	if t := h.TimeoutSeconds; t != nil && (*t < 1 || *t > 30) {
		errs = append(errs, field.Invalid(p.Child("timeoutSeconds"), *t, "the timeout value must be between 1 and 30 seconds"))
	}
	errs = append(errs, validateReviewVersions(p.Child("admissionReviewVersions"), h.AdmissionReviewVersions)...)
	opts := metav1validation.LabelSelectorValidationOptions{}
	if h.NamespaceSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.NamespaceSelector, opts, p.Child("namespaceSelector"))...)
	}
	if h.ObjectSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.ObjectSelector, opts, p.Child("objectSelector"))...)
	}
	errs = append(errs, validateClientConfig(p.Child("clientConfig"), h.ClientConfig)...)
	errs = append(errs, st.validateMatchConditions(p.Child("matchConditions"), h.MatchConditions)...)
	return errs
}

func validateEnum[T ~string](p *field.Path, v *T, allowed ...T) field.ErrorList {
	if v == nil {
		return nil
	}
	for _, a := range allowed {
		if *v == a {
			return nil
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	return field.ErrorList{field.NotSupported(p, *v, names)}
}

func validateReviewVersions(p *field.Path, versions []string) field.ErrorList {
	if len(versions) == 0 {
		return field.ErrorList{field.Required(p, "must specify one of v1, v1beta1")}
	}
	var errs field.ErrorList
	seen := sets.New[string]()
	known := false
	for i, v := range versions {
		if seen.Has(v) {
			errs = append(errs, field.Invalid(p.Index(i), v, "duplicate version"))
		}
		seen.Insert(v)
		for _, msg := range utilvalidation.IsDNS1035Label(v) {
			errs = append(errs, field.Invalid(p.Index(i), v, msg))
		}
		known = known || v == "v1" || v == "v1beta1"
	}
	if !known {
		errs = append(errs, field.Invalid(p, versions, "must include at least one of v1, v1beta1"))
	}
	return errs
}

func validateClientConfig(p *field.Path, cc admissionregistrationv1.WebhookClientConfig) field.ErrorList {
	var errs field.ErrorList
	switch {
	case cc.URL != nil && cc.Service != nil:
		errs = append(errs, field.Required(p, "exactly one of url or service is required"))
	case cc.URL != nil:
		errs = append(errs, validateWebhookURL(p.Child("url"), *cc.URL)...)
	case cc.Service != nil:
		sp := p.Child("service")
		if cc.Service.Name == "" {
			errs = append(errs, field.Required(sp.Child("name"), "service name is required"))
		}
		if cc.Service.Namespace == "" {
			errs = append(errs, field.Required(sp.Child("namespace"), "service namespace is required"))
		}
		if path := cc.Service.Path; path != nil {
			switch {
			case *path == "":
			case !strings.HasPrefix(*path, "/"):
				errs = append(errs, field.Invalid(sp.Child("path"), *path, "must start with a '/'"))
			case *path != "/" && strings.HasSuffix(*path, "/") || strings.Contains(*path, "//"):
				errs = append(errs, field.Invalid(sp.Child("path"), *path, "segment[s] may not be empty"))
			}
		}
		if port := cc.Service.Port; port != nil {
			for _, msg := range utilvalidation.IsValidPortNum(int(*port)) {
				errs = append(errs, field.Invalid(sp.Child("port"), *port, "port is not valid: "+msg))
			}
		}
	default:
		errs = append(errs, field.Required(p, "exactly one of url or service is required"))
	}
	if len(cc.CABundle) > 0 && !strings.Contains(string(cc.CABundle), "-----BEGIN CERTIFICATE-----") {
		errs = append(errs, field.Invalid(p.Child("caBundle"), "", "must contain at least one PEM-encoded certificate"))
	}
	return errs
}

func validateWebhookURL(p *field.Path, raw string) field.ErrorList {
	u, err := url.Parse(raw)
	if err != nil {
		return field.ErrorList{field.Invalid(p, raw, "url must be a valid URL: "+err.Error())}
	}
	var errs field.ErrorList
	if u.Scheme != "https" {
		errs = append(errs, field.Invalid(p, u.Scheme, "'https' is the only allowed URL scheme"))
	}
	if u.Host == "" {
		errs = append(errs, field.Invalid(p, u.Host, "host must be specified"))
	}
	if u.User != nil {
		errs = append(errs, field.Invalid(p, u.User.String(), "user information is not permitted in the URL"))
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		errs = append(errs, field.Invalid(p, u.Fragment, "fragments are not permitted in the URL"))
	}
	if u.RawQuery != "" {
		errs = append(errs, field.Invalid(p, u.RawQuery, "query parameters are not permitted in the URL"))
	}
	return errs
}

var validOperations = []admissionregistrationv1.OperationType{
	admissionregistrationv1.OperationAll, admissionregistrationv1.Create, admissionregistrationv1.Update,
	admissionregistrationv1.Delete, admissionregistrationv1.Connect,
}

func validateRule(p *field.Path, r admissionregistrationv1.RuleWithOperations) field.ErrorList {
	var errs field.ErrorList
	if len(r.Operations) == 0 {
		errs = append(errs, field.Required(p.Child("operations"), ""))
	}
	if len(r.Operations) > 1 && hasWildcardOp(r.Operations) {
		errs = append(errs, field.Invalid(p.Child("operations"), r.Operations, "if '*' is present, must not specify other operations"))
	}
	for i, op := range r.Operations {
		errs = append(errs, validateEnum(p.Child("operations").Index(i), &op, validOperations...)...)
	}
	errs = append(errs, validateWildcardList(p.Child("apiGroups"), r.APIGroups, false)...)
	errs = append(errs, validateWildcardList(p.Child("apiVersions"), r.APIVersions, true)...)
	errs = append(errs, ValidateRuleResources(p.Child("resources"), r.Resources)...)
	errs = append(errs, validateEnum(p.Child("scope"), r.Scope, admissionregistrationv1.ClusterScope, admissionregistrationv1.NamespacedScope, admissionregistrationv1.AllScopes)...)
	return errs
}

func hasWildcardOp(ops []admissionregistrationv1.OperationType) bool {
	for _, op := range ops {
		if op == admissionregistrationv1.OperationAll {
			return true
		}
	}
	return false
}

func validateWildcardList(p *field.Path, xs []string, noEmpty bool) field.ErrorList {
	var errs field.ErrorList
	if len(xs) == 0 {
		return field.ErrorList{field.Required(p, "")}
	}
	for i, x := range xs {
		if x == "*" && len(xs) > 1 {
			errs = append(errs, field.Invalid(p, xs, "if '*' is present, must not specify other "+p.String()[strings.LastIndex(p.String(), ".")+1:]))
			break
		}
		if noEmpty && x == "" {
			errs = append(errs, field.Required(p.Index(i), ""))
		}
	}
	return errs
}

func ValidateRuleResources(p *field.Path, rs []string) field.ErrorList {
	if len(rs) == 0 {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	resourcesWithWildcardSub := sets.New[string]()
	subsWithWildcardRes := sets.New[string]()
	for i, r := range rs {
		if r == "" {
			errs = append(errs, field.Required(p.Index(i), ""))
			continue
		}
		res, sub, hasSub := strings.Cut(r, "/")
		if strings.Contains(sub, "/") {
			errs = append(errs, field.Invalid(p.Index(i), r, "may not contain more than one '/'"))
			continue
		}
		if res == "" || hasSub && sub == "" {
			errs = append(errs, field.Invalid(p.Index(i), r, "must not be empty on either side of '/'"))
			continue
		}
		if r == "*" && len(rs) > 1 {
			errs = append(errs, field.Invalid(p.Index(i), r, "if '*' is present, must not specify other resources without subresources"))
		}
		if hasSub && sub == "*" {
			resourcesWithWildcardSub.Insert(res)
		}
		if res == "*" && hasSub {
			subsWithWildcardRes.Insert(sub)
		}
	}
	for i, r := range rs {
		res, sub, hasSub := strings.Cut(r, "/")
		if !hasSub || strings.Contains(sub, "/") {
			continue
		}
		if sub != "*" && resourcesWithWildcardSub.Has(res) {
			errs = append(errs, field.Invalid(p.Index(i), r, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, r)))
		}
		if res != "*" && subsWithWildcardRes.Has(sub) {
			errs = append(errs, field.Invalid(p.Index(i), r, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, r)))
		}
	}
	return errs
}

// maxMatchConditions is kube-apiserver's limit.
const maxMatchConditions = 64

func (st admissionConfigStrategy) validateMatchConditions(p *field.Path, mcs []admissionregistrationv1.MatchCondition) field.ErrorList {
	var errs field.ErrorList
	if len(mcs) > maxMatchConditions {
		errs = append(errs, field.TooMany(p, len(mcs), maxMatchConditions))
	}
	names := sets.New[string]()
	for i, mc := range mcs {
		ip := p.Index(i)
		if mc.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), ""))
		} else {
			for _, msg := range utilvalidation.IsQualifiedName(mc.Name) {
				errs = append(errs, field.Invalid(ip.Child("name"), mc.Name, msg))
			}
			if names.Has(mc.Name) {
				errs = append(errs, field.Duplicate(ip.Child("name"), mc.Name))
			}
			names.Insert(mc.Name)
		}
		errs = append(errs, st.validateCEL(ip.Child("expression"), mc.Expression, cel.BoolType)...)
	}
	return errs
}

func (st admissionConfigStrategy) validateCEL(p *field.Path, expr string, want *cel.Type) field.ErrorList {
	if strings.TrimSpace(expr) == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	if err := st.compile(expr, want); err != nil {
		return field.ErrorList{field.Invalid(p, expr, err.Error())}
	}
	return nil
}

func (st admissionConfigStrategy) validatePolicySpec(p *field.Path, spec *admissionregistrationv1.ValidatingAdmissionPolicySpec) field.ErrorList {
	var errs field.ErrorList
	if pk := spec.ParamKind; pk != nil {
		pp := p.Child("paramKind")
		if pk.APIVersion == "" {
			errs = append(errs, field.Required(pp.Child("apiVersion"), ""))
		}
		if pk.Kind == "" {
			errs = append(errs, field.Required(pp.Child("kind"), ""))
		}
	}
	if spec.MatchConstraints == nil {
		errs = append(errs, field.Required(p.Child("matchConstraints"), ""))
	} else {
		mp := p.Child("matchConstraints")
		if len(spec.MatchConstraints.ResourceRules) == 0 {
			errs = append(errs, field.Required(mp.Child("resourceRules"), ""))
		}
		errs = append(errs, validateMatchResources(mp, spec.MatchConstraints)...)
	}
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		errs = append(errs, field.Required(p.Child("validations"), "validations or auditAnnotations must contain at least one item"))
	}
	errs = append(errs, validateEnum(p.Child("failurePolicy"), spec.FailurePolicy, admissionregistrationv1.Ignore, admissionregistrationv1.Fail)...)
	errs = append(errs, st.validateMatchConditions(p.Child("matchConditions"), spec.MatchConditions)...)
	for i, v := range spec.Variables {
		vp := p.Child("variables").Index(i)
		if v.Name == "" {
			errs = append(errs, field.Required(vp.Child("name"), ""))
		}
		errs = append(errs, st.validateCEL(vp.Child("expression"), v.Expression, nil)...)
	}
	keys := sets.New[string]()
	for i, a := range spec.AuditAnnotations {
		ap := p.Child("auditAnnotations").Index(i)
		for _, msg := range utilvalidation.IsQualifiedName(a.Key) {
			errs = append(errs, field.Invalid(ap.Child("key"), a.Key, msg))
		}
		if keys.Has(a.Key) {
			errs = append(errs, field.Duplicate(ap.Child("key"), a.Key))
		}
		keys.Insert(a.Key)
		errs = append(errs, st.validateCEL(ap.Child("valueExpression"), a.ValueExpression, nil)...)
	}
	for i, v := range spec.Validations {
		vp := p.Child("validations").Index(i)
		errs = append(errs, st.validateCEL(vp.Child("expression"), v.Expression, cel.BoolType)...)
		if v.MessageExpression != "" {
			errs = append(errs, st.validateCEL(vp.Child("messageExpression"), v.MessageExpression, cel.StringType)...)
		}
		if strings.Contains(v.Message, "\n") {
			errs = append(errs, field.Invalid(vp.Child("message"), v.Message, "message must not contain line breaks"))
		}
		if r := v.Reason; r != nil {
			if _, ok := ReasonCodes[*r]; !ok {
				errs = append(errs, field.NotSupported(vp.Child("reason"), *r, []string{string(metav1.StatusReasonUnauthorized), string(metav1.StatusReasonForbidden), string(metav1.StatusReasonInvalid), string(metav1.StatusReasonRequestEntityTooLarge)}))
			}
		}
	}
	return errs
}

func validateMatchResources(p *field.Path, m *admissionregistrationv1.MatchResources) field.ErrorList {
	var errs field.ErrorList
	for i, r := range m.ResourceRules {
		errs = append(errs, validateRule(p.Child("resourceRules").Index(i), r.RuleWithOperations)...)
	}
	for i, r := range m.ExcludeResourceRules {
		errs = append(errs, validateRule(p.Child("excludeResourceRules").Index(i), r.RuleWithOperations)...)
	}
	errs = append(errs, validateEnum(p.Child("matchPolicy"), m.MatchPolicy, admissionregistrationv1.Exact, admissionregistrationv1.Equivalent)...)
	opts := metav1validation.LabelSelectorValidationOptions{}
	if m.NamespaceSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(m.NamespaceSelector, opts, p.Child("namespaceSelector"))...)
	}
	if m.ObjectSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(m.ObjectSelector, opts, p.Child("objectSelector"))...)
	}
	return errs
}

func (st admissionConfigStrategy) validateBindingSpec(p *field.Path, spec *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) field.ErrorList {
	var errs field.ErrorList
	if spec.PolicyName == "" {
		errs = append(errs, field.Required(p.Child("policyName"), ""))
	}
	ap := p.Child("validationActions")
	if len(spec.ValidationActions) == 0 {
		errs = append(errs, field.Required(ap, "at least one validation action is required"))
	}
	seen := sets.New[admissionregistrationv1.ValidationAction]()
	for i, a := range spec.ValidationActions {
		errs = append(errs, validateEnum(ap.Index(i), &a, admissionregistrationv1.Deny, admissionregistrationv1.Warn, admissionregistrationv1.Audit)...)
		if seen.Has(a) {
			errs = append(errs, field.Duplicate(ap.Index(i), a))
		}
		seen.Insert(a)
	}
	if seen.Has(admissionregistrationv1.Deny) && seen.Has(admissionregistrationv1.Warn) {
		errs = append(errs, field.Invalid(ap, spec.ValidationActions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	if r := spec.ParamRef; r != nil {
		rp := p.Child("paramRef")
		if r.Name != "" && r.Selector != nil {
			errs = append(errs, field.Forbidden(rp.Child("name"), "name and selector are mutually exclusive"))
		}
		if r.Name == "" && r.Selector == nil {
			errs = append(errs, field.Required(rp, "one of name or selector must be specified"))
		}
		if r.ParameterNotFoundAction == nil {
			errs = append(errs, field.Required(rp.Child("parameterNotFoundAction"), ""))
		} else {
			errs = append(errs, validateEnum(rp.Child("parameterNotFoundAction"), r.ParameterNotFoundAction, admissionregistrationv1.DenyAction, admissionregistrationv1.AllowAction)...)
		}
	}
	if spec.MatchResources != nil {
		errs = append(errs, validateMatchResources(p.Child("matchResources"), spec.MatchResources)...)
	}
	return errs
}

// MutatingAsValidating keeps the fields both webhook kinds share, so one
// compiler serves both.
func MutatingAsValidating(w admissionregistrationv1.MutatingWebhook) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name: w.Name, ClientConfig: w.ClientConfig, Rules: w.Rules, FailurePolicy: w.FailurePolicy,
		MatchPolicy: w.MatchPolicy, NamespaceSelector: w.NamespaceSelector, ObjectSelector: w.ObjectSelector,
		SideEffects: w.SideEffects, TimeoutSeconds: w.TimeoutSeconds, AdmissionReviewVersions: w.AdmissionReviewVersions,
		MatchConditions: w.MatchConditions,
	}
}

// The admissionregistration.k8s.io kinds' table columns, as kubectl shows
// them from kube-apiserver.
var (
	webhooksCol             = registry.Col("Webhooks", registry.TInteger, "Webhooks is a list of webhooks and the affected resources and operations.")
	mutatingWebhooksPrinter = registry.Printer{
		Columns: registry.Cols(registry.NameCol, webhooksCol, registry.AgeCol),
		Cells: func(o runtime.Object) []any {
			c := o.(*admissionregistrationv1.MutatingWebhookConfiguration)
			return []any{c.Name, int64(len(c.Webhooks)), registry.Age(c)}
		},
	}
	validatingWebhooksPrinter = registry.Printer{
		Columns: registry.Cols(registry.NameCol, webhooksCol, registry.AgeCol),
		Cells: func(o runtime.Object) []any {
			c := o.(*admissionregistrationv1.ValidatingWebhookConfiguration)
			return []any{c.Name, int64(len(c.Webhooks)), registry.Age(c)}
		},
	}
	policyPrinter = registry.Printer{
		Columns: registry.Cols(registry.NameCol, registry.Col("Validations", registry.TInteger, "Validations is a list of validation expressions."),
			registry.Col("ParamKind", registry.TString, "ParamKind specifies the kind of resources used to parameterize this policy"), registry.AgeCol),
		Cells: func(o runtime.Object) []any {
			p := o.(*admissionregistrationv1.ValidatingAdmissionPolicy)
			kind := "<unset>"
			if pk := p.Spec.ParamKind; pk != nil {
				kind = pk.APIVersion + "/" + pk.Kind
			}
			return []any{p.Name, int64(len(p.Spec.Validations)), kind, registry.Age(p)}
		},
	}
	bindingPrinter = registry.Printer{
		Columns: registry.Cols(registry.NameCol, registry.Col("PolicyName", registry.TString, "PolicyName references a ValidatingAdmissionPolicy name which the ValidatingAdmissionPolicyBinding binds to."),
			registry.Col("ParamRef", registry.TString, "ParamRef specifies the parameter resource used to configure the admission control policy."), registry.AgeCol),
		Cells: func(o runtime.Object) []any {
			b := o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
			ref := "<unset>"
			if r := b.Spec.ParamRef; r != nil {
				switch {
				case r.Name != "" && r.Namespace != "":
					ref = r.Namespace + "/" + r.Name
				case r.Name != "":
					ref = "*/" + r.Name
				default:
					ref = "*/*"
				}
			}
			return []any{b.Name, b.Spec.PolicyName, ref, registry.Age(b)}
		},
	}
)

func ptrTo[T any](v T) *T { return &v }

// ReasonCodes are the reasons a validation may give, with their codes.
var ReasonCodes = map[metav1.StatusReason]int32{
	metav1.StatusReasonUnauthorized:          http.StatusUnauthorized,
	metav1.StatusReasonForbidden:             http.StatusForbidden,
	metav1.StatusReasonInvalid:               http.StatusUnprocessableEntity,
	metav1.StatusReasonRequestEntityTooLarge: http.StatusRequestEntityTooLarge,
}
