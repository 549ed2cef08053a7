// Package aggregator is kube-apiserver's aggregation layer in bonsai: a
// group version claimed by an APIService with a service is served by that
// service. Every request under it is authenticated and authorized by the
// API server, then proxied here over TLS (the APIService's caBundle,
// server name <svc>.<ns>.svc) to one ready endpoint of the Service, with
// the caller's identity in the front-proxy headers and the server's
// front-proxy client certificate. An availability loop checks each
// backend's discovery and keeps the APIService's Available condition and
// the discovery documents merged into /apis.
//
// The package also holds the APIService kind itself (its strategy,
// printer and the local APIServices made on start) and the registration
// of CRD group versions as local APIServices. It reaches the API server
// only through Server, as kube-aggregator sits in front of
// kube-apiserver in a delegation chain: it never imports the server.
package aggregator

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiservicehelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/store"
)

// Server is what the aggregator needs of the API server it sits in front
// of: the groups it serves itself, the APIServices in its store, the
// Services and endpoints backends run behind, and its way of answering
// with a Status.
type Server interface {
	// BuiltinGroup: the group is one of the server's built-in kinds'.
	BuiltinGroup(group string) bool
	// ServedGroup: the server serves the group itself, built-in or a
	// CustomResourceDefinition's.
	ServedGroup(group string) bool
	// CustomGroupVersions are the group versions CustomResourceDefinitions
	// serve; synced is false until every CRD stored at start is known.
	CustomGroupVersions() (gvs []schema.GroupVersion, synced bool)

	// APIServices is the APIServices in the store, compiled by Compile
	// (the server keeps the result until one of them changes).
	APIServices(ctx context.Context) (*Set, error)
	// GetAPIService reads one APIService with its revision.
	GetAPIService(ctx context.Context, name string) (*apiregistrationv1.APIService, uint64, error)
	// UpdateAPIService stores as if it is still at rev (store.ErrConflict
	// otherwise).
	UpdateAPIService(ctx context.Context, as *apiregistrationv1.APIService, rev uint64) error
	// EnsureAPIService creates as unless one of its name exists.
	EnsureAPIService(ctx context.Context, as *apiregistrationv1.APIService) error
	// DeleteAPIService deletes as if it is still at its resourceVersion.
	DeleteAPIService(ctx context.Context, as *apiregistrationv1.APIService) error

	// Service reads a Service (an API NotFound error if there is none).
	Service(ctx context.Context, namespace, name string) (*corev1.Service, error)
	// ResolveService finds an address (host:port) for port of a Service.
	ResolveService(ctx context.Context, namespace, name string, port int32) (string, error)
	// ReadyEndpoints lists host:port of the Service's ready endpoints for
	// the named service port.
	ReadyEndpoints(ctx context.Context, namespace, name, portName string) ([]string, error)
	// ServiceTransport is how the server calls services (webhooks and
	// backends alike): tlsCfg with caBundle's certificates as roots (the
	// system's for an empty one).
	ServiceTransport(caBundle []byte, tlsCfg *tls.Config) (*http.Transport, error)

	// WriteStatus answers with a Status of code, reason and message, as
	// the server answers every error.
	WriteStatus(w http.ResponseWriter, code int32, reason metav1.StatusReason, message string)
}

const (
	// discoveryTimeout is upstream's: a backend must answer its
	// discovery within five seconds to count as available.
	discoveryTimeout = 5 * time.Second
	// availabilityResync re-checks every APIService this often besides
	// on changes written through the server.
	availabilityResync = 10 * time.Second

	// AuthenticationConfigMap is the kube-system ConfigMap that tells
	// aggregated servers how to authenticate the API server and its callers.
	AuthenticationConfigMap = "extension-apiserver-authentication"
	// aggregatorUser is who the availability checks call backends as.
	aggregatorUser = "system:kube-aggregator"
)

// Front-proxy headers, as kube-apiserver sends and publishes them.
const (
	remoteUserHeader        = "X-Remote-User"
	remoteUIDHeader         = "X-Remote-Uid"
	remoteGroupHeader       = "X-Remote-Group"
	remoteExtraHeaderPrefix = "X-Remote-Extra-"
)

