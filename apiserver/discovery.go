package apiserver

import (
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apidiscoveryv2beta1 "k8s.io/api/apidiscovery/v2beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var standardVerbs = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// subresourceInfo is how discovery describes each subresource.
var subresourceInfo = map[string]struct {
	gvk   schema.GroupVersionKind // empty group/version: the parent's
	verbs metav1.Verbs
}{
	"status":              {verbs: metav1.Verbs{"get", "patch", "update"}},
	"approval":            {verbs: metav1.Verbs{"get", "patch", "update"}},
	"scale":               {gvk: schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}, verbs: metav1.Verbs{"get", "patch", "update"}},
	"binding":             {gvk: schema.GroupVersionKind{Version: "v1", Kind: "Binding"}, verbs: metav1.Verbs{"create"}},
	"eviction":            {gvk: schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, verbs: metav1.Verbs{"create"}},
	"finalize":            {verbs: metav1.Verbs{"update"}},
	"ephemeralcontainers": {verbs: metav1.Verbs{"get", "patch", "update"}},
	"log":                 {verbs: metav1.Verbs{"get"}},
	"exec":                {gvk: schema.GroupVersionKind{Version: "v1", Kind: "PodExecOptions"}, verbs: metav1.Verbs{"create", "get"}},
	"attach":              {gvk: schema.GroupVersionKind{Version: "v1", Kind: "PodAttachOptions"}, verbs: metav1.Verbs{"create", "get"}},
	"portforward":         {gvk: schema.GroupVersionKind{Version: "v1", Kind: "PodPortForwardOptions"}, verbs: metav1.Verbs{"create", "get"}},
	"token":               {gvk: schema.GroupVersionKind{Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest"}, verbs: metav1.Verbs{"create"}},
	// proxy's kind is the parent's: PodProxyOptions, ServiceProxyOptions.
	"proxy": {verbs: metav1.Verbs{"create", "delete", "get", "patch", "update"}},
}

func (r *resource) verbs() metav1.Verbs {
	if r.createOnly {
		return metav1.Verbs{"create"}
	}
	if r.reader != nil {
		return metav1.Verbs{"get", "list"}
	}
	if r.noCollection {
		return metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	}
	return standardVerbs
}

func subKind(r *resource, sub string) schema.GroupVersionKind {
	if sub == "proxy" {
		return schema.GroupVersionKind{Version: "v1", Kind: r.kind + "ProxyOptions"}
	}
	gvk := subresourceInfo[sub].gvk
	if gvk.Kind == "" {
		return r.gvk()
	}
	return gvk
}

// apiResources is the legacy discovery document of one group version.
func (s *Server) apiResources(gv schema.GroupVersion) *metav1.APIResourceList {
	out := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	for _, r := range s.resourcesIn(gv) {
		out.APIResources = append(out.APIResources, metav1.APIResource{
			Name: r.gvr.Resource, SingularName: r.singular, Namespaced: r.namespaced, Kind: r.kind,
			Verbs: r.verbs(), ShortNames: r.shortNames, Categories: r.categories,
		})
		for _, sub := range r.subresources {
			gvk := subKind(r, sub)
			ar := metav1.APIResource{Name: r.gvr.Resource + "/" + sub, Namespaced: r.namespaced, Kind: gvk.Kind, Verbs: subresourceInfo[sub].verbs}
			if gvk.GroupVersion() != r.gvr.GroupVersion() {
				ar.Group, ar.Version = gvk.Group, gvk.Version
			}
			out.APIResources = append(out.APIResources, ar)
		}
	}
	return out
}

// aggregated builds the apidiscovery v2 document for the core group (core
// true) or every other group.
func (s *Server) aggregated(core bool) *apidiscoveryv2.APIGroupDiscoveryList {
	out := &apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}}
	for _, g := range s.groups() {
		if (g.name == "") != core {
			continue
		}
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.name}}
		for _, v := range g.versions {
			vd := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
			for _, r := range s.resourcesIn(schema.GroupVersion{Group: g.name, Version: v}) {
				scope := apidiscoveryv2.ScopeCluster
				if r.namespaced {
					scope = apidiscoveryv2.ScopeNamespace
				}
				rd := apidiscoveryv2.APIResourceDiscovery{
					Resource: r.gvr.Resource, ResponseKind: &metav1.GroupVersionKind{Group: r.gvr.Group, Version: r.gvr.Version, Kind: r.kind},
					Scope: scope, SingularResource: r.singular, Verbs: r.verbs(), ShortNames: r.shortNames, Categories: r.categories,
				}
				for _, sub := range r.subresources {
					gvk := subKind(r, sub)
					rd.Subresources = append(rd.Subresources, apidiscoveryv2.APISubresourceDiscovery{
						Subresource: sub, ResponseKind: &metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}, Verbs: subresourceInfo[sub].verbs,
					})
				}
				vd.Resources = append(vd.Resources, rd)
			}
			gd.Versions = append(gd.Versions, vd)
		}
		out.Items = append(out.Items, gd)
	}
	return out
}

// aggregatedFormat says which aggregated discovery version the client
// accepts, if any ("v2", "v2beta1" or "").
func aggregatedFormat(r *http.Request) string {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, p, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || mt != "application/json" || p["g"] != "apidiscovery.k8s.io" || p["as"] != "APIGroupDiscoveryList" {
			if err == nil && (mt == "application/json" || mt == "*/*") && p["as"] == "" {
				return "" // plain JSON preferred before any aggregated form
			}
			continue
		}
		if p["v"] == "v2" || p["v"] == "v2beta1" {
			return p["v"]
		}
	}
	return ""
}

