package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// upstreamCtxKey carries a request's upstream from ServeHTTP to the
// round tripper.
type upstreamCtxKey struct{}

// ServeHTTP routes a request by the current state and proxies it.
func (c *Controller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := c.state.Load()
	if st == nil {
		http.Error(w, "503 Service Unavailable: the ingress controller is starting", http.StatusServiceUnavailable)
		return
	}
	b := st.table.Match(r.Host, r.URL.Path)
	switch {
	case b == nil:
		http.Error(w, "404 Not Found: no Ingress rule matches this host and path", http.StatusNotFound)
		return
	case b.Resource != nil:
		http.Error(w, fmt.Sprintf("503 Service Unavailable: Ingress %s/%s sends this request to the resource %s, which %s does not serve",
			b.Namespace, b.Ingress, resourceName(b.Resource), ControllerName), http.StatusServiceUnavailable)
		return
	}
	up := st.upstreams[keyOf(b)]
	if up == nil || len(up.addrs) == 0 {
		why := "no endpoints"
		if up != nil {
			why = up.why
		}
		http.Error(w, fmt.Sprintf("503 Service Unavailable: backend %s of Ingress %s/%s: %s", keyOf(b), b.Namespace, b.Ingress, why), http.StatusServiceUnavailable)
		return
	}
	if isUpgrade(r.Header) {
		c.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), upstreamCtxKey{}, up)))
		return
	}
	c.forward(w, r, up)
}

// rewrite makes the request to the backend: the same path and Host,
// the X-Forwarded headers of this hop (a client's own are dropped, as
// ingress-nginx does by default), and an endpoint the round tripper
// fills in.
func (c *Controller) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = pr.In.Context().Value(upstreamCtxKey{}).(*upstream).name
	pr.SetXForwarded()
	if ip, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
		pr.Out.Header.Set("X-Real-Ip", ip)
	}
	if la, ok := pr.In.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, port, err := net.SplitHostPort(la.String()); err == nil {
			pr.Out.Header.Set("X-Forwarded-Port", port)
		}
	}
}

// roundTripper is ReverseProxy's way to send, for Upgrade requests.
type roundTripper struct{ c *Controller }

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	up := req.Context().Value(upstreamCtxKey{}).(*upstream)
	return rt.c.send(req.Context(), req, up)
}

// send sends req to up's endpoints in turn (round robin), and to the
// next one when connecting fails, up to maxTries, as long as nothing of
// the request was sent.
func (c *Controller) send(ctx context.Context, req *http.Request, up *upstream) (*http.Response, error) {
	n := len(up.addrs)
	start := int(up.next.Add(1) - 1)
	var body *trackedBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &trackedBody{rc: req.Body}
		req.Body = body
	}
	tries := min(n, maxTries)
	for i := 0; ; i++ {
		addr := up.addrs[(start+i)%n]
		resp, err := c.transport.roundTrip(ctx, req, addr, body)
		if err == nil {
			return resp, nil
		}
		if i+1 >= tries || !dialFailed(err) || (body != nil && body.read) || ctx.Err() != nil {
			return nil, err
		}
		c.log.Debug("endpoint refused; trying the next", "upstream", up.name, "endpoint", addr, "err", err)
	}
}

func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// trackedBody is a request body that says whether any of it was read,
// and that the transport may not close: a request whose connection
// failed goes to another endpoint with the same body.
type trackedBody struct {
	rc   io.ReadCloser
	read bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.read = true
	return b.rc.Read(p)
}

func (b *trackedBody) Close() error { return nil }

// proxyError answers a request no endpoint answered: 504 when the
// endpoint took too long, 502 otherwise; nothing when the client left.
func (c *Controller) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	c.answerError(w, r, r.Context().Value(upstreamCtxKey{}).(*upstream), err)
}

func (c *Controller) answerError(w http.ResponseWriter, r *http.Request, up *upstream, err error) {
	if r.Context().Err() != nil {
		return
	}
	status := http.StatusBadGateway
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		status = http.StatusGatewayTimeout
	}
	what := err.Error()
	if errors.Is(err, syscall.ECONNREFUSED) {
		what = "connection refused"
	}
	c.log.Debug("proxy error", "upstream", up.name, "host", r.Host, "path", r.URL.Path, "status", status, "err", err)
	http.Error(w, strconv.Itoa(status)+" "+http.StatusText(status)+": backend "+up.name+": "+what, status)
}

// copyBuffers are the proxy's 32 KB body copy buffers, reused.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }
