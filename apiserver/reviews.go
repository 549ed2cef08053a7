package apiserver

import (
	"net/http"
	"net/url"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
)

// serveReview answers the create-only review kinds of
// authorization.k8s.io and authentication.k8s.io: nothing is stored, the
// answer is the request with its status filled in.
func (s *Server) serveReview(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	if ri.verb != "create" || ri.name != "" || ri.subresource != "" {
		return methodNotSupported(res, ri.verb)
	}
	p, err := parseWrite(r, res)
	if err != nil {
		return err
	}
	obj := res.newObject()
	if err := decodeRequest(w, r, p.body, obj, p.fv); err != nil {
		return err
	}
	if err := checkKind(obj, res); err != nil {
		return err
	}
	u := requestUser(r.Context())
	if u == nil {
		return apierrors.NewUnauthorized("Unauthorized")
	}
	var errs field.ErrorList
	switch o := obj.(type) {
	case *authorizationv1.SelfSubjectAccessReview:
		errs = validateAccessSpec(o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes)
		if len(errs) == 0 {
			o.Status = s.accessReview(r, u, o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes)
		}
	case *authorizationv1.SubjectAccessReview:
		errs = validateAccessSpec(o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes)
		if o.Spec.User == "" && len(o.Spec.Groups) == 0 {
			errs = append(errs, field.Invalid(field.NewPath("spec", "user"), o.Spec.User, "at least one of user or group must be specified"))
		}
		if len(errs) == 0 {
			o.Status = s.accessReview(r, reviewedUser(o.Spec.User, o.Spec.UID, o.Spec.Groups, o.Spec.Extra), o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes)
		}
	case *authorizationv1.LocalSubjectAccessReview:
		errs = validateAccessSpec(o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes)
		if o.Spec.NonResourceAttributes != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "nonResourceAttributes"), o.Spec.NonResourceAttributes, "disallowed on this kind of request"))
		}
		if o.Spec.ResourceAttributes != nil && o.Spec.ResourceAttributes.Namespace != ri.namespace {
			errs = append(errs, field.Invalid(field.NewPath("spec", "resourceAttributes", "namespace"), o.Spec.ResourceAttributes.Namespace, "must match metadata.namespace"))
		}
		if o.Spec.User == "" && len(o.Spec.Groups) == 0 {
			errs = append(errs, field.Invalid(field.NewPath("spec", "user"), o.Spec.User, "at least one of user or group must be specified"))
		}
		if len(errs) == 0 {
			o.Namespace = ri.namespace
			o.Status = s.accessReview(r, reviewedUser(o.Spec.User, o.Spec.UID, o.Spec.Groups, o.Spec.Extra), o.Spec.ResourceAttributes, nil)
		}
	case *authorizationv1.SelfSubjectRulesReview:
		if o.Spec.Namespace == "" {
			errs = append(errs, field.Required(field.NewPath("spec", "namespace"), ""))
		} else {
			o.Status = s.rulesReview(u, o.Spec.Namespace)
		}
	case *authenticationv1.SelfSubjectReview:
		o.Status.UserInfo = userInfo(u)
	case *authenticationv1.TokenReview:
		if o.Spec.Token == "" {
			errs = append(errs, field.Required(field.NewPath("spec", "token"), ""))
		} else {
			o.Status = s.tokenReview(r, o.Spec)
		}
	}
	if len(errs) > 0 {
		m, _ := metaOf(obj)
		return invalid(res, m.GetName(), errs)
	}
	return s.respond(w, r, http.StatusCreated, res, obj, p.format)
}

func validateAccessSpec(ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) field.ErrorList {
	if (ra == nil) == (nra == nil) {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "resourceAttributes"), ra, "exactly one of nonResourceAttributes or resourceAttributes must be specified")}
	}
	return nil
}

func reviewedUser(name, uid string, groups []string, extra map[string]authorizationv1.ExtraValue) *authn.User {
	u := &authn.User{Name: name, UID: uid, Groups: groups}
	if len(extra) > 0 {
		u.Extra = map[string][]string{}
		for k, v := range extra {
			u.Extra[k] = v
		}
	}
	return u
}

