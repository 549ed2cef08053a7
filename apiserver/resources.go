package apiserver

import (
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/kubernetes/scheme"

	"bonsai.dev/bonsai/apiserver/aggregator"
	"bonsai.dev/bonsai/apiserver/apiextensions"
	"bonsai.dev/bonsai/apiserver/registry"
	"bonsai.dev/bonsai/apiserver/registry/admissionregistration"
	"bonsai.dev/bonsai/apiserver/registry/apps"
	"bonsai.dev/bonsai/apiserver/registry/autoscaling"
	"bonsai.dev/bonsai/apiserver/registry/batch"
	"bonsai.dev/bonsai/apiserver/registry/certificates"
	"bonsai.dev/bonsai/apiserver/registry/coordination"
	"bonsai.dev/bonsai/apiserver/registry/core"
	"bonsai.dev/bonsai/apiserver/registry/discovery"
	"bonsai.dev/bonsai/apiserver/registry/events"
	"bonsai.dev/bonsai/apiserver/registry/flowcontrol"
	"bonsai.dev/bonsai/apiserver/registry/networking"
	noderegistry "bonsai.dev/bonsai/apiserver/registry/node"
	"bonsai.dev/bonsai/apiserver/registry/policy"
	"bonsai.dev/bonsai/apiserver/registry/rbac"
	resourceregistry "bonsai.dev/bonsai/apiserver/registry/resource"
	"bonsai.dev/bonsai/apiserver/registry/scheduling"
	"bonsai.dev/bonsai/apiserver/registry/storage"
	"bonsai.dev/bonsai/apiserver/registry/storagemigration"
	"bonsai.dev/bonsai/store"
)

// resource is one entry of the API server's table: everything the generic
// handlers need to serve it.
type resource struct {
	gvr        schema.GroupVersionResource
	kind       string
	listKind   string
	singular   string
	namespaced bool
	shortNames []string
	categories []string
	// subresources served besides the main resource ("status", "scale",
	// "binding", ...).
	subresources []string
	// verbs beyond the standard set (all resources are get/list/watch/
	// create/update/patch/delete/deletecollection unless noCollection).
	noCollection bool
	// createOnly: a review kind (SubjectAccessReview, TokenReview ...)
	// that is only ever created, answered and never stored.
	createOnly bool
	// reader serves a kind that is computed, not stored: get and list.
	reader   registry.Reader
	strategy registry.Strategy
	// onRead fills in, on every object read from the store, what older
	// versions did not store (kube-apiserver's defaultOnRead of Services).
	onRead func(runtime.Object)
	// returnDeleted: DELETE that removes the object answers with it rather
	// than a Status (pods do).
	returnDeleted bool
	// allowCreateOnUpdate: PUT of a missing object creates it.
	allowCreateOnUpdate bool
	// fields lists the field selector labels beyond metadata.name and
	// metadata.namespace, with how to read each from an object.
	fields map[string]func(runtime.Object) string

	// storedAs names another resource whose objects this one shows in
	// another form (events.k8s.io Events are core Events): keys, storage
	// encoding and watch events are that resource's, converted with
	// toStorage and fromStorage.
	storedAs schema.GroupVersionResource
	storage  *resource
	// shownAs are the resources whose storage this one is.
	shownAs                []*resource
	toStorage, fromStorage func(runtime.Object) runtime.Object

	// def is the kind's description, which strategies see.
	def *registry.Kind
	// printer gives the table columns (nil: upstream's default).
	printer *registry.Printer
	// defaulter applies the kind's defaults.
	defaulter defaulterFunc

	// custom is set for the versions of CustomResourceDefinitions: their
	// objects are unstructured, checked against the CRD's schema.
	custom *apiextensions.Version

	fmMu  sync.Mutex
	fms   map[string]*managedfields.FieldManager
	empty emptyFields
}

func (r *resource) gvk() schema.GroupVersionKind { return r.gvr.GroupVersion().WithKind(r.kind) }

func (r *resource) hasSubresource(s string) bool {
	for _, x := range r.subresources {
		if x == s {
			return true
		}
	}
	return false
}

