package apiserver

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/store"
)

// readAuditFile reads the events of an audit log file.
func readAuditFile(t *testing.T, path string) []audit.Event {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseAuditEvents(t, data)
}

// TestAdmissionAuditAnnotations: a policy's auditAnnotations (as
// "<policy>/<key>"), its Audit failures, the webhooks' own
// auditAnnotations (as "<webhook>/<key>") and the mutating webhooks'
// mutation and patch records reach the audit log file, as kube-apiserver
// writes them; a valueExpression of the wrong type denies.
func TestAdmissionAuditAnnotations(t *testing.T) {
	policy, err := audit.ParsePolicy([]byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Request\n  omitStages: [RequestReceived]\n"))
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "audit.log")
	log, err := audit.OpenLog(logPath, audit.Rotation{MaxSizeMB: 100})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: st, AuditPolicy: policy, AuditLog: log, AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); st.Close(); log.Close() })

	mut := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		r := patchResponse(jsonPatch(map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{"checked": "yes"}}))
		r.AuditAnnotations = map[string]string{"checked": "yes"}
		return r
	})
	val := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: true, AuditAnnotations: map[string]string{"verdict": "fine"}}
	})
	cmRule := rule(opsCreate, "", "v1", "configmaps")
	mutCfg := admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "mutate"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{mutatingHook(urlHook("mutate.example.com", mut, cmRule))}}
	valCfg := admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "validate"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{urlHook("validate.example.com", val, cmRule)}}
	body := func(o any) string {
		b, _ := json.Marshal(o)
		return string(b)
	}
	for _, w := range []struct{ path, body string }{
		{"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", body(mutCfg)},
		{"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", body(valCfg)},
		{"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", `{"metadata":{"name":"keys.example.com"},"spec":{
			"matchConstraints":{"resourceRules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["configmaps"]}]},
			"auditAnnotations":[{"key":"data-keys","valueExpression":"string(size(object.data))"},{"key":"skipped","valueExpression":"null"},{"key":"blank","valueExpression":"' '"}],
			"validations":[{"expression":"size(object.data) < 2","message":"too many keys"}]}}`},
		{"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", `{"metadata":{"name":"keys-audit"},"spec":{
			"policyName":"keys.example.com","validationActions":["Audit"]}}`},
		{"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", `{"metadata":{"name":"typed.example.com"},"spec":{
			"matchConstraints":{"resourceRules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["configmaps"]}]},
			"auditAnnotations":[{"key":"count","valueExpression":"size(object.data)"}]}}`},
		{"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", `{"metadata":{"name":"typed-bad"},"spec":{
			"policyName":"typed.example.com","validationActions":["Audit"],"matchResources":{"objectSelector":{"matchLabels":{"bad":"yes"}}}}}`},
		{"/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"audited"},"data":{"a":"1","b":"2"}}`},
	} {
		if rec := serveAs(s, "POST", w.path, "", w.body, nil); rec.Code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", w.path, rec.Code, rec.Body)
		}
	}
	evs := readAuditFile(t, logPath)
	ev := evs[len(evs)-1]
	if ev.ObjectRef == nil || ev.ObjectRef.Resource != "configmaps" || ev.Verb != "create" {
		t.Fatalf("last event: %+v", ev.ObjectRef)
	}
	want := map[string]string{
		"keys.example.com/data-keys":                            "2",
		"mutate.example.com/checked":                            "yes",
		"validate.example.com/verdict":                          "fine",
		"mutation.webhook.admission.k8s.io/round_0_index_0":     `{"configuration":"mutate","webhook":"mutate.example.com","mutated":true}`,
		"patch.webhook.admission.k8s.io/round_0_index_0":        `{"configuration":"mutate","webhook":"mutate.example.com","patch":[{"op":"add","path":"/metadata/annotations","value":{"checked":"yes"}}],"patchType":"JSONPatch"}`,
		"validation.policy.admission.k8s.io/validation_failure": `[{"message":"too many keys","policy":"keys.example.com","binding":"keys-audit","expressionIndex":0,"validationActions":["Audit"]}]`,
	}
	for k, v := range want {
		if got, ok := ev.Annotations[k]; !ok || got != v {
			t.Errorf("annotation %s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"keys.example.com/skipped", "keys.example.com/blank", "typed.example.com/count"} {
		if v, ok := ev.Annotations[k]; ok {
			t.Errorf("annotation %s = %q, want none", k, v)
		}
	}

	// An auditAnnotation that is not a string or null denies, whatever
	// the binding's actions.
	rec := serveAs(s, "POST", "/api/v1/namespaces/default/configmaps", "", `{"metadata":{"name":"bad","labels":{"bad":"yes"}},"data":{"a":"1"}}`, nil)
	if rec.Code == http.StatusCreated || !strings.Contains(rec.Body.String(), "valueExpression 'size(object.data)' resulted in unsupported return type") {
		t.Fatalf("bad valueExpression: %d %s", rec.Code, rec.Body)
	}
	if rec := serveAs(s, "GET", "/api/v1/namespaces/default/configmaps/bad", "", "", nil); rec.Code != http.StatusNotFound {
		t.Fatalf("a denied create stored the object: %d", rec.Code)
	}
}