func (s *Server) writeAggregated(w http.ResponseWriter, r *http.Request, version string, core bool) {
	list := s.aggregated(core)
	if !core {
		list.Items = append(list.Items, s.aggregator.AggregatedGroups(r.Context())...)
	}
	var doc any = list
	if version == "v2beta1" {
		doc = toV2beta1(doc.(*apidiscoveryv2.APIGroupDiscoveryList))
	}
	body, err := json.Marshal(doc)
	if err != nil {
		writeError(w, err)
		return
	}
	// The content type tells the client which document this is.
	w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v="+version+";as=APIGroupDiscoveryList")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// toV2beta1 re-labels a v2 document: the two versions have the same shape.
func toV2beta1(in *apidiscoveryv2.APIGroupDiscoveryList) *apidiscoveryv2beta1.APIGroupDiscoveryList {
	out := &apidiscoveryv2beta1.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2beta1"}}
	for _, g := range in.Items {
		gd := apidiscoveryv2beta1.APIGroupDiscovery{ObjectMeta: g.ObjectMeta}
		for _, v := range g.Versions {
			vd := apidiscoveryv2beta1.APIVersionDiscovery{Version: v.Version, Freshness: apidiscoveryv2beta1.DiscoveryFreshness(v.Freshness)}
			for _, r := range v.Resources {
				rd := apidiscoveryv2beta1.APIResourceDiscovery{Resource: r.Resource, ResponseKind: r.ResponseKind, Scope: apidiscoveryv2beta1.ResourceScope(r.Scope),
					SingularResource: r.SingularResource, Verbs: r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories}
				for _, sr := range r.Subresources {
					rd.Subresources = append(rd.Subresources, apidiscoveryv2beta1.APISubresourceDiscovery{Subresource: sr.Subresource, ResponseKind: sr.ResponseKind, Verbs: sr.Verbs})
				}
				vd.Resources = append(vd.Resources, rd)
			}
			gd.Versions = append(gd.Versions, vd)
		}
		out.Items = append(out.Items, gd)
	}
	return out
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if v := aggregatedFormat(r); v != "" {
		s.writeAggregated(w, r, v, true)
		return
	}
	writeObject(w, http.StatusOK, &metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{
			ClientCIDR: "0.0.0.0/0", ServerAddress: serverAddress(r),
		}},
	}, outJSON)
}

func serverAddress(r *http.Request) string {
	if _, _, err := net.SplitHostPort(r.Host); err == nil {
		return r.Host
	}
	return r.Host + ":443"
}

func (s *Server) apiGroup(g apiGroup) metav1.APIGroup {
	ag := metav1.APIGroup{Name: g.name}
	for _, v := range g.versions {
		ag.Versions = append(ag.Versions, metav1.GroupVersionForDiscovery{GroupVersion: g.name + "/" + v, Version: v})
	}
	ag.PreferredVersion = ag.Versions[0]
	return ag
}

func (s *Server) serveAPIs(w http.ResponseWriter, r *http.Request) {
	if v := aggregatedFormat(r); v != "" {
		s.writeAggregated(w, r, v, false)
		return
	}
	list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, g := range s.groups() {
		if g.name != "" {
			list.Groups = append(list.Groups, s.apiGroup(g))
		}
	}
	list.Groups = append(list.Groups, s.aggregator.Groups(r.Context())...)
	writeObject(w, http.StatusOK, list, outJSON)
}

func (s *Server) serveGroup(w http.ResponseWriter, r *http.Request, group string) {
	g, ok := s.group(group)
	if !ok && group != "" {
		if ag, ok := s.aggregator.Group(r.Context(), group); ok {
			writeObject(w, http.StatusOK, ag, outJSON)
			return
		}
	}
	if !ok || group == "" {
		writeError(w, notFoundPath())
		return
	}
	ag := s.apiGroup(g)
	ag.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
	writeObject(w, http.StatusOK, &ag, outJSON)
}

func (s *Server) serveGroupVersion(w http.ResponseWriter, r *http.Request, gv schema.GroupVersion) {
	g, ok := s.group(gv.Group)
	if !ok || !contains(g.versions, gv.Version) {
		writeError(w, notFoundPath())
		return
	}
	writeObject(w, http.StatusOK, s.apiResources(gv), outJSON)
}

// serveAPITree routes everything under /api and /apis: discovery documents
// and resource requests.
func (s *Server) serveAPITree(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) >= 3 && parts[0] == "apis" && s.serveAggregated(w, r, schema.GroupVersion{Group: parts[1], Version: parts[2]}) {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.serveResource(w, r)
		return
	}
	switch {
	case len(parts) == 1 && parts[0] == "api":
		s.serveAPI(w, r)
	case len(parts) == 1 && parts[0] == "apis":
		s.serveAPIs(w, r)
	case len(parts) == 2 && parts[0] == "api":
		s.serveGroupVersion(w, r, schema.GroupVersion{Version: parts[1]})
	case len(parts) == 2 && parts[0] == "apis":
		s.serveGroup(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "apis":
		s.serveGroupVersion(w, r, schema.GroupVersion{Group: parts[1], Version: parts[2]})
	default:
		s.serveResource(w, r)
	}
}