// maxDiscoveryResponse bounds a backend's discovery answer, as the API
// server bounds a webhook's (kube-apiserver reads at most a few MB too).
const maxDiscoveryResponse = 3 << 20

// Aggregator proxies the group versions APIServices delegate to services,
// and keeps the APIServices' availability.
type Aggregator struct {
	s          Server
	log        *slog.Logger
	frontProxy *pki.FrontProxy
	// poke asks the availability loop for a pass now; resync is how long
	// it waits otherwise (tests shorten it).
	poke   chan struct{}
	resync atomic.Int64

	mu sync.Mutex
	// discovery holds each remote APIService's resources from its last
	// good discovery check, with whether that check was the latest.
	discovery map[string]backendDiscovery
	// transports are the compiled set's, by APIService name; only
	// Compile (under the cache's lock) changes them, under tmu (not mu:
	// mu's holders read the compiled set, which may compile).
	tmu        sync.Mutex
	transports map[string]keyedTransport
}

// keyedTransport is a transport with what it was made from.
type keyedTransport struct {
	key       string
	transport *http.Transport
}

type backendDiscovery struct {
	resources *metav1.APIResourceList
	current   bool
}

// Set is the APIServices, compiled: remote ones with their transports.
type Set struct {
	all    []*apiregistrationv1.APIService
	remote map[schema.GroupVersion]*Backend
}

// Backend is one remote APIService and how to reach it.
type Backend struct {
	apiService *apiregistrationv1.APIService
	transport  *http.Transport
	err        error // the caBundle did not parse
}

// New makes the aggregator of s, which calls backends with fp's client
// certificate.
func New(s Server, fp *pki.FrontProxy, log *slog.Logger) *Aggregator {
	a := &Aggregator{s: s, log: log, frontProxy: fp, poke: make(chan struct{}, 1), discovery: map[string]backendDiscovery{}}
	a.resync.Store(int64(availabilityResync))
	return a
}

// SetResync sets how long the availability loop waits between passes
// when nothing wakes it (tests shorten it).
func (a *Aggregator) SetResync(d time.Duration) { a.resync.Store(int64(d)) }

// Compile compiles the stored APIServices (the server's cache of them
// calls it under its lock, never twice at once): a status write keeps
// the transports of services whose way is unchanged.
func (a *Aggregator) Compile(objs []runtime.Object) *Set {
	set := &Set{remote: map[schema.GroupVersion]*Backend{}}
	kept := map[string]keyedTransport{}
	for _, o := range objs {
		as := o.(*apiregistrationv1.APIService)
		set.all = append(set.all, as)
		if as.Spec.Service == nil {
			continue
		}
		b := &Backend{apiService: as}
		key := fmt.Sprintf("%s/%s:%d %t %x", as.Spec.Service.Namespace, as.Spec.Service.Name, servicePort(as.Spec.Service), as.Spec.InsecureSkipTLSVerify, as.Spec.CABundle)
		if t, ok := a.transports[as.Name]; ok && t.key == key {
			b.transport = t.transport
		} else {
			b.transport, b.err = a.transport(as)
		}
		set.remote[schema.GroupVersion{Group: as.Spec.Group, Version: as.Spec.Version}] = b
		kept[as.Name] = keyedTransport{key: key, transport: b.transport}
	}
	// A status write recompiles the set: connections stay open unless
	// the way to the service changed.
	for name, t := range a.transports {
		if kept[name].transport != t.transport && t.transport != nil {
			t.transport.CloseIdleConnections()
		}
	}
	a.tmu.Lock()
	a.transports = kept
	a.tmu.Unlock()
	return set
}

// CloseIdleConnections closes the idle connections to every backend, so
// the next call handshakes again with the front-proxy client
// certificate in force: after a renewal, as the kubelet connections are.
// Calls under way keep theirs.
func (a *Aggregator) CloseIdleConnections() {
	a.tmu.Lock()
	ts := make([]*http.Transport, 0, len(a.transports))
	for _, t := range a.transports {
		if t.transport != nil {
			ts = append(ts, t.transport)
		}
	}
	a.tmu.Unlock()
	for _, t := range ts {
		t.CloseIdleConnections()
	}
}

