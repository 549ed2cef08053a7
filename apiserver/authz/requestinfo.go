package authz

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/fields"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/params"
)

// namespaceSubresources are subresources of a Namespace itself, not
// resources inside it.
var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// RequestAttributes parses what r asks for the way kube-apiserver's
// RequestInfoFactory does: /api/<v>/... and /apis/<g>/<v>/... name a
// resource (discovery paths such as /api/v1 and /apis/apps/v1 do not);
// everything else is a non-resource URL whose verb is the lower-case
// HTTP method.
func RequestAttributes(r *http.Request, u *authn.User) Attributes {
	a := Attributes{User: u, Path: r.URL.Path, Verb: strings.ToLower(r.Method)}
	parts := splitPath(r.URL.Path)
	if len(parts) < 3 || (parts[0] != "api" && parts[0] != "apis") {
		return a
	}
	prefix := parts[0]
	parts = parts[1:]
	if prefix == "apis" {
		if len(parts) < 3 {
			return a
		}
		a.APIGroup, parts = parts[0], parts[1:]
	}
	a.ResourceRequest = true
	a.APIVersion, parts = parts[0], parts[1:]
	pathVerb := ""
	if parts[0] == "watch" || parts[0] == "proxy" {
		pathVerb, parts = parts[0], parts[1:]
		if len(parts) == 0 {
			// Kubernetes cannot tell the kind either; nothing is
			// served there, and the request is authorized as the
			// bare verb on no resource.
			a.Verb = pathVerb
			return a
		}
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		a.Namespace = parts[1]
		if len(parts) > 2 && !namespaceSubresources[parts[2]] {
			parts = parts[2:]
		}
	}
	if len(parts) >= 3 && pathVerb != "proxy" {
		a.Subresource = parts[2]
	}
	if len(parts) >= 2 {
		a.Name = parts[1]
	}
	a.Resource = parts[0]
	q := r.URL.Query()
	watch := params.Bool(q, "watch")
	switch {
	case pathVerb == "proxy":
		a.Verb = pathVerb
	case pathVerb == "watch":
		a.Verb = ResourceVerb(http.MethodGet, a.Name, true)
	default:
		a.Verb = ResourceVerb(r.Method, a.Name, watch)
	}
	// A list or watch of one object by name is authorized as a request
	// for that name, so resourceNames rules can grant it.
	if a.Name == "" && (a.Verb == "list" || a.Verb == "watch") {
		if fs := q.Get("fieldSelector"); fs != "" {
			if sel, err := fields.ParseSelector(fs); err == nil {
				if name, ok := sel.RequiresExactMatch("metadata.name"); ok && len(path.IsValidPathSegmentName(name)) == 0 {
					a.Name = name
				}
			}
		}
	}
	return a
}

// ResourceVerb is the verb of a resource request, as Kubernetes names it:
// a GET is a get of one object, a list of many or a watch; a DELETE of no
// name is a deletecollection. Other methods are their lower-case names.
func ResourceVerb(method, name string, watch bool) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watch:
			return "watch"
		case name == "":
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if name == "" {
			return "deletecollection"
		}
		return "delete"
	}
	return strings.ToLower(method)
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}
