package apiserver

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/apiserver/pki"
)

// hookServer is a real HTTPS admission webhook on 127.0.0.1 with its own
// CA, whose certificate also names the Service webhook.default.svc.
type hookServer struct {
	url     string
	addr    netip.AddrPort
	ca      []byte
	mu      sync.Mutex
	reqs    []*admissionv1.AdmissionRequest
	paths   []string
	respond func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

func newHookServer(t *testing.T, respond func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) *hookServer {
	t.Helper()
	certs, err := pki.Ensure(t.TempDir(), pki.SANs{DNSNames: []string{"webhook.default.svc"}, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	h := &hookServer{ca: certs.CA.CertPEM, respond: respond}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.reqs = append(h.reqs, review.Request)
		h.paths = append(h.paths, r.URL.RequestURI())
		respond := h.respond
		h.mu.Unlock()
		resp := &admissionv1.AdmissionResponse{Allowed: true}
		if respond != nil {
			resp = respond(review.Request)
		}
		if resp.UID == "" {
			resp.UID = review.Request.UID
		}
		review.Request, review.Response = nil, resp
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&review)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*certs.Serving.Current()}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	h.url = srv.URL
	h.addr = netip.MustParseAddrPort(srv.Listener.Addr().String())
	return h
}

func (h *hookServer) calls() []*admissionv1.AdmissionRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*admissionv1.AdmissionRequest(nil), h.reqs...)
}

func (h *hookServer) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs, h.paths = nil, nil
}

func rule(ops []admissionregistrationv1.OperationType, group, version string, resources ...string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
		APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources}}
}

var (
	opsAll    = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	opsCreate = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
	opsUpdate = []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
	opsDelete = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
)

// urlHook is a validating webhook calling h by URL.
func urlHook(name string, h *hookServer, rules ...admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    name,
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptrTo(h.url + "/validate"), CABundle: h.ca},
		Rules:                   rules,
		SideEffects:             ptrTo(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
	}
}

func mutatingHook(v admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name: v.Name, ClientConfig: v.ClientConfig, Rules: v.Rules, FailurePolicy: v.FailurePolicy,
		MatchPolicy: v.MatchPolicy, NamespaceSelector: v.NamespaceSelector, ObjectSelector: v.ObjectSelector,
		SideEffects: v.SideEffects, TimeoutSeconds: v.TimeoutSeconds, AdmissionReviewVersions: v.AdmissionReviewVersions,
		MatchConditions: v.MatchConditions,
	}
}

func (e *testEnv) validating(t *testing.T, name string, hooks ...admissionregistrationv1.ValidatingWebhook) {
	t.Helper()
	_, err := e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(e.ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: hooks}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(e.ctx, name, metav1.DeleteOptions{})
	})
}

func (e *testEnv) mutating(t *testing.T, name string, hooks ...admissionregistrationv1.MutatingWebhook) {
	t.Helper()
	_, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(e.ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: hooks}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(e.ctx, name, metav1.DeleteOptions{})
	})
}

// warnings is a clientset whose responses' Warning headers are kept.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

func (e *testEnv) withWarnings() (*kubernetes.Clientset, *warningRecorder) {
	rec := &warningRecorder{}
	cfg := rest.CopyConfig(e.cfg)
	cfg.WarningHandler = rec
	return kubernetes.NewForConfigOrDie(cfg), rec
}

func jsonPatch(ops ...map[string]any) []byte {
	b, _ := json.Marshal(ops)
	return b
}

func patchResponse(patch []byte, warnings ...string) *admissionv1.AdmissionResponse {
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt, Warnings: warnings}
}

