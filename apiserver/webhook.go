package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/apiserver/params"
	"bonsai.dev/bonsai/apiserver/registry/admissionregistration"
)

// Admission webhooks: MutatingWebhookConfiguration and
// ValidatingWebhookConfiguration, called with AdmissionReview v1 over
// HTTPS after the built-in admission steps, as kube-apiserver's
// MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins do.
// Mutating webhooks run one after another (configurations by name, then
// their webhooks in order), with one reinvocation pass for webhooks that
// ask for it; validating webhooks run in parallel.

// admissionAttrs describes one request under admission.
type admissionAttrs struct {
	op          admissionv1.Operation
	res         *resource
	subresource string
	namespace   string
	name        string
	obj, old    runtime.Object
	dryRun      bool
	user        *authn.User
	// kind is the kind of obj and old when it is not the resource's own:
	// a subresource's object (Binding, Eviction, Scale) or the options of
	// a CONNECT. Empty for the resource's objects.
	kind schema.GroupVersionKind
	// authorizer answers CEL's authorizer checks.
	authorizer authz.Authorizer
	// wc is the write in progress (only its res for a connect).
	wc *writeCtx
	// subresourceAdmitted: the write a subresource request makes on its
	// parent once the subresource's own object was admitted.
	subresourceAdmitted bool
	// hooked: webhooks and policies see this request. They do not see
	// the server's own writes (no user), the admission configurations
	// themselves, or the writes of subresourceAdmitted.
	hooked bool
}

// webhook is one compiled webhook of a configuration.
type webhook struct {
	name, configName string
	mutating         bool
	rules            []admissionregistrationv1.RuleWithOperations
	failurePolicy    admissionregistrationv1.FailurePolicyType
	matchPolicy      admissionregistrationv1.MatchPolicyType
	nsSelector       labels.Selector
	objSelector      labels.Selector
	sideEffects      admissionregistrationv1.SideEffectClass
	timeout          time.Duration
	reinvoke         bool
	conditions       *matchConditions
	client           *webhookClient
}

// webhookSet is what the caches hold: one kind's webhooks in call order.
type webhookSet []*webhook

// webhookAdmission owns the two webhook configuration caches.
type webhookAdmission struct {
	s                    *Server
	mutating, validating *configCache[webhookSet]
}

func newWebhookAdmission(s *Server) *webhookAdmission {
	return &webhookAdmission{
		s: s,
		mutating: newConfigCache(s, gvr("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"), func(objs []runtime.Object) webhookSet {
			return compileWebhooks(s, objs, true)
		}),
		validating: newConfigCache(s, gvr("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"), func(objs []runtime.Object) webhookSet {
			return compileWebhooks(s, objs, false)
		}),
	}
}

// compileWebhooks builds the call list: configurations sorted by name,
// webhooks in their order. What cannot compile (validation prevents it)
// is skipped with a log line.
func compileWebhooks(s *Server, objs []runtime.Object, mutating bool) webhookSet {
	type cfg struct {
		name     string
		webhooks []admissionregistrationv1.ValidatingWebhook
		reinvoke []bool
	}
	var cfgs []cfg
	for _, o := range objs {
		switch c := o.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			x := cfg{name: c.Name}
			for _, w := range c.Webhooks {
				x.webhooks = append(x.webhooks, admissionregistration.MutatingAsValidating(w))
				x.reinvoke = append(x.reinvoke, w.ReinvocationPolicy != nil && *w.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy)
			}
			cfgs = append(cfgs, x)
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			x := cfg{name: c.Name, webhooks: c.Webhooks, reinvoke: make([]bool, len(c.Webhooks))}
			cfgs = append(cfgs, x)
		}
	}
	sort.Slice(cfgs, func(i, j int) bool { return cfgs[i].name < cfgs[j].name })
	var out webhookSet
	for _, c := range cfgs {
		for i, w := range c.webhooks {
			hook, err := compileWebhook(c.name, w, mutating)
			if err != nil {
				s.log.Warn("admission webhook not usable; skipped", "configuration", c.name, "webhook", w.Name, "err", err)
				continue
			}
			hook.reinvoke = c.reinvoke[i]
			out = append(out, hook)
		}
	}
	return out
}

