package apiserver

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/apiserver/authz"
)

// requestInfo is what a resource request asks for, parsed from its path and
// method the way kube-apiserver's RequestInfoFactory does.
type requestInfo struct {
	verb        string // get list watch create update patch delete deletecollection
	gvr         schema.GroupVersionResource
	namespace   string
	name        string
	subresource string
	// proxyPath is what follows .../<name>/proxy in a pods/proxy or
	// services/proxy request ("/" and below), passed on as the path.
	proxyPath string
}

// namespaceSubresources are the subresources of a namespace itself, which
// would otherwise read as a resource inside it.
var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// parseResourcePath parses /api/v1/... and /apis/<g>/<v>/... paths. ok is
// false for paths that are not resource requests (discovery and such).
func parseResourcePath(method, path string, watchParam bool) (requestInfo, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var ri requestInfo
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		ri.gvr.Version, parts = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		ri.gvr.Group, ri.gvr.Version, parts = parts[1], parts[2], parts[3:]
	default:
		return ri, false
	}
	watchPath := false
	if parts[0] == "watch" {
		watchPath, parts = true, parts[1:]
		if len(parts) == 0 {
			return ri, false
		}
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		if len(parts) > 2 && !namespaceSubresources[parts[2]] {
			ri.namespace, parts = parts[1], parts[2:]
		}
	}
	if len(parts) > 3 && parts[2] == "proxy" {
		// <resource>/<name>/proxy/<path>: the rest is the proxied path,
		// a trailing slash included.
		ri.proxyPath = "/" + strings.Join(parts[3:], "/")
		if strings.HasSuffix(path, "/") {
			ri.proxyPath += "/"
		}
		parts = parts[:3]
	}
	for _, p := range parts {
		if p == "" {
			return ri, false
		}
	}
	switch len(parts) {
	case 1:
		ri.gvr.Resource = parts[0]
	case 2:
		ri.gvr.Resource, ri.name = parts[0], parts[1]
	case 3:
		ri.gvr.Resource, ri.name, ri.subresource = parts[0], parts[1], parts[2]
	default:
		return ri, false
	}
	if ri.subresource == "proxy" {
		// The query is the proxied server's: a watch parameter in it
		// does not make the request a watch.
		watchParam = false
	}
	ri.verb = authz.ResourceVerb(method, ri.name, watchPath || watchParam)
	return ri, true
}
