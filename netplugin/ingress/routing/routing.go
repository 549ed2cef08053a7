// Package routing is the Ingress controller's routing table: which
// backend a request goes to, given its Host header and path, under the
// rules of the Ingresses the controller serves. It is pure (no API, no
// network): the controller builds a Table from Ingresses and swaps it in
// whole; requests only read it.
//
// The rules are those of the Ingress API:
//
//   - host: an exact name, or "*.foo.com", which covers exactly one more
//     label ("bar.foo.com", not "foo.com" nor "baz.bar.foo.com"); a rule
//     without host catches every host.
//   - pathType Exact matches the path exactly, case-sensitively; Prefix
//     matches element by element ("/foo" matches "/foo", "/foo/" and
//     "/foo/bar", not "/foobar"; a trailing slash on either side is
//     ignored); ImplementationSpecific is matched as Prefix.
//   - of the paths that match, the longest wins, Exact before Prefix at
//     the same length; between Ingresses giving the same host, path and
//     type, the oldest wins (as ingress-nginx).
//
// Where the API leaves it to the controller, bonsai does what
// ingress-nginx and Traefik do: a request is tried against the rules of
// its exact host, then of its wildcard host, then the defaultBackend of
// the (oldest) Ingress naming that host, then the rules without host,
// then the defaultBackend of the oldest Ingress with no rules or with
// rules without host. Nothing matched: no backend (404).
package routing

import (
	"net"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Backend is where a route sends requests: a Service port, or a
// resource (which the controller answers 503: it cannot serve one).
type Backend struct {
	// Namespace and Ingress are the Ingress the route comes from.
	Namespace, Ingress string
	// Service and Port are a service backend.
	Service string
	Port    networkingv1.ServiceBackendPort
	// Resource is set for a resource backend.
	Resource *corev1.TypedLocalObjectReference
}

// ServiceKey is "namespace/name" of a service backend's Service.
func (b *Backend) ServiceKey() string { return b.Namespace + "/" + b.Service }

// Table is a routing table. The zero value routes nothing.
type Table struct {
	exact    map[string]*hostRoutes
	wildcard map[string]*hostRoutes // by the suffix after "*", ".foo.com"
	anyHost  *hostRoutes            // rules without host
}

// hostRoutes are the routes of one host.
type hostRoutes struct {
	paths []route // longest first, Exact before Prefix at the same length
	// fallback is the defaultBackend of the oldest Ingress naming the
	// host (for anyHost: of the oldest Ingress with no rules or with
	// rules without host).
	fallback *Backend
}

type route struct {
	// match is the path as written for Exact, and without its trailing
	// slashes for Prefix ("" is every path).
	match   string
	exact   bool
	backend *Backend
}

func (r route) matches(path string) bool {
	if r.exact {
		return path == r.match
	}
	return MatchPrefix(r.match, path)
}

// MatchPrefix reports whether prefix, a Prefix path without trailing
// slashes, is an element-wise prefix of path.
func MatchPrefix(prefix, path string) bool {
	if prefix == "" {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || path[len(prefix)] == '/'
}

// New builds the table of ings. Their order does not matter: where two
// disagree, the older (creationTimestamp, then namespace/name) wins.
func New(ings []*networkingv1.Ingress) *Table {
	sorted := make([]*networkingv1.Ingress, len(ings))
	copy(sorted, ings)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	t := &Table{exact: map[string]*hostRoutes{}, wildcard: map[string]*hostRoutes{}, anyHost: &hostRoutes{}}
	for _, ing := range sorted {
		t.add(ing)
	}
	t.each(func(h *hostRoutes) {
		sort.SliceStable(h.paths, func(i, j int) bool {
			a, b := h.paths[i], h.paths[j]
			if len(a.match) != len(b.match) {
				return len(a.match) > len(b.match)
			}
			return a.exact && !b.exact
		})
	})
	return t
}

func (t *Table) each(f func(*hostRoutes)) {
	for _, h := range t.exact {
		f(h)
	}
	for _, h := range t.wildcard {
		f(h)
	}
	f(t.anyHost)
}

func (t *Table) host(name string) *hostRoutes {
	m, key := t.exact, name
	switch {
	case name == "":
		return t.anyHost
	case strings.HasPrefix(name, "*."):
		m, key = t.wildcard, name[1:]
	}
	h := m[key]
	if h == nil {
		h = &hostRoutes{}
		m[key] = h
	}
	return h
}

func (t *Table) add(ing *networkingv1.Ingress) {
	backend := func(b *networkingv1.IngressBackend) *Backend {
		out := &Backend{Namespace: ing.Namespace, Ingress: ing.Name, Resource: b.Resource}
		if b.Service != nil {
			out.Service, out.Port = b.Service.Name, b.Service.Port
		}
		return out
	}
	var def *Backend
	if ing.Spec.DefaultBackend != nil {
		def = backend(ing.Spec.DefaultBackend)
	}
	if len(ing.Spec.Rules) == 0 && def != nil && t.anyHost.fallback == nil {
		t.anyHost.fallback = def
	}
	for _, rule := range ing.Spec.Rules {
		h := t.host(strings.ToLower(rule.Host))
		if def != nil && h.fallback == nil {
			h.fallback = def
		}
		if rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			r := route{match: p.Path, backend: backend(&p.Backend)}
			if p.PathType != nil && *p.PathType == networkingv1.PathTypeExact {
				r.exact = true
			} else {
				// Prefix, and ImplementationSpecific taken as Prefix.
				r.match = strings.TrimRight(p.Path, "/")
			}
			h.paths = append(h.paths, r)
		}
	}
}

// Match is the backend for a request to host (a Host header: any port
// is ignored, and case) and path (the URL's path); nil when nothing
// matches.
func (t *Table) Match(host, path string) *Backend {
	if t == nil || t.anyHost == nil {
		return nil
	}
	host = Host(host)
	var exact, wild *hostRoutes
	if host != "" {
		exact = t.exact[host]
		if i := strings.IndexByte(host, '.'); i > 0 {
			wild = t.wildcard[host[i:]]
		}
	}
	for _, h := range []*hostRoutes{exact, wild} {
		if b := h.match(path); b != nil {
			return b
		}
	}
	for _, h := range []*hostRoutes{exact, wild} {
		if h != nil && h.fallback != nil {
			return h.fallback
		}
	}
	if b := t.anyHost.match(path); b != nil {
		return b
	}
	return t.anyHost.fallback
}

func (h *hostRoutes) match(path string) *Backend {
	if h == nil {
		return nil
	}
	for _, r := range h.paths {
		if r.matches(path) {
			return r.backend
		}
	}
	return nil
}

// Host is a Host header (or a TLS server name) as rules compare it:
// lower case, without port or trailing dot.
func Host(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}