// transport is how to call one APIService's service: its caBundle, the
// Service's DNS name as server name, and the front-proxy certificate.
func (a *Aggregator) transport(as *apiregistrationv1.APIService) (*http.Transport, error) {
	return a.s.ServiceTransport(as.Spec.CABundle, &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: as.Spec.Service.Name + "." + as.Spec.Service.Namespace + ".svc",
		// Read on every handshake: a renewed certificate is used at once.
		GetClientCertificate: a.frontProxy.Client.GetClientCertificate,
		InsecureSkipVerify:   as.Spec.InsecureSkipTLSVerify,
	})
}

// Remote is the backend serving gv, if an APIService with a service
// claims it. Built-in group versions are always served by the server.
func (a *Aggregator) Remote(ctx context.Context, gv schema.GroupVersion) *Backend {
	if a.s.BuiltinGroup(gv.Group) {
		return nil
	}
	set, err := a.s.APIServices(ctx)
	if err != nil {
		return nil
	}
	return set.remote[gv]
}

// ServeProxy proxies r of u to b; the caller has been authorized already.
func (a *Aggregator) ServeProxy(w http.ResponseWriter, r *http.Request, b *Backend, u *authn.User) {
	// As upstream: an APIService not (yet) available takes no requests.
	if b.err != nil || !apiservicehelper.IsAPIServiceConditionTrue(b.apiService, apiregistrationv1.Available) {
		a.s.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "service unavailable")
		return
	}
	ref := b.apiService.Spec.Service
	host, err := a.s.ResolveService(r.Context(), ref.Namespace, ref.Name, servicePort(ref))
	if err != nil {
		a.log.Debug("aggregated API unreachable", "apiservice", b.apiService.Name, "err", err)
		a.s.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "service unavailable")
		return
	}
	if u == nil {
		a.s.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "https", host, ""
			setFrontProxyHeaders(pr.Out.Header, u)
		},
		Transport: b.transport,
		// Watches and other streams pass through as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a.log.Debug("aggregated API call failed", "apiservice", b.apiService.Name, "err", err)
			a.s.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf("error trying to reach service: %v", err))
		},
	}
	rp.ServeHTTP(w, r)
}

func servicePort(ref *apiregistrationv1.ServiceReference) int32 {
	if ref.Port != nil {
		return *ref.Port
	}
	return 443
}

// setFrontProxyHeaders replaces the caller's credentials with its
// identity: the backend trusts these headers only from a client with the
// front-proxy certificate, and must never see the caller's token, nor
// identity headers the caller made up.
func setFrontProxyHeaders(h http.Header, u *authn.User) {
	h.Del("Authorization")
	for k := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "impersonate-") || strings.HasPrefix(lk, "x-remote-") {
			h.Del(k)
		}
	}
	h.Set(remoteUserHeader, u.Name)
	if u.UID != "" {
		h.Set(remoteUIDHeader, u.UID)
	}
	for _, g := range u.Groups {
		h.Add(remoteGroupHeader, g)
	}
	for k, vs := range u.Extra {
		for _, v := range vs {
			h.Add(remoteExtraHeaderPrefix+url.PathEscape(k), v)
		}
	}
}

// Group is /apis/<group> of a group only APIServices serve.
func (a *Aggregator) Group(ctx context.Context, group string) (*metav1.APIGroup, bool) {
	for _, g := range a.Groups(ctx) {
		if g.Name == group {
			g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
			return &g, true
		}
	}
	return nil, false
}

// Groups are the groups APIServices with a service add to /apis, in
// upstream's order: by groupPriorityMinimum, versions by versionPriority.
func (a *Aggregator) Groups(ctx context.Context) []metav1.APIGroup {
	set, err := a.s.APIServices(ctx)
	if err != nil {
		return nil
	}
	var remote []*apiregistrationv1.APIService
	for _, b := range set.remote {
		if !a.s.ServedGroup(b.apiService.Spec.Group) {
			remote = append(remote, b.apiService)
		}
	}
	var out []metav1.APIGroup
	for _, versions := range apiservicehelper.SortedByGroupAndVersion(remote) {
		g := metav1.APIGroup{Name: versions[0].Spec.Group}
		for _, v := range versions {
			g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: v.Spec.Group + "/" + v.Spec.Version, Version: v.Spec.Version})
		}
		g.PreferredVersion = g.Versions[0]
		out = append(out, g)
	}
	return out
}

