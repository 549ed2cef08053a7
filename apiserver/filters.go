package apiserver

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

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
			s.authFailures.record(s.log, r, err)
			s.auditFailedAuthentication(r)
			writeStatus(w, statusf(http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}

func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}

// authFailureLog logs failed authentications at info level, at most one a
// second after a burst of five, and says how many it left out: a client
// guessing tokens is seen, and cannot flood the log.
type authFailureLog struct {
	limit      *rate.Limiter
	suppressed atomic.Int64
}

func newAuthFailureLog() *authFailureLog {
	return &authFailureLog{limit: rate.NewLimiter(1, 5)}
}

func (l *authFailureLog) record(log *slog.Logger, r *http.Request, err error) {
	if !l.limit.Allow() {
		l.suppressed.Add(1)
		return
	}
	reason := "no credentials"
	if err != nil {
		reason = err.Error()
	}
	log.Info("authentication failed", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path,
		"userAgent", r.UserAgent(), "reason", reason, "suppressedSinceLast", l.suppressed.Swap(0))
}