func compileWebhook(configName string, w admissionregistrationv1.ValidatingWebhook, mutating bool) (*webhook, error) {
	h := &webhook{
		name: w.Name, configName: configName, mutating: mutating, rules: w.Rules,
		failurePolicy: admissionregistrationv1.Fail, matchPolicy: admissionregistrationv1.Equivalent,
		timeout: 10 * time.Second, nsSelector: labels.Everything(), objSelector: labels.Everything(),
	}
	if w.FailurePolicy != nil {
		h.failurePolicy = *w.FailurePolicy
	}
	if w.MatchPolicy != nil {
		h.matchPolicy = *w.MatchPolicy
	}
	if w.SideEffects != nil {
		h.sideEffects = *w.SideEffects
	}
	if w.TimeoutSeconds != nil {
		h.timeout = time.Duration(*w.TimeoutSeconds) * time.Second
	}
	var err error
	if w.NamespaceSelector != nil {
		if h.nsSelector, err = metav1.LabelSelectorAsSelector(w.NamespaceSelector); err != nil {
			return nil, err
		}
	}
	if w.ObjectSelector != nil {
		if h.objSelector, err = metav1.LabelSelectorAsSelector(w.ObjectSelector); err != nil {
			return nil, err
		}
	}
	if h.conditions, err = compileMatchConditions(w.MatchConditions, false); err != nil {
		return nil, err
	}
	if h.client, err = newWebhookClient(w.ClientConfig); err != nil {
		return nil, err
	}
	return h, nil
}

// exemptFromAdmission: the admission configurations themselves are never
// sent to webhooks or policies, so a bad webhook cannot lock itself in.
func exemptFromAdmission(res *resource) bool {
	if res.gvr.Group != "admissionregistration.k8s.io" {
		return false
	}
	switch res.gvr.Resource {
	case "mutatingwebhookconfigurations", "validatingwebhookconfigurations",
		"validatingadmissionpolicies", "validatingadmissionpolicybindings":
		return true
	}
	return false
}

// requestAttrs builds the attributes of a write for the webhooks and
// policies alone; ok is false when they do not see it (hooked).
func requestAttrs(ctx context.Context, wc *writeCtx, op admissionv1.Operation, subresource, namespace, name string, obj, old runtime.Object) (*admissionAttrs, bool) {
	a := newAdmissionAttrs(ctx, wc, op, subresource, namespace, name, obj, old)
	if !a.hooked {
		return nil, false
	}
	return &a, true
}

// subresourceAdmittedKey marks the context of a subresource request
// (pods/binding, pods/eviction, */scale) whose own object admission has
// seen: the writes it then makes on the parent object are not sent to
// webhooks and policies again, as kube-apiserver's subresource storages
// write the parent without admission.
type subresourceAdmittedKey struct{}

// subresourceAdmission runs admission on a subresource's own object
// (a Binding, an Eviction, a Scale) of kind, as kube-apiserver sends it:
// the parent's resource, the subresource, the object of its own kind.
// mutate runs the mutating webhooks (which may change obj in place);
// validate the policies and validating webhooks; written is the context
// for the writes that follow.
type subresourceAdmission struct {
	s *Server
	a *admissionAttrs // nil: nothing to admit (the server's own request)
}

func (s *Server) admitSubresource(ctx context.Context, wc *writeCtx, op admissionv1.Operation, subresource, namespace, name string, kind schema.GroupVersionKind, obj, old runtime.Object) subresourceAdmission {
	a, ok := requestAttrs(ctx, wc, op, subresource, namespace, name, obj, old)
	if !ok {
		return subresourceAdmission{s: s}
	}
	a.kind = kind
	obj.GetObjectKind().SetGroupVersionKind(kind)
	if old != nil && !reflect.ValueOf(old).IsNil() {
		old.GetObjectKind().SetGroupVersionKind(kind)
	}
	return subresourceAdmission{s: s, a: a}
}