func TestWebhookConfigurationDefaultsAndValidation(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, nil)
	hook := urlHook("defaults.example.com", h, rule(opsCreate, "", "v1", "configmaps"))
	svcHook := hook
	svcHook.Name = "service.example.com"
	svcHook.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "webhook"}, CABundle: h.ca}
	got, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(e.ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults"}, Webhooks: []admissionregistrationv1.MutatingWebhook{mutatingHook(hook), mutatingHook(svcHook)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := got.Webhooks[0]
	if *w.FailurePolicy != admissionregistrationv1.Fail || *w.MatchPolicy != admissionregistrationv1.Equivalent || *w.TimeoutSeconds != 10 ||
		*w.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy || *w.Rules[0].Scope != admissionregistrationv1.AllScopes ||
		w.NamespaceSelector == nil || w.ObjectSelector == nil || got.Generation != 1 {
		t.Errorf("defaults not applied: %+v", w)
	}
	if p := got.Webhooks[1].ClientConfig.Service.Port; p == nil || *p != 443 {
		t.Errorf("service port default: %v", p)
	}

	for _, tc := range []struct {
		name string
		mod  func(*admissionregistrationv1.ValidatingWebhook)
		want string
	}{
		{"short name", func(w *admissionregistrationv1.ValidatingWebhook) { w.Name = "short" }, "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots"},
		{"no side effects", func(w *admissionregistrationv1.ValidatingWebhook) { w.SideEffects = nil }, "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"},
		{"side effects Some", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.SideEffects = ptrTo(admissionregistrationv1.SideEffectClassSome)
		}, `webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"`},
		{"timeout", func(w *admissionregistrationv1.ValidatingWebhook) { w.TimeoutSeconds = ptrTo[int32](31) }, "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"},
		{"review versions", func(w *admissionregistrationv1.ValidatingWebhook) { w.AdmissionReviewVersions = nil }, "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1"},
		{"http url", func(w *admissionregistrationv1.ValidatingWebhook) { w.ClientConfig.URL = ptrTo("http://127.0.0.1/x") }, "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme"},
		{"url query", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ClientConfig.URL = ptrTo("https://127.0.0.1/x?a=b")
		}, "query parameters are not permitted in the URL"},
		{"both client configs", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ClientConfig.Service = &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "x"}
		}, "webhooks[0].clientConfig: Required value: exactly one of url or service is required"},
		{"service path", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "x", Path: ptrTo("x")}}
		}, "webhooks[0].clientConfig.service.path: Invalid value: \"x\": must start with a '/'"},
		{"operation", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Operations = []admissionregistrationv1.OperationType{"GET"}
		}, `webhooks[0].rules[0].operations[0]: Unsupported value: "GET"`},
		{"wildcard resource", func(w *admissionregistrationv1.ValidatingWebhook) { w.Rules[0].Resources = []string{"*", "pods"} }, "if '*' is present, must not specify other resources without subresources"},
		{"scope", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Scope = ptrTo(admissionregistrationv1.ScopeType("Galaxy"))
		}, `webhooks[0].rules[0].scope: Unsupported value: "Galaxy"`},
		{"selector", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
		}, "webhooks[0].objectSelector.matchExpressions[0].operator: Invalid value: \"Near\""},
		{"match condition", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "bad", Expression: "object.metadata.name +"}}
		}, "webhooks[0].matchConditions[0].expression: Invalid value: \"object.metadata.name +\": compilation failed"},
		{"match condition not bool", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "str", Expression: "'x'"}}
		}, "must evaluate to bool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := urlHook("bad.example.com", h, rule(opsCreate, "", "v1", "configmaps"))
			tc.mod(&bad)
			_, err := e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(e.ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{bad}}, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want 422 with %q", err, tc.want)
			}
		})
	}
	// Duplicate names across one configuration.
	_, err = e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(e.ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "dup"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{hook, hook}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `webhooks[1].name: Duplicate value: "defaults.example.com"`) {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestMutatingWebhookPatchesWarnsAndSeesTheRequest(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return patchResponse(jsonPatch(map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{"mutated": "yes"}}), "configmap looked at")
	})
	hook := urlHook("label.example.com", h, rule(opsCreate, "", "v1", "configmaps"))
	e.mutating(t, "label", mutatingHook(hook))
	cs, rec := e.withWarnings()
	got, err := cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("m1", nil), metav1.CreateOptions{FieldManager: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["mutated"] != "yes" {
		t.Errorf("patch not applied: %v", got.Labels)
	}
	stored, _ := e.cs.CoreV1().ConfigMaps("default").Get(e.ctx, "m1", metav1.GetOptions{})
	if stored.Labels["mutated"] != "yes" {
		t.Errorf("patch not stored: %v", stored.Labels)
	}
	if w := rec.all(); len(w) != 1 || w[0] != "configmap looked at" {
		t.Errorf("warnings %q", w)
	}
	calls := h.calls()
	if len(calls) != 1 {
		t.Fatalf("%d calls", len(calls))
	}
	req := calls[0]
	var obj corev1.ConfigMap
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		t.Fatal(err)
	}
	var opts metav1.CreateOptions
	json.Unmarshal(req.Options.Raw, &opts)
	if req.Operation != admissionv1.Create || req.Kind != (metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}) ||
		req.Resource != (metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}) || req.Namespace != "default" || req.Name != "m1" ||
		req.UserInfo.Username != "system:admin" || req.DryRun == nil || *req.DryRun || obj.Name != "m1" || obj.APIVersion != "v1" || obj.Kind != "ConfigMap" ||
		len(req.OldObject.Raw) != 0 || opts.Kind != "CreateOptions" || req.UID == "" {
		t.Errorf("request %+v object %+v options %+v", req, obj, opts)
	}
	if p := h.paths[0]; p != "/validate?timeout=10s" {
		t.Errorf("path %q", p)
	}
	// Only CREATE: an update is not sent.
	got.Data = map[string]string{"a": "b"}
	if _, err := e.cs.CoreV1().ConfigMaps("default").Update(e.ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(h.calls()); n != 1 {
		t.Errorf("update called a CREATE webhook: %d calls", n)
	}
	// A patch may not move the object to another namespace.
	h.respond = func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return patchResponse(jsonPatch(map[string]any{"op": "replace", "path": "/metadata/namespace", "value": "kube-system"}))
	}
	_, err = e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("moved", nil), metav1.CreateOptions{})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "the namespace of the provided object does not match the namespace sent on the request") {
		t.Errorf("namespace move: %v", err)
	}
	// A patch that breaks the object fails the request (failurePolicy Fail).
	h.respond = func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return patchResponse(jsonPatch(map[string]any{"op": "replace", "path": "/nothere/x", "value": 1}))
	}
	_, err = e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("m2", nil), metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `failed calling webhook "label.example.com"`) {
		t.Errorf("bad patch: %v", err)
	}
}

