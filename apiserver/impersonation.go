package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
)

// Impersonation headers, as kubectl --as, --as-group and --as-uid send
// them.
const (
	headerImpersonateUser        = "Impersonate-User"
	headerImpersonateGroup       = "Impersonate-Group"
	headerImpersonateUID         = "Impersonate-Uid"
	headerImpersonateExtraPrefix = "Impersonate-Extra-"
)

// withImpersonation lets a user act as another when the authorizer
// allows it the impersonate verb on each requested user (or service
// account), group, uid and extra value, as kube-apiserver does. The
// headers are removed before the request goes on.
func (s *Server) withImpersonation(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Header.Get(headerImpersonateUser)
		groups := r.Header.Values(headerImpersonateGroup)
		uid := r.Header.Get(headerImpersonateUID)
		extra := map[string][]string{}
		for k, v := range r.Header {
			if strings.HasPrefix(k, headerImpersonateExtraPrefix) {
				key, err := url.PathUnescape(strings.ToLower(strings.TrimPrefix(k, headerImpersonateExtraPrefix)))
				if err != nil {
					key = strings.ToLower(strings.TrimPrefix(k, headerImpersonateExtraPrefix))
				}
				extra[key] = append(extra[key], v...)
			}
		}
		if name == "" && len(groups) == 0 && uid == "" && len(extra) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		requester := requestUser(r.Context())
		if requester == nil {
			writeError(w, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		if name == "" {
			var what []string
			for _, g := range groups {
				what = append(what, fmt.Sprintf("{Group %s}", g))
			}
			if uid != "" {
				what = append(what, fmt.Sprintf("{UID %s}", uid))
			}
			for k, vs := range extra {
				for _, v := range vs {
					what = append(what, fmt.Sprintf("{UserExtra %s=%s}", k, v))
				}
			}
			writeError(w, apierrors.NewBadRequest(fmt.Sprintf("requested %v without impersonating a user", what)))
			return
		}
		ctx := r.Context()
		check := func(a authz.Attributes) bool {
			a.User, a.ResourceRequest, a.Verb = requester, true, "impersonate"
			if s.authorize(ctx, a) {
				return true
			}
			writeError(w, forbidden(a, ""))
			return false
		}
		u := &authn.User{Name: name, UID: uid}
		if ns, sa, ok := serviceAccountUser(name); ok {
			if !check(authz.Attributes{Resource: "serviceaccounts", Namespace: ns, Name: sa}) {
				return
			}
			if len(groups) == 0 {
				u.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}
			}
		} else if !check(authz.Attributes{Resource: "users", Name: name}) {
			return
		}
		for _, g := range groups {
			if !check(authz.Attributes{Resource: "groups", Name: g}) {
				return
			}
			u.Groups = append(u.Groups, g)
		}
		if uid != "" && !check(authz.Attributes{Resource: "uids", Name: uid}) {
			return
		}
		for k, vs := range extra {
			for _, v := range vs {
				if !check(authz.Attributes{APIGroup: "authentication.k8s.io", Resource: "userextras", Subresource: k, Name: v}) {
					return
				}
			}
		}
		if len(extra) > 0 {
			u.Extra = extra
		}
		if name != "system:anonymous" {
			addAuthenticated := true
			for _, g := range u.Groups {
				if g == authn.GroupAuthenticated || g == "system:unauthenticated" {
					addAuthenticated = false
				}
			}
			if addAuthenticated {
				u.Groups = append(u.Groups, authn.GroupAuthenticated)
			}
		}
		if ev := auditEvent(ctx); ev != nil {
			ui := userInfo(u)
			ev.ImpersonatedUser = &ui
		}
		r = r.Clone(context.WithValue(ctx, userKey{}, u))
		r.Header.Del(headerImpersonateUser)
		r.Header.Del(headerImpersonateGroup)
		r.Header.Del(headerImpersonateUID)
		for k := range r.Header {
			if strings.HasPrefix(k, headerImpersonateExtraPrefix) {
				r.Header.Del(k)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// serviceAccountUser splits system:serviceaccount:<ns>:<name>.
func serviceAccountUser(name string) (ns, sa string, ok bool) {
	rest, ok := strings.CutPrefix(name, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	ns, sa, ok = strings.Cut(rest, ":")
	return ns, sa, ok && ns != "" && sa != ""
}