// admitSubresourceCreate starts the admission of a subresource create
// (pods/binding, pods/eviction, serviceaccounts/token) whose body is obj:
// it reads the request's dryRun and runs the mutating webhooks; the
// caller validates obj, then runs validate.
func (s *Server) admitSubresourceCreate(r *http.Request, res *resource, ri requestInfo, kind schema.GroupVersionKind, obj runtime.Object) (adm subresourceAdmission, dry bool, err error) {
	opts, err := params.Create(r.URL.Query())
	if err != nil {
		return adm, false, err
	}
	dry = len(opts.DryRun) > 0
	// The object is in the request's namespace, as kube-apiserver's
	// create handler makes it before admission.
	if m, err := metaOf(obj); err == nil && m.GetNamespace() == "" {
		m.SetNamespace(ri.namespace)
	}
	adm = s.admitSubresource(r.Context(), s.newWriteCtx(res, dry), admissionv1.Create, ri.subresource, ri.namespace, ri.name, kind, obj, nil)
	return adm, dry, adm.mutate(r.Context())
}

func (sa subresourceAdmission) mutate(ctx context.Context) error {
	if sa.a == nil {
		return nil
	}
	return sa.s.runMutating(ctx, sa.a)
}

func (sa subresourceAdmission) validate(ctx context.Context) error {
	if sa.a == nil {
		return nil
	}
	return sa.s.runValidating(ctx, sa.a)
}

func (sa subresourceAdmission) written(ctx context.Context) context.Context {
	return context.WithValue(ctx, subresourceAdmittedKey{}, true)
}

