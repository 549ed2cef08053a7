package apiserver

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"bonsai.dev/bonsai/apiserver/aggregator"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
)

// The aggregation layer (APIServices, proxying, availability) lives in
// apiserver/aggregator and reaches the server only through
// aggregator.Server. This file is the server's side of that line: the
// aggregator.Server it hands over (aggregatorServer), the cache of
// compiled APIServices, the write notes that wake the availability loop,
// the APIServices and extension authentication made on start, and the
// hand-over of requests under a remote group version.

// aggregatorServer is the server as the aggregator sees it.
type aggregatorServer struct{ s *Server }

func (a aggregatorServer) BuiltinGroup(group string) bool { return a.s.builtinGroup(group) }

func (a aggregatorServer) ServedGroup(group string) bool {
	_, ok := a.s.group(group)
	return ok
}

func (a aggregatorServer) CustomGroupVersions() ([]schema.GroupVersion, bool) {
	if !a.s.crs.synced.Load() {
		return nil, false
	}
	var out []schema.GroupVersion
	for _, g := range a.s.crs.index().groups {
		for _, v := range g.versions {
			out = append(out, schema.GroupVersion{Group: g.name, Version: v})
		}
	}
	return out, true
}

func (a aggregatorServer) APIServices(ctx context.Context) (*aggregator.Set, error) {
	return a.s.apiServices.get(ctx)
}

func (a aggregatorServer) GetAPIService(ctx context.Context, name string) (*apiregistrationv1.APIService, uint64, error) {
	obj, rev, err := a.s.getObject(ctx, a.s.reg.byGVR[aggregator.GVR], "", name)
	if err != nil {
		return nil, 0, err
	}
	return obj.(*apiregistrationv1.APIService), rev, nil
}

func (a aggregatorServer) UpdateAPIService(ctx context.Context, as *apiregistrationv1.APIService, rev uint64) error {
	res := a.s.reg.byGVR[aggregator.GVR]
	data, err := encodeForStore(res, as)
	if err != nil {
		return err
	}
	_, err = a.s.cfg.Store.Update(ctx, res.key("", as.Name), data, rev)
	return err
}

func (a aggregatorServer) EnsureAPIService(ctx context.Context, as *apiregistrationv1.APIService) error {
	return a.s.ensure(ctx, as, aggregator.GVR)
}

func (a aggregatorServer) DeleteAPIService(ctx context.Context, as *apiregistrationv1.APIService) error {
	_, err := a.s.cfg.Store.Delete(ctx, a.s.reg.byGVR[aggregator.GVR].key("", as.Name), revisionOf(as.ResourceVersion))
	return err
}

func (a aggregatorServer) Service(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	return a.s.service(ctx, namespace, name)
}

func (a aggregatorServer) ResolveService(ctx context.Context, namespace, name string, port int32) (string, error) {
	return a.s.resolveService(ctx, namespace, name, port)
}

func (a aggregatorServer) ReadyEndpoints(ctx context.Context, namespace, name, portName string) ([]string, error) {
	return a.s.readyEndpoints(ctx, namespace, name, portName)
}

// ServiceTransport is the webhooks' transport without HTTP/2, so that
// connection upgrades (exec, port-forward) pass through the proxy.
func (a aggregatorServer) ServiceTransport(caBundle []byte, tlsCfg *tls.Config) (*http.Transport, error) {
	pool, err := caBundlePool(caBundle)
	if err != nil {
		return nil, err
	}
	tlsCfg.RootCAs = pool
	return serviceTransport(tlsCfg, false), nil
}

func (a aggregatorServer) WriteStatus(w http.ResponseWriter, code int32, reason metav1.StatusReason, message string) {
	writeStatus(w, &metav1.Status{Code: code, Reason: reason, Message: message})
}

// builtinGroup: the group is one of the built-in kinds'.
func (s *Server) builtinGroup(group string) bool {
	_, ok := s.reg.group(group)
	return ok
}

// service reads a Service from the store.
func (s *Server) service(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "services")], namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Service), nil
}

// newAggregator makes the aggregator, calling backends with fp's client
// certificate, and the cache of compiled APIServices it reads.
func (s *Server) newAggregator(fp *pki.FrontProxy) {
	s.aggregator = aggregator.New(aggregatorServer{s}, fp, s.log)
	s.apiServices = newConfigCache(s, aggregator.GVR, s.aggregator.Compile)
}

// runAggregator keeps the compiled APIServices and their availability
// until ctx ends.
func (s *Server) runAggregator(ctx context.Context) {
	go s.apiServices.run(ctx)
	s.aggregator.Run(ctx)
}

// aggregatorNotes wake the availability loop on this server's writes of
// APIServices, Services and EndpointSlices, and keep the compiled
// APIServices current.
func (s *Server) aggregatorNotes() []writeNote {
	notes := []writeNote{{prefix: s.apiServices.prefix(), wrote: func(_ string, rev uint64) { s.apiServices.changed(rev); s.aggregator.Wake() }}}
	for _, g := range []schema.GroupVersionResource{gvr("", "v1", "services"), gvr("discovery.k8s.io", "v1", "endpointslices")} {
		notes = append(notes, writeNote{prefix: s.reg.byGVR[g].prefix(""), wrote: func(string, uint64) { s.aggregator.Wake() }})
	}
	return notes
}

// serveAggregated proxies r to the service of gv's APIService, if gv is
// a remote group version; it reports whether it did.
func (s *Server) serveAggregated(w http.ResponseWriter, r *http.Request, gv schema.GroupVersion) bool {
	b := s.aggregator.Remote(r.Context(), gv)
	if b == nil {
		return false
	}
	u, _ := r.Context().Value(userKey{}).(*authn.User)
	s.aggregator.ServeProxy(w, r, b, u)
	return true
}

// serveOpenAPIV3GroupVersion proxies /openapi/v3/apis/<group>/<version>
// of a remote group version to its backend, as kube-apiserver's
// aggregator does; the rest is this server's.
func (s *Server) serveOpenAPIV3GroupVersion(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/openapi/v3"), "/"), "/")
	if len(parts) == 3 && parts[0] == "apis" && s.serveAggregated(w, r, schema.GroupVersion{Group: parts[1], Version: parts[2]}) {
		return
	}
	s.openapi.ServeV3(w, r)
}

// ensureLocalAPIServices creates the local APIService of every built-in
// group version. An existing one is left as it is.
func (s *Server) ensureLocalAPIServices(ctx context.Context) error {
	for _, g := range s.reg.groups {
		for _, v := range g.versions {
			if err := s.ensure(ctx, aggregator.LocalAPIService(schema.GroupVersion{Group: g.name, Version: v}), aggregator.GVR); err != nil {
				return err
			}
		}
	}
	return nil
}

// ensureExtensionAuthentication publishes how aggregated servers
// authenticate this server and its callers, in kube-system's
// extension-apiserver-authentication ConfigMap (what kube-apiserver puts
// there), and creates the Role upstream has for reading it.
func (s *Server) ensureExtensionAuthentication(ctx context.Context) error {
	data := s.aggregator.AuthenticationConfig(s.cfg.ClientCAPEM)
	want := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: aggregator.AuthenticationConfigMap, Namespace: "kube-system"}, Data: data}
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
	return s.ensure(ctx, aggregator.AuthenticationReaderRole(), gvr(rbacv1.GroupName, "v1", "roles"))
}
