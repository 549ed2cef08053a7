// Package authn turns a request's credentials into a user: client
// certificates signed by the cluster CA, bearer tokens from a static
// token file, and service-account tokens (JWTs it also issues, for the
// API server's TokenRequest). It decides who is asking, never what they
// may do.
package authn

import "net/http"

// Well-known groups, as Kubernetes names them.
const (
	GroupAuthenticated = "system:authenticated"
	GroupMasters       = "system:masters"
)

// User is an authenticated identity.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Authenticator authenticates one request. ok is false when the request
// carries no credentials this authenticator understands; err is set when it
// carries credentials that are invalid (the request is then rejected with
// 401 whatever other authenticators say).
type Authenticator interface {
	AuthenticateRequest(r *http.Request) (u *User, ok bool, err error)
}
