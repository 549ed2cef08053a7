package apiserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// The aggregation layer: a group version claimed by an APIService with a
// service is served by that service. Every request under it is
// authenticated and authorized here, then proxied over TLS (the
// APIService's caBundle, server name <svc>.<ns>.svc) to one ready
// endpoint of the Service, with the caller's identity in the front-proxy
// headers and this server's front-proxy client certificate. An
// availability loop checks each backend's discovery and keeps the
// APIService's Available condition and the discovery documents merged
// into /apis.

const (
	// discoveryTimeout is upstream's: a backend must answer its
	// discovery within five seconds to count as available.
	discoveryTimeout = 5 * time.Second
	// availabilityResync re-checks every APIService this often besides
	// on changes written through this server.
	availabilityResync = 10 * time.Second

	extensionAuthConfigMap = "extension-apiserver-authentication"
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

type aggregator struct {
	s          *Server
	frontProxy *pki.FrontProxy
	services   *configCache[*apiServiceSet]
	// poke asks the availability loop for a pass now; resync is how long
	// it waits otherwise (tests shorten it).
	poke   chan struct{}
	resync atomic.Int64

	mu sync.Mutex
	// discovery holds each remote APIService's resources from its last
	// good discovery check, with whether that check was the latest.
	discovery map[string]backendDiscovery
	// transports are the compiled set's, by APIService name; only
	// compile (under the cache's lock) touches them.
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

// apiServiceSet is the APIServices, compiled: remote ones with their
// transports.
type apiServiceSet struct {
	all    []*apiregistrationv1.APIService
	remote map[schema.GroupVersion]*backend
}

// backend is one remote APIService and how to reach it.
type backend struct {
	apiService *apiregistrationv1.APIService
	transport  *http.Transport
	err        error // the caBundle did not parse
}

func newAggregator(s *Server, fp *pki.FrontProxy) *aggregator {
	a := &aggregator{s: s, frontProxy: fp, poke: make(chan struct{}, 1), discovery: map[string]backendDiscovery{}}
	a.services = newConfigCache(s, apiServiceGVR, a.compile)
	a.resync.Store(int64(availabilityResync))
	return a
}

func (a *aggregator) compile(objs []runtime.Object) *apiServiceSet {
	set := &apiServiceSet{remote: map[schema.GroupVersion]*backend{}}
	kept := map[string]keyedTransport{}
	for _, o := range objs {
		as := o.(*apiregistrationv1.APIService)
		set.all = append(set.all, as)
		if as.Spec.Service == nil {
			continue
		}
		b := &backend{apiService: as}
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
	a.transports = kept
	return set
}

// transport is how to call one APIService's service: its caBundle, the
// Service's DNS name as server name, and the front-proxy certificate.
func (a *aggregator) transport(as *apiregistrationv1.APIService) (*http.Transport, error) {
	pool, err := caBundlePool(as.Spec.CABundle)
	if err != nil {
		return nil, err
	}
	return serviceTransport(&tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         as.Spec.Service.Name + "." + as.Spec.Service.Namespace + ".svc",
		Certificates:       []tls.Certificate{a.frontProxy.Client},
		RootCAs:            pool,
		InsecureSkipVerify: as.Spec.InsecureSkipTLSVerify,
	}, false), nil
}

// remote is the backend serving gv, if an APIService with a service
// claims it. Built-in group versions are always served here.
func (a *aggregator) remote(ctx context.Context, gv schema.GroupVersion) *backend {
	if _, builtin := a.s.reg.group(gv.Group); builtin {
		return nil
	}
	set, err := a.services.get(ctx)
	if err != nil {
		return nil
	}
	return set.remote[gv]
}

// serveProxy proxies r to b; the caller has been authorized already.
func (a *aggregator) serveProxy(w http.ResponseWriter, r *http.Request, b *backend) {
	// As upstream: an APIService not (yet) available takes no requests.
	if b.err != nil || !apiservicehelper.IsAPIServiceConditionTrue(b.apiService, apiregistrationv1.Available) {
		writeStatus(w, statusf(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "service unavailable"))
		return
	}
	ref := b.apiService.Spec.Service
	host, err := a.s.resolveService(r.Context(), ref.Namespace, ref.Name, servicePort(ref))
	if err != nil {
		a.s.log.Debug("aggregated API unreachable", "apiservice", b.apiService.Name, "err", err)
		writeStatus(w, statusf(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "service unavailable"))
		return
	}
	u, _ := r.Context().Value(userKey{}).(*authn.User)
	if u == nil {
		writeStatus(w, statusf(http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized"))
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
			a.s.log.Debug("aggregated API call failed", "apiservice", b.apiService.Name, "err", err)
			writeStatus(w, statusf(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "error trying to reach service: %v", err))
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

// serveGroup answers /apis/<group> of a group only APIServices serve.
func (a *aggregator) serveGroup(w http.ResponseWriter, r *http.Request, group string) bool {
	for _, g := range a.groups(r.Context()) {
		if g.Name == group {
			g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
			writeObject(w, http.StatusOK, &g, outJSON)
			return true
		}
	}
	return false
}

// groups are the groups APIServices with a service add to /apis, in
// upstream's order: by groupPriorityMinimum, versions by versionPriority.
func (a *aggregator) groups(ctx context.Context) []metav1.APIGroup {
	set, err := a.services.get(ctx)
	if err != nil {
		return nil
	}
	var remote []*apiregistrationv1.APIService
	for _, b := range set.remote {
		if _, local := a.s.group(b.apiService.Spec.Group); !local {
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

// aggregatedGroups is the apidiscovery v2 part of the remote groups, from
// each backend's last good discovery; a backend failing now is shown
// Stale, as upstream does.
func (a *aggregator) aggregatedGroups(ctx context.Context) []apidiscoveryv2.APIGroupDiscovery {
	var out []apidiscoveryv2.APIGroupDiscovery
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.groups(ctx) {
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

// openAPIPaths are the OpenAPI v3 paths of the remote group versions,
// whose documents their backends serve.
func (a *aggregator) openAPIPaths() []string {
	var out []string
	for _, g := range a.groups(context.Background()) {
		for _, v := range g.Versions {
			out = append(out, "apis/"+v.GroupVersion)
		}
	}
	return out
}

// serveOpenAPIV3GroupVersion proxies /openapi/v3/apis/<group>/<version>
// of a remote group version to its backend, as kube-apiserver's
// aggregator does; the rest is this server's.
func (s *Server) serveOpenAPIV3GroupVersion(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/openapi/v3"), "/"), "/")
	if len(parts) == 3 && parts[0] == "apis" {
		if b := s.aggregator.remote(r.Context(), schema.GroupVersion{Group: parts[1], Version: parts[2]}); b != nil {
			s.aggregator.serveProxy(w, r, b)
			return
		}
	}
	s.openapi.ServeV3(w, r)
}

// run keeps the APIServices' Available conditions until ctx ends.
func (a *aggregator) run(ctx context.Context) {
	go a.services.run(ctx)
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

// wake asks for an availability pass (a write to APIServices, Services or
// EndpointSlices went through this server).
func (a *aggregator) wake() {
	select {
	case a.poke <- struct{}{}:
	default:
	}
}

func (a *aggregator) checkAll(ctx context.Context) {
	set, err := a.services.get(ctx)
	if err != nil {
		return
	}
	if err := a.syncCRDAPIServices(ctx, set); err != nil && ctx.Err() == nil {
		a.s.log.Warn("APIServices of custom resources not synced", "err", err)
	}
	var wg sync.WaitGroup
	for _, as := range set.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cond := a.check(ctx, as, set.remote[schema.GroupVersion{Group: as.Spec.Group, Version: as.Spec.Version}])
			if err := a.setAvailable(ctx, as.Name, cond); err != nil && ctx.Err() == nil {
				a.s.log.Warn("APIService status not written", "apiservice", as.Name, "err", err)
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
func (a *aggregator) syncCRDAPIServices(ctx context.Context, set *apiServiceSet) error {
	if !a.s.crs.synced.Load() {
		return nil // not all CRDs are known yet: nothing may go
	}
	want := map[string]schema.GroupVersion{}
	for _, g := range a.s.crs.index().groups {
		for _, v := range g.versions {
			want[v+"."+g.name] = schema.GroupVersion{Group: g.name, Version: v}
		}
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
		if err := a.s.ensure(ctx, as, apiServiceGVR); err != nil {
			return err
		}
	}
	res := a.s.reg.byGVR[apiServiceGVR]
	for name, as := range have {
		if _, ok := want[name]; ok || as.Labels[autoManagedLabel] != "true" {
			continue
		}
		if _, err := a.s.cfg.Store.Delete(ctx, res.key("", name), revisionOf(as.ResourceVersion)); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// check is upstream's availability check of one APIService.
func (a *aggregator) check(ctx context.Context, as *apiregistrationv1.APIService, b *backend) apiregistrationv1.APIServiceCondition {
	cond := func(status apiregistrationv1.ConditionStatus, reason, msg string) apiregistrationv1.APIServiceCondition {
		return apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available, Status: status, Reason: reason, Message: msg}
	}
	if as.Spec.Service == nil || b == nil {
		return apiservicehelper.NewLocalAvailableAPIServiceCondition()
	}
	ref := as.Spec.Service
	port := servicePort(ref)
	obj, _, err := a.s.getObject(ctx, a.s.reg.byGVR[gvr("", "v1", "services")], ref.Namespace, ref.Name)
	if apierrors.IsNotFound(err) {
		return cond(apiregistrationv1.ConditionFalse, "ServiceNotFound", fmt.Sprintf("service/%s in %q is not present", ref.Name, ref.Namespace))
	} else if err != nil {
		return cond(apiregistrationv1.ConditionUnknown, "ServiceAccessError", fmt.Sprintf("service/%s in %q cannot be checked due to: %v", ref.Name, ref.Namespace, err))
	}
	svc := obj.(*corev1.Service)
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
		addrs, err := a.s.readyEndpoints(ctx, ref.Namespace, ref.Name, portName)
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
func (a *aggregator) discover(ctx context.Context, b *backend) (*metav1.APIResourceList, error) {
	as := b.apiService
	path := "/apis/" + as.Spec.Group + "/" + as.Spec.Version
	if b.err != nil {
		return nil, fmt.Errorf("failing or missing response from %s: %v", path, b.err)
	}
	host, err := a.s.resolveService(ctx, as.Spec.Service.Namespace, as.Spec.Service.Name, servicePort(as.Spec.Service))
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
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxWebhookResponse))
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
func (a *aggregator) setAvailable(ctx context.Context, name string, cond apiregistrationv1.APIServiceCondition) error {
	res := a.s.reg.byGVR[apiServiceGVR]
	for range 5 {
		obj, rev, err := a.s.getObject(ctx, res, "", name)
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		as := obj.(*apiregistrationv1.APIService)
		if old := apiservicehelper.GetAPIServiceConditionByType(as, apiregistrationv1.Available); old != nil &&
			old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message {
			return nil
		}
		cond.LastTransitionTime = storedNow()
		apiservicehelper.SetAPIServiceCondition(as, cond)
		data, err := encodeForStore(res, as)
		if err != nil {
			return err
		}
		if _, err := a.s.cfg.Store.Update(ctx, res.key("", name), data, rev); errors.Is(err, store.ErrConflict) {
			continue
		} else {
			return err
		}
	}
	return nil
}

// writeNotes wake the availability loop on this server's writes of
// APIServices, Services and EndpointSlices, and keep the compiled
// APIServices current.
func (a *aggregator) writeNotes(s *Server) []writeNote {
	notes := []writeNote{{prefix: a.services.prefix(), wrote: func(_ string, rev uint64) { a.services.changed(rev); a.wake() }}}
	for _, g := range []schema.GroupVersionResource{gvr("", "v1", "services"), gvr("discovery.k8s.io", "v1", "endpointslices")} {
		notes = append(notes, writeNote{prefix: s.reg.byGVR[g].prefix(""), wrote: func(string, uint64) { a.wake() }})
	}
	return notes
}

// ensureExtensionAuthentication publishes how aggregated servers
// authenticate this server and its callers, in kube-system's
// extension-apiserver-authentication ConfigMap (what kube-apiserver puts
// there), and creates the Role upstream has for reading it.
func (s *Server) ensureExtensionAuthentication(ctx context.Context) error {
	list := func(xs ...string) string { b, _ := json.Marshal(xs); return string(b) }
	data := map[string]string{
		"requestheader-client-ca-file":       string(s.aggregator.frontProxy.CA.CertPEM),
		"requestheader-allowed-names":        list(s.aggregator.frontProxy.AllowedNames()...),
		"requestheader-username-headers":     list(remoteUserHeader),
		"requestheader-uid-headers":          list(remoteUIDHeader),
		"requestheader-group-headers":        list(remoteGroupHeader),
		"requestheader-extra-headers-prefix": list(remoteExtraHeaderPrefix),
	}
	if len(s.cfg.ClientCAPEM) > 0 {
		data["client-ca-file"] = string(s.cfg.ClientCAPEM)
	}
	want := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: extensionAuthConfigMap, Namespace: "kube-system"}, Data: data}
	err := s.ensureCurrent(ctx, want, gvr("", "v1", "configmaps"), func(o runtime.Object) bool {
		have := o.(*corev1.ConfigMap)
		changed := false
		for k, v := range data {
			if have.Data[k] != v {
				if have.Data == nil {
					have.Data = map[string]string{}
				}
				have.Data[k], changed = v, true
			}
		}
		return changed
	})
	if err != nil {
		return err
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "extension-apiserver-authentication-reader", Namespace: "kube-system",
			Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}, Annotations: map[string]string{"rbac.authorization.kubernetes.io/autoupdate": "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{extensionAuthConfigMap}, Verbs: []string{"get", "list", "watch"}}},
	}
	return s.ensure(ctx, role, gvr(rbacv1.GroupName, "v1", "roles"))
}

// validateAPIServiceGroup refuses a service for a group served here: its
// requests would never reach the service.
func (s *Server) validateAPIServiceGroup(as *apiregistrationv1.APIService) error {
	if _, builtin := s.reg.group(as.Spec.Group); builtin && as.Spec.Service != nil {
		return fmt.Errorf("%q is served by the API server itself and cannot be delegated to a service", as.Spec.Group)
	}
	return nil
}