// admitMutating runs the mutating webhooks on a create's or an update's
// object, in place.
func (s *Server) admitMutating(ctx context.Context, a *admissionAttrs) (err error) {
	m, _ := metaOf(a.obj)
	if wc := a.wc; wc.requestSpec != nil {
		// Webhooks see the request's object whole.
		if hooks, err := s.webhooks.mutating.get(ctx); err != nil || len(hooks) > 0 {
			if err := wc.requestSpec(); err != nil {
				return err
			}
			wc.requestSpec = nil
		}
	}
	// A webhook may not move the object to another namespace.
	defer func() {
		if err == nil && m.GetNamespace() != a.namespace {
			err = apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
	}()
	return s.runMutating(ctx, a)
}

// runMutating calls the mutating webhooks that match a, one after
// another, patching a.obj in place.
func (s *Server) runMutating(ctx context.Context, a *admissionAttrs) error {
	hooks, err := s.webhooks.mutating.get(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(hooks) == 0 {
		return nil
	}
	// invokedAt[i] is the mutation count after hook i ran (its own change
	// included); a hook that asks to be reinvoked is, once, if a later
	// one changed the object.
	invokedAt := map[int]int{}
	mutations := 0
	for i, h := range hooks {
		changed, called, err := s.callWebhook(ctx, h, a, hookCall{index: i})
		if err != nil {
			return err
		}
		if changed {
			mutations++
		}
		if called {
			invokedAt[i] = mutations
		}
	}
	if mutations == 0 {
		return nil
	}
	for i, h := range hooks {
		if at, ok := invokedAt[i]; !ok || !h.reinvoke || at >= mutations {
			continue
		}
		if _, _, err := s.callWebhook(ctx, h, a, hookCall{round: 1, index: i}); err != nil {
			return err
		}
	}
	return nil
}

// runValidating evaluates the policies, then calls the validating
// webhooks.
func (s *Server) runValidating(ctx context.Context, a *admissionAttrs) error {
	if err := s.admitPolicies(ctx, a); err != nil {
		return err
	}
	return s.runValidatingWebhooks(ctx, a)
}

// runValidatingWebhooks calls the validating webhooks in parallel; the
// first denial (in configuration order) is the answer.
func (s *Server) runValidatingWebhooks(ctx context.Context, a *admissionAttrs) error {
	hooks, err := s.webhooks.validating.get(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	switch len(hooks) {
	case 0:
		return nil
	case 1:
		_, _, err := s.callWebhook(ctx, hooks[0], a, hookCall{})
		return err
	}
	errs := make([]error, len(hooks))
	done := make(chan struct{}, len(hooks))
	for i, h := range hooks {
		go func() {
			defer func() { done <- struct{}{} }()
			_, _, errs[i] = s.callWebhook(ctx, h, a, hookCall{index: i})
		}()
	}
	for range hooks {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// connectOptions reads the options of a pods/exec, attach or portforward
// request from its query, as kube-apiserver decodes them before admission.
func connectOptions(subresource string, q url.Values) (runtime.Object, error) {
	var opts runtime.Object
	switch subresource {
	case "exec":
		opts = params.PodExec(q)
	case "attach":
		opts = params.PodAttach(q)
	case "portforward":
		o, err := params.PodPortForward(q)
		if err != nil {
			return nil, err
		}
		opts = o
	default:
		return nil, fmt.Errorf("no options for %q", subresource)
	}
	kind := reflect.TypeOf(opts).Elem().Name()
	opts.GetObjectKind().SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
	return opts, nil
}

// admitConnect admits a pods/exec, attach or portforward request as
// operation CONNECT with its options as the object, as kube-apiserver
// does. A mutating webhook's patch changes the options the connection is
// made with, as in kube-apiserver.
func (s *Server) admitConnect(ctx context.Context, res *resource, ri requestInfo, opts runtime.Object) error {
	a := newAdmissionAttrs(ctx, s.newWriteCtx(res, false), admissionv1.Connect, ri.subresource, ri.namespace, ri.name, opts, nil)
	a.kind = opts.GetObjectKind().GroupVersionKind()
	return s.admit(ctx, &a, nil)
}

// hookCall says which call of a webhook this is, for the audit
// annotations: the round (1 for a mutating webhook's reinvocation) and
// the webhook's index in its list.
type hookCall struct{ round, index int }

// The audit annotations admission webhooks leave, as kube-apiserver's.
const (
	mutationAnnotationPrefix           = "mutation.webhook.admission.k8s.io/"
	patchAnnotationPrefix              = "patch.webhook.admission.k8s.io/"
	mutationFailedOpenAnnotationPrefix = "failed-open." + mutationAnnotationPrefix
	validatingFailedOpenAnnotation     = "failed-open.validating.webhook.admission.k8s.io/"
)

func (c hookCall) key(prefix string) string {
	return fmt.Sprintf("%sround_%d_index_%d", prefix, c.round, c.index)
}

// annotateCall records in the audit event that a mutating webhook was
// called and whether it changed the object (Metadata level), and the
// patch it sent (Request level).
func annotateCall(ctx context.Context, h *webhook, c hookCall, mutated bool, patch jsonpatch.Patch) {
	if !h.mutating {
		return
	}
	m, _ := json.Marshal(struct {
		Configuration string `json:"configuration"`
		Webhook       string `json:"webhook"`
		Mutated       bool   `json:"mutated"`
	}{h.configName, h.name, mutated})
	addAdmissionAnnotation(ctx, audit.LevelMetadata, c.key(mutationAnnotationPrefix), string(m))
	if patch == nil {
		return
	}
	p, err := json.Marshal(struct {
		Configuration string          `json:"configuration"`
		Webhook       string          `json:"webhook"`
		Patch         jsonpatch.Patch `json:"patch,omitempty"`
		PatchType     string          `json:"patchType,omitempty"`
	}{h.configName, h.name, patch, string(admissionv1.PatchTypeJSONPatch)})
	if err == nil {
		addAdmissionAnnotation(ctx, audit.LevelRequest, c.key(patchAnnotationPrefix), string(p))
	}
}

// callWebhook calls h if it matches a. changed says a patch changed the
// object; called that the webhook was asked.
func (s *Server) callWebhook(ctx context.Context, h *webhook, a *admissionAttrs, c hookCall) (changed, called bool, err error) {
	inv, ok, err := s.matchWebhook(ctx, h, a)
	if err != nil || !ok {
		return false, false, err
	}
	if a.dryRun && h.sideEffects != admissionregistrationv1.SideEffectClassNone && h.sideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun {
		// kube-apiserver refuses a dry run that would reach a webhook
		// with side effects.
		return false, false, apierrors.NewBadRequest(fmt.Sprintf("admission webhook %q has side effects and does not support dry run", h.name))
	}
	req, err := inv.request(a)
	if err != nil {
		return false, false, apierrors.NewInternalError(err)
	}
	if ok, err := h.conditions.match(req, a, nil); err != nil {
		if h.failurePolicy == admissionregistrationv1.Ignore {
			return false, false, nil
		}
		return false, false, apierrors.NewInternalError(fmt.Errorf("failed calling webhook %q: %w", h.name, err))
	} else if !ok {
		return false, false, nil
	}
	var patch jsonpatch.Patch
	defer func() { annotateCall(ctx, h, c, changed, patch) }()
	failOpen := func() {
		prefix := validatingFailedOpenAnnotation
		if h.mutating {
			prefix = mutationFailedOpenAnnotationPrefix
		}
		addAdmissionAnnotation(ctx, audit.LevelMetadata, c.key(prefix), h.name)
	}
	resp, callErr := h.client.call(ctx, s, h, req)
	if callErr != nil {
		if h.failurePolicy == admissionregistrationv1.Ignore {
			s.log.Warn("admission webhook failed; ignored as its failurePolicy says", "webhook", h.name, "err", callErr)
			failOpen()
			return false, true, nil
		}
		return false, true, apierrors.NewInternalError(fmt.Errorf("failed calling webhook %q: %w", h.name, callErr))
	}
	// The webhook's own audit annotations go under its name.
	for k, v := range resp.AuditAnnotations {
		addAdmissionAnnotation(ctx, audit.LevelMetadata, h.name+"/"+k, v)
	}
	for _, w := range resp.Warnings {
		addWarningTo(ctx, w)
	}
	if !resp.Allowed {
		return false, true, webhookDenied(h.name, resp.Result)
	}
	if len(resp.Patch) == 0 || !h.mutating {
		return false, true, nil
	}
	if a.obj == nil || reflect.ValueOf(a.obj).IsNil() {
		// A DELETE has no object to patch; kube-apiserver fails the
		// request whatever the failurePolicy.
		if p, err := jsonpatch.DecodePatch(resp.Patch); err == nil && len(p) == 0 {
			return false, true, nil
		}
		return false, true, apierrors.NewInternalError(fmt.Errorf("admission webhook %q attempted to modify the object, which is not supported for this operation", h.name))
	}
	changed, err = inv.applyPatch(a, resp.Patch)
	if err != nil {
		if h.failurePolicy == admissionregistrationv1.Ignore {
			failOpen()
			return false, true, nil
		}
		return false, true, apierrors.NewInternalError(fmt.Errorf("failed calling webhook %q: %w", h.name, err))
	}
	patch, _ = jsonpatch.DecodePatch(resp.Patch)
	return changed, true, nil
}

// webhookDenied is the error of a webhook's refusal, worded as
// kube-apiserver words it.
func webhookDenied(name string, result *metav1.Status) error {
	st := metav1.Status{Status: metav1.StatusFailure}
	if result != nil {
		st = *result
	}
	deniedBy := fmt.Sprintf("admission webhook %q denied the request", name)
	if st.Code < http.StatusBadRequest {
		st.Code = http.StatusBadRequest
	}
	if st.Status == "" || st.Status == metav1.StatusSuccess {
		st.Status = metav1.StatusFailure
	}
	switch {
	case st.Message != "":
		st.Message = deniedBy + ": " + st.Message
	case st.Reason != "":
		st.Message = deniedBy + ": " + string(st.Reason)
	default:
		st.Message = deniedBy + " without explanation"
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// invocation is how a matched webhook sees the request: the resource and
// kind it registered for, which under matchPolicy Equivalent may differ
// from the request's.
type invocation struct {
	res *resource // the resource the webhook is called for
}

// matchWebhook decides whether h is called for a.
func (s *Server) matchWebhook(ctx context.Context, h *webhook, a *admissionAttrs) (invocation, bool, error) {
	inv := invocation{res: a.res}
	if !rulesMatch(h.rules, a, a.res) {
		if h.matchPolicy != admissionregistrationv1.Equivalent {
			return inv, false, nil
		}
		eq := s.equivalentResource(a.res)
		if eq == nil || !rulesMatch(h.rules, a, eq) {
			return inv, false, nil
		}
		inv.res = eq
	}
	if !objectSelected(h.objSelector, a) {
		return inv, false, nil
	}
	ok, err := s.namespaceSelected(ctx, h.nsSelector, a)
	if err != nil {
		return inv, false, err
	}
	return inv, ok, nil
}

// equivalentResource is the other resource that stores the same objects
// (core and events.k8s.io Events), which matchPolicy Equivalent also
// matches.
func (s *Server) equivalentResource(res *resource) *resource {
	if res.storage != nil {
		return res.storage
	}
	for _, r := range s.reg.byGVR {
		if r.storage == res {
			return r
		}
	}
	return nil
}

func rulesMatch(rules []admissionregistrationv1.RuleWithOperations, a *admissionAttrs, res *resource) bool {
	for _, r := range rules {
		if ruleMatches(r, a, res) {
			return true
		}
	}
	return false
}

func ruleMatches(r admissionregistrationv1.RuleWithOperations, a *admissionAttrs, res *resource) bool {
	opOK := false
	for _, op := range r.Operations {
		if op == admissionregistrationv1.OperationAll || string(op) == string(a.op) {
			opOK = true
			break
		}
	}
	if !opOK || !matchesAny(r.APIGroups, res.gvr.Group) || !matchesAny(r.APIVersions, res.gvr.Version) {
		return false
	}
	resOK := false
	for _, want := range r.Resources {
		if resourceMatches(want, res.gvr.Resource, a.subresource) {
			resOK = true
			break
		}
	}
	if !resOK {
		return false
	}
	isNamespace := res.gvr.Group == "" && res.gvr.Resource == "namespaces"
	switch scope := r.Scope; {
	case scope == nil || *scope == admissionregistrationv1.AllScopes:
		return true
	case *scope == admissionregistrationv1.NamespacedScope:
		return res.namespaced && !isNamespace
	default:
		return !res.namespaced || isNamespace
	}
}

func matchesAny(xs []string, x string) bool {
	for _, y := range xs {
		if y == "*" || y == x {
			return true
		}
	}
	return false
}

// resourceMatches reads a rule's resource: "pods", "pods/status",
// "pods/*", "*", "*/status", "*/*".
func resourceMatches(want, resource, subresource string) bool {
	r, sub, hasSub := strings.Cut(want, "/")
	if r != "*" && r != resource {
		return false
	}
	if !hasSub {
		return subresource == ""
	}
	return sub == "*" || sub == subresource
}

// objectSelected: the object's labels (or, for deletes, the old
// object's) match the selector.
func objectSelected(sel labels.Selector, a *admissionAttrs) bool {
	if sel.Empty() {
		return true
	}
	for _, o := range []runtime.Object{a.obj, a.old} {
		if o == nil || reflect.ValueOf(o).IsNil() {
			continue
		}
		if m, err := metaOf(o); err == nil && sel.Matches(labels.Set(m.GetLabels())) {
			return true
		}
	}
	return false
}

// namespaceSelected: the namespace of the object (a Namespace itself for
// namespace requests) has labels the selector matches; other
// cluster-scoped objects always match.
func (s *Server) namespaceSelected(ctx context.Context, sel labels.Selector, a *admissionAttrs) (bool, error) {
	if sel.Empty() {
		return true, nil
	}
	if a.res.gvr.Group == "" && a.res.gvr.Resource == "namespaces" {
		o := a.obj
		if o == nil || reflect.ValueOf(o).IsNil() {
			o = a.old
		}
		m, _ := metaOf(o)
		return sel.Matches(labels.Set(m.GetLabels())), nil
	}
	if !a.res.namespaced {
		return true, nil
	}
	ns, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "namespaces")], "", a.namespace)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return sel.Matches(labels.Set(ns.(*corev1.Namespace).Labels)), nil
}

// request builds the AdmissionRequest the webhook is sent.
func (inv invocation) request(a *admissionAttrs) (*admissionv1.AdmissionRequest, error) {
	req := &admissionv1.AdmissionRequest{
		UID:                types.UID(uuid.NewUUID()),
		Kind:               metav1.GroupVersionKind(inv.res.gvk()),
		Resource:           metav1.GroupVersionResource(inv.res.gvr),
		SubResource:        a.subresource,
		RequestKind:        ptrTo(metav1.GroupVersionKind(a.res.gvk())),
		RequestResource:    ptrTo(metav1.GroupVersionResource(a.res.gvr)),
		RequestSubResource: a.subresource,
		Name:               a.name,
		Namespace:          a.namespace,
		Operation:          a.op,
		UserInfo:           userInfo(a.user),
		DryRun:             &a.dryRun,
	}
	var err error
	if !a.kind.Empty() {
		// A subresource's object or the connect options, of their own
		// kind.
		gvk := metav1.GroupVersionKind(a.kind)
		req.Kind, req.RequestKind = gvk, &gvk
		if req.Object.Raw, err = encodeAs(a.kind, a.obj); err != nil {
			return nil, err
		}
		if req.OldObject.Raw, err = encodeAs(a.kind, a.old); err != nil {
			return nil, err
		}
		req.Options.Raw, err = optionsFor(a)
		return req, err
	}
	if req.Object.Raw, err = inv.encode(a.res, a.obj); err != nil {
		return nil, err
	}
	if req.OldObject.Raw, err = inv.encode(a.res, a.old); err != nil {
		return nil, err
	}
	req.Options.Raw, err = optionsFor(a)
	return req, err
}

func optionsFor(a *admissionAttrs) ([]byte, error) {
	var dry []string
	if a.dryRun {
		dry = []string{metav1.DryRunAll}
	}
	var o any
	switch a.op {
	case admissionv1.Create:
		o = &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"}, DryRun: dry}
	case admissionv1.Update:
		o = &metav1.UpdateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "UpdateOptions"}, DryRun: dry}
	case admissionv1.Delete:
		o = &metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "DeleteOptions"}, DryRun: dry}
	default:
		return nil, nil
	}
	return json.Marshal(o)
}

