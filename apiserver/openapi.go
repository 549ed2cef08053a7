package apiserver

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"bonsai.dev/bonsai/apiserver/openapi"
)

// openAPIHandlers holds each server's OpenAPI handler by its resource table,
// so that whoever changes the table can invalidate the documents without
// the handler living in Server itself.
var openAPIHandlers sync.Map // *registry → *openapi.Handler

// openAPI returns the server's OpenAPI handler, created on first use and
// forgotten when the server shuts down.
func (s *Server) openAPI() *openapi.Handler {
	h := openapi.NewHandler(s.reg.openAPIResources)
	if v, loaded := openAPIHandlers.LoadOrStore(s.reg, h); loaded {
		return v.(*openapi.Handler)
	}
	context.AfterFunc(s.ctx, func() { openAPIHandlers.Delete(s.reg) })
	return h
}

// invalidateOpenAPI makes the next OpenAPI request rebuild the documents;
// call it after adding or removing resources.
func (reg *registry) invalidateOpenAPI() {
	if v, ok := openAPIHandlers.Load(reg); ok {
		v.(*openapi.Handler).Invalidate()
	}
}

// openAPIResources describes the table for the OpenAPI documents.
func (reg *registry) openAPIResources() []openapi.Resource {
	var out []openapi.Resource
	for _, g := range reg.groups {
		for _, v := range g.versions {
			for _, r := range reg.resourcesIn(schema.GroupVersion{Group: g.name, Version: v}) {
				out = append(out, r.openAPI())
			}
		}
	}
	return out
}

func (r *resource) openAPI() openapi.Resource {
	out := openapi.Resource{
		GVK: r.gvk(), ListKind: r.listKind, Resource: r.gvr.Resource, Namespaced: r.namespaced,
		Verbs: r.verbs(), Object: r.newObject(), List: r.newList(), ReturnsDeleted: r.returnDeleted,
	}
	for _, sub := range r.subresources {
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
