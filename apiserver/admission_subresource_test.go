package apiserver

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// denyingHook answers every review with a denial while deny is set.
func denyingHook(t *testing.T, deny *atomic.Bool) *hookServer {
	return newHookServer(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if deny.Load() {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: 403, Reason: metav1.StatusReasonForbidden, Message: "not now"}}
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
}

func checkReview(t *testing.T, what string, calls []*admissionv1.AdmissionRequest, op admissionv1.Operation, kind metav1.GroupVersionKind, res metav1.GroupVersionResource, sub, name string) *admissionv1.AdmissionRequest {
	t.Helper()
	if len(calls) != 1 {
		t.Fatalf("%s: %d webhook calls, want 1", what, len(calls))
	}
	r := calls[0]
	if r.Operation != op || r.Kind != kind || r.Resource != res || r.SubResource != sub || r.Name != name ||
		r.RequestKind == nil || *r.RequestKind != kind || r.RequestSubResource != sub || r.Namespace != "default" {
		t.Errorf("%s: review %s %v %v sub %q name %q ns %q", what, r.Operation, r.Kind, r.Resource, r.SubResource, r.Name, r.Namespace)
	}
	return r
}

// TestWebhooksSeeSubresourceWrites: pods/binding, pods/eviction,
// deployments/scale (and a custom resource's scale) and status writes
// reach admission as kube-apiserver sends them: the parent's resource,
// the subresource, the subresource's own kind; a denial changes nothing
// and the parent's write that follows is not sent again.
func TestWebhooksSeeSubresourceWrites(t *testing.T) {
	e := newTestEnv(t)
	createCRD(t, e, crontabCRD)
	waitServed(t, e, crontabs, true)
	var deny atomic.Bool
	h := denyingHook(t, &deny)
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	e.validating(t, "subresources",
		urlHook("pods.example.com", h, rule(all, "", "v1", "pods/*", "pods")),
		urlHook("scale.example.com", h, rule(opsUpdate, "*", "*", "*/scale", "deployments")))
	pods, deps := e.cs.CoreV1().Pods("default"), e.cs.AppsV1().Deployments("default")
	podsRes := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	if _, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const denied = `admission webhook "pods.example.com" denied the request: not now`

	// pods/binding.
	bind := func() error {
		h.reset()
		return pods.Bind(e.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{})
	}
	deny.Store(true)
	if err := bind(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), denied) {
		t.Fatalf("denied binding: %v", err)
	}
	if p, _ := pods.Get(e.ctx, "p", metav1.GetOptions{}); p.Spec.NodeName != "" {
		t.Fatalf("a denied binding bound the pod to %q", p.Spec.NodeName)
	}
	deny.Store(false)
	if err := bind(); err != nil {
		t.Fatal(err)
	}
	r := checkReview(t, "binding", h.calls(), admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}, podsRes, "binding", "p")
	var b corev1.Binding
	if err := json.Unmarshal(r.Object.Raw, &b); err != nil || b.Target.Name != "n1" || b.Kind != "Binding" || b.Namespace != "default" {
		t.Errorf("binding object %s: %v", r.Object.Raw, err)
	}
	if p, _ := pods.Get(e.ctx, "p", metav1.GetOptions{}); p.Spec.NodeName != "n1" {
		t.Fatalf("binding: node %q", p.Spec.NodeName)
	}

	// pods/status.
	h.reset()
	deny.Store(true)
	p, _ := pods.Get(e.ctx, "p", metav1.GetOptions{})
	p.Status.Message = "denied"
	if _, err := pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), denied) {
		t.Fatalf("denied status update: %v", err)
	}
	checkReview(t, "status", h.calls(), admissionv1.Update, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, podsRes, "status", "p")
	h.reset()
	if _, err := pods.Patch(e.ctx, "p", types.MergePatchType, []byte(`{"status":{"message":"patched"}}`), metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
		t.Fatalf("denied status patch: %v", err)
	}
	checkReview(t, "status patch", h.calls(), admissionv1.Update, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, podsRes, "status", "p")
	if p, _ := pods.Get(e.ctx, "p", metav1.GetOptions{}); p.Status.Message != "" {
		t.Fatalf("a denied status write stored %q", p.Status.Message)
	}

	// pods/eviction: the Eviction is admitted, the deletion it makes is
	// not (the DELETE rule on pods does not see it).
	evict := func() error {
		h.reset()
		return e.cs.PolicyV1().Evictions("default").Evict(e.ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}})
	}
	if err := evict(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), denied) {
		t.Fatalf("denied eviction: %v", err)
	}
	if _, err := pods.Get(e.ctx, "p", metav1.GetOptions{}); err != nil {
		t.Fatalf("a denied eviction removed the pod: %v", err)
	}
	deny.Store(false)
	if err := evict(); err != nil {
		t.Fatal(err)
	}
	r = checkReview(t, "eviction", h.calls(), admissionv1.Create, metav1.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, podsRes, "eviction", "p")
	var ev policyv1.Eviction
	if err := json.Unmarshal(r.Object.Raw, &ev); err != nil || ev.Name != "p" || ev.DeleteOptions == nil || *ev.DeleteOptions.GracePeriodSeconds != 0 {
		t.Errorf("eviction object %s: %v", r.Object.Raw, err)
	}
	var opts metav1.CreateOptions
	if err := json.Unmarshal(r.Options.Raw, &opts); err != nil || opts.Kind != "CreateOptions" {
		t.Errorf("eviction options %s: %v", r.Options.Raw, err)
	}
	if _, err := pods.Get(e.ctx, "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("evicted pod: %v", err)
	}

	// deployments/scale: the Scale is admitted (old and new), the
	// Deployment's update is not.
	labels := map[string]string{"app": "web"}
	if _, err := deps.Create(e.ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptrTo[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scaleKind := metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
	depsRes := metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	scale := func(n int32) error {
		h.reset()
		_, err := deps.UpdateScale(e.ctx, "web", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}, metav1.UpdateOptions{})
		return err
	}
	deny.Store(true)
	if err := scale(3); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `admission webhook "scale.example.com" denied the request: not now`) {
		t.Fatalf("denied scale: %v", err)
	}
	if d, _ := deps.Get(e.ctx, "web", metav1.GetOptions{}); *d.Spec.Replicas != 1 {
		t.Fatalf("a denied scale stored %d replicas", *d.Spec.Replicas)
	}
	deny.Store(false)
	if err := scale(3); err != nil {
		t.Fatal(err)
	}
	r = checkReview(t, "scale", h.calls(), admissionv1.Update, scaleKind, depsRes, "scale", "web")
	var sc, oldSc autoscalingv1.Scale
	json.Unmarshal(r.Object.Raw, &sc)
	json.Unmarshal(r.OldObject.Raw, &oldSc)
	if sc.Spec.Replicas != 3 || oldSc.Spec.Replicas != 1 || oldSc.Status.Selector != "app=web" {
		t.Errorf("scale objects: new %s old %s", r.Object.Raw, r.OldObject.Raw)
	}

	// A custom resource's scale matches */scale too.
	dc := e.dyn.Resource(crontabs).Namespace("default")
	if _, err := dc.Create(e.ctx, crontab("daily", map[string]any{"cronSpec": "* * * * */5", "replicas": int64(1)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.reset()
	deny.Store(true)
	_, err := dc.Patch(e.ctx, "daily", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}, "scale")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `admission webhook "scale.example.com" denied the request: not now`) {
		t.Fatalf("denied custom scale: %v", err)
	}
	checkReview(t, "custom scale", h.calls(), admissionv1.Update, scaleKind, metav1.GroupVersionResource(crontabs), "scale", "daily")
	if ct, _ := dc.Get(e.ctx, "daily", metav1.GetOptions{}); ct.Object["spec"].(map[string]any)["replicas"] != int64(1) {
		t.Fatalf("a denied custom scale stored %v", ct.Object["spec"])
	}
}

