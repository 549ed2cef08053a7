package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/apiserver/authn"
)

// inProcessUserKey carries the identity of an in-process client. It is a
// context value, so nothing arriving over the network can claim it.
type inProcessUserKey struct{}

// fromInProcess says whether r came from one of bonsai's own components
// through ClientConfig's transport.
func fromInProcess(r *http.Request) bool {
	_, ok := r.Context().Value(inProcessUserKey{}).(*authn.User)
	return ok
}

// ClientConfig is a client-go configuration that reaches this server
// without TCP or TLS, acting as user, through the whole handler chain:
// what bonsai's own scheduler, controllers and kubelet use inside `bonsai
// server`.
func (s *Server) ClientConfig(user *authn.User) *rest.Config {
	return &rest.Config{
		Host:      "http://bonsai.in-process",
		Transport: &inProcessTransport{h: s.handler, user: user},
		QPS:       -1, // no client-side throttling in-process
		UserAgent: user.Name,
	}
}

type inProcessTransport struct {
	h    http.Handler
	user *authn.User
}

// HandsOverWatches: the watches of bonsai's informers through this
// transport get their events as objects (client.WatchSink).
func (t *inProcessTransport) HandsOverWatches() {}

// RoundTrip runs the handler. A request whose answer may be a stream (a
// watch, a log, a proxied or upgraded connection) runs in a goroutine and
// returns as soon as its header is written, the body streaming through a
// pipe; closing the body cancels the request. Any other request runs
// here, its answer buffered: no goroutine and no pipe hand-offs for the
// bindings, status writes and lease renewals of bonsai's components.
func (t *inProcessTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(context.WithValue(req.Context(), inProcessUserKey{}, t.user))
	req = req.Clone(ctx)
	req.RequestURI = req.URL.RequestURI()
	req.RemoteAddr = "in-process"
	if req.Body == nil {
		req.Body = http.NoBody
	}
	if !mayStream(req) {
		defer cancel()
		return t.answer(req)
	}
	pr, pw := io.Pipe()
	rw := &pipeResponseWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				rw.WriteHeader(http.StatusInternalServerError)
				pw.CloseWithError(io.ErrUnexpectedEOF)
				return
			}
		}()
		t.h.ServeHTTP(rw, req)
		rw.WriteHeader(http.StatusOK) // no-op if already written
		pw.Close()
	}()
	select {
	case <-rw.ready:
	case <-req.Context().Done():
		cancel()
		pr.Close()
		return nil, req.Context().Err()
	}
	return response(req, rw.code, rw.sent, &cancelOnClose{ReadCloser: pr, cancel: cancel}, -1), nil
}

// response is the answer to req.
func response(req *http.Request, code int, header http.Header, body io.ReadCloser, length int64) *http.Response {
	return &http.Response{
		StatusCode:    code,
		Status:        http.StatusText(code),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          body,
		ContentLength: length,
		Request:       req,
	}
}

// mayStream says whether the answer to req may be a stream that outlives
// the handler's first write: a watch (a watch parameter, even false, or
// the old /watch/ paths), a followed or any log, a proxied request, or a
// connection upgrade (exec, attach, port-forward).
func mayStream(req *http.Request) bool {
	if req.Header.Get("Upgrade") != "" || req.Header.Get("Connection") != "" {
		return true
	}
	q, p := req.URL.RawQuery, req.URL.Path
	return strings.Contains(q, "watch=") || strings.Contains(q, "follow=") ||
		strings.Contains(p, "/watch/") || strings.HasSuffix(p, "/log") || strings.Contains(p, "/proxy")
}

// answer runs the handler for req here and returns its whole answer.
func (t *inProcessTransport) answer(req *http.Request) (resp *http.Response, err error) {
	rw := &bufferedResponseWriter{}
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("in-process request %s %s: handler panicked: %v", req.Method, req.URL.Path, p)
			}
		}()
		t.h.ServeHTTP(rw, req)
	}()
	if err != nil {
		return nil, err
	}
	rw.WriteHeader(http.StatusOK) // a no-op if the handler wrote one
	return response(req, rw.code, rw.sent, io.NopCloser(bytes.NewReader(rw.body.Bytes())), int64(rw.body.Len())), nil
}

// bufferedResponseWriter keeps a whole answer. Its header map becomes
// the response's at WriteHeader; later changes go to a new map and are
// lost, as on the wire.
type bufferedResponseWriter struct {
	header, sent http.Header
	code         int
	body         bytes.Buffer
}

func (w *bufferedResponseWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *bufferedResponseWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code, w.sent, w.header = code, w.Header(), nil
	}
}

func (w *bufferedResponseWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Flush is a no-op: the answer is whole when the handler returns.
func (w *bufferedResponseWriter) Flush() {}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	c.cancel()
	return c.ReadCloser.Close()
}

// pipeResponseWriter is an http.ResponseWriter (and Flusher) over a pipe.
type pipeResponseWriter struct {
	header http.Header
	sent   http.Header
	code   int
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
}

func (w *pipeResponseWriter) Header() http.Header { return w.header }

func (w *pipeResponseWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.code = code
		w.sent = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponseWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush is a no-op: every Write already reaches the reader.
func (w *pipeResponseWriter) Flush() {}