func TestValidatingWebhookDeniesWithKubernetesWording(t *testing.T) {
	e := newTestEnv(t)
	var status *metav1.Status
	h := newHookServer(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: false, Result: status, Warnings: []string{"think again"}}
	})
	e.validating(t, "deny", urlHook("deny.example.com", h, rule(opsAll, "", "v1", "configmaps")))
	cs, rec := e.withWarnings()
	for _, tc := range []struct {
		status   *metav1.Status
		code     int32
		wantMsg  string
		wantWarn bool
	}{
		{&metav1.Status{Message: "names must be nicer"}, 400, `admission webhook "deny.example.com" denied the request: names must be nicer`, true},
		{&metav1.Status{Code: 403, Reason: metav1.StatusReasonForbidden}, 403, `admission webhook "deny.example.com" denied the request: Forbidden`, true},
		{nil, 400, `admission webhook "deny.example.com" denied the request without explanation`, true},
	} {
		status = tc.status
		_, err := cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("denied", nil), metav1.CreateOptions{})
		var st apierrors.APIStatus
		if !asStatus(err, &st) || st.Status().Code != tc.code || st.Status().Message != tc.wantMsg {
			t.Errorf("got %v, want %d %q", err, tc.code, tc.wantMsg)
		}
	}
	if w := rec.all(); len(w) != 3 || w[0] != "think again" {
		t.Errorf("warnings with denials: %q", w)
	}
	if _, err := e.cs.CoreV1().ConfigMaps("default").Get(e.ctx, "denied", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a denied create was stored: %v", err)
	}
}