// TestMutatingWebhookPatchesSubresourceObjects: a mutating webhook's
// patch to a Scale or a Binding is what gets written.
func TestMutatingWebhookPatchesSubresourceObjects(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		switch req.SubResource {
		case "scale":
			return patchResponse(jsonPatch(map[string]any{"op": "replace", "path": "/spec/replicas", "value": 2}))
		case "binding":
			return patchResponse(jsonPatch(map[string]any{"op": "replace", "path": "/target/name", "value": "chosen"}))
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	e.mutating(t, "subresources", mutatingHook(urlHook("sub.example.com", h,
		rule(opsUpdate, "apps", "v1", "deployments/scale"), rule(opsCreate, "", "v1", "pods/binding"))))
	labels := map[string]string{"app": "web"}
	deps := e.cs.AppsV1().Deployments("default")
	if _, err := deps.Create(e.ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptrTo[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := deps.UpdateScale(e.ctx, "web", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}, metav1.UpdateOptions{})
	if err != nil || out.Spec.Replicas != 2 {
		t.Fatalf("mutated scale: %+v %v", out, err)
	}
	if d, _ := deps.Get(e.ctx, "web", metav1.GetOptions{}); *d.Spec.Replicas != 2 {
		t.Fatalf("stored replicas %d, want the webhook's 2", *d.Spec.Replicas)
	}
	pods := e.cs.CoreV1().Pods("default")
	if _, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Bind(e.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Name: "asked"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, _ := pods.Get(e.ctx, "p", metav1.GetOptions{}); p.Spec.NodeName != "chosen" {
		t.Fatalf("bound to %q, want the webhook's node", p.Spec.NodeName)
	}
}

// TestPolicyOnEviction: a ValidatingAdmissionPolicy matching
// pods/eviction sees the Eviction as its object.
func TestPolicyOnEviction(t *testing.T) {
	e := newTestEnv(t)
	e.policy(t, "no-eviction.example.com", admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: rule(opsCreate, "", "v1", "pods/eviction")}}},
		Validations: []admissionregistrationv1.Validation{{
			Expression: "object.kind == 'Eviction' && request.subResource == 'eviction' && object.metadata.name != 'keep'", Message: "keep stays"}},
	})
	e.binding(t, "no-eviction", admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "no-eviction.example.com",
		ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}})
	pods := e.cs.CoreV1().Pods("default")
	for _, name := range []string{"keep", "go"} {
		if _, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	evict := func(name string) error {
		return e.cs.PolicyV1().Evictions("default").Evict(e.ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}})
	}
	err := evict("keep")
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'no-eviction.example.com' with binding 'no-eviction' denied request: keep stays") {
		t.Fatalf("eviction of keep: %v", err)
	}
	if err := evict("go"); err != nil {
		t.Fatalf("eviction of go: %v", err)
	}
	if _, err := pods.Get(e.ctx, "keep", metav1.GetOptions{}); err != nil {
		t.Fatalf("keep: %v", err)
	}
	// The policy matches only the subresource: deleting keep is allowed.
	if err := pods.Delete(e.ctx, "keep", metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}); err != nil {
		t.Fatal(err)
	}
}

