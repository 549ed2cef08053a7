package apiserver

import (
	"context"
	"io"
	"net/http"
	"sync"

	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/apiserver/authn"
)

// inProcessUserKey carries the identity of an in-process client. It is a
// context value, so nothing arriving over the network can claim it.
type inProcessUserKey struct{}

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

// RoundTrip runs the handler in a goroutine and returns as soon as it has
// written its header, streaming the body through a pipe: watches work.
// Closing the response body cancels the request.
func (t *inProcessTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(context.WithValue(req.Context(), inProcessUserKey{}, t.user))
	req = req.Clone(ctx)
	req.RequestURI = req.URL.RequestURI()
	req.RemoteAddr = "in-process"
	if req.Body == nil {
		req.Body = http.NoBody
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
	return &http.Response{
		StatusCode:    rw.code,
		Status:        http.StatusText(rw.code),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rw.sent,
		Body:          &cancelOnClose{ReadCloser: pr, cancel: cancel},
		ContentLength: -1,
		Request:       req,
	}, nil
}

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
