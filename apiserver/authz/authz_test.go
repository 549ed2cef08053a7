package authz

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/authn"
)

func TestRequestAttributes(t *testing.T) {
	for _, tc := range []struct {
		method, url string
		want        Attributes
	}{
		{"GET", "/api", Attributes{Verb: "get", Path: "/api"}},
		{"GET", "/api/v1", Attributes{Verb: "get", Path: "/api/v1"}},
		{"GET", "/apis/apps/v1", Attributes{Verb: "get", Path: "/apis/apps/v1"}},
		{"POST", "/healthz", Attributes{Verb: "post", Path: "/healthz"}},
		{"GET", "/api/v1/pods", Attributes{ResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "pods", Path: "/api/v1/pods"}},
		{"GET", "/api/v1/namespaces/ns/pods?watch=1", Attributes{ResourceRequest: true, Verb: "watch", APIVersion: "v1", Namespace: "ns", Resource: "pods", Path: "/api/v1/namespaces/ns/pods"}},
		{"GET", "/api/v1/watch/namespaces/ns/pods/p", Attributes{ResourceRequest: true, Verb: "watch", APIVersion: "v1", Namespace: "ns", Resource: "pods", Name: "p", Path: "/api/v1/watch/namespaces/ns/pods/p"}},
		{"GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp", Attributes{ResourceRequest: true, Verb: "list", APIVersion: "v1", Namespace: "ns", Resource: "pods", Name: "p", Path: "/api/v1/namespaces/ns/pods"}},
		{"GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp,spec.nodeName%3Dn", Attributes{ResourceRequest: true, Verb: "list", APIVersion: "v1", Namespace: "ns", Resource: "pods", Name: "p", Path: "/api/v1/namespaces/ns/pods"}},
		{"GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name!%3Dp", Attributes{ResourceRequest: true, Verb: "list", APIVersion: "v1", Namespace: "ns", Resource: "pods", Path: "/api/v1/namespaces/ns/pods"}},
		{"POST", "/api/v1/namespaces/ns/pods/p/eviction", Attributes{ResourceRequest: true, Verb: "create", APIVersion: "v1", Namespace: "ns", Resource: "pods", Name: "p", Subresource: "eviction", Path: "/api/v1/namespaces/ns/pods/p/eviction"}},
		{"PATCH", "/apis/apps/v1/namespaces/ns/deployments/d/scale", Attributes{ResourceRequest: true, Verb: "patch", APIGroup: "apps", APIVersion: "v1", Namespace: "ns", Resource: "deployments", Name: "d", Subresource: "scale", Path: "/apis/apps/v1/namespaces/ns/deployments/d/scale"}},
		{"DELETE", "/apis/apps/v1/namespaces/ns/deployments", Attributes{ResourceRequest: true, Verb: "deletecollection", APIGroup: "apps", APIVersion: "v1", Namespace: "ns", Resource: "deployments", Path: "/apis/apps/v1/namespaces/ns/deployments"}},
		{"DELETE", "/apis/apps/v1/namespaces/ns/deployments/d", Attributes{ResourceRequest: true, Verb: "delete", APIGroup: "apps", APIVersion: "v1", Namespace: "ns", Resource: "deployments", Name: "d", Path: "/apis/apps/v1/namespaces/ns/deployments/d"}},
		// A namespace is in itself; its status and finalize are its
		// subresources, not resources inside it.
		{"GET", "/api/v1/namespaces/ns", Attributes{ResourceRequest: true, Verb: "get", APIVersion: "v1", Namespace: "ns", Resource: "namespaces", Name: "ns", Path: "/api/v1/namespaces/ns"}},
		{"PUT", "/api/v1/namespaces/ns/finalize", Attributes{ResourceRequest: true, Verb: "update", APIVersion: "v1", Namespace: "ns", Resource: "namespaces", Name: "ns", Subresource: "finalize", Path: "/api/v1/namespaces/ns/finalize"}},
		{"GET", "/api/v1/namespaces", Attributes{ResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "namespaces", Path: "/api/v1/namespaces"}},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", Attributes{ResourceRequest: true, Verb: "create", APIGroup: "authorization.k8s.io", APIVersion: "v1", Resource: "selfsubjectaccessreviews", Path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"}},
	} {
		got := RequestAttributes(httptest.NewRequest(tc.method, tc.url, nil), nil)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.url, diff)
		}
	}
}

