package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/google/cel-go/cel"
	celtypes "github.com/google/cel-go/common/types"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"

	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/apiserver/registry/admissionregistration"
	"bonsai.dev/bonsai/store"
)

// ValidatingAdmissionPolicy: CEL validations bound to requests by
// ValidatingAdmissionPolicyBindings, run before the validating webhooks,
// as kube-apiserver's ValidatingAdmissionPolicy plugin does.

// compiledPolicy is one ValidatingAdmissionPolicy, compiled.
type compiledPolicy struct {
	name          string
	policy        *admissionregistrationv1.ValidatingAdmissionPolicy
	failurePolicy admissionregistrationv1.FailurePolicyType
	match         *compiledMatch
	conditions    *matchConditions
	variables     []namedProgram
	validations   []compiledValidation
	// auditAnnotations are the policy's auditAnnotations, by key.
	auditAnnotations []namedProgram
	// err is why the policy cannot be used (an expression that does not
	// compile); it fails requests the policy matches as its failurePolicy
	// says.
	err error
}

type namedProgram struct {
	name string
	prg  *celProgram
}

type compiledValidation struct {
	v          admissionregistrationv1.Validation
	prg        *celProgram
	messageExp *celProgram
}

// compiledMatch is a policy's matchConstraints or a binding's
// matchResources.
type compiledMatch struct {
	rules, exclude []admissionregistrationv1.RuleWithOperations
	nsSelector     labels.Selector
	objSelector    labels.Selector
	matchPolicy    admissionregistrationv1.MatchPolicyType
}

func compileMatch(m *admissionregistrationv1.MatchResources) (*compiledMatch, error) {
	c := &compiledMatch{nsSelector: labels.Everything(), objSelector: labels.Everything(), matchPolicy: admissionregistrationv1.Equivalent}
	if m == nil {
		return c, nil
	}
	for _, r := range m.ResourceRules {
		c.rules = append(c.rules, r.RuleWithOperations)
	}
	for _, r := range m.ExcludeResourceRules {
		c.exclude = append(c.exclude, r.RuleWithOperations)
	}
	if m.MatchPolicy != nil {
		c.matchPolicy = *m.MatchPolicy
	}
	var err error
	if m.NamespaceSelector != nil {
		if c.nsSelector, err = metav1.LabelSelectorAsSelector(m.NamespaceSelector); err != nil {
			return nil, err
		}
	}
	if m.ObjectSelector != nil {
		if c.objSelector, err = metav1.LabelSelectorAsSelector(m.ObjectSelector); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// matches: rules (all resources when a binding gives none) and not
// excluded, selectors.
func (s *Server) policyMatches(ctx context.Context, m *compiledMatch, a *admissionAttrs, rulesRequired bool) (bool, error) {
	if len(m.rules) > 0 || rulesRequired {
		ok := rulesMatch(m.rules, a, a.res)
		if !ok && m.matchPolicy == admissionregistrationv1.Equivalent {
			if eq := s.equivalentResource(a.res); eq != nil {
				ok = rulesMatch(m.rules, a, eq)
			}
		}
		if !ok {
			return false, nil
		}
	}
	if len(m.exclude) > 0 && rulesMatch(m.exclude, a, a.res) {
		return false, nil
	}
	if !objectSelected(m.objSelector, a) {
		return false, nil
	}
	return s.namespaceSelected(ctx, m.nsSelector, a)
}

func compilePolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) *compiledPolicy {
	c := &compiledPolicy{name: p.Name, policy: p, failurePolicy: admissionregistrationv1.Fail}
	if p.Spec.FailurePolicy != nil {
		c.failurePolicy = *p.Spec.FailurePolicy
	}
	if c.match, c.err = compileMatch(p.Spec.MatchConstraints); c.err != nil {
		return c
	}
	if c.conditions, c.err = compileMatchConditions(p.Spec.MatchConditions, true); c.err != nil {
		return c
	}
	for _, v := range p.Spec.Variables {
		prg, err := compileCEL(v.Expression, nil)
		if err != nil {
			c.err = fmt.Errorf("variable %q: %w", v.Name, err)
			return c
		}
		c.variables = append(c.variables, namedProgram{name: v.Name, prg: prg})
	}
	for _, an := range p.Spec.AuditAnnotations {
		prg, err := compileCEL(an.ValueExpression, nil)
		if err != nil {
			c.err = fmt.Errorf("auditAnnotation %q: %w", an.Key, err)
			return c
		}
		c.auditAnnotations = append(c.auditAnnotations, namedProgram{name: an.Key, prg: prg})
	}
	for _, v := range p.Spec.Validations {
		cv := compiledValidation{v: v}
		var err error
		if cv.prg, err = compileCEL(v.Expression, cel.BoolType); err != nil {
			c.err = err
			return c
		}
		if v.MessageExpression != "" {
			if cv.messageExp, err = compileCEL(v.MessageExpression, cel.StringType); err != nil {
				c.err = err
				return c
			}
		}
		c.validations = append(c.validations, cv)
	}
	return c
}

// policyAdmission owns the policy and binding caches.
type policyAdmission struct {
	policies *configCache[map[string]*compiledPolicy]
	bindings *configCache[[]*compiledBinding]
}

// compiledBinding is a binding with its matchResources compiled (nil
// when it has none).
type compiledBinding struct {
	*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	match *compiledMatch
	err   error
}

func newPolicyAdmission(s *Server) *policyAdmission {
	return &policyAdmission{
		policies: newConfigCache(s, gvr("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"), func(objs []runtime.Object) map[string]*compiledPolicy {
			out := map[string]*compiledPolicy{}
			for _, o := range objs {
				p := o.(*admissionregistrationv1.ValidatingAdmissionPolicy)
				out[p.Name] = compilePolicy(p)
			}
			return out
		}),
		bindings: newConfigCache(s, gvr("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings"), func(objs []runtime.Object) []*compiledBinding {
			out := make([]*compiledBinding, 0, len(objs))
			for _, o := range objs {
				b := &compiledBinding{ValidatingAdmissionPolicyBinding: o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)}
				if b.Spec.MatchResources != nil {
					b.match, b.err = compileMatch(b.Spec.MatchResources)
				}
				out = append(out, b)
			}
			sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
			return out
		}),
	}
}

