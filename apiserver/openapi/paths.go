package openapi

import (
	"reflect"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// param is one query or path parameter, described once for both documents.
type param struct {
	name, in, typ, description string
	unique                     bool
}

var (
	pName      = param{name: "name", in: "path", typ: "string", unique: true}
	pNamespace = param{name: "namespace", in: "path", typ: "string", description: "object name and auth scope, such as for teams and projects", unique: true}
	pPretty    = param{name: "pretty", in: "query", typ: "string", description: "If 'true', then the output is pretty printed.", unique: true}

	pDryRun          = param{name: "dryRun", in: "query", typ: "string", unique: true, description: "When present, the request is validated and run through admission but nothing is stored. The only valid value is All."}
	pFieldManager    = param{name: "fieldManager", in: "query", typ: "string", unique: true, description: "The name of the actor making the change, recorded in managedFields."}
	pFieldValidation = param{name: "fieldValidation", in: "query", typ: "string", unique: true, description: "How to treat unknown and duplicate fields in the request body: Ignore, Warn or Strict."}
	pForce           = param{name: "force", in: "query", typ: "boolean", unique: true, description: "Take ownership of conflicting fields in an apply request. Only valid for apply patches."}

	pAllowWatchBookmarks  = param{name: "allowWatchBookmarks", in: "query", typ: "boolean", unique: true, description: "Ask for BOOKMARK watch events. The server may ignore the request."}
	pContinue             = param{name: "continue", in: "query", typ: "string", unique: true, description: "The continue token of a previous paged list, to fetch the next page."}
	pFieldSelector        = param{name: "fieldSelector", in: "query", typ: "string", unique: true, description: "Restrict the objects returned by their fields. Defaults to everything."}
	pLabelSelector        = param{name: "labelSelector", in: "query", typ: "string", unique: true, description: "Restrict the objects returned by their labels. Defaults to everything."}
	pLimit                = param{name: "limit", in: "query", typ: "integer", unique: true, description: "The most objects to return in one page; a continue token leads to the rest."}
	pResourceVersion      = param{name: "resourceVersion", in: "query", typ: "string", unique: true, description: "Which version of the collection to serve or to watch from."}
	pResourceVersionMatch = param{name: "resourceVersionMatch", in: "query", typ: "string", unique: true, description: "How resourceVersion applies to a list: Exact or NotOlderThan."}
	pSendInitialEvents    = param{name: "sendInitialEvents", in: "query", typ: "boolean", unique: true, description: "Start a watch with synthetic ADDED events for the current state, then a bookmark."}
	pTimeoutSeconds       = param{name: "timeoutSeconds", in: "query", typ: "integer", unique: true, description: "End a list or watch call after this many seconds."}
	pWatch                = param{name: "watch", in: "query", typ: "boolean", unique: true, description: "Stream changes to the described objects instead of listing them."}

	pGracePeriodSeconds = param{name: "gracePeriodSeconds", in: "query", typ: "integer", unique: true, description: "Seconds the object has to terminate before it is removed; 0 removes it at once."}
	pOrphanDependents   = param{name: "orphanDependents", in: "query", typ: "boolean", unique: true, description: "Deprecated: use propagationPolicy."}
	pPropagationPolicy  = param{name: "propagationPolicy", in: "query", typ: "string", unique: true, description: "Whether and how dependents are garbage collected: Orphan, Background or Foreground."}

	writeParams  = []param{pDryRun, pFieldManager, pFieldValidation}
	patchParams  = []param{pDryRun, pFieldManager, pFieldValidation, pForce}
	listParams   = []param{pAllowWatchBookmarks, pContinue, pFieldSelector, pLabelSelector, pLimit, pResourceVersion, pResourceVersionMatch, pSendInitialEvents, pTimeoutSeconds, pWatch}
	deleteParams = []param{pDryRun, pGracePeriodSeconds, pOrphanDependents, pPropagationPolicy}
	// deletecollection takes the list selectors (not watch) and the delete
	// options.
	deleteCollectionParams = []param{pContinue, pDryRun, pFieldSelector, pGracePeriodSeconds, pLabelSelector, pLimit, pOrphanDependents, pPropagationPolicy, pResourceVersion, pResourceVersionMatch, pSendInitialEvents, pTimeoutSeconds}
)

// The content types Kubernetes lists on its operations.
var (
	produces      = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/cbor"}
	listProduces  = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/cbor", "application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch", "application/cbor-seq"}
	patchConsumes = []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"}
	// Custom resources take no strategic merge patch: it needs the Go
	// type's patch strategies. kubectl's client-side apply reads this
	// list to choose between a strategic and a JSON merge patch.
	customPatchConsumes = []string{"application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"}
)

var (
	tDeleteOptions = reflect.TypeOf(metav1.DeleteOptions{})
	tStatus        = reflect.TypeOf(metav1.Status{})
	tPatch         = reflect.TypeOf(metav1.Patch{})
)

// operation is one HTTP method on one path, described once for both
// documents.
type operation struct {
	method      string // get, put, post, patch, delete
	id          string
	action      string // x-kubernetes-action
	description string
	gvk         schema.GroupVersionKind
	params      []param
	body        *spec.Schema // request body
	patch       []string     // body is a patch of one of these types
	responses   map[int]*spec.Schema
	list        bool // may answer with a watch stream
}

type pathItem struct {
	path   string
	params []param
	ops    []operation
}

// groupVersionPath is where a group version is served, without the leading
// slash: "api/v1", "apis/apps/v1".
func groupVersionPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// opGroup is the group version part of operation IDs and tags the way
// Kubernetes spells it: core/v1 → CoreV1, networking.k8s.io/v1 →
// NetworkingV1, rbac.authorization.k8s.io/v1 → RbacAuthorizationV1.
func opGroup(gv schema.GroupVersion) (id, tag string) {
	g := strings.TrimSuffix(gv.Group, ".k8s.io")
	if g == "" {
		g = "core"
	}
	parts := strings.FieldsFunc(g, func(r rune) bool { return r == '.' || r == '-' })
	for _, p := range parts {
		id += upperFirst(p)
	}
	return id + upperFirst(gv.Version), strings.Join(parts, "_") + "_" + gv.Version
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func has(verbs []string, v string) bool {
	for _, x := range verbs {
		if x == v {
			return true
		}
	}
	return false
}

// paths describes every path of one resource, adding the types they use to
// b.
func paths(b *builder, r Resource) []pathItem {
	gv := r.GVK.GroupVersion()
	prefix := "/" + groupVersionPath(gv)
	idGroup, _ := opGroup(gv)
	var obj, list spec.Schema
	patchTypes := patchConsumes
	if r.Schema != nil {
		patchTypes = customPatchConsumes
		obj, list = b.customKinds(r)
	} else {
		obj = b.kind(typeOf(r.Object), r.GVK)
		if r.List != nil {
			list = b.kind(typeOf(r.List), gv.WithKind(r.ListKind))
		}
	}
	status := b.kind(tStatus, schema.GroupVersionKind{Version: "v1", Kind: "Status"})
	deleteOpts := b.kind(tDeleteOptions, gv.WithKind("DeleteOptions"))
	patchBody := b.ref(tPatch)

	ns, nsID := "", ""
	var nsParams []param
	if r.Namespaced {
		ns, nsID = "/namespaces/{namespace}", "Namespaced"
		nsParams = []param{pNamespace}
	}
	kind := r.GVK.Kind
	collection := prefix + ns + "/" + r.Resource
	item := collection + "/{name}"
	itemParams := append([]param{pName}, nsParams...)
	plural := r.Resource

	var out []pathItem
	coll := pathItem{path: collection, params: append(append([]param{}, nsParams...), pPretty)}
	if has(r.Verbs, "list") && r.List != nil {
		coll.ops = append(coll.ops, operation{method: "get", id: "list" + idGroup + nsID + kind, action: "list", gvk: r.GVK,
			description: "list or watch objects of kind " + kind, params: listParams, responses: map[int]*spec.Schema{200: &list}, list: true})
	}
	if has(r.Verbs, "create") {
		coll.ops = append(coll.ops, operation{method: "post", id: "create" + idGroup + nsID + kind, action: "post", gvk: r.GVK,
			description: "create " + articled(kind), params: writeParams, body: &obj, responses: map[int]*spec.Schema{200: &obj, 201: &obj, 202: &obj}})
	}
	if has(r.Verbs, "deletecollection") {
		coll.ops = append(coll.ops, operation{method: "delete", id: "delete" + idGroup + "Collection" + nsID + kind, action: "deletecollection", gvk: r.GVK,
			description: "delete collection of " + kind, params: deleteCollectionParams, body: &deleteOpts, responses: map[int]*spec.Schema{200: &status}})
	}
	if len(coll.ops) > 0 {
		out = append(out, coll)
	}

	one := pathItem{path: item, params: append(append([]param{}, itemParams...), pPretty)}
	one.params[0].description = "name of the " + kind
	if has(r.Verbs, "get") {
		one.ops = append(one.ops, operation{method: "get", id: "read" + idGroup + nsID + kind, action: "get", gvk: r.GVK,
			description: "read the specified " + kind, responses: map[int]*spec.Schema{200: &obj}})
	}
	if has(r.Verbs, "update") {
		one.ops = append(one.ops, operation{method: "put", id: "replace" + idGroup + nsID + kind, action: "put", gvk: r.GVK,
			description: "replace the specified " + kind, params: writeParams, body: &obj, responses: map[int]*spec.Schema{200: &obj, 201: &obj}})
	}
	if has(r.Verbs, "patch") {
		one.ops = append(one.ops, operation{method: "patch", id: "patch" + idGroup + nsID + kind, action: "patch", gvk: r.GVK,
			description: "partially update the specified " + kind, params: patchParams, body: &patchBody, patch: patchTypes, responses: map[int]*spec.Schema{200: &obj, 201: &obj}})
	}
	if has(r.Verbs, "delete") {
		deleted := &status
		if r.ReturnsDeleted {
			deleted = &obj
		}
		one.ops = append(one.ops, operation{method: "delete", id: "delete" + idGroup + nsID + kind, action: "delete", gvk: r.GVK,
			description: "delete " + articled(kind), params: deleteParams, body: &deleteOpts, responses: map[int]*spec.Schema{200: deleted, 202: deleted}})
	}
	if len(one.ops) > 0 {
		out = append(out, one)
	}

	if r.Namespaced && has(r.Verbs, "list") && r.List != nil {
		out = append(out, pathItem{path: prefix + "/" + plural, params: []param{pPretty}, ops: []operation{{
			method: "get", id: "list" + idGroup + kind + "ForAllNamespaces", action: "list", gvk: r.GVK,
			description: "list or watch objects of kind " + kind, params: listParams, responses: map[int]*spec.Schema{200: &list}, list: true,
		}}})
	}

	for _, sub := range r.Subresources {
		subObj := obj
		if sub.Object != nil {
			subObj = b.kind(typeOf(sub.Object), sub.GVK)
		}
		subGVK := sub.GVK
		if subGVK.Kind == "" {
			subGVK = r.GVK
		}
		name := kind + upperFirst(sub.Name)
		p := pathItem{path: item + "/" + sub.Name, params: append(append([]param{}, itemParams...), pPretty)}
		p.params[0].description = "name of the " + upperFirst(sub.Name)
		if has(sub.Verbs, "get") {
			p.ops = append(p.ops, operation{method: "get", id: "read" + idGroup + nsID + name, action: "get", gvk: subGVK,
				description: "read " + sub.Name + " of the specified " + kind, responses: map[int]*spec.Schema{200: &subObj}})
		}
		if has(sub.Verbs, "create") {
			p.ops = append(p.ops, operation{method: "post", id: "create" + idGroup + nsID + name, action: "post", gvk: subGVK,
				description: "create " + sub.Name + " of " + articled(kind), params: writeParams, body: &subObj, responses: map[int]*spec.Schema{200: &subObj, 201: &subObj, 202: &subObj}})
		}
		if has(sub.Verbs, "update") {
			p.ops = append(p.ops, operation{method: "put", id: "replace" + idGroup + nsID + name, action: "put", gvk: subGVK,
				description: "replace " + sub.Name + " of the specified " + kind, params: writeParams, body: &subObj, responses: map[int]*spec.Schema{200: &subObj, 201: &subObj}})
		}
		if has(sub.Verbs, "patch") {
			p.ops = append(p.ops, operation{method: "patch", id: "patch" + idGroup + nsID + name, action: "patch", gvk: subGVK,
				description: "partially update " + sub.Name + " of the specified " + kind, params: patchParams, body: &patchBody, patch: patchTypes, responses: map[int]*spec.Schema{200: &subObj, 201: &subObj}})
		}
		if len(p.ops) > 0 {
			out = append(out, p)
		}
	}
	return out
}

func articled(kind string) string {
	if strings.ContainsRune("AEIOU", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

func typeOf(v any) reflect.Type {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func gvkExtension(gvk schema.GroupVersionKind) map[string]string {
	return map[string]string{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}
}

// v2Path renders a path item for Swagger 2.0.
func v2Path(p pathItem, tag string) spec.PathItem {
	var item spec.PathItem
	for _, pp := range p.params {
		item.Parameters = append(item.Parameters, v2Param(pp))
	}
	for _, o := range p.ops {
		op := &spec.Operation{OperationProps: spec.OperationProps{
			Description: o.description, ID: o.id, Tags: []string{tag}, Schemes: []string{"https"},
			Consumes: []string{"*/*"}, Produces: produces,
		}}
		if o.patch != nil {
			op.Consumes = o.patch
		}
		if o.list {
			op.Produces = listProduces
		}
		if o.body != nil {
			bp := spec.Parameter{ParamProps: spec.ParamProps{Name: "body", In: "body", Schema: o.body}}
			bp.Required = o.method != "delete"
			op.Parameters = append(op.Parameters, bp)
		}
		for _, qp := range o.params {
			op.Parameters = append(op.Parameters, v2Param(qp))
		}
		op.Responses = &spec.Responses{ResponsesProps: spec.ResponsesProps{StatusCodeResponses: map[int]spec.Response{
			401: {ResponseProps: spec.ResponseProps{Description: "Unauthorized"}},
		}}}
		for code, s := range o.responses {
			op.Responses.StatusCodeResponses[code] = spec.Response{ResponseProps: spec.ResponseProps{Description: statusText(code), Schema: s}}
		}
		op.AddExtension("x-kubernetes-action", o.action)
		op.AddExtension("x-kubernetes-group-version-kind", gvkExtension(o.gvk))
		switch o.method {
		case "get":
			item.Get = op
		case "put":
			item.Put = op
		case "post":
			item.Post = op
		case "patch":
			item.Patch = op
		case "delete":
			item.Delete = op
		}
	}
	return item
}

func v2Param(p param) spec.Parameter {
	out := spec.Parameter{ParamProps: spec.ParamProps{Name: p.name, In: p.in, Description: p.description, Required: p.in == "path"}}
	out.Type = p.typ
	out.UniqueItems = p.unique
	return out
}

// v3Path renders a path item for OpenAPI 3.0.
func v3Path(p pathItem, tag string) *spec3.Path {
	item := &spec3.Path{}
	for _, pp := range p.params {
		item.Parameters = append(item.Parameters, v3Param(pp))
	}
	for _, o := range p.ops {
		op := &spec3.Operation{OperationProps: spec3.OperationProps{Description: o.description, OperationId: o.id, Tags: []string{tag}}}
		if o.body != nil {
			types := []string{"*/*"}
			if o.patch != nil {
				types = o.patch
			}
			op.RequestBody = &spec3.RequestBody{RequestBodyProps: spec3.RequestBodyProps{Content: mediaTypes(types, o.body), Required: o.method != "delete"}}
		}
		for _, qp := range o.params {
			op.Parameters = append(op.Parameters, v3Param(qp))
		}
		op.Responses = &spec3.Responses{ResponsesProps: spec3.ResponsesProps{StatusCodeResponses: map[int]*spec3.Response{
			401: {ResponseProps: spec3.ResponseProps{Description: "Unauthorized"}},
		}}}
		for code, s := range o.responses {
			types := produces
			if o.list {
				types = listProduces
			}
			op.Responses.StatusCodeResponses[code] = &spec3.Response{ResponseProps: spec3.ResponseProps{Description: statusText(code), Content: mediaTypes(types, s)}}
		}
		op.AddExtension("x-kubernetes-action", o.action)
		op.AddExtension("x-kubernetes-group-version-kind", gvkExtension(o.gvk))
		switch o.method {
		case "get":
			item.Get = op
		case "put":
			item.Put = op
		case "post":
			item.Post = op
		case "patch":
			item.Patch = op
		case "delete":
			item.Delete = op
		}
	}
	return item
}

func v3Param(p param) *spec3.Parameter {
	s := &spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{p.typ}, UniqueItems: p.unique}}
	return &spec3.Parameter{ParameterProps: spec3.ParameterProps{Name: p.name, In: p.in, Description: p.description, Required: p.in == "path", Schema: s}}
}

func mediaTypes(types []string, s *spec.Schema) map[string]*spec3.MediaType {
	out := map[string]*spec3.MediaType{}
	for _, t := range types {
		out[t] = &spec3.MediaType{MediaTypeProps: spec3.MediaTypeProps{Schema: s}}
	}
	return out
}

func statusText(code int) string {
	switch code {
	case 200:
		return "OK"
	case 201:
		return "Created"
	case 202:
		return "Accepted"
	}
	return ""
}
