package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"bonsai.dev/bonsai/client"
)

// Defaults, as k3s and kubeadm configure cluster DNS.
const (
	DefaultAddress       = "10.43.0.10:53"
	DefaultClusterDomain = "cluster.local"
	// DefaultTTL is the kubernetes plugin's default answer TTL.
	DefaultTTL = 5 * time.Second
	// DefaultCacheSize is the capacity of CoreDNS' cache plugin.
	DefaultCacheSize = 9984
	// DefaultCacheMaxTTL is the "cache 30" of the k3s and kubeadm Corefiles.
	DefaultCacheMaxTTL = 30 * time.Second
	// DefaultUpstreamTimeout is how long one upstream gets to answer, the
	// forward plugin's read timeout.
	DefaultUpstreamTimeout = 2 * time.Second
	DefaultResolvConf      = "/etc/resolv.conf"
)

// Config of the cluster DNS server. Zero fields take the defaults above.
type Config struct {
	// Informers supply Services, EndpointSlices and Namespaces; the caller
	// starts them.
	Informers *client.Informers
	// Address is the ip:port served over UDP and TCP. Port 0 picks a free
	// port, the same for both (for tests).
	Address string
	// ClusterDomain is the zone answered from the informers.
	ClusterDomain string
	// TTL of the answers in the cluster domain.
	TTL time.Duration
	// Upstreams ("ip" or "ip:port") get every query outside the cluster
	// domain. Nil means the nameservers of ResolvConf.
	Upstreams []string
	// ResolvConf is read for the upstreams when Upstreams is nil.
	ResolvConf string
	// UpstreamTimeout bounds one attempt at one upstream.
	UpstreamTimeout time.Duration
	// CacheSize bounds the number of cached upstream responses.
	CacheSize int
	// CacheMaxTTL caps how long an upstream response (positive or
	// negative) is cached.
	CacheMaxTTL time.Duration
	Logger      *slog.Logger
}

// Server is the cluster DNS server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	zone    string
	dotZone string // "." + zone, to test names for the suffix
	index   *zoneIndex
	fwd     *forwarder
	builder *indexBuilder

	mu      sync.Mutex
	udp     net.PacketConn
	tcp     net.Listener
	address string
	synced  atomic.Bool
}

// New builds the server and registers its informer handlers; it must be
// called before the informers start. It does not bind: Listen or Run does.
func New(cfg Config) (*Server, error) {
	if cfg.Informers == nil {
		return nil, errors.New("dns: Config.Informers is required")
	}
	if cfg.Address == "" {
		cfg.Address = DefaultAddress
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = DefaultClusterDomain
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = DefaultResolvConf
	}
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.CacheMaxTTL == 0 {
		cfg.CacheMaxTTL = DefaultCacheMaxTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	listen, err := netip.ParseAddrPort(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("dns: address %q: want ip:port: %w", cfg.Address, err)
	}
	if cfg.TTL < 0 || cfg.TTL > time.Hour {
		// The kubernetes plugin's bounds for its ttl option.
		return nil, fmt.Errorf("dns: TTL %s: want 0 to 3600 s", cfg.TTL)
	}
	if _, ok := dns.IsDomainName(cfg.ClusterDomain); !ok {
		return nil, fmt.Errorf("dns: cluster domain %q is not a domain name", cfg.ClusterDomain)
	}
	upstreams := cfg.Upstreams
	if upstreams == nil {
		rc, err := ReadResolvConf(cfg.ResolvConf)
		if err != nil {
			return nil, fmt.Errorf("dns: upstreams: %w", err)
		}
		upstreams = rc.Nameservers
	}
	ups, err := upstreamAddrs(upstreams, listen)
	if err != nil {
		return nil, err
	}
	if len(ups) == 0 {
		cfg.Logger.Warn("cluster DNS has no upstream: names outside the cluster domain will fail", "configured", upstreams)
	}
	var nsIPs []netip.Addr
	if !listen.Addr().IsUnspecified() {
		nsIPs = []netip.Addr{listen.Addr().Unmap()}
	}
	zone := strings.ToLower(dns.Fqdn(cfg.ClusterDomain))
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		zone:    zone,
		dotZone: "." + zone,
		index:   newZoneIndex(zone, uint32(cfg.TTL/time.Second), nsIPs),
		fwd:     newForwarder(ups, cfg.UpstreamTimeout, newCache(cfg.CacheSize, cfg.CacheMaxTTL)),
	}
	if s.builder, err = newIndexBuilder(cfg.Informers, s.index, zone, s.log); err != nil {
		return nil, err
	}
	return s, nil
}