// TestWebhookRules covers operations, groups, resources, subresources,
// scope, and DELETE.
func TestWebhookRules(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, nil)
	namespaced := rule(opsAll, "*", "*", "*")
	namespaced.Scope = ptrTo(admissionregistrationv1.NamespacedScope)
	cluster := rule(opsCreate, "*", "*", "*")
	cluster.Scope = ptrTo(admissionregistrationv1.ClusterScope)
	e.validating(t, "rules",
		urlHook("status.example.com", h, rule(opsUpdate, "", "v1", "resourcequotas/status")),
		urlHook("main.example.com", h, rule(opsUpdate, "", "v1", "resourcequotas")),
		urlHook("delete.example.com", h, rule(opsDelete, "", "v1", "secrets")),
		urlHook("apps.example.com", h, rule(opsCreate, "apps", "v1", "*/*")),
		urlHook("namespaced.example.com", h, namespaced),
		urlHook("cluster.example.com", h, cluster),
	)
	names := func() map[string]int {
		out := map[string]int{}
		for _, r := range h.calls() {
			key := r.Resource.Resource
			if r.SubResource != "" {
				key += "/" + r.SubResource
			}
			out[string(r.Operation)+" "+key]++
		}
		h.reset()
		return out
	}
	// There is no webhook name in the request: which webhooks ran is
	// counted from the calls of each request.
	q, err := e.cs.CoreV1().ResourceQuotas("default").Create(e.ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(); got["CREATE resourcequotas"] != 1 || len(got) != 1 { // namespaced only
		t.Errorf("create quota: %v", got)
	}
	q.Status.Hard = corev1.ResourceList{}
	q.Status.Used = corev1.ResourceList{}
	q.Labels = map[string]string{"a": "b"}
	q, err = e.cs.CoreV1().ResourceQuotas("default").Update(e.ctx, q, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(); got["UPDATE resourcequotas"] != 2 { // main + namespaced
		t.Errorf("update quota: %v", got)
	}
	if _, err := e.cs.CoreV1().ResourceQuotas("default").UpdateStatus(e.ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := names(); got["UPDATE resourcequotas/status"] != 1 || len(got) != 1 { // status only: "*" has no subresources
		t.Errorf("update quota status: %v", got)
	}
	if _, err := e.cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rules"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := names(); got["CREATE namespaces"] != 1 || len(got) != 1 { // cluster only
		t.Errorf("create namespace: %v", got)
	}
	if _, err := e.cs.CoreV1().Secrets("default").Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names()
	if err := e.cs.CoreV1().Secrets("default").Delete(e.ctx, "s", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	calls := h.calls()
	if got := names(); got["DELETE secrets"] != 2 {
		t.Errorf("delete secret: %v", got)
	}
	if len(calls) > 0 && (len(calls[0].OldObject.Raw) == 0 || len(calls[0].Object.Raw) != 0) {
		t.Errorf("delete sends the old object only: %+v", calls[0])
	}
}

func TestWebhookSelectorsAndMatchConditions(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: "selected"}}
	})
	for _, ns := range []string{"picked", "other"} {
		if _, err := e.cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	byNS := urlHook("ns.example.com", h, rule(opsCreate, "", "v1", "configmaps"))
	byNS.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "picked"}}
	byObj := urlHook("obj.example.com", h, rule(opsCreate, "", "v1", "secrets"))
	byObj.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "check", Operator: metav1.LabelSelectorOpExists}}}
	byCEL := urlHook("cel.example.com", h, rule(opsCreate, "", "v1", "serviceaccounts"))
	byCEL.MatchConditions = []admissionregistrationv1.MatchCondition{
		{Name: "prefix", Expression: "object.metadata.name.startsWith('checked-')"},
		{Name: "user", Expression: "request.userInfo.username == 'system:admin'"},
	}
	e.validating(t, "selectors", byNS, byObj, byCEL)

	create := func(obj func(ns string) error, ns string) error { return obj(ns) }
	cmIn := func(ns string) error {
		_, err := e.cs.CoreV1().ConfigMaps(ns).Create(e.ctx, cm("c", nil), metav1.CreateOptions{})
		return err
	}
	if err := create(cmIn, "picked"); err == nil || !strings.Contains(err.Error(), `"ns.example.com" denied`) {
		t.Errorf("namespace selector should match: %v", err)
	}
	if err := create(cmIn, "other"); err != nil {
		t.Errorf("namespace selector should not match: %v", err)
	}
	secret := func(labels map[string]string) error {
		_, err := e.cs.CoreV1().Secrets("other").Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "s-", Labels: labels}}, metav1.CreateOptions{})
		return err
	}
	if err := secret(map[string]string{"check": ""}); err == nil || !strings.Contains(err.Error(), `"obj.example.com" denied`) {
		t.Errorf("object selector should match: %v", err)
	}
	if err := secret(nil); err != nil {
		t.Errorf("object selector should not match: %v", err)
	}
	sa := func(name string) error {
		_, err := e.cs.CoreV1().ServiceAccounts("other").Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	}
	if err := sa("checked-a"); err == nil || !strings.Contains(err.Error(), `"cel.example.com" denied`) {
		t.Errorf("match conditions should match: %v", err)
	}
	if err := sa("unchecked"); err != nil {
		t.Errorf("match conditions should not match: %v", err)
	}
}

func TestWebhookMatchPolicyEquivalent(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, nil)
	equivalent := urlHook("equivalent.example.com", h, rule(opsCreate, "events.k8s.io", "v1", "events"))
	exact := urlHook("exact.example.com", h, rule(opsCreate, "events.k8s.io", "v1", "events"))
	exact.MatchPolicy = ptrTo(admissionregistrationv1.Exact)
	e.validating(t, "events", equivalent, exact)
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "default"},
		Reason: "Test", Message: "m", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "test"}}
	if _, err := e.cs.CoreV1().Events("default").Create(e.ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	calls := h.calls()
	if len(calls) != 1 {
		t.Fatalf("%d calls, want the Equivalent webhook only", len(calls))
	}
	r := calls[0]
	if r.Kind.Group != "events.k8s.io" || r.RequestKind == nil || r.RequestKind.Group != "" || r.RequestResource.Resource != "events" {
		t.Errorf("kind %v request kind %v", r.Kind, r.RequestKind)
	}
	var got map[string]any
	json.Unmarshal(r.Object.Raw, &got)
	if got["apiVersion"] != "events.k8s.io/v1" || got["note"] != "m" {
		t.Errorf("object not converted to the webhook's version: %v", got)
	}
}

