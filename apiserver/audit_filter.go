package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
)

// maxAuditBody bounds the request and response bodies an event carries.
const maxAuditBody = 1 << 20

type auditKey struct{}

// auditState is the event of a request in flight, for the filters after
// the audit step (impersonation, authorization) and admission to add to;
// mu guards its annotations, which validating webhooks add in parallel.
type auditState struct {
	mu sync.Mutex
	ev *audit.Event
}

func auditEvent(ctx context.Context) *audit.Event {
	if st, ok := ctx.Value(auditKey{}).(*auditState); ok {
		return st.ev
	}
	return nil
}

func annotate(ctx context.Context, k, v string) {
	updateAnnotations(ctx, audit.LevelMetadata, func(a map[string]string) { a[k] = v })
}

// addAdmissionAnnotation adds an annotation admission makes, when the
// event records at least level. The first value of a key stays, as
// kube-apiserver refuses to change an admission annotation once set.
func addAdmissionAnnotation(ctx context.Context, level audit.Level, k, v string) {
	updateAnnotations(ctx, level, func(a map[string]string) {
		if _, ok := a[k]; !ok {
			a[k] = v
		}
	})
}

// updateAnnotations lets f change the annotations of ctx's event, if the
// event records at least level.
func updateAnnotations(ctx context.Context, level audit.Level, f func(map[string]string)) {
	st, ok := ctx.Value(auditKey{}).(*auditState)
	if !ok || st.ev.Level.Less(level) {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ev.Annotations == nil {
		st.ev.Annotations = map[string]string{}
	}
	f(st.ev.Annotations)
}

// withAudit writes the audit events the policy asks for: RequestReceived
// before the request is handled, ResponseStarted when a long-running
// request (watch, exec, attach, port-forward, log) sends its headers,
// ResponseComplete at its end. It runs right after authentication, as in
// kube-apiserver, so it sees who asked before impersonation.
func (s *Server) withAudit(next http.Handler) http.Handler {
	if s.cfg.AuditPolicy == nil || s.cfg.AuditLog == nil {
		return next
	}
	policy, log := s.cfg.AuditPolicy, s.cfg.AuditLog
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := requestUser(r.Context())
		if u == nil {
			next.ServeHTTP(w, r)
			return
		}
		a := authz.RequestAttributes(r, u)
		level, omit := policy.LevelFor(audit.Attributes{
			User: u.Name, Groups: u.Groups, Verb: a.Verb, ResourceRequest: a.ResourceRequest,
			APIGroup: a.APIGroup, Resource: a.Resource, Subresource: a.Subresource, Namespace: a.Namespace, Name: a.Name, Path: a.Path,
		})
		if level == audit.LevelNone {
			next.ServeHTTP(w, r)
			return
		}
		ev := &audit.Event{
			Level: level, AuditID: types.UID(uuid.NewUUID()), RequestURI: r.URL.RequestURI(), Verb: a.Verb,
			User: userInfo(u), SourceIPs: sourceIPs(r), UserAgent: r.UserAgent(),
			RequestReceivedTimestamp: metav1.NewMicroTime(time.Now()),
		}
		if a.ResourceRequest {
			ev.ObjectRef = &audit.ObjectReference{Resource: a.Resource, Namespace: a.Namespace, Name: a.Name, APIGroup: a.APIGroup, APIVersion: a.APIVersion, Subresource: a.Subresource}
		}
		if !level.Less(audit.LevelRequest) && (r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch) && r.Body != nil {
			body, err := io.ReadAll(io.LimitReader(r.Body, maxAuditBody+1))
			r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
			if err == nil && len(body) <= maxAuditBody && json.Valid(body) {
				ev.RequestObject = body
			}
		}
		st := &auditState{ev: ev}
		emit := func(stage audit.Stage) {
			if omit[stage] {
				return
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			e := *ev
			e.Stage, e.StageTimestamp = stage, metav1.NewMicroTime(time.Now())
			if err := log.Write(&e); err != nil {
				s.log.Error("audit log", "err", err)
			}
		}
		w.Header().Set("Audit-Id", string(ev.AuditID))
		emit(audit.StageRequestReceived)
		longRunning := a.Verb == "watch" || (a.ResourceRequest && connectSubresources[a.Subresource]) || a.Subresource == "log"
		aw := &auditWriter{ResponseWriter: w, capture: !longRunning}
		if longRunning {
			aw.started = func() {
				ev.ResponseStatus = &metav1.Status{Code: int32(aw.code)}
				emit(audit.StageResponseStarted)
			}
		}
		next.ServeHTTP(aw, r.WithContext(context.WithValue(r.Context(), auditKey{}, st)))
		if aw.code == 0 {
			aw.code = http.StatusOK
		}
		ev.ResponseStatus = responseStatus(aw.code, aw.body.Bytes())
		if level == audit.LevelRequestResponse && aw.capture && aw.body.Len() > 0 && json.Valid(aw.body.Bytes()) {
			ev.ResponseObject = bytes.Clone(aw.body.Bytes())
		}
		emit(audit.StageResponseComplete)
	})
}