// upstreamAddrs turns nameservers into ip:port, leaving out any that is
// this server itself: forwarding there would loop (CoreDNS' loop plugin
// stops on the same condition).
func upstreamAddrs(servers []string, listen netip.AddrPort) ([]string, error) {
	var out []string
	for _, s := range servers {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			ip, err2 := netip.ParseAddr(s)
			if err2 != nil {
				return nil, fmt.Errorf("dns: upstream %q: want ip or ip:port", s)
			}
			ap = netip.AddrPortFrom(ip, 53)
		}
		if loopsBack(ap, listen) {
			continue
		}
		out = append(out, ap.String())
	}
	return out, nil
}

func loopsBack(up, listen netip.AddrPort) bool {
	if up.Port() != listen.Port() {
		return false
	}
	u, l := up.Addr().Unmap(), listen.Addr().Unmap()
	return u == l || (l.IsUnspecified() && (u.IsLoopback() || u.IsUnspecified()))
}

// Listen binds the UDP and TCP sockets and returns the address served.
// Run calls it when the caller has not.
func (s *Server) Listen() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.udp != nil {
		return s.address, nil
	}
	host, port, _ := net.SplitHostPort(s.cfg.Address)
	// With port 0 the kernel picks the UDP port; TCP must get the same
	// one, which another process may hold: try a few.
	var lastErr error
	for range 10 {
		pc, err := net.ListenPacket("udp", s.cfg.Address)
		if err != nil {
			return "", fmt.Errorf("dns: listen udp %s: %w", s.cfg.Address, err)
		}
		bound := net.JoinHostPort(host, strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))
		ln, err := net.Listen("tcp", bound)
		if err != nil {
			pc.Close()
			lastErr = fmt.Errorf("dns: listen tcp %s: %w", bound, err)
			if port != "0" {
				return "", lastErr
			}
			continue
		}
		s.udp, s.tcp, s.address = pc, ln, bound
		return bound, nil
	}
	return "", lastErr
}

// Run serves until ctx ends. Answers in the cluster domain wait for the
// informers: until they have synced, a name not found is SERVFAIL, not
// NXDOMAIN, as in CoreDNS.
func (s *Server) Run(ctx context.Context) error {
	if _, err := s.Listen(); err != nil {
		return err
	}
	// Shutdown before a server has started is a no-op after which it
	// would serve forever: wait for both to start first.
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	servers := []*dns.Server{
		{PacketConn: s.udp, Handler: s, Net: "udp", NotifyStartedFunc: notify},
		{Listener: s.tcp, Handler: s, Net: "tcp", NotifyStartedFunc: notify},
	}
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		go func() { errc <- srv.ActivateAndServe() }()
	}
	for range servers {
		select {
		case <-started:
		case err := <-errc:
			s.udp.Close()
			s.tcp.Close()
			return fmt.Errorf("dns: serving %s: %w", s.address, err)
		}
	}
	go func() {
		if s.builder.waitSynced(ctx) {
			s.synced.Store(true)
			s.log.Info("cluster DNS serving", "address", s.address, "domain", s.cfg.ClusterDomain, "upstreams", s.fwd.upstreams)
		}
	}()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("dns: serving %s: %w", s.address, err)
	}
	for _, srv := range servers {
		srv.Shutdown()
	}
	return err
}
