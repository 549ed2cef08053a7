// Package authz decides whether an authenticated user may make a request:
// the attributes of a request (parsed as kube-apiserver's RequestInfo
// does), the authorizers (AlwaysAllow, system:masters, Node, RBAC) and
// their union, and the default RBAC policy the server creates on start.
// It reads roles, bindings and pods from caches the API server feeds; it
// never writes to the store and never touches the handler chain itself.
package authz

import (
	"context"
	"fmt"
	"strings"

	"bonsai.dev/bonsai/apiserver/authn"
)

// Attributes are what a request asks to do, as kube-apiserver's
// authorizer.Attributes.
type Attributes struct {
	User *authn.User
	Verb string
	// ResourceRequest: the request names a resource (/api/..., /apis/...);
	// otherwise Path is the non-resource URL.
	ResourceRequest bool
	APIGroup        string
	APIVersion      string
	Resource        string
	Subresource     string
	Namespace       string
	Name            string
	Path            string
}

// Decision is an authorizer's answer.
type Decision int

const (
	// NoOpinion lets the next authorizer decide; the last one's
	// NoOpinion is a denial.
	NoOpinion Decision = iota
	Allow
	Deny
)

// Authorizer decides on one request. reason says why (shown after the
// forbidden message when the request is denied).
type Authorizer interface {
	Authorize(ctx context.Context, a Attributes) (d Decision, reason string, err error)
}

// Union asks each authorizer in turn until one allows or denies.
type Union []Authorizer

func (u Union) Authorize(ctx context.Context, a Attributes) (Decision, string, error) {
	var reasons []string
	var errs []string
	for _, z := range u {
		d, reason, err := z.Authorize(ctx, a)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if reason != "" {
			reasons = append(reasons, reason)
		}
		if d != NoOpinion {
			return d, reason, nil
		}
	}
	if len(errs) > 0 {
		return NoOpinion, strings.Join(reasons, ", "), fmt.Errorf("%s", strings.Join(errs, ", "))
	}
	return NoOpinion, strings.Join(reasons, ", "), nil
}

// AlwaysAllow is --authorization-mode=AlwaysAllow.
type AlwaysAllow struct{}

func (AlwaysAllow) Authorize(context.Context, Attributes) (Decision, string, error) {
	return Allow, "", nil
}

// PrivilegedGroups allows every request of a member of system:masters,
// whatever RBAC says, as kube-apiserver does: the group cannot be locked
// out by a deleted binding.
type PrivilegedGroups struct{}

func (PrivilegedGroups) Authorize(_ context.Context, a Attributes) (Decision, string, error) {
	if a.User != nil && hasGroup(a.User, authn.GroupMasters) {
		return Allow, "", nil
	}
	return NoOpinion, "", nil
}

func hasGroup(u *authn.User, g string) bool {
	for _, x := range u.Groups {
		if x == g {
			return true
		}
	}
	return false
}

// ForbiddenMessage is the text after "<resource> is forbidden: " in
// Kubernetes' 403 answers.
func ForbiddenMessage(a Attributes) string {
	name := ""
	if a.User != nil {
		name = a.User.Name
	}
	if !a.ResourceRequest {
		return fmt.Sprintf("User %q cannot %s path %q", name, a.Verb, a.Path)
	}
	res := a.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	if a.Namespace != "" {
		return fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", name, a.Verb, res, a.APIGroup, a.Namespace)
	}
	return fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", name, a.Verb, res, a.APIGroup)
}