func TestWebhookFailurePolicyTimeoutAndTLS(t *testing.T) {
	e := newTestEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "https://" + l.Addr().String() + "/x"
	l.Close()
	slow := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		time.Sleep(1500 * time.Millisecond)
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	other := newHookServer(t, nil) // a different CA

	for _, tc := range []struct {
		name string
		hook func() admissionregistrationv1.ValidatingWebhook
		want string // "" allowed
	}{
		{"unreachable fail", func() admissionregistrationv1.ValidatingWebhook {
			w := urlHook("down.example.com", slow, rule(opsCreate, "", "v1", "configmaps"))
			w.ClientConfig.URL = &closedURL
			return w
		}, `Internal error occurred: failed calling webhook "down.example.com": failed to call webhook: Post "` + closedURL + `?timeout=10s"`},
		{"unreachable ignore", func() admissionregistrationv1.ValidatingWebhook {
			w := urlHook("down.example.com", slow, rule(opsCreate, "", "v1", "configmaps"))
			w.ClientConfig.URL = &closedURL
			w.FailurePolicy = ptrTo(admissionregistrationv1.Ignore)
			return w
		}, ""},
		{"timeout", func() admissionregistrationv1.ValidatingWebhook {
			w := urlHook("slow.example.com", slow, rule(opsCreate, "", "v1", "configmaps"))
			w.TimeoutSeconds = ptrTo[int32](1)
			return w
		}, "context deadline exceeded"},
		{"wrong caBundle", func() admissionregistrationv1.ValidatingWebhook {
			w := urlHook("untrusted.example.com", slow, rule(opsCreate, "", "v1", "configmaps"))
			w.ClientConfig.CABundle = other.ca
			return w
		}, "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.validating(t, "failure", tc.hook())
			_, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "f-"}}, metav1.CreateOptions{})
			if tc.want == "" && err != nil || tc.want != "" && (!apierrors.IsInternalError(err) || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(e.ctx, "failure", metav1.DeleteOptions{})
		})
	}
	// A response for another request is a failure to call.
	bad := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{UID: "other", Allowed: true}
	})
	e.validating(t, "baduid", urlHook("uid.example.com", bad, rule(opsCreate, "", "v1", "configmaps")))
	_, err = e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("uid", nil), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `expected response.uid=`) {
		t.Errorf("wrong uid: %v", err)
	}
}

func TestWebhookDryRunAndSideEffects(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, nil)
	none := urlHook("none.example.com", h, rule(opsCreate, "", "v1", "configmaps"))
	onDry := urlHook("ondryrun.example.com", h, rule(opsCreate, "", "v1", "configmaps"))
	onDry.SideEffects = ptrTo(admissionregistrationv1.SideEffectClassNoneOnDryRun)
	e.validating(t, "dry", none, onDry)
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("dry", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	calls := h.calls()
	if len(calls) != 2 || !*calls[0].DryRun || !*calls[1].DryRun {
		t.Fatalf("dry run calls: %d", len(calls))
	}
	if _, err := e.cs.CoreV1().ConfigMaps("default").Get(e.ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("dry run stored: %v", err)
	}
	// A webhook with side effects refuses a dry run; v1 does not accept
	// one, so it is checked on the compiled webhook.
	hook, err := compileWebhook("c", urlHook("some.example.com", h, rule(opsCreate, "", "v1", "configmaps")), false)
	if err != nil {
		t.Fatal(err)
	}
	hook.sideEffects = admissionregistrationv1.SideEffectClassSome
	a := &admissionAttrs{op: admissionv1.Create, res: e.s.reg.byGVR[gvr("", "v1", "configmaps")], namespace: "default", name: "x", obj: cm("x", nil), dryRun: true, user: nil}
	if _, _, err := e.s.callWebhook(e.ctx, hook, a, hookCall{}); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "has side effects and does not support dry run") {
		t.Errorf("side effects on dry run: %v", err)
	}
}

