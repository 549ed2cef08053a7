// Package apiserver serves the Kubernetes API over the store: the handler
// chain (authentication, authorization, admission), discovery, OpenAPI and
// the generic REST handlers for every resource in its table. It owns the
// wire format; it does not own TLS listeners or certificates (cmd/bonsai
// sets those up) and it never reaches into another component's state.
package apiserver

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"bonsai.dev/bonsai/apiserver/admission"
	"bonsai.dev/bonsai/apiserver/admission/podsecurity"
	"bonsai.dev/bonsai/apiserver/aggregator"
	"bonsai.dev/bonsai/apiserver/apiextensions"
	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/apiserver/encryption"
	"bonsai.dev/bonsai/apiserver/metricsapi"
	"bonsai.dev/bonsai/apiserver/openapi"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/apiserver/registry"
	"bonsai.dev/bonsai/apiserver/registry/core"
	"bonsai.dev/bonsai/store"
)

// Config is what the API server needs from the process that runs it.
type Config struct {
	Store store.Store
	// Authenticator identifies callers; nil lets every request through as
	// an anonymous admin (in-process clients and tests only).
	Authenticator authn.Authenticator
	// ServiceCIDR is the primary service range; ServiceCIDRs, if set, are
	// one range per family, the primary first (dual-stack Services).
	ServiceCIDR   netip.Prefix
	ServiceCIDRs  []netip.Prefix
	ClusterCIDR   netip.Prefix
	NodePortRange PortRange
	ClusterDomain string
	// AdvertiseAddress and SecurePort are where the kubernetes Service's
	// endpoints point; unset, that Service is not created.
	AdvertiseAddress netip.Addr
	SecurePort       int
	// KubeletTLS is how the API server calls kubelets for pods/log, exec,
	// attach and portforward: its kubelet-client certificate and the CA
	// of kubelet serving certificates. KubeletPort is the port of a
	// kubelet whose Node reports none (default 10250).
	KubeletTLS  *tls.Config
	KubeletPort int
	// ReservedHostPorts are the node's ports bonsai serves itself; a pod
	// that asks for one as a hostPort is refused.
	ReservedHostPorts []core.ReservedPort
	// Limits bound requests in flight, their time and each user's
	// watches (--max-requests-inflight and friends).
	Limits Limits
	// ServiceAccountKey signs the service-account tokens of TokenRequest
	// and verifies them as bearer tokens; it must outlive restarts (see
	// pki.Certs.ServiceAccountKey). Nil: a key made at start, whose
	// tokens die with the process (tests).
	ServiceAccountKey crypto.Signer
	// ServiceAccountIssuer is the tokens' "iss" and the API server's
	// audience; default https://kubernetes.default.svc.<ClusterDomain>.
	ServiceAccountIssuer string
	// AuthorizationMode is RBAC (the default: Kubernetes' Node,RBAC) or
	// AlwaysAllow. Without an Authenticator every caller is system:masters,
	// which RBAC allows everything.
	AuthorizationMode string
	// Profiling serves Go's profiles under /debug/pprof/ (--profiling,
	// on by default as in kube-apiserver); the default roles give that
	// path to cluster-admin only.
	Profiling bool
	// AuditPolicy and AuditLog, both set, write audit events
	// (--audit-policy-file, --audit-log-path).
	AuditPolicy *audit.Policy
	AuditLog    *audit.Log
	// Admission is the admission plugins' configuration
	// (--admission-control-config-file); nil: every plugin's defaults
	// (PodSecurity: privileged, no exemptions).
	Admission *admission.Config
	// FrontProxy is the front-proxy CA and client certificate requests
	// to aggregated API servers carry (pki.Certs.FrontProxy); nil: one
	// made at start (tests). ClientCAPEM is the CA of client
	// certificates, published to aggregated servers with it.
	FrontProxy  *pki.FrontProxy
	ClientCAPEM []byte
	// Version is bonsai's own version, shown in /version's gitVersion
	// build metadata.
	Version string
	// Encryption encrypts the values of the resources it lists in the
	// store (--encryption-provider-config); nil: values are stored as
	// they are.
	Encryption *encryption.Config
	// MaxObjectSize is the largest object, in its stored encoding, that
	// a write may store (--max-object-size; default
	// DefaultMaxObjectSize, etcd's limit). Larger ones are refused with
	// 413, dry runs too.
	MaxObjectSize int
	// MetricsSource gives this host's node's figures in-process to the
	// resource metrics API (metrics.k8s.io), which scrapes every
	// MetricResolution (--metric-resolution, default
	// metricsapi.DefaultResolution); other nodes' figures come from
	// their kubelet API's /stats/summary over KubeletTLS. A negative
	// MetricResolution scrapes nothing on its own (tests scrape by hand).
	MetricsSource    metricsapi.Source
	MetricResolution time.Duration
	Logger           *slog.Logger
}

