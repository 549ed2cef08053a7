package authz

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"

	"bonsai.dev/bonsai/apiserver/authn"
)

// RBAC evaluates Roles, ClusterRoles, RoleBindings and
// ClusterRoleBindings held in memory. The API server feeds it from store
// watches (Set*/Delete*/Reset); a request costs map lookups by subject,
// whatever the number of bindings.
type RBAC struct {
	mu           sync.RWMutex
	roles        map[nsName]*rbacv1.Role
	clusterRoles map[string]*rbacv1.ClusterRole
	// bindings are RoleBindings (ns set) and ClusterRoleBindings (ns "").
	bindings map[nsName]*binding
	// bySubject indexes bindings by namespace ("" for cluster bindings)
	// and subject.
	bySubject map[string]map[subjectKey][]*binding
}

type nsName struct{ ns, name string }

// subjectKey is a user name (ServiceAccount subjects become their user
// name) or a group name.
type subjectKey struct {
	group bool
	name  string
}

type binding struct {
	ns, name string
	roleRef  rbacv1.RoleRef
	subjects []subjectKey
}

// NewRBAC is an empty RBAC authorizer: it allows nothing until fed.
func NewRBAC() *RBAC {
	z := &RBAC{}
	z.Reset()
	return z
}

// Reset forgets everything (before a re-list).
func (z *RBAC) Reset() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.roles = map[nsName]*rbacv1.Role{}
	z.clusterRoles = map[string]*rbacv1.ClusterRole{}
	z.bindings = map[nsName]*binding{}
	z.bySubject = map[string]map[subjectKey][]*binding{}
}

func (z *RBAC) SetRole(r *rbacv1.Role) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.roles[nsName{r.Namespace, r.Name}] = r
}

func (z *RBAC) DeleteRole(ns, name string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	delete(z.roles, nsName{ns, name})
}

func (z *RBAC) SetClusterRole(r *rbacv1.ClusterRole) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.clusterRoles[r.Name] = r
}

func (z *RBAC) DeleteClusterRole(name string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	delete(z.clusterRoles, name)
}

func (z *RBAC) SetRoleBinding(b *rbacv1.RoleBinding) {
	z.setBinding(b.Namespace, b.Name, b.RoleRef, b.Subjects)
}

func (z *RBAC) SetClusterRoleBinding(b *rbacv1.ClusterRoleBinding) {
	z.setBinding("", b.Name, b.RoleRef, b.Subjects)
}

// DeleteBinding removes a RoleBinding (ns set) or ClusterRoleBinding.
func (z *RBAC) DeleteBinding(ns, name string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.unindex(nsName{ns, name})
}