// key is the store key of one object.
func (r *resource) key(namespace, name string) string {
	if r.storage != nil {
		return r.storage.key(namespace, name)
	}
	return store.ObjectKey{Group: r.gvr.Group, Resource: r.gvr.Resource, Namespace: namespace, Name: name}.String()
}

// prefix is the store prefix of the resource's objects in namespace ("":
// all namespaces, or a cluster-scoped resource).
func (r *resource) prefix(namespace string) string {
	if r.storage != nil {
		return r.storage.prefix(namespace)
	}
	return store.ObjectKey{Group: r.gvr.Group, Resource: r.gvr.Resource, Namespace: namespace}.NamespacePrefix()
}

func (r *resource) newObject() runtime.Object {
	if r.custom != nil {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(r.gvk())
		return u
	}
	obj, err := scheme.Scheme.New(r.gvk())
	if err != nil {
		panic("apiserver: kind not in scheme: " + r.gvk().String())
	}
	return obj
}

func (r *resource) newList() runtime.Object {
	if r.custom != nil {
		l := &unstructured.UnstructuredList{Object: map[string]any{}}
		l.SetGroupVersionKind(r.gvr.GroupVersion().WithKind(r.listKind))
		return l
	}
	obj, err := scheme.Scheme.New(r.gvr.GroupVersion().WithKind(r.listKind))
	if err != nil {
		panic("apiserver: list kind not in scheme: " + r.listKind)
	}
	return obj
}

// resourceIndex indexes the resource table.
type resourceIndex struct {
	byGVR  map[schema.GroupVersionResource]*resource
	groups []apiGroup // in discovery order
}

// apiGroup is one group with its served versions (preferred first).
type apiGroup struct {
	name     string
	versions []string
}

func newRegistry(resources []*resource) *resourceIndex {
	reg := &resourceIndex{byGVR: map[schema.GroupVersionResource]*resource{}}
	seen := map[string]int{}
	for _, r := range resources {
		if r.listKind == "" {
			r.listKind = r.kind + "List"
		}
		if r.singular == "" {
			r.singular = strings.ToLower(r.kind)
		}
		if r.strategy == nil {
			r.strategy = registry.DefaultStrategy{}
		}
		if r.def == nil {
			r.def = &registry.Kind{GVR: r.gvr, Kind: r.kind, ListKind: r.listKind, Singular: r.singular, Namespaced: r.namespaced,
				ShortNames: r.shortNames, Categories: r.categories, Subresources: r.subresources, Strategy: r.strategy, Fields: r.fields}
		}
		reg.byGVR[r.gvr] = r
		i, ok := seen[r.gvr.Group]
		if !ok {
			i = len(reg.groups)
			seen[r.gvr.Group] = i
			reg.groups = append(reg.groups, apiGroup{name: r.gvr.Group})
		}
		g := &reg.groups[i]
		if !contains(g.versions, r.gvr.Version) {
			g.versions = append(g.versions, r.gvr.Version)
		}
	}
	for _, r := range resources {
		if !r.storedAs.Empty() {
			r.storage = reg.byGVR[r.storedAs]
			r.storage.shownAs = append(r.storage.shownAs, r)
		}
	}
	return reg
}

// resourcesIn lists a group version's resources sorted by name.
func (reg *resourceIndex) resourcesIn(gv schema.GroupVersion) []*resource {
	var out []*resource
	for gvr, r := range reg.byGVR {
		if gvr.GroupVersion() == gv {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].gvr.Resource < out[j].gvr.Resource })
	return out
}

func (reg *resourceIndex) group(name string) (apiGroup, bool) {
	for _, g := range reg.groups {
		if g.name == name {
			return g, true
		}
	}
	return apiGroup{}, false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func gvr(group, version, res string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: res}
}