// PortRange is an inclusive range of ports, as --service-node-port-range.
type PortRange = registry.PortRange

// Server is the API server.
type Server struct {
	// nsCache answers "does this namespace exist, is it terminating" for
	// namespaced creates.
	nsCache *namespaceCache
	cfg     Config
	reg     *resourceIndex
	// env is what strategies may read of the configuration, and the
	// Service allocator they use.
	env    registry.Env
	events *eventCache // watch events decoded and encoded once
	// handingOver counts the watches whose events go to in-process
	// informers as objects.
	handingOver atomic.Int64

	// webhooks and policies are the admission configurations, compiled.
	webhooks *webhookAdmission
	policies *policyAdmission
	// podSecurity is the PodSecurity admission plugin.
	podSecurity *podsecurity.Plugin
	// admission is the admission chain (admission_chain.go).
	admission *admission.Chain
	// encryption is the store's encryption at rest, nil without it: the
	// bottom of cfg.Store, below every cache and fast path.
	encryption *encryption.Store
	// snapshots is the store's own snapshotter, below encryption: a
	// snapshot holds what is stored, encrypted values as they are.
	snapshots store.Snapshotter

	// bookmarkEvery is how often watches that allow bookmarks get one.
	bookmarkEvery time.Duration
	log           *slog.Logger
	authFailures  *authFailureLog
	flow          *flowControl
	handler       http.Handler
	metrics       *metrics
	handlers      *handlerPool // runs short requests on grown stacks
	ctx           context.Context
	cancel        context.CancelFunc

	// watches is cancelled to end every open watch (clients re-watch).
	watchMu     sync.Mutex
	watches     context.Context
	endWatchesF context.CancelFunc

	// authorizer decides on every authenticated request; rbac and
	// nodeAuthz are its RBAC and Node parts (nil under AlwaysAllow).
	authorizer authorizer
	rbac       *authz.RBAC
	nodeAuthz  *authz.Node

	// saSigner issues service-account tokens, which the authenticator
	// checks.
	saSigner *authn.TokenSigner

	// crs are the resources CustomResourceDefinitions add to the table;
	// crdController keeps the CRDs' status and cleans up after them.
	crs           *customResources
	crdController *apiextensions.Controller
	// openapi serves the OpenAPI documents, rebuilt when CRDs change.
	openapi *openapi.Handler

	// aggregator proxies the group versions APIServices delegate to
	// services, and keeps the APIServices' availability.
	aggregator *aggregator.Aggregator
	// apiServices are the stored APIServices, compiled by the aggregator.
	apiServices *configCache[*aggregator.Set]

	// kubelet and kubeletInsecure (no server certificate check, for
	// insecureSkipTLSVerifyBackend) call kubelets.
	kubelet, kubeletInsecure *http.Transport

	// resourceMetrics serves metrics.k8s.io.
	resourceMetrics *metricsapi.Provider
	// components are the in-process components ComponentStatuses show.
	components componentStatuses
}

