package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"k8s.io/apiserver/pkg/cel/library"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	k8sauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
)

// CEL for admission: webhooks' and policies' matchConditions and
// policies' validations see the variables kube-apiserver gives them —
// object, oldObject, request, params, namespaceObject and, in policies,
// variables — as JSON-shaped values.

// celCostLimit bounds one expression's evaluation, as kube-apiserver's
// per-expression cost budget does.
const celCostLimit = 1000000

var (
	celEnvOnce sync.Once
	celEnv     *cel.Env
	celEnvErr  error
)

func admissionCELEnv() (*cel.Env, error) {
	celEnvOnce.Do(func() {
		celEnv, celEnvErr = cel.NewEnv(
			cel.Variable("object", cel.DynType),
			cel.Variable("oldObject", cel.DynType),
			cel.Variable("request", cel.DynType),
			cel.Variable("params", cel.DynType),
			cel.Variable("namespaceObject", cel.DynType),
			cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
			ext.Strings(),
			cel.CrossTypeNumericComparisons(true),
			// Kubernetes' own libraries, as kube-apiserver gives
			// admission expressions.
			library.URLs(), library.Regex(), library.Lists(), library.Quantity(),
			library.IP(), library.CIDR(), library.Format(), library.SemverLib(),
			cel.OptionalTypes(),
			// authorizer: checks against the server's authorizer for
			// the requesting user; authorizer.requestResource is the
			// check of the request's own resource.
			library.Authz(), library.AuthzSelectors(),
			cel.Variable("authorizer", library.AuthorizerType),
			cel.Variable("authorizer.requestResource", library.ResourceCheckType),
		)
	})
	return celEnv, celEnvErr
}

// celProgram is one compiled expression.
type celProgram struct {
	expr string
	prg  cel.Program
}

// compileCEL compiles expr; want is the result type it must have
// (cel.BoolType, cel.StringType) or nil for any.
func compileCEL(expr string, want *cel.Type) (*celProgram, error) {
	env, err := admissionCELEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("compilation failed: %v", iss.Err())
	}
	if want != nil && ast.OutputType() != cel.DynType && !ast.OutputType().IsExactType(want) {
		return nil, fmt.Errorf("must evaluate to %s but got %s", want, ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(celCostLimit))
	if err != nil {
		return nil, fmt.Errorf("compilation failed: %v", err)
	}
	return &celProgram{expr: expr, prg: prg}, nil
}

// checkCEL is compileCEL for validation, which needs only its error.
func checkCEL(expr string, want *cel.Type) error {
	_, err := compileCEL(expr, want)
	return err
}

func (p *celProgram) eval(vars map[string]any) (ref.Val, error) {
	out, _, err := p.prg.Eval(vars)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (p *celProgram) evalBool(vars map[string]any) (bool, error) {
	out, err := p.eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("expression %q did not evaluate to a bool", p.expr)
	}
	return bool(b), nil
}

// matchConditions are a webhook's or policy's compiled matchConditions.
type matchConditions struct {
	names []string
	prgs  []*celProgram
}

func compileMatchConditions(mcs []admissionregistrationv1.MatchCondition, _ bool) (*matchConditions, error) {
	m := &matchConditions{}
	for _, mc := range mcs {
		p, err := compileCEL(mc.Expression, cel.BoolType)
		if err != nil {
			return nil, fmt.Errorf("matchCondition %q: %w", mc.Name, err)
		}
		m.names, m.prgs = append(m.names, mc.Name), append(m.prgs, p)
	}
	return m, nil
}

// match is false if any condition is false; an error (when none is false)
// is for the failurePolicy to decide.
func (m *matchConditions) match(req *admissionv1.AdmissionRequest, a *admissionAttrs, params any) (bool, error) {
	if m == nil || len(m.prgs) == 0 {
		return true, nil
	}
	vars, err := celVars(req, a, params)
	if err != nil {
		return false, err
	}
	var firstErr error
	for i, p := range m.prgs {
		ok, err := p.evalBool(vars)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("failed to evaluate match condition %q: %w", m.names[i], err)
			}
			continue
		}
		if !ok {
			return false, nil
		}
	}
	return firstErr == nil, firstErr
}

// celVars are the variables of one admission request.
func celVars(req *admissionv1.AdmissionRequest, a *admissionAttrs, params any) (map[string]any, error) {
	vars := map[string]any{"params": params}
	var err error
	if vars["object"], err = jsonValueRaw(req.Object.Raw); err != nil {
		return nil, err
	}
	if vars["oldObject"], err = jsonValueRaw(req.OldObject.Raw); err != nil {
		return nil, err
	}
	r := *req
	r.Object, r.OldObject = runtime.RawExtension{}, runtime.RawExtension{}
	if vars["request"], err = jsonValue(&r); err != nil {
		return nil, err
	}
	vars["namespaceObject"] = nil
	if a.user != nil && a.authorizer != nil {
		u := &user.DefaultInfo{Name: a.user.Name, UID: a.user.UID, Groups: a.user.Groups, Extra: a.user.Extra}
		z := celAuthorizer{a.authorizer}
		vars["authorizer"] = library.NewAuthorizerVal(u, z)
		vars["authorizer.requestResource"] = library.NewResourceAuthorizerVal(u, z, requestResource{a})
	}
	return vars, nil
}

// celAuthorizer answers the CEL authorizer library's checks with the
// server's authorizer (RBAC, Node, system:masters), as kube-apiserver
// gives admission expressions its own.
type celAuthorizer struct{ z authz.Authorizer }

func (c celAuthorizer) Authorize(ctx context.Context, at k8sauthorizer.Attributes) (k8sauthorizer.Decision, string, error) {
	var u *authn.User
	if ui := at.GetUser(); ui != nil {
		u = &authn.User{Name: ui.GetName(), UID: ui.GetUID(), Groups: ui.GetGroups(), Extra: ui.GetExtra()}
	}
	d, reason, err := c.z.Authorize(ctx, authz.Attributes{
		User: u, Verb: at.GetVerb(), ResourceRequest: at.IsResourceRequest(), APIGroup: at.GetAPIGroup(),
		APIVersion: at.GetAPIVersion(), Resource: at.GetResource(), Subresource: at.GetSubresource(),
		Namespace: at.GetNamespace(), Name: at.GetName(), Path: at.GetPath(),
	})
	switch d {
	case authz.Allow:
		return k8sauthorizer.DecisionAllow, reason, err
	case authz.Deny:
		return k8sauthorizer.DecisionDeny, reason, err
	}
	return k8sauthorizer.DecisionNoOpinion, reason, err
}

// requestResource is the resource a request is on, for
// authorizer.requestResource.
type requestResource struct{ a *admissionAttrs }

func (r requestResource) GetName() string                          { return r.a.name }
func (r requestResource) GetNamespace() string                     { return r.a.namespace }
func (r requestResource) GetResource() schema.GroupVersionResource { return r.a.res.gvr }
func (r requestResource) GetSubresource() string                   { return r.a.subresource }

func jsonValue(v any) (any, error) {
	if v == nil || reflect.ValueOf(v).Kind() == reflect.Pointer && reflect.ValueOf(v).IsNil() {
		return nil, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonValueRaw(data)
}

// jsonValueRaw decodes JSON with integers as int64, as CEL's int.
func jsonValueRaw(data []byte) (any, error) {
	if len(data) == 0 {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return numbersToCEL(v), nil
}

func numbersToCEL(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbersToCEL(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbersToCEL(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
