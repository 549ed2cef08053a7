package ingress

import (
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
)

// forward proxies an ordinary request (not an Upgrade) to up and copies
// the answer back, as httputil.ReverseProxy would with the controller's
// rewrite, without its per-request copies of the request, its context
// and its headers: at tens of thousands of requests a second those were
// a third of what the proxy allocated. Upgrade requests still go
// through ReverseProxy, which owns the hijacked connection's copying.
func (c *Controller) forward(w http.ResponseWriter, r *http.Request, up *upstream) {
	h := headerPool.Get().(http.Header)
	defer func() { clear(h); headerPool.Put(h) }()
	forwardedHeader(h, r)
	out := &http.Request{
		Method: r.Method, URL: r.URL, Host: r.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: r.Body, ContentLength: r.ContentLength,
		// Filled as the body is read, sent after it (chunked).
		Trailer: r.Trailer,
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := c.send(r.Context(), out, up)
	if err != nil {
		c.answerError(w, r, up, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		c.answerError(w, r, up, errUnaskedUpgrade)
		return
	}
	removeHopHeaders(resp.Header)
	wh := w.Header()
	for k, vv := range resp.Header {
		wh[k] = vv
	}
	announced := len(resp.Trailer)
	if announced > 0 {
		names := make([]string, 0, announced)
		for k := range resp.Trailer {
			names = append(names, k)
		}
		wh["Trailer"] = []string{strings.Join(names, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	if err := copyBody(w, resp, streams(resp)); err != nil {
		// Headers are out: the client must see a broken response, not
		// a short one taken for whole. net/http closes the connection
		// (or resets the stream) without logging this panic.
		panic(http.ErrAbortHandler)
	}
	for k, vv := range resp.Trailer {
		if len(resp.Trailer) != announced {
			k = http.TrailerPrefix + k
		}
		wh[k] = vv
	}
}

// errUnaskedUpgrade is a backend switching protocols for a request that
// asked for no Upgrade.
var errUnaskedUpgrade = errors.New("it switched protocols without an Upgrade request")

// headerPool holds the outgoing requests' header maps: each is filled
// from the incoming request's (sharing its value slices, which nothing
// writes) and cleared after the exchange.
var headerPool = sync.Pool{New: func() any { return make(http.Header, 16) }}

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1, which a
// proxy does not forward, and the forwarding headers a client may not
// set itself (ingress-nginx replaces them; so does ReverseProxy's
// Rewrite mode).
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

var clientForwarded = map[string]bool{
	"Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true,
	"X-Forwarded-Proto": true, "X-Forwarded-Port": true, "X-Real-Ip": true,
}

var (
	teTrailers = []string{"trailers"}
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

// forwardedHeader fills h with what goes to the backend: r's headers
// less the hop-by-hop ones (and those r's Connection names), and this
// hop's X-Forwarded-For, -Host, -Proto, -Port and X-Real-Ip.
func forwardedHeader(h http.Header, r *http.Request) {
	named := connectionTokens(r.Header)
	for k, vv := range r.Header {
		if hopHeaders[k] || clientForwarded[k] || (named != nil && named[k]) {
			continue
		}
		h[k] = vv
	}
	for _, v := range r.Header["Te"] {
		if hasToken(v, "trailers") {
			h["Te"] = teTrailers
		}
	}
	// One backing array for this hop's values.
	vals := make([]string, 3)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		vals[0] = ip
		h["X-Forwarded-For"] = vals[0:1:1]
		h["X-Real-Ip"] = vals[0:1:1]
	}
	vals[1] = r.Host
	h["X-Forwarded-Host"] = vals[1:2:2]
	if r.TLS != nil {
		h["X-Forwarded-Proto"] = protoHTTPS
	} else {
		h["X-Forwarded-Proto"] = protoHTTP
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, port, err := net.SplitHostPort(la.String()); err == nil {
			vals[2] = port
			h["X-Forwarded-Port"] = vals[2:3:3]
		}
	}
}

// removeHopHeaders drops the hop-by-hop headers of a response.
func removeHopHeaders(h http.Header) {
	for k := range connectionTokens(h) {
		delete(h, k)
	}
	for k := range hopHeaders {
		delete(h, k)
	}
}

// connectionTokens are the header names a Connection header lists, nil
// when there are none.
func connectionTokens(h http.Header) map[string]bool {
	var named map[string]bool
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				if named == nil {
					named = map[string]bool{}
				}
				named[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	return named
}

func hasToken(v, token string) bool {
	for _, f := range strings.Split(v, ",") {
		if strings.EqualFold(textproto.TrimString(f), token) {
			return true
		}
	}
	return false
}

// isUpgrade reports whether a request asks to switch protocols.
func isUpgrade(h http.Header) bool {
	if _, ok := h["Upgrade"]; !ok {
		return false
	}
	for _, v := range h["Connection"] {
		if hasToken(v, "upgrade") {
			return true
		}
	}
	return false
}

// streams reports whether a response goes to the client as it comes (a
// flush after every write): of unknown length, or an event stream; one
// of known length goes out as the buffer fills. ReverseProxy does the
// same with FlushInterval 0.
func streams(resp *http.Response) bool {
	if resp.ContentLength == -1 {
		return true
	}
	const es = "text/event-stream"
	ct := resp.Header.Get("Content-Type")
	if len(ct) < len(es) || !strings.EqualFold(ct[:len(es)], es) {
		return false
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == es
}

// copyBody copies a response's body to the client with a pooled buffer,
// flushing each write when it streams.
func copyBody(w http.ResponseWriter, resp *http.Response, flush bool) error {
	var fl http.Flusher
	if flush {
		fl, _ = w.(http.Flusher)
	}
	buf := copyBuffers{}.Get()
	defer copyBuffers{}.Put(buf)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