// AggregatedGroups is the apidiscovery v2 part of the remote groups, from
// each backend's last good discovery; a backend failing now is shown
// Stale, as upstream does.
func (a *Aggregator) AggregatedGroups(ctx context.Context) []apidiscoveryv2.APIGroupDiscovery {
	var out []apidiscoveryv2.APIGroupDiscovery
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.Groups(ctx) {
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.Name}}
		for _, v := range g.Versions {
			d, ok := a.discovery[v.Version+"."+g.Name]
			if !ok {
				continue
			}
			vd := apidiscoveryv2.APIVersionDiscovery{Version: v.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
			if !d.current {
				vd.Freshness = apidiscoveryv2.DiscoveryFreshnessStale
			}
			vd.Resources = resourcesToV2(schema.GroupVersion{Group: g.Name, Version: v.Version}, d.resources)
			gd.Versions = append(gd.Versions, vd)
		}
		if len(gd.Versions) > 0 {
			out = append(out, gd)
		}
	}
	return out
}

// resourcesToV2 turns a legacy APIResourceList into apidiscovery v2
// resources, subresources under their parents.
func resourcesToV2(gv schema.GroupVersion, l *metav1.APIResourceList) []apidiscoveryv2.APIResourceDiscovery {
	var out []apidiscoveryv2.APIResourceDiscovery
	index := map[string]int{}
	kind := func(r metav1.APIResource) *metav1.GroupVersionKind {
		k := &metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: r.Kind}
		if r.Group != "" || r.Version != "" {
			k.Group, k.Version = r.Group, r.Version
		}
		return k
	}
	for _, r := range l.APIResources {
		if strings.Contains(r.Name, "/") {
			continue
		}
		scope := apidiscoveryv2.ScopeCluster
		if r.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		index[r.Name] = len(out)
		out = append(out, apidiscoveryv2.APIResourceDiscovery{
			Resource: r.Name, ResponseKind: kind(r), Scope: scope, SingularResource: r.SingularName,
			Verbs: r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories,
		})
	}
	for _, r := range l.APIResources {
		parent, sub, ok := strings.Cut(r.Name, "/")
		if i, found := index[parent]; ok && found {
			out[i].Subresources = append(out[i].Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: sub, ResponseKind: kind(r), Verbs: r.Verbs})
		}
	}
	return out
}

// OpenAPIPaths are the OpenAPI v3 paths of the remote group versions,
// whose documents their backends serve.
func (a *Aggregator) OpenAPIPaths() []string {
	var out []string
	for _, g := range a.Groups(context.Background()) {
		for _, v := range g.Versions {
			out = append(out, "apis/"+v.GroupVersion)
		}
	}
	return out
}

// Run keeps the APIServices' Available conditions until ctx ends.
func (a *Aggregator) Run(ctx context.Context) {
	for {
		a.checkAll(ctx)
		t := time.NewTimer(time.Duration(a.resync.Load()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.poke:
		case <-t.C:
		}
		t.Stop()
	}
}

// Wake asks for an availability pass (a write to APIServices, Services or
// EndpointSlices went through the server, or the CRDs' group versions
// changed).
func (a *Aggregator) Wake() {
	select {
	case a.poke <- struct{}{}:
	default:
	}
}

func (a *Aggregator) checkAll(ctx context.Context) {
	set, err := a.s.APIServices(ctx)
	if err != nil {
		return
	}
	if err := a.syncCRDAPIServices(ctx, set); err != nil && ctx.Err() == nil {
		a.log.Warn("APIServices of custom resources not synced", "err", err)
	}
	var wg sync.WaitGroup
	for _, as := range set.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cond := a.check(ctx, as, set.remote[schema.GroupVersion{Group: as.Spec.Group, Version: as.Spec.Version}])
			if err := a.setAvailable(ctx, as.Name, cond); err != nil && ctx.Err() == nil {
				a.log.Warn("APIService status not written", "apiservice", as.Name, "err", err)
			}
		}()
	}
	wg.Wait()
	// Forget what is no longer claimed.
	a.mu.Lock()
	for name := range a.discovery {
		found := false
		for _, b := range set.remote {
			found = found || b.apiService.Name == name
		}
		if !found {
			delete(a.discovery, name)
		}
	}
	a.mu.Unlock()
}

