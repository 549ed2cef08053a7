package authz

import (
	"net/http"
	"net/url"
	"testing"
)

// FuzzRequestAttributes: any path and query parse without panicking, and
// a resource request always names its verb.
func FuzzRequestAttributes(f *testing.F) {
	for _, s := range []string{"/api/v1/pods", "/apis/apps/v1/namespaces/x/deployments/d/scale", "/api/v1/watch", "/apis/a/b/c", "/", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp"} {
		f.Add("GET", s)
	}
	f.Fuzz(func(t *testing.T, method, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		a := RequestAttributes(&http.Request{Method: method, URL: u}, nil)
		if a.ResourceRequest && a.Resource == "" && a.Verb != "watch" && a.Verb != "proxy" {
			t.Errorf("%s %s: resource request without a resource: %+v", method, raw, a)
		}
	})
}