func TestMutatingWebhookReinvocation(t *testing.T) {
	e := newTestEnv(t)
	var mu sync.Mutex
	calls := map[string]int{}
	addLabel := func(key string) func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			mu.Lock()
			calls[key]++
			mu.Unlock()
			var obj corev1.ConfigMap
			json.Unmarshal(req.Object.Raw, &obj)
			if obj.Labels[key] != "" {
				return &admissionv1.AdmissionResponse{Allowed: true}
			}
			if obj.Labels == nil {
				return patchResponse(jsonPatch(map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{key: strconv.Itoa(len(obj.Labels) + 1)}}))
			}
			return patchResponse(jsonPatch(map[string]any{"op": "add", "path": "/metadata/labels/" + key, "value": strconv.Itoa(len(obj.Labels) + 1)}))
		}
	}
	first := newHookServer(t, addLabel("first"))
	second := newHookServer(t, addLabel("second"))
	w1 := mutatingHook(urlHook("first.example.com", first, rule(opsCreate, "", "v1", "configmaps")))
	w1.ReinvocationPolicy = ptrTo(admissionregistrationv1.IfNeededReinvocationPolicy)
	w2 := mutatingHook(urlHook("second.example.com", second, rule(opsCreate, "", "v1", "configmaps")))
	e.mutating(t, "a-first", w1)
	e.mutating(t, "b-second", w2)
	got, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("re", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Configurations run by name: first, then second (which changes the
	// object), then first again as it asked.
	if got.Labels["first"] != "1" || got.Labels["second"] != "2" || calls["first"] != 2 || calls["second"] != 1 {
		t.Errorf("labels %v calls %v", got.Labels, calls)
	}
	// A webhook's own change does not reinvoke it.
	e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(e.ctx, "b-second", metav1.DeleteOptions{})
	calls = map[string]int{}
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("alone", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if calls["first"] != 1 {
		t.Errorf("a webhook alone was called %d times", calls["first"])
	}
}

func TestWebhookToService(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: "via service"}}
	})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "webhook"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "https", Port: 8443, TargetPort: intstr.FromInt32(int32(h.addr.Port()))}}}}
	if _, err := e.cs.CoreV1().Services("default").Create(e.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Service has no selector: its endpoint is the test's server.
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "webhook-1", Labels: map[string]string{discoveryv1.LabelServiceName: "webhook"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("https"), Port: ptrTo(int32(h.addr.Port()))}}}
	if _, err := e.cs.DiscoveryV1().EndpointSlices("default").Create(e.ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hook := urlHook("service.example.com", h, rule(opsCreate, "", "v1", "configmaps"))
	hook.ClientConfig = admissionregistrationv1.WebhookClientConfig{CABundle: h.ca, Service: &admissionregistrationv1.ServiceReference{
		Namespace: "default", Name: "webhook", Port: ptrTo[int32](8443), Path: ptrTo("/check")}}
	e.validating(t, "service", hook)
	_, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("svc", nil), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `admission webhook "service.example.com" denied the request: via service`) {
		t.Fatalf("got %v", err)
	}
	if p := h.paths[0]; p != "/check?timeout=10s" {
		t.Errorf("path %q", p)
	}
	// A missing Service is a failure to call.
	if err := e.cs.CoreV1().Services("default").Delete(e.ctx, "webhook", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("svc", nil), metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `failed calling webhook "service.example.com": failed to call webhook: service "webhook" not found`) {
		t.Errorf("missing service: %v", err)
	}
}

func TestWebhookConfigurationsAreExempt(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: false}
	})
	e.validating(t, "everything", urlHook("everything.example.com", h, rule(opsAll, "*", "*", "*")))
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("x", nil), metav1.CreateOptions{}); err == nil {
		t.Fatal("the webhook should deny everything else")
	}
	if err := e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(e.ctx, "everything", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("a webhook must not guard its own configuration: %v", err)
	}
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("x", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a deleted webhook still runs: %v", err)
	}
}

func TestWebhookOnConnect(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Code: 403, Reason: metav1.StatusReasonForbidden, Message: "no exec here"}}
	})
	if _, err := e.cs.CoreV1().Pods("default").Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exec := func() error {
		return e.cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("p").SubResource("exec").
			Param("command", "ls").Param("command", "/").Param("stdout", "true").Do(e.ctx).Error()
	}
	// The pod has no node: without a webhook, that is the answer.
	if err := exec(); err == nil || !strings.Contains(err.Error(), "does not have a host assigned") {
		t.Fatalf("exec without webhook: %v", err)
	}
	e.validating(t, "connect",
		urlHook("pods.example.com", h, rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Connect}, "", "v1", "pods")),
		urlHook("exec.example.com", h, rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Connect}, "", "v1", "pods/exec")))
	err := exec()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `admission webhook "exec.example.com" denied the request: no exec here`) {
		t.Fatalf("exec with a CONNECT webhook: %v", err)
	}
	calls := h.calls()
	if len(calls) != 1 { // "pods" has no subresources
		t.Fatalf("%d calls", len(calls))
	}
	var opts corev1.PodExecOptions
	json.Unmarshal(calls[0].Object.Raw, &opts)
	if r := calls[0]; r.Operation != admissionv1.Connect || r.Kind.Kind != "PodExecOptions" || r.SubResource != "exec" ||
		strings.Join(opts.Command, " ") != "ls /" || !opts.Stdout || opts.Stdin {
		t.Errorf("request %+v options %+v", r, opts)
	}
}

