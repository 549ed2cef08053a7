package authz

import (
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/fields"

	"bonsai.dev/bonsai/apiserver/authn"
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
	if parts[0] == "watch" || parts[0] == "proxy" {
		if len(parts) < 2 {
			// Kubernetes cannot tell the kind either; nothing is
			// served there, and the request is authorized as the
			// bare verb on no resource.
			a.Verb = parts[0]
			return a
		}
		a.Verb, parts = parts[0], parts[1:]
	} else {
		switch r.Method {
		case http.MethodPost:
			a.Verb = "create"
		case http.MethodGet, http.MethodHead:
			a.Verb = "get"
		case http.MethodPut:
			a.Verb = "update"
		case http.MethodPatch:
			a.Verb = "patch"
		case http.MethodDelete:
			a.Verb = "delete"
		default:
			a.Verb = ""
		}
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		a.Namespace = parts[1]
		if len(parts) > 2 && !namespaceSubresources[parts[2]] {
			parts = parts[2:]
		}
	}
	if len(parts) >= 3 && a.Verb != "proxy" {
		a.Subresource = parts[2]
	}
	if len(parts) >= 2 {
		a.Name = parts[1]
	}
	a.Resource = parts[0]
	if a.Name == "" && a.Verb == "get" {
		q := r.URL.Query()
		a.Verb = "list"
		if w, err := strconv.ParseBool(q.Get("watch")); err == nil && w {
			a.Verb = "watch"
		}
		// A list or watch of one object by name is authorized as a
		// request for that name, so resourceNames rules can grant it.
		if fs := q.Get("fieldSelector"); fs != "" {
			if sel, err := fields.ParseSelector(fs); err == nil {
				if name, ok := sel.RequiresExactMatch("metadata.name"); ok && len(path.IsValidPathSegmentName(name)) == 0 {
					a.Name = name
				}
			}
		}
	}
	if a.Name == "" && a.Verb == "delete" {
		a.Verb = "deletecollection"
	}
	return a
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}