// convert turns an object of from into one of inv.res (the same object
// under the equivalent resource).
func (inv invocation) convert(from *resource, obj runtime.Object) runtime.Object {
	switch {
	case from == inv.res:
		return obj
	case inv.res.storage == from:
		return inv.res.fromStorage(obj)
	case from.storage == inv.res:
		return from.toStorage(obj)
	}
	return obj
}

// encodeAs is the JSON of obj (nil for none) as kind.
func encodeAs(kind schema.GroupVersionKind, obj runtime.Object) ([]byte, error) {
	if obj == nil || reflect.ValueOf(obj).IsNil() {
		return nil, nil
	}
	o := obj.DeepCopyObject()
	o.GetObjectKind().SetGroupVersionKind(kind)
	return json.Marshal(o)
}

func (inv invocation) encode(from *resource, obj runtime.Object) ([]byte, error) {
	if obj == nil || reflect.ValueOf(obj).IsNil() {
		return nil, nil
	}
	o := inv.convert(from, obj.DeepCopyObject())
	o.GetObjectKind().SetGroupVersionKind(inv.res.gvk())
	return json.Marshal(o)
}

// applyPatch applies a webhook's JSON patch to a.obj in place, converting
// through the webhook's resource and applying defaults again, as
// kube-apiserver does.
func (inv invocation) applyPatch(a *admissionAttrs, patch []byte) (bool, error) {
	if a.obj == nil || reflect.ValueOf(a.obj).IsNil() {
		return false, nil
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return false, fmt.Errorf("failed to decode the webhook's patch: %w", err)
	}
	if !a.kind.Empty() {
		return applyPatchAs(a, p)
	}
	before, err := inv.encode(a.res, a.obj)
	if err != nil {
		return false, err
	}
	after, err := p.Apply(before)
	if err != nil {
		return false, fmt.Errorf("failed to apply the webhook's patch: %w", err)
	}
	patched := inv.res.newObject()
	if err := json.Unmarshal(after, patched); err != nil {
		return false, fmt.Errorf("the webhook's patch made an invalid object: %w", err)
	}
	if gvk := patched.GetObjectKind().GroupVersionKind(); gvk != inv.res.gvk() {
		return false, fmt.Errorf("the webhook's patch changed the kind to %v", gvk)
	}
	back := inv.backTo(a.res, patched)
	a.res.defaulter.Default(back)
	back.GetObjectKind().SetGroupVersionKind(a.res.gvk())
	if reflect.DeepEqual(back, a.obj) {
		return false, nil
	}
	reflect.ValueOf(a.obj).Elem().Set(reflect.ValueOf(back).Elem())
	return true, nil
}

