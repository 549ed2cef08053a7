package apiserver

import (
	"context"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/authn"
)

type userKey struct{}

// publicPaths answer anonymous requests, as kube-apiserver's default RBAC
// (system:public-info-viewer) allows.
var publicPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true}

func (s *Server) withAuthentication(next http.Handler) http.Handler {
	if s.cfg.Authenticator == nil {
		admin := &authn.User{Name: "system:admin", Groups: []string{authn.GroupMasters, authn.GroupAuthenticated}}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, admin)))
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := r.Context().Value(inProcessUserKey{}).(*authn.User); ok {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
			return
		}
		u, ok, err := s.cfg.Authenticator.AuthenticateRequest(r)
		if err != nil || !ok {
			if err == nil && publicPaths[r.URL.Path] {
				next.ServeHTTP(w, r)
				return
			}
			if err != nil {
				s.log.Debug("authentication failed", "remote", r.RemoteAddr, "err", err)
			}
			writeStatus(w, statusf(http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}

func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}