// admitPolicies evaluates every binding whose policy matches a.
func (s *Server) admitPolicies(ctx context.Context, a *admissionAttrs) error {
	bindings, err := s.policies.bindings.get(ctx)
	if err != nil || len(bindings) == 0 {
		return err
	}
	policies, err := s.policies.policies.get(ctx)
	if err != nil {
		return err
	}
	// Audit annotations are written whatever the outcome.
	annotations := policyAnnotations{}
	defer annotations.publish(ctx)
	for _, b := range bindings {
		p := policies[b.Spec.PolicyName]
		if p == nil {
			continue // a binding to a missing policy is ignored
		}
		if err := s.evalBinding(ctx, p, b, a, annotations); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) evalBinding(ctx context.Context, p *compiledPolicy, cb *compiledBinding, a *admissionAttrs, annotations policyAnnotations) error {
	b := cb.ValidatingAdmissionPolicyBinding
	actions := sets.New(b.Spec.ValidationActions...)
	// failure reports a configuration or evaluation failure by the
	// policy's failurePolicy.
	failure := func(err error) error {
		if p.failurePolicy == admissionregistrationv1.Ignore {
			return nil
		}
		return s.policyOutcome(ctx, p, b, a, actions, err.Error(), "", -1)
	}
	if p.err == nil {
		if ok, err := s.policyMatches(ctx, p.match, a, true); err != nil || !ok {
			return err
		}
	} else if ok, _ := s.policyMatches(ctx, p.match, a, true); !ok {
		return nil
	}
	if cb.err != nil {
		return failure(cb.err)
	}
	if cb.match != nil {
		if ok, err := s.policyMatches(ctx, cb.match, a, false); err != nil || !ok {
			return err
		}
	}
	if p.err != nil {
		return failure(p.err)
	}
	params, err := s.policyParams(ctx, p, b, a)
	if err != nil {
		return failure(err)
	}
	if params == nil {
		// No params found, and the binding allows that.
		return nil
	}
	req, err := invocation{res: a.res}.request(a)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	for _, param := range params {
		if err := s.evalPolicy(ctx, p, b, a, actions, req, param, failure, annotations); err != nil {
			return err
		}
	}
	return nil
}

// policyParams lists the parameter objects a binding gives the policy:
// [nil] when the policy takes none, nil when none is found and the
// binding allows that.
func (s *Server) policyParams(ctx context.Context, p *compiledPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, a *admissionAttrs) ([]any, error) {
	pk := p.policy.Spec.ParamKind
	if pk == nil {
		return []any{nil}, nil
	}
	ref := b.Spec.ParamRef
	if ref == nil {
		return nil, fmt.Errorf("failed to configure binding: no paramRef in binding %q for policy with paramKind", b.Name)
	}
	gv, err := schema.ParseGroupVersion(pk.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("failed to configure policy: %w", err)
	}
	// Parameters are often custom resources (a CRD made for the policy).
	var pres *resource
	for _, reg := range s.registries() {
		for _, r := range reg.byGVR {
			if r.gvr.GroupVersion() == gv && r.kind == pk.Kind && r.storage == nil {
				pres = r
			}
		}
	}
	if pres == nil {
		return nil, fmt.Errorf("failed to configure policy: failed to find resource referenced by paramKind: '%s, Kind=%s'", pk.APIVersion, pk.Kind)
	}
	namespace := ""
	if pres.namespaced {
		namespace = ref.Namespace
		if namespace == "" {
			namespace = a.namespace
		}
		if namespace == "" {
			return nil, fmt.Errorf("failed to configure binding: cannot use a namespaced paramRef without a namespace on a cluster-scoped request")
		}
	}
	var objs []runtime.Object
	if ref.Name != "" {
		obj, _, err := s.getObject(ctx, pres, namespace, ref.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
		if err == nil {
			objs = append(objs, obj)
		}
	} else {
		sel := labels.Everything()
		if ref.Selector != nil {
			if sel, err = metav1.LabelSelectorAsSelector(ref.Selector); err != nil {
				return nil, err
			}
		}
		l, err := s.cfg.Store.List(ctx, pres.prefix(namespace), store.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, kv := range l.Items {
			obj, err := decodeStored(pres, kv)
			if err != nil {
				continue
			}
			if m, _ := metaOf(obj); sel.Matches(labels.Set(m.GetLabels())) {
				objs = append(objs, obj)
			}
		}
	}
	if len(objs) == 0 {
		if ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.AllowAction {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction")
	}
	out := make([]any, 0, len(objs))
	for _, o := range objs {
		o.GetObjectKind().SetGroupVersionKind(pres.gvk())
		v, err := jsonValue(o)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (s *Server) evalPolicy(ctx context.Context, p *compiledPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, a *admissionAttrs, actions sets.Set[admissionregistrationv1.ValidationAction], req *admissionv1.AdmissionRequest, param any, failure func(error) error, annotations policyAnnotations) error {
	if ok, err := p.conditions.match(req, a, param); err != nil {
		return failure(err)
	} else if !ok {
		return nil
	}
	vars, err := celVars(req, a, param)
	if err != nil {
		return failure(err)
	}
	if a.res.namespaced && a.namespace != "" {
		if ns, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "namespaces")], "", a.namespace); err == nil {
			vars["namespaceObject"], _ = jsonValue(ns)
		}
	}
	// Variables are evaluated in order; each may use the ones before.
	composed := map[string]any{}
	vars["variables"] = composed
	for _, v := range p.variables {
		out, err := v.prg.eval(vars)
		if err != nil {
			return failure(fmt.Errorf("variable %q: %w", v.name, err))
		}
		composed[v.name] = out
	}
	// auditAnnotations: a string is written (an empty one and null are
	// not); an error or another type fails as the failurePolicy says.
	for _, an := range p.auditAnnotations {
		out, err := an.prg.eval(vars)
		var msg string
		switch {
		case err != nil:
			if p.failurePolicy == admissionregistrationv1.Ignore {
				continue
			}
			msg = fmt.Sprintf("valueExpression '%s' resulted in error: %v", an.prg.expr, err)
		case out.Type() == celtypes.StringType:
			if v := strings.TrimSpace(out.Value().(string)); v != "" {
				annotations.add(p.name, an.name, v)
			}
			continue
		case out.Type() == celtypes.NullType:
			continue
		default:
			msg = fmt.Sprintf("valueExpression '%s' resulted in unsupported return type: %v. Return type must be either string or null.", an.prg.expr, out.Type())
		}
		// A failed audit annotation denies whatever the binding's
		// actions, as in kube-apiserver.
		if err := s.policyOutcome(ctx, p, b, a, sets.New(admissionregistrationv1.Deny), msg, "", -1); err != nil {
			return err
		}
	}
	for i, v := range p.validations {
		ok, err := v.prg.evalBool(vars)
		if err != nil {
			if err := failure(fmt.Errorf("expression '%s' resulted in error: %w", v.v.Expression, err)); err != nil {
				return err
			}
			continue
		}
		if ok {
			continue
		}
		msg := v.v.Message
		if v.messageExp != nil {
			if out, err := v.messageExp.eval(vars); err == nil {
				if m, ok := out.Value().(string); ok && strings.TrimSpace(m) != "" && !strings.Contains(m, "\n") {
					msg = m
				}
			}
		}
		if msg == "" {
			msg = "failed expression: " + v.v.Expression
		}
		var reason metav1.StatusReason
		if v.v.Reason != nil {
			reason = *v.v.Reason
		}
		if err := s.policyOutcome(ctx, p, b, a, actions, msg, reason, i); err != nil {
			return err
		}
	}
	return nil
}

// policyOutcome enforces one failed validation (index, or -1 for a
// failure of the policy itself) by the binding's actions: Audit records it
// in the request's audit event, Warn adds a warning, Deny refuses the
// request.
func (s *Server) policyOutcome(ctx context.Context, p *compiledPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, a *admissionAttrs, actions sets.Set[admissionregistrationv1.ValidationAction], msg string, reason metav1.StatusReason, index int) error {
	if actions.Has(admissionregistrationv1.Audit) {
		auditValidationFailure(ctx, policyFailure{Message: msg, Policy: p.name, Binding: b.Name, ExpressionIndex: index, ValidationActions: b.Spec.ValidationActions})
	}
	if actions.Has(admissionregistrationv1.Warn) {
		addWarningTo(ctx, fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s", p.name, b.Name, msg))
	}
	if !actions.Has(admissionregistrationv1.Deny) {
		return nil
	}
	// kube-apiserver words every denial as a Forbidden one, but gives it
	// the validation's reason and that reason's code, Invalid (422) when
	// the validation has none, and the message also as a cause.
	message := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", p.name, b.Name, msg)
	err := apierrors.NewForbidden(qualified(a.res), a.name, errors.New(message))
	if _, ok := admissionregistration.ReasonCodes[reason]; !ok || reason == "" {
		reason = metav1.StatusReasonInvalid
	}
	err.ErrStatus.Reason, err.ErrStatus.Code = reason, admissionregistration.ReasonCodes[reason]
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Message: message})
	return err
}

// validationFailureAnnotation is the audit annotation kube-apiserver puts
// a policy's Audit failures under, as a JSON list.
const validationFailureAnnotation = "validation.policy.admission.k8s.io/validation_failure"

type policyFailure struct {
	Message           string                                     `json:"message"`
	Policy            string                                     `json:"policy"`
	Binding           string                                     `json:"binding"`
	ExpressionIndex   int                                        `json:"expressionIndex"`
	ValidationActions []admissionregistrationv1.ValidationAction `json:"validationActions"`
}

// maxValidationFailures bounds the failures one annotation lists, as
// kube-apiserver does.
const maxValidationFailures = 50

func auditValidationFailure(ctx context.Context, f policyFailure) {
	updateAnnotations(ctx, audit.LevelMetadata, func(a map[string]string) {
		var all []policyFailure
		if prev := a[validationFailureAnnotation]; prev != "" {
			json.Unmarshal([]byte(prev), &all)
		}
		if len(all) >= maxValidationFailures {
			return
		}
		if data, err := json.Marshal(append(all, f)); err == nil {
			a[validationFailureAnnotation] = string(data)
		}
	})
}

// maxAuditAnnotationValueLength bounds a policy's audit annotation value,
// as kube-apiserver does.
const maxAuditAnnotationValueLength = 10 * 1024

// policyAnnotations collects the audit annotations of a request's
// policies: per policy, per key, the distinct values its bindings gave.
type policyAnnotations map[string]map[string][]string

func (pa policyAnnotations) add(policy, key, value string) {
	if len(value) > maxAuditAnnotationValueLength {
		value = value[:maxAuditAnnotationValueLength]
	}
	if pa[policy] == nil {
		pa[policy] = map[string][]string{}
	}
	for _, v := range pa[policy][key] {
		if v == value {
			return
		}
	}
	pa[policy][key] = append(pa[policy][key], value)
}

// publish writes them as "<policy>/<key>": values of several bindings
// (of different params) joined by ", ", as kube-apiserver does.
func (pa policyAnnotations) publish(ctx context.Context) {
	for policy, keys := range pa {
		for key, values := range keys {
			addAdmissionAnnotation(ctx, audit.LevelMetadata, policy+"/"+key, strings.Join(values, ", "))
		}
	}
}
