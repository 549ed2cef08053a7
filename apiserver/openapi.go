package apiserver

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"bonsai.dev/bonsai/apiserver/openapi"
)

// openAPIResources describes the table, custom resources included, for
// the OpenAPI documents.
func (s *Server) openAPIResources() []openapi.Resource {
	var out []openapi.Resource
	for _, reg := range s.registries() {
		for _, g := range reg.groups {
			for _, v := range g.versions {
				for _, r := range reg.resourcesIn(schema.GroupVersion{Group: g.name, Version: v}) {
					out = append(out, r.openAPI())
				}
			}
		}
	}
	return out
}

func (r *resource) openAPI() openapi.Resource {
	out := openapi.Resource{
		GVK: r.gvk(), ListKind: r.listKind, Resource: r.gvr.Resource, Namespaced: r.namespaced,
		Verbs: r.verbs(), Object: r.newObject(), ReturnsDeleted: r.returnDeleted,
	}
	if !r.createOnly {
		out.List = r.newList()
	}
	if r.custom != nil {
		out.Schema = r.custom.OpenAPI()
		if out.Schema == nil {
			out.Schema = &spec.Schema{}
		}
	}
	for _, sub := range r.subresources {
		if sub == "log" || connectSubresources[sub] {
			continue // streams, not objects: nothing the schema can say
		}
		gvk := subKind(r, sub)
		sr := openapi.Subresource{Name: sub, GVK: gvk, Verbs: subresourceInfo[sub].verbs}
		if gvk != r.gvk() {
			obj, err := scheme.Scheme.New(gvk)
			if err != nil {
				continue // a kind the scheme lacks cannot be described
			}
			sr.Object = obj
		}
		out.Subresources = append(out.Subresources, sr)
	}
	return out
}