func (z *RBAC) setBinding(ns, name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
	b := &binding{ns: ns, name: name, roleRef: ref}
	for _, s := range subjects {
		if k, ok := subjectOf(s, ns); ok {
			b.subjects = append(b.subjects, k)
		}
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.unindex(nsName{ns, name})
	z.bindings[nsName{ns, name}] = b
	idx := z.bySubject[ns]
	if idx == nil {
		idx = map[subjectKey][]*binding{}
		z.bySubject[ns] = idx
	}
	for _, k := range b.subjects {
		idx[k] = append(idx[k], b)
	}
}

func (z *RBAC) unindex(key nsName) {
	old := z.bindings[key]
	if old == nil {
		return
	}
	delete(z.bindings, key)
	idx := z.bySubject[key.ns]
	for _, k := range old.subjects {
		list := idx[k]
		for i, b := range list {
			if b == old {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(idx, k)
		} else {
			idx[k] = list
		}
	}
}

// subjectOf is the index key of a binding subject, as RBAC's
// appliesToUser matches it: a ServiceAccount without a namespace in a
// RoleBinding is in the binding's namespace.
func subjectOf(s rbacv1.Subject, bindingNS string) (subjectKey, bool) {
	switch s.Kind {
	case rbacv1.UserKind:
		return subjectKey{name: s.Name}, true
	case rbacv1.GroupKind:
		return subjectKey{group: true, name: s.Name}, true
	case rbacv1.ServiceAccountKind:
		ns := s.Namespace
		if ns == "" {
			ns = bindingNS
		}
		if ns == "" {
			return subjectKey{}, false
		}
		return subjectKey{name: "system:serviceaccount:" + ns + ":" + s.Name}, true
	}
	return subjectKey{}, false
}

// visit calls f with each binding that applies to u, cluster bindings
// first, then those of namespace ns, until f returns false.
func (z *RBAC) visit(u *authn.User, ns string, f func(b *binding) bool) {
	scopes := []string{""}
	if ns != "" {
		scopes = append(scopes, ns)
	}
	for _, scope := range scopes {
		idx := z.bySubject[scope]
		if len(idx) == 0 {
			continue
		}
		for _, b := range idx[subjectKey{name: u.Name}] {
			if !f(b) {
				return
			}
		}
		for _, g := range u.Groups {
			for _, b := range idx[subjectKey{group: true, name: g}] {
				if !f(b) {
					return
				}
			}
		}
	}
}

// rulesOf is the rules of a binding's role, or an error if it is
// missing (as Kubernetes reports it in a denial's reason).
func (z *RBAC) rulesOf(b *binding) ([]rbacv1.PolicyRule, error) {
	switch b.roleRef.Kind {
	case "ClusterRole":
		if r := z.clusterRoles[b.roleRef.Name]; r != nil {
			return r.Rules, nil
		}
		return nil, fmt.Errorf("clusterrole.rbac.authorization.k8s.io %q not found", b.roleRef.Name)
	case "Role":
		if b.ns != "" {
			if r := z.roles[nsName{b.ns, b.roleRef.Name}]; r != nil {
				return r.Rules, nil
			}
		}
		return nil, fmt.Errorf("role.rbac.authorization.k8s.io %q not found", b.roleRef.Name)
	}
	return nil, fmt.Errorf("unknown roleRef kind %q", b.roleRef.Kind)
}

// Authorize allows a request that a rule bound to the user allows.
func (z *RBAC) Authorize(_ context.Context, a Attributes) (Decision, string, error) {
	if a.User == nil {
		return NoOpinion, "", nil
	}
	z.mu.RLock()
	defer z.mu.RUnlock()
	var allowedBy *binding
	var errs []string
	z.visit(a.User, a.Namespace, func(b *binding) bool {
		rules, err := z.rulesOf(b)
		if err != nil {
			errs = append(errs, err.Error())
			return true
		}
		for i := range rules {
			if RuleAllows(a, &rules[i]) {
				allowedBy = b
				return false
			}
		}
		return true
	})
	if allowedBy != nil {
		kind, where := "ClusterRoleBinding", ""
		if allowedBy.ns != "" {
			kind, where = "RoleBinding", fmt.Sprintf(" in namespace %q", allowedBy.ns)
		}
		return Allow, fmt.Sprintf("RBAC: allowed by %s %q of %s %q to %s%s", kind, allowedBy.name, allowedBy.roleRef.Kind, allowedBy.roleRef.Name, subjectText(a.User), where), nil
	}
	if len(errs) > 0 {
		return NoOpinion, "RBAC: " + joinErrs(errs), nil
	}
	return NoOpinion, "", nil
}

func subjectText(u *authn.User) string {
	if strings.HasPrefix(u.Name, "system:serviceaccount:") {
		return fmt.Sprintf("ServiceAccount %q", strings.TrimPrefix(u.Name, "system:serviceaccount:"))
	}
	return fmt.Sprintf("User %q", u.Name)
}

func joinErrs(errs []string) string {
	if len(errs) == 1 {
		return errs[0]
	}
	return "[" + strings.Join(errs, ", ") + "]"
}

// RulesFor lists the rules bound to u in namespace ns (cluster bindings
// included), and what could not be resolved.
func (z *RBAC) RulesFor(u *authn.User, ns string) ([]rbacv1.PolicyRule, []error) {
	z.mu.RLock()
	defer z.mu.RUnlock()
	var rules []rbacv1.PolicyRule
	var errs []error
	z.visit(u, ns, func(b *binding) bool {
		r, err := z.rulesOf(b)
		if err != nil {
			errs = append(errs, err)
			return true
		}
		rules = append(rules, r...)
		return true
	})
	return rules, errs
}

// ClusterRoles lists the ClusterRoles (for aggregation and tests).
func (z *RBAC) ClusterRoles() []*rbacv1.ClusterRole {
	z.mu.RLock()
	defer z.mu.RUnlock()
	out := make([]*rbacv1.ClusterRole, 0, len(z.clusterRoles))
	for _, r := range z.clusterRoles {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RuleAllows says whether rule grants the request, with Kubernetes'
// matching: "*" verbs, groups and resources; "*/sub" and "res/sub" for
// subresources; resourceNames; non-resource URLs with a trailing "*".
func RuleAllows(a Attributes, rule *rbacv1.PolicyRule) bool {
	if !matches(rule.Verbs, a.Verb) {
		return false
	}
	if !a.ResourceRequest {
		for _, u := range rule.NonResourceURLs {
			if u == rbacv1.NonResourceAll || u == a.Path || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.Path, strings.TrimSuffix(u, "*"))) {
				return true
			}
		}
		return false
	}
	if !matches(rule.APIGroups, a.APIGroup) {
		return false
	}
	if !resourceMatches(rule.Resources, a.Resource, a.Subresource) {
		return false
	}
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, n := range rule.ResourceNames {
		if n == a.Name {
			return true
		}
	}
	return false
}

func matches(list []string, x string) bool {
	for _, v := range list {
		if v == "*" || v == x {
			return true
		}
	}
	return false
}

func resourceMatches(list []string, resource, sub string) bool {
	for _, r := range list {
		if r == rbacv1.ResourceAll {
			return true
		}
		if sub == "" {
			if r == resource {
				return true
			}
			continue
		}
		if len(r) == len(resource)+1+len(sub) && strings.HasPrefix(r, resource) && r[len(resource)] == '/' && strings.HasSuffix(r, sub) {
			return true
		}
		if len(r) == len(sub)+2 && strings.HasPrefix(r, "*/") && strings.HasSuffix(r, sub) {
			return true
		}
	}
	return false
}