// TestWebhooksSeeTokenRequests: serviceaccounts/token creates reach
// admission as a TokenRequest, and a denial issues no token.
func TestWebhooksSeeTokenRequests(t *testing.T) {
	e := newTestEnv(t)
	var deny atomic.Bool
	h := denyingHook(t, &deny)
	e.validating(t, "tokens", urlHook("tokens.example.com", h, rule(opsCreate, "", "v1", "serviceaccounts/token")))
	if _, err := e.cs.CoreV1().ServiceAccounts("default").Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	request := func() (*authenticationv1.TokenRequest, error) {
		h.reset()
		return e.cs.CoreV1().ServiceAccounts("default").CreateToken(e.ctx, "robot", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}}}, metav1.CreateOptions{})
	}
	deny.Store(true)
	if tr, err := request(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `admission webhook "tokens.example.com" denied the request: not now`) {
		t.Fatalf("denied token request: %+v %v", tr, err)
	}
	deny.Store(false)
	tr, err := request()
	if err != nil || tr.Status.Token == "" {
		t.Fatalf("token request: %+v %v", tr, err)
	}
	r := checkReview(t, "token", h.calls(), admissionv1.Create, metav1.GroupVersionKind{Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest"},
		metav1.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, "token", "robot")
	var sent authenticationv1.TokenRequest
	if err := json.Unmarshal(r.Object.Raw, &sent); err != nil || len(sent.Spec.Audiences) != 1 || sent.Spec.Audiences[0] != "vault" || sent.Status.Token != "" {
		t.Errorf("token request object %s: %v", r.Object.Raw, err)
	}
}
