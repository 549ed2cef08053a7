package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/store"
)

// Authorization modes (--authorization-mode).
const (
	// AuthorizationRBAC is kube-apiserver's Node,RBAC: system:masters,
	// then the Node authorizer, then RBAC.
	AuthorizationRBAC        = "RBAC"
	AuthorizationAlwaysAllow = "AlwaysAllow"
)

// setupAuthorization builds the authorizer of cfg.AuthorizationMode and
// loads the caches it reads before the server takes requests.
func (s *Server) setupAuthorization(ctx context.Context) error {
	switch s.cfg.AuthorizationMode {
	case AuthorizationAlwaysAllow:
		s.authorizer = authz.AlwaysAllow{}
		return nil
	case "", AuthorizationRBAC:
	default:
		return fmt.Errorf("unknown authorization mode %q (want %s or %s)", s.cfg.AuthorizationMode, AuthorizationRBAC, AuthorizationAlwaysAllow)
	}
	s.rbac, s.nodeAuthz = authz.NewRBAC(), authz.NewNode()
	s.authorizer = authz.Union{authz.PrivilegedGroups{}, s.nodeAuthz, s.rbac}
	feeds := []struct {
		gvr    schema.GroupVersionResource
		set    func(runtime.Object)
		delete func(ns, name string)
	}{
		{gvr("rbac.authorization.k8s.io", "v1", "clusterroles"),
			func(o runtime.Object) { s.rbac.SetClusterRole(o.(*rbacv1.ClusterRole)) },
			func(_, name string) { s.rbac.DeleteClusterRole(name) }},
		{gvr("rbac.authorization.k8s.io", "v1", "roles"),
			func(o runtime.Object) { s.rbac.SetRole(o.(*rbacv1.Role)) }, s.rbac.DeleteRole},
		{gvr("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
			func(o runtime.Object) { s.rbac.SetClusterRoleBinding(o.(*rbacv1.ClusterRoleBinding)) }, s.rbac.DeleteBinding},
		{gvr("rbac.authorization.k8s.io", "v1", "rolebindings"),
			func(o runtime.Object) { s.rbac.SetRoleBinding(o.(*rbacv1.RoleBinding)) }, s.rbac.DeleteBinding},
		{gvr("", "v1", "pods"),
			func(o runtime.Object) { s.nodeAuthz.SetPod(o.(*corev1.Pod)) }, s.nodeAuthz.DeletePod},
		{gvr("", "v1", "persistentvolumeclaims"),
			func(o runtime.Object) { s.nodeAuthz.SetClaim(o.(*corev1.PersistentVolumeClaim)) }, s.nodeAuthz.DeleteClaim},
	}
	for _, f := range feeds {
		if err := s.feed(ctx, s.reg.byGVR[f.gvr], f.set, f.delete); err != nil {
			return fmt.Errorf("authorization cache of %s: %w", f.gvr.Resource, err)
		}
	}
	return nil
}

// feed lists res into set, then keeps watching it in the background
// (re-listing, without forgetting, when a watch ends), as an informer
// would. The first list is done when feed returns.
func (s *Server) feed(ctx context.Context, res *resource, set func(runtime.Object), del func(ns, name string)) error {
	prefix := res.prefix("")
	split := func(key string) (string, string) {
		rest := strings.TrimPrefix(key, prefix)
		if ns, name, ok := strings.Cut(rest, "/"); ok && res.namespaced {
			return ns, name
		}
		return "", rest
	}
	list := func() (uint64, map[string]bool, error) {
		l, err := s.cfg.Store.List(ctx, prefix, store.ListOptions{})
		if err != nil {
			return 0, nil, err
		}
		seen := map[string]bool{}
		for _, kv := range l.Items {
			if obj, err := decodeStored(res, kv); err == nil {
				set(obj)
				seen[kv.Key] = true
			}
		}
		return l.Revision, seen, nil
	}
	rev, known, err := list()
	if err != nil {
		return err
	}
	go func() {
		for ctx.Err() == nil {
			w, err := s.cfg.Store.Watch(ctx, prefix, rev)
			if err == nil {
				for ev := range w.Events() {
					if ev.Type == store.Deleted {
						del(split(ev.Key))
						delete(known, ev.Key)
					} else if e := s.events.get(res, ev); e.err == nil {
						// Decoded once with the watchers of the same
						// event, and as unchanged by set as by them.
						set(e.obj)
						known[ev.Key] = true
					}
					rev = ev.Revision
				}
				w.Stop()
			}
			if ctx.Err() != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
			// The watch ended (compaction, store restart): re-list, and
			// drop what went while nobody watched.
			r, seen, err := list()
			if err != nil {
				continue
			}
			for key := range known {
				if !seen[key] {
					del(split(key))
				}
			}
			rev, known = r, seen
		}
	}()
	return nil
}

// withAuthorization refuses, with Kubernetes' 403, a request the
// authorizer does not allow. It runs after authentication and
// impersonation, before anything reads the body or the store.
func (s *Server) withAuthorization(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := r.Context().Value(userKey{}).(*authn.User)
		if !ok {
			// Only public paths get here unauthenticated.
			next.ServeHTTP(w, r)
			return
		}
		a := authz.RequestAttributes(r, u)
		d, reason, err := s.authorizer.Authorize(r.Context(), a)
		if reason != "" {
			annotate(r.Context(), "authorization.k8s.io/reason", reason)
		}
		if d == authz.Allow {
			annotate(r.Context(), "authorization.k8s.io/decision", "allow")
			next.ServeHTTP(w, r)
			return
		}
		if err != nil {
			s.log.Debug("authorization error", "user", u.Name, "err", err)
		}
		if fromInProcess(r) {
			// bonsai's own components are meant to hold what they use:
			// a refusal is a gap in their default roles.
			s.log.Warn("in-process component refused", "user", u.Name, "verb", a.Verb, "resource", a.Resource, "subresource", a.Subresource, "namespace", a.Namespace, "path", a.Path, "reason", reason)
		}
		annotate(r.Context(), "authorization.k8s.io/decision", "forbid")
		writeError(w, forbidden(a, reason))
	})
}

// forbidden is Kubernetes' 403 for a request the authorizer refused.
func forbidden(a authz.Attributes, reason string) error {
	msg := authz.ForbiddenMessage(a)
	if reason != "" {
		msg += ": " + reason
	}
	gr := schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}
	return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("%s", msg))
}

// authorize runs the authorizer on attributes a request did not carry
// (impersonation, escalation checks).
func (s *Server) authorize(ctx context.Context, a authz.Attributes) bool {
	d, _, _ := s.authorizer.Authorize(ctx, a)
	return d == authz.Allow
}

// requestUser is the user a request acts as, once authenticated (and
// impersonated).
func requestUser(ctx context.Context) *authn.User {
	u, _ := ctx.Value(userKey{}).(*authn.User)
	return u
}

type authorizer = authz.Authorizer