// TestMutatingWebhookOnConnect: mutating webhooks are called for CONNECT
// too, with the options as the object; their patch changes the options
// (the validating webhooks, called after, see the patched ones), and a
// patch that changes the kind is refused.
func TestMutatingWebhookOnConnect(t *testing.T) {
	e := newTestEnv(t)
	var patch []byte
	var mu sync.Mutex
	mut := newHookServer(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		mu.Lock()
		defer mu.Unlock()
		return patchResponse(patch)
	})
	val := newHookServer(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: "seen"}}
	})
	if _, err := e.cs.CoreV1().Pods("default").Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	connect := []admissionregistrationv1.OperationType{admissionregistrationv1.Connect}
	e.mutating(t, "connect-mutate", mutatingHook(urlHook("mutate.example.com", mut, rule(connect, "", "v1", "pods/exec", "pods/attach"))))
	e.validating(t, "connect-validate", urlHook("validate.example.com", val, rule(connect, "", "v1", "pods/*")))
	exec := func() error {
		return e.cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("p").SubResource("exec").
			Param("command", "ls").Param("stdout", "true").Do(e.ctx).Error()
	}
	mu.Lock()
	patch = jsonPatch(map[string]any{"op": "replace", "path": "/command", "value": []string{"id", "-u"}},
		map[string]any{"op": "add", "path": "/stderr", "value": true})
	mu.Unlock()
	if err := exec(); err == nil || !strings.Contains(err.Error(), `admission webhook "validate.example.com" denied the request: seen`) {
		t.Fatalf("exec: %v", err)
	}
	if calls := mut.calls(); len(calls) != 1 || calls[0].Operation != admissionv1.Connect || calls[0].Kind.Kind != "PodExecOptions" {
		t.Fatalf("mutating webhook calls: %d", len(calls))
	}
	calls := val.calls()
	var opts corev1.PodExecOptions
	if len(calls) != 1 || json.Unmarshal(calls[0].Object.Raw, &opts) != nil || strings.Join(opts.Command, " ") != "id -u" || !opts.Stderr || !opts.Stdout {
		t.Fatalf("the validating webhook saw %d calls, options %+v", len(calls), opts)
	}
	// A patch that makes the options another kind fails the request.
	mu.Lock()
	patch = jsonPatch(map[string]any{"op": "replace", "path": "/kind", "value": "PodAttachOptions"})
	mu.Unlock()
	if err := exec(); !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "changed the kind") {
		t.Fatalf("kind-changing patch: %v", err)
	}
}

// TestMutatingWebhookOnDelete: mutating webhooks are called for DELETE,
// with the object in oldObject; they may deny, and a patch (there is no
// object to patch) fails the request whatever the failurePolicy.
func TestMutatingWebhookOnDelete(t *testing.T) {
	e := newTestEnv(t)
	var mu sync.Mutex
	var resp *admissionv1.AdmissionResponse
	h := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		mu.Lock()
		defer mu.Unlock()
		r := *resp
		return &r
	})
	answer := func(r *admissionv1.AdmissionResponse) {
		mu.Lock()
		resp = r
		mu.Unlock()
		h.reset()
	}
	hook := urlHook("delete.example.com", h, rule(opsDelete, "", "v1", "configmaps"))
	hook.FailurePolicy = ptrTo(admissionregistrationv1.Ignore)
	e.mutating(t, "delete", mutatingHook(hook))
	cms := e.cs.CoreV1().ConfigMaps("default")
	for _, n := range []string{"a", "b"} {
		if _, err := cms.Create(e.ctx, cm(n, map[string]string{"k": n}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	answer(&admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "keep it"}})
	if err := cms.Delete(e.ctx, "a", metav1.DeleteOptions{}); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `admission webhook "delete.example.com" denied the request: keep it`) {
		t.Fatalf("denied delete: %v", err)
	}
	calls := h.calls()
	var old corev1.ConfigMap
	if len(calls) != 1 || calls[0].Operation != admissionv1.Delete || len(calls[0].Object.Raw) != 0 ||
		json.Unmarshal(calls[0].OldObject.Raw, &old) != nil || old.Data["k"] != "a" || !strings.Contains(string(calls[0].Options.Raw), `"kind":"DeleteOptions"`) {
		t.Fatalf("%d calls: %+v", len(calls), calls)
	}
	answer(patchResponse(jsonPatch(map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{"x": "y"}})))
	if err := cms.Delete(e.ctx, "a", metav1.DeleteOptions{}); !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `admission webhook "delete.example.com" attempted to modify the object, which is not supported for this operation`) {
		t.Fatalf("patching delete: %v", err)
	}
	if _, err := cms.Get(e.ctx, "a", metav1.GetOptions{}); err != nil {
		t.Fatalf("a refused delete removed the object: %v", err)
	}
	answer(&admissionv1.AdmissionResponse{Allowed: true})
	if err := cms.Delete(e.ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(h.calls()) != 1 {
		t.Fatalf("allowed delete: %d calls", len(h.calls()))
	}
}