// applyPatchAs patches an object of its own kind (a subresource's object,
// connect options) in place.
func applyPatchAs(a *admissionAttrs, p jsonpatch.Patch) (bool, error) {
	before, err := encodeAs(a.kind, a.obj)
	if err != nil {
		return false, err
	}
	after, err := p.Apply(before)
	if err != nil {
		return false, fmt.Errorf("failed to apply the webhook's patch: %w", err)
	}
	patched := reflect.New(reflect.TypeOf(a.obj).Elem()).Interface().(runtime.Object)
	if err := json.Unmarshal(after, patched); err != nil {
		return false, fmt.Errorf("the webhook's patch made an invalid object: %w", err)
	}
	if gvk := patched.GetObjectKind().GroupVersionKind(); gvk != a.kind {
		return false, fmt.Errorf("the webhook's patch changed the kind to %v", gvk)
	}
	if reflect.DeepEqual(patched, a.obj) {
		return false, nil
	}
	reflect.ValueOf(a.obj).Elem().Set(reflect.ValueOf(patched).Elem())
	return true, nil
}

func (inv invocation) backTo(to *resource, obj runtime.Object) runtime.Object {
	switch {
	case to == inv.res:
		return obj
	case to.storage == inv.res:
		return to.fromStorage(obj)
	case inv.res.storage == to:
		return inv.res.toStorage(obj)
	}
	return obj
}

// warningsKey carries the response's Warning sink, for admission.
type warningsKey struct{}

// warningSink adds Warning headers to one response; validating webhooks
// answer in parallel.
type warningSink struct {
	mu sync.Mutex
	w  http.ResponseWriter
}

// withAdmissionWarnings lets admission add Warning headers to the
// response of the request it admits.
func withAdmissionWarnings(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), warningsKey{}, &warningSink{w: w})))
	})
}

// addWarningTo adds a Warning header to the response of ctx's request.
func addWarningTo(ctx context.Context, msg string) {
	if s, ok := ctx.Value(warningsKey{}).(*warningSink); ok {
		s.mu.Lock()
		addWarning(s.w, msg)
		s.mu.Unlock()
	}
}