// syncCRDAPIServices gives every group version CustomResourceDefinitions
// serve a local APIService and removes those no CRD serves any more, as
// kube-apiserver's CRD registration controller does (label
// automanaged=true, upstream's priorities 1000/100). An APIService an
// admin made for the group version is left alone.
func (a *Aggregator) syncCRDAPIServices(ctx context.Context, set *Set) error {
	gvs, synced := a.s.CustomGroupVersions()
	if !synced {
		return nil // not all CRDs are known yet: nothing may go
	}
	want := map[string]schema.GroupVersion{}
	for _, gv := range gvs {
		want[gv.Version+"."+gv.Group] = gv
	}
	have := map[string]*apiregistrationv1.APIService{}
	for _, as := range set.all {
		have[as.Name] = as
	}
	for name, gv := range want {
		if _, ok := have[name]; ok {
			continue
		}
		as := &apiregistrationv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{autoManagedLabel: "true"}},
			Spec:       apiregistrationv1.APIServiceSpec{Group: gv.Group, Version: gv.Version, GroupPriorityMinimum: 1000, VersionPriority: 100},
		}
		if err := a.s.EnsureAPIService(ctx, as); err != nil {
			return err
		}
	}
	for name, as := range have {
		if _, ok := want[name]; ok || as.Labels[autoManagedLabel] != "true" {
			continue
		}
		if err := a.s.DeleteAPIService(ctx, as); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// check is upstream's availability check of one APIService.
func (a *Aggregator) check(ctx context.Context, as *apiregistrationv1.APIService, b *Backend) apiregistrationv1.APIServiceCondition {
	cond := func(status apiregistrationv1.ConditionStatus, reason, msg string) apiregistrationv1.APIServiceCondition {
		return apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available, Status: status, Reason: reason, Message: msg}
	}
	if as.Spec.Service == nil || b == nil {
		return apiservicehelper.NewLocalAvailableAPIServiceCondition()
	}
	ref := as.Spec.Service
	port := servicePort(ref)
	svc, err := a.s.Service(ctx, ref.Namespace, ref.Name)
	if apierrors.IsNotFound(err) {
		return cond(apiregistrationv1.ConditionFalse, "ServiceNotFound", fmt.Sprintf("service/%s in %q is not present", ref.Name, ref.Namespace))
	} else if err != nil {
		return cond(apiregistrationv1.ConditionUnknown, "ServiceAccessError", fmt.Sprintf("service/%s in %q cannot be checked due to: %v", ref.Name, ref.Namespace, err))
	}
	if svc.Spec.Type != corev1.ServiceTypeExternalName {
		portName, found := "", false
		for _, p := range svc.Spec.Ports {
			if p.Port == port {
				portName, found = p.Name, true
			}
		}
		if !found {
			return cond(apiregistrationv1.ConditionFalse, "ServicePortError", fmt.Sprintf("service/%s in %q is not listening on port %d", ref.Name, ref.Namespace, port))
		}
		addrs, err := a.s.ReadyEndpoints(ctx, ref.Namespace, ref.Name, portName)
		if err != nil {
			return cond(apiregistrationv1.ConditionUnknown, "EndpointsAccessError", fmt.Sprintf("cannot find endpoints for service/%s in %q due to: %v", ref.Name, ref.Namespace, err))
		}
		if len(addrs) == 0 {
			return cond(apiregistrationv1.ConditionFalse, "MissingEndpoints", fmt.Sprintf("endpoints for service/%s in %q have no addresses with port name %q", ref.Name, ref.Namespace, portName))
		}
	}
	l, err := a.discover(ctx, b)
	a.mu.Lock()
	if err != nil {
		if d, ok := a.discovery[as.Name]; ok {
			d.current = false
			a.discovery[as.Name] = d
		}
	} else {
		a.discovery[as.Name] = backendDiscovery{resources: l, current: true}
	}
	a.mu.Unlock()
	if err != nil {
		return cond(apiregistrationv1.ConditionFalse, "FailedDiscoveryCheck", err.Error())
	}
	return cond(apiregistrationv1.ConditionTrue, "Passed", "all checks passed")
}