// auditFailedAuthentication writes the event of a request that failed
// authentication, as kube-apiserver's failed-authentication audit: no
// user, the policy's level for it, stage ResponseStarted, code 401 and
// the methods the request tried.
func (s *Server) auditFailedAuthentication(r *http.Request) {
	if s.cfg.AuditPolicy == nil || s.cfg.AuditLog == nil {
		return
	}
	a := authz.RequestAttributes(r, &authn.User{})
	level, omit := s.cfg.AuditPolicy.LevelFor(audit.Attributes{
		Verb: a.Verb, ResourceRequest: a.ResourceRequest, APIGroup: a.APIGroup, Resource: a.Resource,
		Subresource: a.Subresource, Namespace: a.Namespace, Name: a.Name, Path: a.Path,
	})
	if level == audit.LevelNone || omit[audit.StageResponseStarted] {
		return
	}
	var tried []string
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		tried = append(tried, "certificate")
	}
	if r.Header.Get("Authorization") != "" {
		tried = append(tried, "token")
	}
	now := metav1.NewMicroTime(time.Now())
	ev := &audit.Event{
		Level: level, AuditID: types.UID(uuid.NewUUID()), Stage: audit.StageResponseStarted, RequestURI: r.URL.RequestURI(), Verb: a.Verb,
		SourceIPs: sourceIPs(r), UserAgent: r.UserAgent(), RequestReceivedTimestamp: now, StageTimestamp: now,
		ResponseStatus: &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnauthorized, Reason: metav1.StatusReasonUnauthorized,
			Message: "Authentication failed, attempted: " + strings.Join(tried, ", ")},
	}
	if a.ResourceRequest {
		ev.ObjectRef = &audit.ObjectReference{Resource: a.Resource, Namespace: a.Namespace, Name: a.Name, APIGroup: a.APIGroup, APIVersion: a.APIVersion, Subresource: a.Subresource}
	}
	if err := s.cfg.AuditLog.Write(ev); err != nil {
		s.log.Error("audit log", "err", err)
	}
}

// responseStatus is the event's status: the code, and for a failure what
// the Status body says.
func responseStatus(code int, body []byte) *metav1.Status {
	st := &metav1.Status{Code: int32(code)}
	if code < 300 {
		return st
	}
	var got metav1.Status
	if json.Unmarshal(body, &got) == nil && got.Kind == "Status" {
		st.Status, st.Message, st.Reason, st.Details = got.Status, got.Message, got.Reason, got.Details
	} else {
		st.Status = metav1.StatusFailure
	}
	return st
}

func sourceIPs(r *http.Request) []string {
	var ips []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		for _, ip := range strings.Split(h, ",") {
			if ip = strings.TrimSpace(ip); net.ParseIP(ip) != nil {
				ips = append(ips, ip)
			}
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil && net.ParseIP(host) != nil {
		ips = append(ips, host)
	}
	return ips
}

type readCloser struct {
	io.Reader
	io.Closer
}

// auditWriter records the status code and (bounded) body of a response,
// passing flushes and hijacks (watches, exec) through.
type auditWriter struct {
	http.ResponseWriter
	code    int
	capture bool
	body    bytes.Buffer
	started func()
}

func (w *auditWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
		if w.started != nil {
			w.started()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.capture {
		if w.body.Len()+len(b) <= maxAuditBody {
			w.body.Write(b)
		} else {
			w.capture = false
			w.body.Reset()
		}
	}
	return w.ResponseWriter.Write(b)
}

func (w *auditWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *auditWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("audit: the connection cannot be hijacked")
	}
	if w.code == 0 {
		w.code = http.StatusSwitchingProtocols
		if w.started != nil {
			w.started()
		}
	}
	return h.Hijack()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
