package apiserver

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/apiserver/registry/admissionregistration"
	"bonsai.dev/bonsai/store"
)

func (e *testEnv) policy(t *testing.T, name string, spec admissionregistrationv1.ValidatingAdmissionPolicySpec) {
	t.Helper()
	_, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(e.ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *testEnv) binding(t *testing.T, name string, spec admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) {
	t.Helper()
	_, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(e.ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(e.ctx, name, metav1.DeleteOptions{})
	})
}

func configMapRules() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, "", "v1", "configmaps")}}}
}

func nsLabeled(e *testEnv, t *testing.T, name, team string) {
	t.Helper()
	if _, err := e.cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": team}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestValidatingAdmissionPolicyDenyWarnAndMatch(t *testing.T) {
	e := newTestEnv(t)
	nsLabeled(e, t, "strict", "strict")
	nsLabeled(e, t, "lax", "lax")
	e.policy(t, "max-keys.example.com", admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: configMapRules(),
		Validations:      []admissionregistrationv1.Validation{{Expression: "!has(object.data) || size(object.data) <= 2"}},
	})
	deny := admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "max-keys.example.com",
		ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "strict"}}}}
	e.binding(t, "max-keys-deny", deny)
	warn := admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "max-keys.example.com",
		ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit},
		MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "lax"}}}}
	e.binding(t, "max-keys-warn", warn)

	big := map[string]string{"a": "1", "b": "2", "c": "3"}
	cs, rec := e.withWarnings()
	_, err := cs.CoreV1().ConfigMaps("strict").Create(e.ctx, cm("big", big), metav1.CreateOptions{})
	want := `configmaps "big" is forbidden: ValidatingAdmissionPolicy 'max-keys.example.com' with binding 'max-keys-deny' denied request: failed expression: !has(object.data) || size(object.data) <= 2`
	// Without a reason, the denial is Invalid (422) with the message as
	// its cause, as kube-apiserver answers.
	if se, ok := err.(*apierrors.StatusError); !ok || !apierrors.IsInvalid(err) || err.Error() != want || se.ErrStatus.Code != 422 ||
		se.ErrStatus.Details == nil || len(se.ErrStatus.Details.Causes) != 1 || !strings.HasPrefix(se.ErrStatus.Details.Causes[0].Message, "ValidatingAdmissionPolicy 'max-keys.example.com'") {
		t.Errorf("deny: got %#v\nwant %s", err, want)
	}
	if _, err := cs.CoreV1().ConfigMaps("strict").Create(e.ctx, cm("small", map[string]string{"a": "1"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("small: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("lax").Create(e.ctx, cm("big", big), metav1.CreateOptions{}); err != nil {
		t.Errorf("warn only: %v", err)
	}
	wantWarn := "Validation failed for ValidatingAdmissionPolicy 'max-keys.example.com' with binding 'max-keys-warn': failed expression: !has(object.data) || size(object.data) <= 2"
	if w := rec.all(); len(w) != 1 || w[0] != wantWarn {
		t.Errorf("warnings %q", w)
	}
	// Other resources are not matched.
	if _, err := cs.CoreV1().Secrets("strict").Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: big}, metav1.CreateOptions{}); err != nil {
		t.Errorf("secret: %v", err)
	}
	// Without bindings a policy does nothing.
	e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(e.ctx, "max-keys-deny", metav1.DeleteOptions{})
	if _, err := cs.CoreV1().ConfigMaps("strict").Create(e.ctx, cm("big", big), metav1.CreateOptions{}); err != nil {
		t.Errorf("unbound: %v", err)
	}
}