// New builds the API server over cfg.Store.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	if len(cfg.ServiceCIDRs) > 0 {
		cfg.ServiceCIDR = cfg.ServiceCIDRs[0]
	}
	if !cfg.ServiceCIDR.IsValid() {
		cfg.ServiceCIDR = netip.MustParsePrefix("10.43.0.0/16")
	}
	if len(cfg.ServiceCIDRs) == 0 {
		cfg.ServiceCIDRs = []netip.Prefix{cfg.ServiceCIDR}
	}
	if !cfg.ClusterCIDR.IsValid() {
		cfg.ClusterCIDR = netip.MustParsePrefix("10.42.0.0/16")
	}
	if cfg.NodePortRange == (PortRange{}) {
		cfg.NodePortRange = PortRange{Base: 30000, Max: 32767}
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.ServiceAccountIssuer == "" {
		cfg.ServiceAccountIssuer = "https://kubernetes.default.svc." + cfg.ClusterDomain
	}
	setJSONPatchCopyLimit()
	s := &Server{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, authFailures: newAuthFailureLog()}
	s.resourceMetrics = metricsapi.New(metricsapi.Config{Source: kubeletSummaries{s: s, local: cfg.MetricsSource}, Objects: metricsObjects{s}, Resolution: cfg.MetricResolution, Logger: cfg.Logger})
	s.reg = newRegistry(append(builtinResources(), s.readOnlyResources()...))
	s.env = registry.Env{ServiceCIDRs: cfg.ServiceCIDRs, NodePortRange: cfg.NodePortRange, ReservedHostPorts: cfg.ReservedHostPorts, Services: serviceAllocator{s},
		NamespaceLabels: s.namespaceLabels}
	s.bindStrategies()
	s.bindServiceOnRead()
	if err := s.setupServiceAccountTokens(); err != nil {
		cancel()
		return nil, err
	}
	if cfg.FrontProxy == nil {
		fp, err := pki.NewFrontProxy()
		if err != nil {
			cancel()
			return nil, fmt.Errorf("front-proxy certificates: %w", err)
		}
		cfg.FrontProxy = fp
	}
	s.newAggregator(cfg.FrontProxy)
	s.metrics = newMetrics(s.reg, cfg.Store)
	s.handlers = newHandlerPool(64, 30*time.Second, s.log)
	s.nsCache = newNamespaceCache()
	s.webhooks, s.policies = newWebhookAdmission(s), newPolicyAdmission(s)
	var psaConfig *podsecurity.Configuration
	if cfg.Admission != nil {
		psaConfig = cfg.Admission.PodSecurity
	}
	psa, err := s.newPodSecurity(psaConfig)
	if err != nil {
		cancel()
		return nil, err
	}
	s.podSecurity = psa
	s.admission = s.newAdmissionChain()
	s.metrics.gatherAlso(psa.Gatherer())
	// Encryption sits right on the store: everything above it, the
	// caches, the no-op write check, the watch fan-out, sees plaintext,
	// and everything written reaches the store through it.
	stored := cfg.Store
	s.snapshots, _ = cfg.Store.(store.Snapshotter)
	if cfg.Encryption != nil {
		s.encryption = encryption.NewStore(cfg.Store, cfg.Encryption)
		stored = s.encryption
	}
	s.cfg.Store = writeNotes{
		Store: instrumentedStore{Store: stored, m: s.metrics},
		notes: append([]writeNote{s.nsCache.note(s.reg.byGVR[gvr("", "v1", "namespaces")].prefix(""))}, append(s.admissionConfigNotes(), s.aggregatorNotes()...)...),
	}
	s.watches, s.endWatchesF = context.WithCancel(ctx)
	s.events = newEventCache(eventCacheKeep, eventCacheMax, eventCacheAge)
	s.kubelet, s.kubeletInsecure = newKubeletTransport(cfg.KubeletTLS, false), newKubeletTransport(cfg.KubeletTLS, true)
	s.bookmarkEvery = defaultBookmarkInterval
	s.crs = newCustomResources()
	s.openapi = openapi.NewHandler(s.openAPIResources)
	s.openapi.Delegated = s.aggregator.OpenAPIPaths
	r := chi.NewRouter()
	s.routes(r)
	s.flow = newFlowControl(cfg.Limits)
	s.handler = s.withMetrics(s.withAuthentication(s.withAudit(s.withFlowControl(s.withImpersonation(s.withAuthorization(withAdmissionWarnings(r)))))))
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	defer bcancel()
	// Before anything allocates: a store from before allocation records
	// gets them for the Services it has.
	if err := s.repairServiceAllocations(bctx, time.Now()); err != nil {
		cancel()
		return nil, fmt.Errorf("service allocation repair: %w", err)
	}
	if err := s.bootstrap(bctx); err != nil {
		cancel()
		return nil, err
	}
	if err := s.setupAuthorization(ctx); err != nil {
		cancel()
		return nil, err
	}
	go s.runNamespaceCache(ctx)
	go s.keepKubernetesService(ctx)
	go s.runAdmissionCaches(ctx)
	s.crdController = s.newCRDController()
	go s.crdController.Run(ctx)
	go s.runCustomResources(ctx)
	go s.runServiceRepair(ctx)
	go s.runAggregator(ctx)
	if cfg.MetricResolution >= 0 {
		go s.resourceMetrics.Run(ctx)
	}
	return s, nil
}

