package proxy

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// healthTimeout is how long a change may wait for the kernel before the
// proxy counts as unhealthy: kube-proxy's, twice its default 30 s sync
// period.
const healthTimeout = 60 * time.Second

// healthCheck is what a Service needs of the health server: its
// health-check node port (0: none) and the number of this node's ready
// endpoints.
type healthCheck struct {
	port  uint16
	local int
}

// healthServer serves the health-check node ports of LoadBalancer
// Services with externalTrafficPolicy: Local, as kube-proxy's service
// health server: an external load balancer asks each node, on
// spec.healthCheckNodePort, whether it has endpoints of the Service, and
// sends traffic only to those that answer 200. Any path answers (kube-
// proxy's does), with
//
//	{"service":{"namespace":"ns","name":"svc"},"localEndpoints":N,"serviceProxyHealthy":true}
//
// and 200 when N > 0 and the proxy is healthy, else 503. N counts the
// distinct addresses of the Service's ready endpoints on this node:
// terminating ones still get traffic but fail the check, so that the
// load balancer moves away from a node whose pods are going.
type healthServer struct {
	log *slog.Logger
	// cidrs are NodePortAddresses: the ports are served on the local
	// addresses in them, or on every address (0.0.0.0) when empty.
	cidrs []netip.Prefix
	// within runs fn in the proxy's network namespace, where listeners
	// must be made.
	within  func(fn func() error) error
	healthy func() bool

	mu       sync.Mutex
	services map[string]*hcService // by Service key
}

type hcService struct {
	namespace, name string
	healthCheck
	servers []*http.Server // none: not listening (yet)
}

func newHealthServer(log *slog.Logger, cidrs []netip.Prefix, healthy func() bool) *healthServer {
	return &healthServer{
		log: log, cidrs: cidrs, healthy: healthy,
		within:   func(fn func() error) error { return fn() },
		services: map[string]*hcService{},
	}
}

// update sets what the health server serves for the Services in want,
// by key; with all, it serves those alone. A port that could not be
// listened on is tried again at every update.
func (h *healthServer) update(want map[string]healthCheck, all bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, s := range h.services {
		hc, ok := want[key]
		if !ok && !all {
			continue
		}
		if !ok || hc.port != s.port {
			s.close()
			delete(h.services, key)
		}
	}
	for key, hc := range want {
		if hc.port == 0 {
			continue
		}
		s := h.services[key]
		if s == nil {
			ns, name, err := splitKey(key)
			if err != nil {
				continue
			}
			s = &hcService{namespace: ns, name: name}
			h.services[key] = s
		}
		s.healthCheck = hc
	}
	for key, s := range h.services {
		if len(s.servers) == 0 {
			if err := h.listen(s); err != nil {
				h.log.Error("serve a Service's health-check node port; retrying at the next sync", "service", key, "port", s.port, "err", err)
			}
		}
	}
}

// listen serves s's port on every address it should.
func (h *healthServer) listen(s *hcService) error {
	var ls []net.Listener
	err := h.within(func() error {
		addrs := []netip.Addr{netip.IPv4Unspecified()}
		if len(h.cidrs) > 0 {
			var err error
			if addrs, err = localAddrs(h.cidrs); err != nil {
				return err
			}
		}
		for _, a := range addrs {
			l, err := net.Listen("tcp4", netip.AddrPortFrom(a, s.port).String())
			if err != nil {
				return err
			}
			ls = append(ls, l)
		}
		return nil
	})
	if err != nil {
		for _, l := range ls {
			l.Close()
		}
		return err
	}
	key := serviceKey(s.namespace, s.name)
	for _, l := range ls {
		srv := &http.Server{Handler: h.handler(key), ReadHeaderTimeout: 5 * time.Second}
		s.servers = append(s.servers, srv)
		go srv.Serve(l)
	}
	return nil
}

func (s *hcService) close() {
	for _, srv := range s.servers {
		srv.Close()
	}
	s.servers = nil
}

// stop closes every port.
func (h *healthServer) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, s := range h.services {
		s.close()
		delete(h.services, key)
	}
}

func (h *healthServer) handler(key string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h.mu.Lock()
		s := h.services[key]
		var ns, name string
		local := 0
		if s != nil {
			ns, name, local = s.namespace, s.name, s.local
		}
		h.mu.Unlock()
		if s == nil {
			http.Error(w, "no health check for this Service", http.StatusServiceUnavailable)
			return
		}
		healthy := h.healthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(local))
		if local > 0 && healthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintf(w, "{\"service\":{\"namespace\":%q,\"name\":%q},\"localEndpoints\":%d,\"serviceProxyHealthy\":%t}\n", ns, name, local, healthy)
	})
}

// localAddrs are this namespace's IPv4 addresses inside cidrs.
func localAddrs(cidrs []netip.Prefix) ([]netip.Addr, error) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list local addresses: %w", err)
	}
	var out []netip.Addr
	for _, ia := range ifAddrs {
		n, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		if a.Is4() && slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, a)
		}
	}
	slicesSortUnique(&out)
	return out, nil
}

// serviceHealthCheck is what the health server needs of svc's ports
// (see servicePorts): its health-check node port when it is a
// LoadBalancer with externalTrafficPolicy: Local, and the distinct
// addresses of its ready endpoints on this node.
func serviceHealthCheck(port int32, ports []servicePort) healthCheck {
	if port <= 0 || port > 65535 || len(ports) == 0 {
		return healthCheck{}
	}
	var addrs []netip.Addr
	for _, sp := range ports {
		for _, e := range sp.endpoints {
			if e.local && e.ready {
				addrs = append(addrs, e.addr.Addr())
			}
		}
	}
	slicesSortUnique(&addrs)
	return healthCheck{port: uint16(port), local: len(addrs)}
}