func TestValidatingAdmissionPolicyParamsAndFailures(t *testing.T) {
	e := newTestEnv(t)
	nsLabeled(e, t, "params", "params")
	if _, err := e.cs.CoreV1().ConfigMaps("params").Create(e.ctx, cm("limits", map[string]string{"max": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.policy(t, "limit.example.com", admissionregistrationv1.ValidatingAdmissionPolicySpec{
		ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
		MatchConstraints: configMapRules(),
		MatchConditions:  []admissionregistrationv1.MatchCondition{{Name: "not-params", Expression: "object.metadata.name != 'limits'"}},
		Variables:        []admissionregistrationv1.Variable{{Name: "keys", Expression: "has(object.data) ? size(object.data) : 0"}},
		Validations: []admissionregistrationv1.Validation{{
			Expression:        "variables.keys <= int(params.data.max)",
			MessageExpression: "'at most ' + params.data.max + ' keys, got ' + string(variables.keys)",
			Reason:            ptrTo(metav1.StatusReasonInvalid),
		}},
	})
	e.binding(t, "limit-binding", admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "limit.example.com",
		ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "params", ParameterNotFoundAction: ptrTo(admissionregistrationv1.DenyAction)},
		MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "params"}}}})
	_, err := e.cs.CoreV1().ConfigMaps("params").Create(e.ctx, cm("two", map[string]string{"a": "1", "b": "2"}), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.HasSuffix(err.Error(), "ValidatingAdmissionPolicy 'limit.example.com' with binding 'limit-binding' denied request: at most 1 keys, got 2") {
		t.Errorf("params: %v", err)
	}
	if _, err := e.cs.CoreV1().ConfigMaps("params").Create(e.ctx, cm("one", map[string]string{"a": "1"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("within the limit: %v", err)
	}
	// The parameter object goes: Deny says requests fail.
	if err := e.cs.CoreV1().ConfigMaps("params").Delete(e.ctx, "limits", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.cs.CoreV1().ConfigMaps("params").Create(e.ctx, cm("none", nil), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "no params found for policy binding with `Deny` parameterNotFoundAction") {
		t.Errorf("missing params: %v", err)
	}

	// A runtime error fails the request under failurePolicy Fail and is
	// ignored under Ignore.
	nsLabeled(e, t, "errors", "errors")
	for _, fp := range []admissionregistrationv1.FailurePolicyType{admissionregistrationv1.Fail, admissionregistrationv1.Ignore} {
		name := "err-" + strings.ToLower(string(fp)) + ".example.com"
		e.policy(t, name, admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptrTo(fp),
			MatchConstraints: configMapRules(),
			Validations:      []admissionregistrationv1.Validation{{Expression: "object.data.missing == 'x'"}},
		})
		e.binding(t, name, admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "errors"}}}})
		_, err := e.cs.CoreV1().ConfigMaps("errors").Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "e-"}, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{})
		if fp == admissionregistrationv1.Fail && (err == nil || !strings.Contains(err.Error(), "expression 'object.data.missing == 'x'' resulted in error: no such key: missing")) {
			t.Errorf("Fail: %v", err)
		}
		if fp == admissionregistrationv1.Ignore && err != nil {
			t.Errorf("Ignore: %v", err)
		}
		// The next round checks Ignore alone.
		e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(e.ctx, "err-fail.example.com", metav1.DeleteOptions{})
	}
}

