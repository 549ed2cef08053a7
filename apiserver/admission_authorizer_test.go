package apiserver

import (
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAdmissionCELAuthorizer: policies' validations and webhooks'
// matchConditions ask the server's RBAC through CEL's authorizer
// (authorizer.group().resource().check(), authorizer.requestResource)
// for the user making the request.
func TestAdmissionCELAuthorizer(t *testing.T) {
	e := newRBACEnv(t, "RBAC")
	if _, err := e.admin.RbacV1().ClusterRoles().Create(e.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"create", "get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.RbacV1().ClusterRoles().Create(e.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "prod-signer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"example.com"}, Resources: []string{"signers"}, ResourceNames: []string{"prod"}, Verbs: []string{"use"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"delete"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"jane", "bob"} {
		e.bind(t, "default", "writer-"+u, "ClusterRole", "writer", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	e.bind(t, "default", "prod-signer-bob", "ClusterRole", "prod-signer", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"})

	_, err := e.admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(e.ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "prod.example.com"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: configMapRules(),
			MatchConditions:  []admissionregistrationv1.MatchCondition{{Name: "prod", Expression: "has(object.metadata.labels) && object.metadata.labels['env'] == 'prod'"}},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "authorizer.group('example.com').resource('signers').namespace(request.namespace).name('prod').check('use').allowed()", Message: "no prod signer"},
				{Expression: "authorizer.requestResource.check('delete').allowed()", MessageExpression: "'may not delete ' + authorizer.requestResource.check('delete').reason()"},
			},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a policy using authorizer: %v", err)
	}
	if _, err := e.admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(e.ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prod"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "prod.example.com",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "only node listers"}}
	})
	hook := urlHook("secrets.example.com", h, rule(opsCreate, "", "v1", "secrets"))
	hook.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-node-lister", Expression: "!authorizer.group('').resource('nodes').check('list').allowed()"}}
	if _, err := e.admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(e.ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "secrets"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{hook}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a webhook matchCondition using authorizer: %v", err)
	}

	jane, bob := e2eClient(t, e.s, userNamed("jane")), e2eClient(t, e.s, userNamed("bob"))
	prod := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": "prod"}}}
	}
	// The admission caches fill from a watch; wait for the policy to bite.
	var janeErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, janeErr = jane.CoreV1().ConfigMaps("default").Create(e.ctx, prod("jane-prod"), metav1.CreateOptions{}); janeErr != nil {
			break
		}
		jane.CoreV1().ConfigMaps("default").Delete(e.ctx, "jane-prod", metav1.DeleteOptions{})
	}
	if !apierrors.IsInvalid(janeErr) || !strings.Contains(janeErr.Error(), "denied request: no prod signer") {
		t.Fatalf("jane without the signer: %v", janeErr)
	}
	if _, err := bob.CoreV1().ConfigMaps("default").Create(e.ctx, prod("bob-prod"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("bob with the signer and delete: %v", err)
	}
	if _, err := jane.CoreV1().ConfigMaps("default").Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "jane-dev"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("jane outside the matchCondition: %v", err)
	}
	// authorizer.requestResource is the request's resource in the
	// request's namespace: bob may use the signer in kube-public too,
	// but may delete configmaps only in default.
	if _, err := e.admin.RbacV1().ClusterRoles().Create(e.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "signer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"signers"}, Verbs: []string{"use"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.bind(t, "kube-public", "writer-bob", "ClusterRole", "writer", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"})
	e.bind(t, "kube-public", "signer-bob", "ClusterRole", "signer", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"})
	// The authorizer's cache fills from a watch: until it has the new
	// bindings the signer check denies first.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err = bob.CoreV1().ConfigMaps("kube-public").Create(e.ctx, prod("bob-public"), metav1.CreateOptions{})
		if !strings.Contains(errText(err), "denied request: no prod signer") || time.Now().After(deadline) {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "denied request: may not delete") {
		t.Fatalf("bob in kube-public (no delete there): %v", err)
	}

	// Webhook matchConditions: the admin lists nodes, so the webhook is
	// not asked; jane does not, so it is, and denies.
	if _, err := e.admin.CoreV1().Secrets("default").Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "admin"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin secret: %v", err)
	}
	if n := len(h.calls()); n != 0 {
		t.Fatalf("webhook asked %d times for the admin", n)
	}
	_, err = jane.CoreV1().Secrets("default").Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "jane"}}, metav1.CreateOptions{})
	if !strings.Contains(errText(err), `admission webhook "secrets.example.com" denied the request: only node listers`) {
		t.Fatalf("jane's secret: %v", err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