// TestStatusWriteSpec checks protobuf status writes, which the server
// decodes without their spec: the stored spec stays whatever the request
// sends, and a mutating webhook on pods/status still sees the request's
// object whole, spec included, as kube-apiserver sends it.
func TestStatusWriteSpec(t *testing.T) {
	e := newTestEnv(t)
	cfg := rest.CopyConfig(e.cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs := kubernetes.NewForConfigOrDie(cfg)
	pod, err := cs.CoreV1().Pods("default").Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	write := func(image string, phase corev1.PodPhase) *corev1.Pod {
		t.Helper()
		p := pod.DeepCopy()
		p.Spec.Containers[0].Image = image
		p.Status.Phase = phase
		got, err := cs.CoreV1().Pods("default").UpdateStatus(e.ctx, p, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Containers[0].Image != "busybox" || got.Status.Phase != phase {
			t.Fatalf("status write with image %s: answer has image %s, phase %s", image, got.Spec.Containers[0].Image, got.Status.Phase)
		}
		stored, err := e.cs.CoreV1().Pods("default").Get(e.ctx, "p", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if stored.Spec.Containers[0].Image != "busybox" || stored.Status.Phase != phase || len(stored.Spec.Containers[0].TerminationMessagePath) == 0 {
			t.Fatalf("status write with image %s: stored image %s, phase %s, terminationMessagePath %q", image, stored.Spec.Containers[0].Image, stored.Status.Phase, stored.Spec.Containers[0].TerminationMessagePath)
		}
		return got
	}
	pod = write("sent-without-webhook", corev1.PodPending)

	h := newHookServer(t, nil)
	e.mutating(t, "status-spec", mutatingHook(urlHook("status.example.com", h, rule(opsUpdate, "", "v1", "pods/status"))))
	pod = write("sent-to-webhook", corev1.PodRunning)
	calls := h.calls()
	if len(calls) != 1 {
		t.Fatalf("%d webhook calls, want 1", len(calls))
	}
	var seen corev1.Pod
	if err := json.Unmarshal(calls[0].Object.Raw, &seen); err != nil {
		t.Fatal(err)
	}
	if len(seen.Spec.Containers) != 1 {
		t.Fatalf("webhook saw containers %+v", seen.Spec.Containers)
	}
	if seen.Spec.Containers[0].Image != "sent-to-webhook" || seen.Status.Phase != corev1.PodRunning || calls[0].SubResource != "status" {
		t.Errorf("webhook saw image %q, phase %q, subresource %q", seen.Spec.Containers[0].Image, seen.Status.Phase, calls[0].SubResource)
	}
}

// TestStatusWriteBadSpec checks that a status write from outside the
// server whose spec does not decode is refused with 400, as
// kube-apiserver refuses a body it cannot decode, and changes nothing.
func TestStatusWriteBadSpec(t *testing.T) {
	e := newTestEnv(t)
	pod, err := e.cs.CoreV1().Pods("default").Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	meta, err := pod.ObjectMeta.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	status, err := pod.Status.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	raw = protowire.AppendTag(raw, 1, protowire.BytesType)
	raw = protowire.AppendBytes(raw, meta)
	raw = protowire.AppendTag(raw, 2, protowire.BytesType)
	raw = protowire.AppendBytes(raw, []byte{0x0a, 0x7f}) // a field longer than the spec
	raw = protowire.AppendTag(raw, 3, protowire.BytesType)
	raw = protowire.AppendBytes(raw, status)
	env, err := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Pod"}, Raw: raw}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPut, "/api/v1/namespaces/default/pods/p/status", bytes.NewReader(append(append([]byte{}, protobufPrefix...), env...)))
	req.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
	rr := httptest.NewRecorder()
	e.s.Handler().ServeHTTP(rr, req)
	if rr.Code != http.StatusBadRequest {
		t.Fatalf("status write with a spec that does not decode: %d %.300s", rr.Code, rr.Body.String())
	}
	got, err := e.cs.CoreV1().Pods("default").Get(e.ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != "" && got.Status.Phase != corev1.PodPending || got.ResourceVersion != pod.ResourceVersion {
		t.Errorf("a refused status write changed the pod: phase %q, resourceVersion %s -> %s", got.Status.Phase, pod.ResourceVersion, got.ResourceVersion)
	}
}