// Handler is the whole chain, for an HTTPS server or an in-process client.
func (s *Server) Handler() http.Handler { return s.handler }

// Shutdown ends every open watch so that http.Server.Shutdown can finish.
func (s *Server) Shutdown() { s.cancel() }

// endWatches ends the watches open now; clients re-watch from their last
// resourceVersion, as after any dropped connection.
func (s *Server) endWatches() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	s.endWatchesF()
	s.watches, s.endWatchesF = context.WithCancel(s.ctx)
}

func (s *Server) watchesContext() context.Context {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	return s.watches
}

func (s *Server) routes(r chi.Router) {
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		r.Get(p, s.serveHealth)
	}
	r.Get("/version", s.serveVersion)
	r.Get("/metrics", s.serveMetrics)
	if s.cfg.Profiling {
		r.HandleFunc("/debug/pprof/*", serveProfiling)
	}
	r.Get(openIDConfigPath, s.serveOpenIDConfiguration)
	r.Get(jwksPath, s.serveJWKS)
	for _, p := range []string{"/api", "/api/*", "/apis", "/apis/*"} {
		r.HandleFunc(p, s.serveAPITree)
	}
	// The documents are built on the first request, not at start.
	r.Get(encryptionStatusPath, s.serveEncryptionStatus)
	r.Post(encryptionRotatePath, s.serveEncryptionRotate)
	r.Post(encryptionReencryptPath, s.serveEncryptionReencrypt)
	r.Get(snapshotPath, s.serveSnapshot)
	r.Get("/openapi/v2", s.openapi.ServeV2)
	r.Get("/openapi/v3", s.openapi.ServeV3)
	r.Get("/openapi/v3/*", s.serveOpenAPIV3GroupVersion)
}

// setupServiceAccountTokens makes the token signer and puts the
// service-account token authenticator in front of the configured ones.
func (s *Server) setupServiceAccountTokens() error {
	key := s.cfg.ServiceAccountKey
	if key == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("service-account key: %w", err)
		}
		key = k
	}
	signer, err := authn.NewTokenSigner(key, s.cfg.ServiceAccountIssuer)
	if err != nil {
		return err
	}
	s.saSigner = signer
	if s.cfg.Authenticator != nil {
		sa := authn.NewServiceAccountTokens(signer, s.apiAudiences(), storeObjects{s})
		s.cfg.Authenticator = authn.WithServiceAccounts(sa, authn.WithBootstrapTokens(authn.NewBootstrapTokens(storeObjects{s}), s.cfg.Authenticator))
	}
	return nil
}

// apiAudiences are the audiences the API server accepts tokens for.
func (s *Server) apiAudiences() []string { return []string{s.cfg.ServiceAccountIssuer} }
