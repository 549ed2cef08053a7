// Package params reads a request's query parameters as kube-apiserver's
// parameter codec does (k8s.io/apimachinery's conversions from []string
// into ListOptions, PodLogOptions and the other options), so that every
// client's spelling means what it means to Kubernetes: the Python client
// sends watch=True.
package params

import (
	"net/url"
	"strings"
)

// Bool is a boolean parameter: false when absent; otherwise its first
// value is false only when it is "0" or "false" in any case, and true
// for anything else, the empty value included.
func Bool(q url.Values, name string) bool {
	v, ok := q[name]
	return ok && len(v) > 0 && truthy(v[0])
}

// BoolPtr is Bool for an optional field: nil when absent.
func BoolPtr(q url.Values, name string) *bool {
	v, ok := q[name]
	if !ok || len(v) == 0 {
		return nil
	}
	b := truthy(v[0])
	return &b
}

func truthy(v string) bool { return v != "0" && !strings.EqualFold(v, "false") }
