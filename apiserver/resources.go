package apiserver

import (
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/kubernetes/scheme"

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
	strategy   strategy
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
	storedAs               schema.GroupVersionResource
	storage                *resource
	toStorage, fromStorage func(runtime.Object) runtime.Object

	// custom is set for the versions of CustomResourceDefinitions: their
	// objects are unstructured, checked against the CRD's schema.
	custom *customVersion

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

// registry indexes the resource table.
type registry struct {
	byGVR  map[schema.GroupVersionResource]*resource
	groups []apiGroup // in discovery order
}

// apiGroup is one group with its served versions (preferred first).
type apiGroup struct {
	name     string
	versions []string
}

func newRegistry(resources []*resource) *registry {
	reg := &registry{byGVR: map[schema.GroupVersionResource]*resource{}}
	seen := map[string]int{}
	for _, r := range resources {
		if r.listKind == "" {
			r.listKind = r.kind + "List"
		}
		if r.singular == "" {
			r.singular = strings.ToLower(r.kind)
		}
		if r.strategy == nil {
			r.strategy = defaultStrategy{}
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
		}
	}
	return reg
}

// resourcesIn lists a group version's resources sorted by name.
func (reg *registry) resourcesIn(gv schema.GroupVersion) []*resource {
	var out []*resource
	for gvr, r := range reg.byGVR {
		if gvr.GroupVersion() == gv {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].gvr.Resource < out[j].gvr.Resource })
	return out
}