// discover reads the backend's discovery of its group version, as the
// aggregator (system:kube-aggregator, system:masters).
func (a *Aggregator) discover(ctx context.Context, b *Backend) (*metav1.APIResourceList, error) {
	as := b.apiService
	path := "/apis/" + as.Spec.Group + "/" + as.Spec.Version
	if b.err != nil {
		return nil, fmt.Errorf("failing or missing response from %s: %v", path, b.err)
	}
	host, err := a.s.ResolveService(ctx, as.Spec.Service.Namespace, as.Spec.Service.Name, servicePort(as.Spec.Service))
	if err != nil {
		return nil, fmt.Errorf("failing or missing response from %s: %v", path, err)
	}
	u := (&url.URL{Scheme: "https", Host: host, Path: path}).String()
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	setFrontProxyHeaders(req.Header, &authn.User{Name: aggregatorUser, Groups: []string{authn.GroupMasters}})
	resp, err := b.transport.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("failing or missing response from %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscoveryResponse))
	if err != nil {
		return nil, fmt.Errorf("failing or missing response from %s: %v", u, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("failing or missing response from %s: bad status from %s: %d", u, u, resp.StatusCode)
	}
	l := &metav1.APIResourceList{}
	if err := json.Unmarshal(body, l); err != nil {
		return nil, fmt.Errorf("failing or missing response from %s: %v", u, err)
	}
	return l, nil
}

// setAvailable writes cond into the APIService's status unless it is
// there already.
func (a *Aggregator) setAvailable(ctx context.Context, name string, cond apiregistrationv1.APIServiceCondition) error {
	for range 5 {
		as, rev, err := a.s.GetAPIService(ctx, name)
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if old := apiservicehelper.GetAPIServiceConditionByType(as, apiregistrationv1.Available); old != nil &&
			old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message {
			return nil
		}
		// The time as the store gives it back (whole seconds, local
		// zone), as the server's own writes set it.
		cond.LastTransitionTime = metav1.NewTime(time.Unix(time.Now().Unix(), 0))
		apiservicehelper.SetAPIServiceCondition(as, cond)
		if err := a.s.UpdateAPIService(ctx, as, rev); errors.Is(err, store.ErrConflict) {
			continue
		} else {
			return err
		}
	}
	return nil
}

// AuthenticationConfig is what kube-apiserver publishes in the
// AuthenticationConfigMap for aggregated servers: the front-proxy CA and
// names, the headers carrying the caller's identity, and clientCAPEM
// (the CA of client certificates) if there is one.
func (a *Aggregator) AuthenticationConfig(clientCAPEM []byte) map[string]string {
	list := func(xs ...string) string { b, _ := json.Marshal(xs); return string(b) }
	data := map[string]string{
		"requestheader-client-ca-file":       string(a.frontProxy.CA.CertPEM),
		"requestheader-allowed-names":        list(a.frontProxy.AllowedNames()...),
		"requestheader-username-headers":     list(remoteUserHeader),
		"requestheader-uid-headers":          list(remoteUIDHeader),
		"requestheader-group-headers":        list(remoteGroupHeader),
		"requestheader-extra-headers-prefix": list(remoteExtraHeaderPrefix),
	}
	if len(clientCAPEM) > 0 {
		data["client-ca-file"] = string(clientCAPEM)
	}
	return data
}

// AuthenticationReaderRole is upstream's Role for reading the
// AuthenticationConfigMap.
func AuthenticationReaderRole() *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "extension-apiserver-authentication-reader", Namespace: "kube-system",
			Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}, Annotations: map[string]string{"rbac.authorization.kubernetes.io/autoupdate": "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{AuthenticationConfigMap}, Verbs: []string{"get", "list", "watch"}}},
	}
}