// builtinKinds is the table of built-in kinds bonsai serves. Group order
// is discovery order, as kube-apiserver lists them.
func builtinKinds() []registry.Kind {
	apiExtensions := []string{"api-extensions"}
	return slices.Concat(core.Kinds(), apps.Kinds(), events.Kinds(), autoscaling.Kinds(), batch.Kinds(), certificates.Kinds(), coordination.Kinds(), discovery.Kinds(), flowcontrol.Kinds(), networking.Kinds(), policy.Kinds(), scheduling.Kinds(), storage.Kinds(), storagemigration.Kinds(), resourceregistry.Kinds(), admissionregistration.Kinds(checkCEL), noderegistry.Kinds(), rbac.Kinds(), []registry.Kind{
		// authentication.k8s.io/v1 and authorization.k8s.io/v1: reviews
		{GVR: gvr("authentication.k8s.io", "v1", "selfsubjectreviews"), Kind: "SelfSubjectReview", CreateOnly: true},
		{GVR: gvr("authentication.k8s.io", "v1", "tokenreviews"), Kind: "TokenReview", CreateOnly: true},
		{GVR: gvr("authorization.k8s.io", "v1", "localsubjectaccessreviews"), Kind: "LocalSubjectAccessReview", Namespaced: true, CreateOnly: true},
		{GVR: gvr("authorization.k8s.io", "v1", "selfsubjectaccessreviews"), Kind: "SelfSubjectAccessReview", CreateOnly: true},
		{GVR: gvr("authorization.k8s.io", "v1", "selfsubjectrulesreviews"), Kind: "SelfSubjectRulesReview", CreateOnly: true},
		{GVR: gvr("authorization.k8s.io", "v1", "subjectaccessreviews"), Kind: "SubjectAccessReview", CreateOnly: true},
		// apiregistration.k8s.io/v1
		{GVR: aggregator.GVR, Kind: "APIService", Categories: apiExtensions, Subresources: []string{"status"}, Strategy: aggregator.Strategy{}, Printer: &aggregator.Printer},
		// apiextensions.k8s.io/v1; kube-apiserver shows CRDs with the
		// default columns.
		{GVR: apiextensions.GVR, Kind: "CustomResourceDefinition", ShortNames: []string{"crd", "crds"}, Categories: []string{"api-extensions"}, Subresources: []string{"status"},
			Strategy: apiextensions.CRDStrategy{}, Printer: registry.DefaultPrinter},
	})
}

// builtinResources is the server's resource table for builtinKinds.
func builtinResources() []*resource {
	kinds := builtinKinds()
	out := make([]*resource, len(kinds))
	for i := range kinds {
		out[i] = newResource(&kinds[i])
	}
	return out
}

// newResource makes k's entry of the resource table.
func newResource(k *registry.Kind) *resource {
	r := &resource{
		gvr: k.GVR, kind: k.Kind, listKind: k.ListKind, singular: k.Singular, namespaced: k.Namespaced,
		shortNames: k.ShortNames, categories: k.Categories, subresources: k.Subresources,
		noCollection: k.NoCollection, createOnly: k.CreateOnly, reader: k.Reader, strategy: k.Strategy,
		returnDeleted: k.ReturnDeleted, allowCreateOnUpdate: k.AllowCreateOnUpdate, fields: k.Fields,
		storedAs: k.StoredAs, toStorage: k.ToStorage, fromStorage: k.FromStorage,
		def: k, printer: k.Printer, defaulter: k.Defaulter,
	}
	if r.listKind == "" {
		k.ListKind = r.kind + "List"
	}
	if r.singular == "" {
		k.Singular = strings.ToLower(r.kind)
	}
	if r.strategy == nil {
		k.Strategy = registry.DefaultStrategy{}
	}
	return r
}

// defaulterFunc applies a kind's defaults; it is also the field
// manager's defaulter, so server-side apply compares defaulted objects,
// as upstream does.
type defaulterFunc func(runtime.Object)

// Default applies the defaults, if the kind has any.
func (f defaulterFunc) Default(obj runtime.Object) {
	if f != nil {
		f(obj)
	}
}

// bindStrategies gives the strategies of the kinds the server itself
// serves (CustomResourceDefinitions, APIServices) the server they check
// groups against.
func (s *Server) bindStrategies() {
	for _, r := range s.reg.byGVR {
		switch r.strategy.(type) {
		case apiextensions.CRDStrategy:
			r.strategy = apiextensions.CRDStrategy{BuiltinGroup: s.builtinGroup}
		case aggregator.Strategy:
			r.strategy = aggregator.Strategy{BuiltinGroup: s.builtinGroup}
		default:
			continue
		}
		r.def.Strategy = r.strategy
	}
}