func TestValidatingAdmissionPolicyValidation(t *testing.T) {
	e := newTestEnv(t)
	for _, tc := range []struct {
		name string
		spec admissionregistrationv1.ValidatingAdmissionPolicySpec
		want string
	}{
		{"no match", admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{{Expression: "true"}}}, "spec.matchConstraints: Required value"},
		{"no validations", admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: configMapRules()}, "spec.validations: Required value: validations or auditAnnotations must contain at least one item"},
		{"bad expression", admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: configMapRules(), Validations: []admissionregistrationv1.Validation{{Expression: "object.("}}}, "spec.validations[0].expression: Invalid value: \"object.(\": compilation failed"},
		{"not bool", admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: configMapRules(), Validations: []admissionregistrationv1.Validation{{Expression: "1 + 1"}}}, "must evaluate to bool"},
		{"audit annotation", admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: configMapRules(), AuditAnnotations: []admissionregistrationv1.AuditAnnotation{{Key: "k", ValueExpression: "object.("}}}, "spec.auditAnnotations[0].valueExpression: Invalid value"},
		{"reason", admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: configMapRules(), Validations: []admissionregistrationv1.Validation{{Expression: "true", Reason: ptrTo(metav1.StatusReasonConflict)}}}, `spec.validations[0].reason: Unsupported value: "Conflict"`},
	} {
		_, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(e.ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: tc.spec}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		spec admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec
		want string
	}{
		{"no policy", admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}, "spec.policyName: Required value"},
		{"no actions", admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p"}, "spec.validationActions: Required value"},
		{"deny and warn", admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny, admissionregistrationv1.Warn}}, "must not contain both Deny and Warn"},
		{"param action", admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, ParamRef: &admissionregistrationv1.ParamRef{Name: "x"}}, "spec.paramRef.parameterNotFoundAction: Required value"},
	} {
		_, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(e.ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: tc.spec}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// FuzzAdmissionCEL feeds arbitrary expressions and objects to the
// admission CEL environment: compiling and evaluating may fail, never
// panic, and an expression that compiles as a bool yields a bool or an
// error.
func FuzzAdmissionCEL(f *testing.F) {
	f.Add("object.metadata.name.startsWith('a')", `{"metadata":{"name":"abc","labels":{"x":"y"}}}`)
	f.Add("has(object.data) && size(object.data) <= 2", `{"data":{"a":"1"}}`)
	f.Add("object.spec.replicas > 1.5", `{"spec":{"replicas":3}}`)
	f.Add("object.items.all(i, i > 0)", `{"items":[1,2,-3]}`)
	f.Fuzz(func(t *testing.T, expr, obj string) {
		p, err := compileCEL(expr, nil)
		if err != nil {
			return
		}
		v, err := jsonValueRaw([]byte(obj))
		if err != nil {
			return
		}
		p.eval(map[string]any{"object": v, "oldObject": nil, "request": nil, "params": nil, "namespaceObject": nil, "variables": map[string]any{}})
		if b, err := compileCEL(expr, cel.BoolType); err == nil {
			b.evalBool(map[string]any{"object": v, "oldObject": nil, "request": nil, "params": nil, "namespaceObject": nil, "variables": map[string]any{}})
		}
	})
}

// FuzzWebhookRules checks that rule validation and matching never panic
// and that a rule validation accepts always matches something sensible:
// "*" matches every resource without a subresource.
func FuzzWebhookRules(f *testing.F) {
	f.Add("pods/status", "pods", "status")
	f.Add("*/*", "deployments", "scale")
	f.Add("*", "configmaps", "")
	f.Add("a//b", "a", "")
	f.Fuzz(func(t *testing.T, rule, resource, sub string) {
		admissionregistration.ValidateRuleResources(field.NewPath("resources"), []string{rule})
		got := resourceMatches(rule, resource, sub)
		if rule == "*" && got != (sub == "") {
			t.Errorf("%q on %s/%s: %v", rule, resource, sub, got)
		}
		if rule == "*/*" && !got {
			t.Errorf("*/* did not match %s/%s", resource, sub)
		}
	})
}

const replicaLimitCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: replicalimits.rules.example.com
spec:
  group: rules.example.com
  scope: Namespaced
  names: {plural: replicalimits, singular: replicalimit, kind: ReplicaLimit, listKind: ReplicaLimitList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          maxReplicas: {type: integer}
`

// TestAdmissionWithCustomResources: a policy whose params are custom
// objects (the usual way), and a mutating webhook patching a custom
// object.
func TestAdmissionWithCustomResources(t *testing.T) {
	e := newTestEnv(t)
	createCRD(t, e, replicaLimitCRD)
	limits := schema.GroupVersionResource{Group: "rules.example.com", Version: "v1", Resource: "replicalimits"}
	waitServed(t, e, limits, true)

	h := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return patchResponse(jsonPatch(map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{"checked": "yes"}}))
	})
	e.mutating(t, "limits", mutatingHook(urlHook("limits.example.com", h, rule(opsCreate, "rules.example.com", "*", "replicalimits"))))
	limit := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "rules.example.com/v1", "kind": "ReplicaLimit",
		"metadata": map[string]any{"name": "limit"}, "maxReplicas": int64(2)}}
	got, err := e.dyn.Resource(limits).Namespace("default").Create(e.ctx, limit, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetLabels()["checked"] != "yes" {
		t.Errorf("custom object not patched: %v", got.GetLabels())
	}
	if calls := h.calls(); len(calls) != 1 || calls[0].Kind.Kind != "ReplicaLimit" {
		t.Errorf("webhook calls: %d", len(calls))
	}

	e.policy(t, "replicas.example.com", admissionregistrationv1.ValidatingAdmissionPolicySpec{
		ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "rules.example.com/v1", Kind: "ReplicaLimit"},
		MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: rule(opsCreate, "apps", "v1", "deployments")}}},
		Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= params.maxReplicas", Reason: ptrTo(metav1.StatusReasonInvalid)}},
	})
	e.binding(t, "replicas-default", admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "replicas.example.com",
		ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		ParamRef:          &admissionregistrationv1.ParamRef{Name: "limit", ParameterNotFoundAction: ptrTo(admissionregistrationv1.DenyAction)}})
	deploy := func(name string, replicas int32) error {
		labels := map[string]string{"app": name}
		_, err := e.cs.AppsV1().Deployments("default").Create(e.ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}},
			metav1.CreateOptions{})
		return err
	}
	if err := deploy("big", 3); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "denied request: failed expression: object.spec.replicas <= params.maxReplicas") {
		t.Errorf("3 replicas over a limit of 2: %v", err)
	}
	if err := deploy("small", 2); err != nil {
		t.Errorf("2 replicas: %v", err)
	}
}

// TestValidatingAdmissionPolicyAuditAction: a binding with Audit lets the
// request through and records the failure in its audit event, under
// kube-apiserver's annotation.
func TestValidatingAdmissionPolicyAuditAction(t *testing.T) {
	policy, err := audit.ParsePolicy([]byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  omitStages: [RequestReceived]\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	s, err := New(Config{Store: st, AuditPolicy: policy, AuditLog: audit.NewLog(buf), AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); st.Close() })
	for _, w := range []struct{ path, body string }{
		{"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", `{"metadata":{"name":"no-data.example.com"},"spec":{
			"matchConstraints":{"resourceRules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["configmaps"]}]},
			"validations":[{"expression":"true"},{"expression":"!has(object.data)","message":"no data please"}]}}`},
		{"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", `{"metadata":{"name":"no-data-audit"},"spec":{
			"policyName":"no-data.example.com","validationActions":["Audit"]}}`},
		{"/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"audited"},"data":{"k":"v"}}`},
	} {
		if rec := serveAs(s, "POST", w.path, "", w.body, nil); rec.Code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", w.path, rec.Code, rec.Body)
		}
	}
	evs := buf.events(t)
	last := evs[len(evs)-1]
	want := `[{"message":"no data please","policy":"no-data.example.com","binding":"no-data-audit","expressionIndex":1,"validationActions":["Audit"]}]`
	if last.ObjectRef == nil || last.ObjectRef.Resource != "configmaps" || last.Annotations[validationFailureAnnotation] != want {
		t.Errorf("audit event of the create: %+v\nannotations %v", last.ObjectRef, last.Annotations)
	}
}