func (reg *registry) group(name string) (apiGroup, bool) {
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

// builtinResources is the table of built-in kinds bonsai serves. Group order
// is discovery order, as kube-apiserver lists them.
func builtinResources() []*resource {
	all := []string{"all"}
	apiExtensions := []string{"api-extensions"}
	return []*resource{
		// core/v1
		{gvr: gvr("", "v1", "namespaces"), kind: "Namespace", shortNames: []string{"ns"}, subresources: []string{"status", "finalize"}, strategy: namespaceStrategy{}, fields: fieldsNamespace},
		{gvr: gvr("", "v1", "nodes"), kind: "Node", shortNames: []string{"no"}, subresources: []string{"status"}, strategy: nodeStrategy{}, fields: fieldsNode},
		{gvr: gvr("", "v1", "pods"), kind: "Pod", namespaced: true, shortNames: []string{"po"}, categories: all, subresources: []string{"status", "binding", "eviction", "ephemeralcontainers", "log", "exec", "attach", "portforward", "proxy"}, strategy: podStrategy{}, returnDeleted: true, fields: fieldsPod},
		{gvr: gvr("", "v1", "services"), kind: "Service", namespaced: true, shortNames: []string{"svc"}, categories: all, subresources: []string{"status", "proxy"}, strategy: serviceStrategy{}, noCollection: true},
		{gvr: gvr("", "v1", "endpoints"), kind: "Endpoints", listKind: "EndpointsList", singular: "endpoints", namespaced: true, shortNames: []string{"ep"}, allowCreateOnUpdate: true},
		{gvr: gvr("", "v1", "configmaps"), kind: "ConfigMap", namespaced: true, shortNames: []string{"cm"}, strategy: configMapStrategy{}},
		{gvr: gvr("", "v1", "secrets"), kind: "Secret", namespaced: true, strategy: secretStrategy{}, fields: fieldsSecret},
		{gvr: gvr("", "v1", "serviceaccounts"), kind: "ServiceAccount", namespaced: true, shortNames: []string{"sa"}, subresources: []string{"token"}},
		{gvr: gvr("", "v1", "events"), kind: "Event", namespaced: true, shortNames: []string{"ev"}, fields: fieldsEvent},
		{gvr: gvr("", "v1", "limitranges"), kind: "LimitRange", namespaced: true, shortNames: []string{"limits"}},
		{gvr: gvr("", "v1", "resourcequotas"), kind: "ResourceQuota", namespaced: true, shortNames: []string{"quota"}, subresources: []string{"status"}},
		{gvr: gvr("", "v1", "podtemplates"), kind: "PodTemplate", namespaced: true},
		{gvr: gvr("", "v1", "persistentvolumes"), kind: "PersistentVolume", shortNames: []string{"pv"}, subresources: []string{"status"}, strategy: persistentVolumeStrategy{}},
		{gvr: gvr("", "v1", "persistentvolumeclaims"), kind: "PersistentVolumeClaim", namespaced: true, shortNames: []string{"pvc"}, subresources: []string{"status"}, strategy: claimStrategy{}},
		{gvr: gvr("", "v1", "replicationcontrollers"), kind: "ReplicationController", namespaced: true, shortNames: []string{"rc"}, categories: all, subresources: []string{"status", "scale"}},
		// apps/v1
		{gvr: gvr("apps", "v1", "deployments"), kind: "Deployment", namespaced: true, shortNames: []string{"deploy"}, categories: all, subresources: []string{"status", "scale"}, strategy: deploymentStrategy{}},
		{gvr: gvr("apps", "v1", "replicasets"), kind: "ReplicaSet", namespaced: true, shortNames: []string{"rs"}, categories: all, subresources: []string{"status", "scale"}, strategy: replicaSetStrategy{}},
		{gvr: gvr("apps", "v1", "statefulsets"), kind: "StatefulSet", namespaced: true, shortNames: []string{"sts"}, categories: all, subresources: []string{"status", "scale"}, strategy: statefulSetStrategy{}},
		{gvr: gvr("apps", "v1", "daemonsets"), kind: "DaemonSet", namespaced: true, shortNames: []string{"ds"}, categories: all, subresources: []string{"status"}, strategy: daemonSetStrategy{}},
		{gvr: gvr("apps", "v1", "controllerrevisions"), kind: "ControllerRevision", namespaced: true},
		// events.k8s.io/v1 shows the core Events.
		{gvr: gvr("events.k8s.io", "v1", "events"), kind: "Event", namespaced: true, shortNames: []string{"ev"},
			storedAs: gvr("", "v1", "events"), toStorage: eventToCore, fromStorage: eventFromCore},
		// batch/v1
		{gvr: gvr("batch", "v1", "jobs"), kind: "Job", namespaced: true, categories: all, subresources: []string{"status"}, strategy: jobStrategy{}},
		{gvr: gvr("batch", "v1", "cronjobs"), kind: "CronJob", namespaced: true, shortNames: []string{"cj"}, categories: all, subresources: []string{"status"}, strategy: cronJobStrategy{}},
		// coordination.k8s.io/v1
		{gvr: gvr("coordination.k8s.io", "v1", "leases"), kind: "Lease", namespaced: true, strategy: leaseStrategy{}},
		// discovery.k8s.io/v1
		{gvr: gvr("discovery.k8s.io", "v1", "endpointslices"), kind: "EndpointSlice", namespaced: true, strategy: endpointSliceStrategy{}},
		// networking.k8s.io/v1
		{gvr: gvr("networking.k8s.io", "v1", "ingresses"), kind: "Ingress", namespaced: true, shortNames: []string{"ing"}, subresources: []string{"status"}, strategy: ingressStrategy{}},
		{gvr: gvr("networking.k8s.io", "v1", "ingressclasses"), kind: "IngressClass"},
		{gvr: gvr("networking.k8s.io", "v1", "ipaddresses"), kind: "IPAddress", shortNames: []string{"ip"}, strategy: ipAddressStrategy{}},
		{gvr: gvr("networking.k8s.io", "v1", "networkpolicies"), kind: "NetworkPolicy", namespaced: true, shortNames: []string{"netpol"}, strategy: networkPolicyStrategy{}},
		{gvr: gvr("networking.k8s.io", "v1", "servicecidrs"), kind: "ServiceCIDR", subresources: []string{"status"}, strategy: serviceCIDRStrategy{}},
		// policy/v1
		{gvr: gvr("policy", "v1", "poddisruptionbudgets"), kind: "PodDisruptionBudget", namespaced: true, shortNames: []string{"pdb"}, subresources: []string{"status"}, strategy: pdbStrategy{}},
		// scheduling.k8s.io/v1
		{gvr: gvr("scheduling.k8s.io", "v1", "priorityclasses"), kind: "PriorityClass", shortNames: []string{"pc"}, strategy: priorityClassStrategy{}},
		// storage.k8s.io/v1
		{gvr: gvr("storage.k8s.io", "v1", "storageclasses"), kind: "StorageClass", shortNames: []string{"sc"}},
		// admissionregistration.k8s.io/v1
		{gvr: gvr("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"), kind: "MutatingWebhookConfiguration", categories: apiExtensions, strategy: admissionConfigStrategy{}},
		{gvr: gvr("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"), kind: "ValidatingWebhookConfiguration", categories: apiExtensions, strategy: admissionConfigStrategy{}},
		{gvr: gvr("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"), kind: "ValidatingAdmissionPolicy", categories: apiExtensions, subresources: []string{"status"}, strategy: admissionConfigStrategy{}},
		{gvr: gvr("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings"), kind: "ValidatingAdmissionPolicyBinding", categories: apiExtensions, strategy: admissionConfigStrategy{}},
		// node.k8s.io/v1
		{gvr: gvr("node.k8s.io", "v1", "runtimeclasses"), kind: "RuntimeClass"},
		// rbac.authorization.k8s.io/v1
		{gvr: gvr("rbac.authorization.k8s.io", "v1", "clusterrolebindings"), kind: "ClusterRoleBinding", strategy: rbacStrategy{}},
		{gvr: gvr("rbac.authorization.k8s.io", "v1", "clusterroles"), kind: "ClusterRole", strategy: rbacStrategy{}},
		{gvr: gvr("rbac.authorization.k8s.io", "v1", "rolebindings"), kind: "RoleBinding", namespaced: true, strategy: rbacStrategy{}},
		{gvr: gvr("rbac.authorization.k8s.io", "v1", "roles"), kind: "Role", namespaced: true, strategy: rbacStrategy{}},
		// authentication.k8s.io/v1 and authorization.k8s.io/v1: reviews
		{gvr: gvr("authentication.k8s.io", "v1", "selfsubjectreviews"), kind: "SelfSubjectReview", createOnly: true},
		{gvr: gvr("authentication.k8s.io", "v1", "tokenreviews"), kind: "TokenReview", createOnly: true},
		{gvr: gvr("authorization.k8s.io", "v1", "localsubjectaccessreviews"), kind: "LocalSubjectAccessReview", namespaced: true, createOnly: true},
		{gvr: gvr("authorization.k8s.io", "v1", "selfsubjectaccessreviews"), kind: "SelfSubjectAccessReview", createOnly: true},
		{gvr: gvr("authorization.k8s.io", "v1", "selfsubjectrulesreviews"), kind: "SelfSubjectRulesReview", createOnly: true},
		{gvr: gvr("authorization.k8s.io", "v1", "subjectaccessreviews"), kind: "SubjectAccessReview", createOnly: true},
		// apiregistration.k8s.io/v1
		{gvr: apiServiceGVR, kind: "APIService", categories: apiExtensions, subresources: []string{"status"}, strategy: apiServiceStrategy{}},
		// apiextensions.k8s.io/v1
		{gvr: gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions"), kind: "CustomResourceDefinition", shortNames: []string{"crd", "crds"}, categories: []string{"api-extensions"}, subresources: []string{"status"}, strategy: crdStrategy{}},
	}
}