func TestRuleAllows(t *testing.T) {
	res := func(verb, group, resource, sub, name string) Attributes {
		return Attributes{ResourceRequest: true, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub, Name: name}
	}
	for _, tc := range []struct {
		rule rbacv1.PolicyRule
		a    Attributes
		want bool
	}{
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}, res("get", "", "pods", "", "p"), true},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}, res("list", "", "pods", "", ""), false},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}, res("get", "apps", "pods", "", ""), false},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}, res("get", "", "pods", "log", ""), false},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods/log"}}, res("get", "", "pods", "log", ""), true},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods/log"}}, res("get", "", "pods", "", ""), false},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"*"}, Resources: []string{"*/status"}}, res("get", "apps", "deployments", "status", ""), true},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"*"}, Resources: []string{"*/status"}}, res("get", "apps", "deployments", "scale", ""), false},
		{rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}, res("escalate", "rbac.authorization.k8s.io", "roles", "", ""), true},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}}, res("get", "", "configmaps", "", "a"), true},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}}, res("get", "", "configmaps", "", "b"), false},
		{rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}}, res("list", "", "configmaps", "", ""), false},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}, Attributes{Verb: "get", Path: "/healthz"}, true},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}, Attributes{Verb: "get", Path: "/healthz/etcd"}, false},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz/*"}}, Attributes{Verb: "get", Path: "/healthz/etcd"}, true},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}, Attributes{Verb: "post", Path: "/healthz"}, false},
		// Resource rules never grant non-resource URLs, and back.
		{rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"*"}, Resources: []string{"*"}}, Attributes{Verb: "get", Path: "/metrics"}, false},
		{rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"*"}}, res("get", "", "pods", "", ""), false},
	} {
		if got := RuleAllows(tc.a, &tc.rule); got != tc.want {
			t.Errorf("%+v on %+v: %v, want %v", tc.rule, tc.a, got, tc.want)
		}
	}
}

func TestForbiddenMessage(t *testing.T) {
	u := &authn.User{Name: "jane"}
	for _, tc := range []struct {
		a    Attributes
		want string
	}{
		{Attributes{User: u, ResourceRequest: true, Verb: "list", Resource: "pods", Namespace: "default"}, `User "jane" cannot list resource "pods" in API group "" in the namespace "default"`},
		{Attributes{User: u, ResourceRequest: true, Verb: "get", APIGroup: "apps", Resource: "deployments", Subresource: "scale"}, `User "jane" cannot get resource "deployments/scale" in API group "apps" at the cluster scope`},
		{Attributes{User: u, Verb: "get", Path: "/metrics"}, `User "jane" cannot get path "/metrics"`},
	} {
		if got := ForbiddenMessage(tc.a); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestRBACIndex: bindings are found by user, group and service account,
// replaced and removed cleanly.
func TestRBACIndex(t *testing.T) {
	ctx := context.Background()
	z := NewRBAC()
	z.SetClusterRole(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}})
	bind := func(name string, subjects ...rbacv1.Subject) {
		z.SetRoleBinding(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "r"}, Subjects: subjects})
	}
	get := Attributes{ResourceRequest: true, Verb: "get", Resource: "pods", Namespace: "ns"}
	allowed := func(u *authn.User) bool {
		a := get
		a.User = u
		d, _, _ := z.Authorize(ctx, a)
		return d == Allow
	}
	jane, ops, sa := &authn.User{Name: "jane"}, &authn.User{Name: "x", Groups: []string{"ops"}}, &authn.User{Name: "system:serviceaccount:ns:b"}
	bind("one", rbacv1.Subject{Kind: "User", Name: "jane"}, rbacv1.Subject{Kind: "Group", Name: "ops"}, rbacv1.Subject{Kind: "ServiceAccount", Name: "b"})
	if !allowed(jane) || !allowed(ops) || !allowed(sa) {
		t.Fatalf("user %v group %v service account %v", allowed(jane), allowed(ops), allowed(sa))
	}
	bind("one", rbacv1.Subject{Kind: "User", Name: "jane"})
	if !allowed(jane) || allowed(ops) || allowed(sa) {
		t.Errorf("after replacing the binding: user %v group %v service account %v", allowed(jane), allowed(ops), allowed(sa))
	}
	z.DeleteBinding("ns", "one")
	if allowed(jane) {
		t.Errorf("allowed after the binding went")
	}
	bind("two", rbacv1.Subject{Kind: "User", Name: "jane"})
	z.DeleteClusterRole("r")
	d, reason, _ := z.Authorize(ctx, Attributes{User: jane, ResourceRequest: true, Verb: "get", Resource: "pods", Namespace: "ns"})
	if d != NoOpinion || reason != `RBAC: clusterrole.rbac.authorization.k8s.io "r" not found` {
		t.Errorf("missing role: %v %q", d, reason)
	}
}

// BenchmarkRBAC1000Bindings is the authorizer's cost for a user bound by
// one of 1,000 RoleBindings in the request's namespace.
func BenchmarkRBAC1000Bindings(b *testing.B) {
	z := NewRBAC()
	z.SetClusterRole(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}})
	for i := 0; i < 1000; i++ {
		z.SetRoleBinding(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("b", i), Namespace: "ns"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "r"}, Subjects: []rbacv1.Subject{{Kind: "User", Name: fmt.Sprint("user-", i)}}})
	}
	u := &authn.User{Name: "user-500", Groups: []string{"system:authenticated"}}
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/configmaps/c", nil)
	a := Union{PrivilegedGroups{}, NewNode(), z}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d, _, _ := a.Authorize(context.Background(), RequestAttributes(req, u)); d != Allow {
			b.Fatal("denied")
		}
	}
}

// TestRBACConcurrent: the store watch feeds the caches while requests
// read them (run with -race).
func TestRBACConcurrent(t *testing.T) {
	z, n := NewRBAC(), NewNode()
	z.SetClusterRole(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			z.SetRoleBinding(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("b", i%10), Namespace: "ns"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "r"}, Subjects: []rbacv1.Subject{{Kind: "User", Name: fmt.Sprint("u", i%7)}}})
			n.SetPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", i%10), Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: "a", ServiceAccountName: "sa"}})
			if i%3 == 0 {
				z.DeleteBinding("ns", fmt.Sprint("b", i%10))
				n.DeletePod("ns", fmt.Sprint("p", i%10))
			}
		}
	}()
	a := Union{PrivilegedGroups{}, n, z}
	node := &authn.User{Name: "system:node:a", Groups: []string{GroupNodes}}
	for {
		select {
		case <-done:
			return
		default:
		}
		a.Authorize(context.Background(), Attributes{User: &authn.User{Name: "u3"}, ResourceRequest: true, Verb: "get", Resource: "pods", Namespace: "ns"})
		a.Authorize(context.Background(), Attributes{User: node, ResourceRequest: true, Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "ns", Name: "sa"})
		z.RulesFor(&authn.User{Name: "u3"}, "ns")
	}
}