func (s *Server) accessReview(r *http.Request, u *authn.User, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) authorizationv1.SubjectAccessReviewStatus {
	a := authz.Attributes{User: u}
	if ra != nil {
		a.ResourceRequest, a.Verb, a.APIGroup, a.APIVersion = true, ra.Verb, ra.Group, ra.Version
		a.Resource, a.Subresource, a.Namespace, a.Name = ra.Resource, ra.Subresource, ra.Namespace, ra.Name
	} else {
		a.Verb, a.Path = nra.Verb, nra.Path
	}
	d, reason, err := s.authorizer.Authorize(r.Context(), a)
	st := authorizationv1.SubjectAccessReviewStatus{Allowed: d == authz.Allow, Denied: d == authz.Deny, Reason: reason}
	if err != nil {
		st.EvaluationError = err.Error()
	}
	return st
}

// rulesReview lists what u may do in ns, as SelfSubjectRulesReview: the
// rules RBAC binds to it. system:masters and nodes hold permissions the
// rules do not list, so their answer is incomplete, as on Kubernetes.
func (s *Server) rulesReview(u *authn.User, ns string) authorizationv1.SubjectRulesReviewStatus {
	var st authorizationv1.SubjectRulesReviewStatus
	if s.rbac == nil {
		// AlwaysAllow: everything.
		st.ResourceRules = []authorizationv1.ResourceRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}}
		st.NonResourceRules = []authorizationv1.NonResourceRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}
		return st
	}
	rules, errs := s.rbac.RulesFor(u, ns)
	if _, ok := authz.NodeName(u); ok {
		st.Incomplete = true
		st.EvaluationError = "node authorizer does not support user rule resolution"
	}
	if len(errs) > 0 {
		st.Incomplete = true
		msg := ""
		for i, e := range errs {
			if i > 0 {
				msg += ", "
			}
			msg += e.Error()
		}
		st.EvaluationError = msg
	}
	st.ResourceRules, st.NonResourceRules = []authorizationv1.ResourceRule{}, []authorizationv1.NonResourceRule{}
	for _, rule := range rules {
		st.ResourceRules, st.NonResourceRules = appendRule(st.ResourceRules, st.NonResourceRules, rule)
	}
	return st
}

func appendRule(rr []authorizationv1.ResourceRule, nr []authorizationv1.NonResourceRule, rule rbacv1.PolicyRule) ([]authorizationv1.ResourceRule, []authorizationv1.NonResourceRule) {
	if len(rule.NonResourceURLs) > 0 {
		return rr, append(nr, authorizationv1.NonResourceRule{Verbs: rule.Verbs, NonResourceURLs: rule.NonResourceURLs})
	}
	return append(rr, authorizationv1.ResourceRule{Verbs: rule.Verbs, APIGroups: rule.APIGroups, Resources: rule.Resources, ResourceNames: rule.ResourceNames}), nr
}

func userInfo(u *authn.User) authenticationv1.UserInfo {
	ui := authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		ui.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range u.Extra {
			ui.Extra[k] = v
		}
	}
	return ui
}

// tokenReview authenticates a bearer token as the API server would for
// a request carrying it.
func (s *Server) tokenReview(r *http.Request, spec authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus {
	var st authenticationv1.TokenReviewStatus
	audiences := s.apiAudiences()
	if len(spec.Audiences) > 0 {
		var ok []string
		for _, a := range spec.Audiences {
			for _, mine := range audiences {
				if a == mine {
					ok = append(ok, a)
				}
			}
		}
		if len(ok) == 0 {
			st.Error = "token audiences are invalid for the target audiences"
			return st
		}
		audiences = ok
	}
	if s.cfg.Authenticator == nil {
		st.Error = "token authentication is not configured"
		return st
	}
	req := (&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Header: http.Header{}}).WithContext(r.Context())
	req.Header.Set("Authorization", "Bearer "+spec.Token)
	u, ok, err := s.cfg.Authenticator.AuthenticateRequest(req)
	switch {
	case err != nil:
		st.Error = err.Error()
	case !ok:
		st.Error = "invalid bearer token"
	default:
		st.Authenticated, st.User, st.Audiences = true, userInfo(u), audiences
	}
	return st
}
