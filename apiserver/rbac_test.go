package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
)

// rbacEnv is a server under RBAC (the default mode) with static tokens
// for "admin" (system:masters) and "jane" and "bob" (no groups), and an
// admin clientset.
type rbacEnv struct {
	s     *Server
	st    store.Store
	admin kubernetes.Interface
	ctx   context.Context
}

func newRBACEnv(t *testing.T, mode string) *rbacEnv {
	t.Helper()
	s, st := newAuthServer(t, "admin-token,admin,1,system:masters\njane-token,jane,2\nbob-token,bob,3\n", mode)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &rbacEnv{s: s, st: st, admin: e2eClient(t, s, adminUser()), ctx: ctx}
}

// newAuthServer is a server that authenticates the static tokens of
// tokenFile and authorizes in mode; both stop when the test ends.
func newAuthServer(t *testing.T, tokenFile, mode string) (*Server, store.Store) {
	t.Helper()
	return newAuthServerWith(t, tokenFile, Config{AuthorizationMode: mode})
}

// newAuthServerWith is newAuthServer with more of the server's Config:
// the store, authenticator and addresses are filled in.
func newAuthServerWith(t *testing.T, tokenFile string, cfg Config) (*Server, store.Store) {
	t.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tf, err := authn.ParseTokenFile(strings.NewReader(tokenFile), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Authenticator = st, authn.Union{tf}
	cfg.AdvertiseAddress, cfg.SecurePort = netip.MustParseAddr("127.0.0.1"), 6443
	s, err := New(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); st.Close() })
	// Ready first, as a client waits for /readyz: until the stored CRDs
	// are served, /healthz and /readyz say 500.
	for deadline := time.Now().Add(30 * time.Second); !s.crs.synced.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server did not load its CustomResourceDefinitions within 30s")
		}
	}
	return s, st
}

// bind has the admin bind role (of kind Role or ClusterRole) to subjects
// in ns.
func (e *rbacEnv) bind(t *testing.T, ns, name, kind, role string, subjects ...rbacv1.Subject) {
	t.Helper()
	if _, err := e.admin.RbacV1().RoleBindings(ns).Create(e.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects:   subjects,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func adminUser() *authn.User {
	return &authn.User{Name: "admin", Groups: []string{authn.GroupMasters, authn.GroupAuthenticated}}
}

func userNamed(name string, groups ...string) *authn.User {
	return &authn.User{Name: name, Groups: append(groups, authn.GroupAuthenticated)}
}

// e2eClient is a clientset acting as u through the whole handler chain.
func e2eClient(t *testing.T, s *Server, u *authn.User) kubernetes.Interface {
	t.Helper()
	return kubernetes.NewForConfigOrDie(s.ClientConfig(u))
}

// serveAs sends one request with a bearer token over the server's
// handler, as a remote client would.
func serveAs(s *Server, method, path, token string, body string, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

func statusOf(t *testing.T, rec *httptest.ResponseRecorder) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("not a Status (%d): %s", rec.Code, rec.Body)
	}
	return st
}

// eventually retries f until it returns nil: the authorizer's caches
// follow the store's watch, as kube-apiserver's follow informers.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestForbiddenMessages(t *testing.T) {
	e := newRBACEnv(t, "")
	for _, tc := range []struct {
		method, path string
		want         string
		name         string
	}{
		{"GET", "/api/v1/namespaces/default/pods", `pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "default"`, ""},
		{"GET", "/api/v1/nodes", `nodes is forbidden: User "jane" cannot list resource "nodes" in API group "" at the cluster scope`, ""},
		{"GET", "/api/v1/nodes?watch=true", `nodes is forbidden: User "jane" cannot watch resource "nodes" in API group "" at the cluster scope`, ""},
		{"GET", "/apis/apps/v1/namespaces/default/deployments/web/scale", `deployments.apps "web" is forbidden: User "jane" cannot get resource "deployments/scale" in API group "apps" in the namespace "default"`, "web"},
		{"DELETE", "/api/v1/namespaces/default/configmaps", `configmaps is forbidden: User "jane" cannot deletecollection resource "configmaps" in API group "" in the namespace "default"`, ""},
		{"GET", "/api/v1/namespaces/default/secrets?fieldSelector=metadata.name%3Dtls", `secrets "tls" is forbidden: User "jane" cannot list resource "secrets" in API group "" in the namespace "default"`, "tls"},
		{"GET", "/metrics", `forbidden: User "jane" cannot get path "/metrics"`, ""},
		{"GET", "/api/v1/namespaces/default", `namespaces "default" is forbidden: User "jane" cannot get resource "namespaces" in API group "" in the namespace "default"`, "default"},
	} {
		rec := serveAs(e.s, tc.method, tc.path, "jane-token", "", nil)
		if rec.Code != http.StatusForbidden {
			t.Errorf("%s %s: %d, want 403: %s", tc.method, tc.path, rec.Code, rec.Body)
			continue
		}
		st := statusOf(t, rec)
		if st.Message != tc.want || st.Reason != metav1.StatusReasonForbidden {
			t.Errorf("%s %s:\n got %q (%s)\nwant %q", tc.method, tc.path, st.Message, st.Reason, tc.want)
		}
		if st.Details == nil || st.Details.Name != tc.name {
			t.Errorf("%s %s: details %+v, want name %q", tc.method, tc.path, st.Details, tc.name)
		}
	}
	// What every authenticated user may do (system:discovery,
	// system:basic-user, system:public-info-viewer).
	for _, p := range []string{"/api", "/api/v1", "/apis", "/apis/rbac.authorization.k8s.io/v1", "/version", "/healthz", "/readyz", "/openapi/v2", "/openapi/v3"} {
		if rec := serveAs(e.s, "GET", p, "jane-token", "", nil); rec.Code != http.StatusOK {
			t.Errorf("GET %s as jane: %d, want 200", p, rec.Code)
		}
	}
	// Anonymous requests are still refused before authorization.
	if rec := serveAs(e.s, "GET", "/api/v1/pods", "", "", nil); rec.Code != http.StatusUnauthorized {
		t.Errorf("anonymous list: %d, want 401", rec.Code)
	}
}

func TestRBACBindings(t *testing.T) {
	e := newRBACEnv(t, "")
	ctx := e.ctx
	mustNS(t, e.admin, "team")
	jane := e2eClient(t, e.s, userNamed("jane"))
	_, err := e.admin.RbacV1().Roles("team").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods", "pods/log"}},
			{Verbs: []string{"get", "list", "update"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"allowed"}},
			{Verbs: []string{"update"}, APIGroups: []string{"apps"}, Resources: []string{"*/scale"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"allowed", "other"} {
		if _, err := e.admin.CoreV1().ConfigMaps("team").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := jane.CoreV1().Pods("team").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list before the binding: %v, want forbidden", err)
	}
	bind := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "jane-reads"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"}},
	}
	if _, err := e.admin.RbacV1().RoleBindings("team").Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "list pods once bound", func() error {
		_, err := jane.CoreV1().Pods("team").List(ctx, metav1.ListOptions{})
		return err
	})
	check := func(what string, err error, allowed bool) {
		t.Helper()
		if allowed && err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("%s: %v, want allowed", what, err)
		}
		if !allowed && !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
	_, err = jane.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	check("list pods in another namespace", err, false)
	check("delete a pod", jane.CoreV1().Pods("team").Delete(ctx, "p", metav1.DeleteOptions{}), false)
	_, err = jane.CoreV1().ConfigMaps("team").Get(ctx, "allowed", metav1.GetOptions{})
	check("get the named configmap", err, true)
	_, err = jane.CoreV1().ConfigMaps("team").Get(ctx, "other", metav1.GetOptions{})
	check("get another configmap", err, false)
	_, err = jane.CoreV1().ConfigMaps("team").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=allowed"})
	check("list the named configmap by field selector", err, true)
	_, err = jane.CoreV1().ConfigMaps("team").List(ctx, metav1.ListOptions{})
	check("list every configmap", err, false)
	rec := serveAs(e.s, "GET", "/api/v1/namespaces/team/pods/p/log", "jane-token", "", nil)
	if rec.Code == http.StatusForbidden {
		t.Errorf("pods/log: 403, want allowed by the subresource rule: %s", rec.Body)
	}
	rec = serveAs(e.s, "PUT", "/apis/apps/v1/namespaces/team/deployments/web/scale", "jane-token", `{}`, nil)
	if rec.Code == http.StatusForbidden {
		t.Errorf("deployments/scale: 403, want allowed by */scale: %s", rec.Body)
	}
	rec = serveAs(e.s, "GET", "/apis/apps/v1/namespaces/team/deployments/web/scale", "jane-token", "", nil)
	if rec.Code != http.StatusForbidden {
		t.Errorf("get deployments/scale: %d, want 403 (only update granted)", rec.Code)
	}

	// A group subject, and a ClusterRole bound in one namespace only.
	if _, err := e.admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "secret-reader"},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"secrets"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ops := e2eClient(t, e.s, userNamed("bob", "ops"))
	e.bind(t, "team", "ops-secrets", "ClusterRole", "secret-reader", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "ops"})
	eventually(t, "group binding", func() error {
		_, err := ops.CoreV1().Secrets("team").List(ctx, metav1.ListOptions{})
		return err
	})
	_, err = ops.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	check("ClusterRole bound by a RoleBinding, another namespace", err, false)

	// A service account subject without a namespace is in the binding's.
	sa := e2eClient(t, e.s, &authn.User{Name: "system:serviceaccount:team:builder", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:team", authn.GroupAuthenticated}})
	if _, err := e.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "builder-secrets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "secret-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "builder", Namespace: "team"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "service account cluster binding", func() error {
		_, err := sa.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
		return err
	})

	// Deleting the binding takes the access away.
	if err := e.admin.RbacV1().RoleBindings("team").Delete(ctx, "jane-reads", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "access gone with the binding", func() error {
		_, err := jane.CoreV1().Pods("team").List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return nil
		}
		return err
	})
	// So does deleting the role a binding refers to.
	if err := e.admin.RbacV1().ClusterRoles().Delete(ctx, "secret-reader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "access gone with the role", func() error {
		_, err := ops.CoreV1().Secrets("team").List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return nil
		}
		return err
	})
}

func mustNS(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRBACValidation(t *testing.T) {
	e := newRBACEnv(t, "")
	ctx := e.ctx
	for _, tc := range []struct {
		role *rbacv1.Role
		want string
	}{
		{&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}}}}, "rules[0].verbs: Required value: verbs must contain at least one value"},
		{&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, Resources: []string{"pods"}}}}, "rules[0].apiGroups: Required value: resource rules must supply at least one api group"},
		{&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/x"}}}}, `rules[0].nonResourceURLs: Invalid value: ["/x"]: namespaced rules cannot apply to non-resource URLs`},
	} {
		_, err := e.admin.RbacV1().Roles("default").Create(ctx, tc.role, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create: %v, want invalid with %q", err, tc.want)
		}
	}
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "x"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "view"},
	}
	if _, err := e.admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"`) {
		t.Errorf("ClusterRoleBinding to a Role: %v", err)
	}
	b.RoleRef.Kind = "ClusterRole"
	got, err := e.admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.RoleRef.Name = "edit"
	if _, err := e.admin.RbacV1().ClusterRoleBindings().Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cannot change roleRef") {
		t.Errorf("roleRef change: %v", err)
	}

	// rbac/v1's defaults: a roleRef or a User or Group subject without
	// an apiGroup is rbac.authorization.k8s.io's (the conformance suite's
	// webhook tests bind roles so); a ServiceAccount's stays the core
	// group.
	rb, err := e.admin.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "defaulted"},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: "default"},
			{Kind: rbacv1.UserKind, Name: "alice"}, {Kind: rbacv1.GroupKind, Name: "devs"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("binding without apiGroups: %v", err)
	}
	if rb.RoleRef.APIGroup != rbacv1.GroupName || rb.Subjects[0].APIGroup != "" || rb.Subjects[1].APIGroup != rbacv1.GroupName || rb.Subjects[2].APIGroup != rbacv1.GroupName {
		t.Errorf("defaults: roleRef %+v subjects %+v", rb.RoleRef, rb.Subjects)
	}
	crb, err := e.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "defaulted"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"},
	}, metav1.CreateOptions{})
	if err != nil || crb.RoleRef.APIGroup != rbacv1.GroupName {
		t.Errorf("ClusterRoleBinding without a roleRef apiGroup: %v %+v", err, crb)
	}
}

func TestRBACEscalationPrevention(t *testing.T) {
	e := newRBACEnv(t, "")
	ctx := e.ctx
	mustNS(t, e.admin, "team")
	jane := e2eClient(t, e.s, userNamed("jane"))
	if _, err := e.admin.RbacV1().Roles("team").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "role-writer"},
		Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"create", "update", "get"}, APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}},
			{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.bind(t, "team", "jane-writes-roles", "Role", "role-writer", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"})
	podReader := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}
	eventually(t, "a role within jane's own rights", func() error {
		_, err := jane.RbacV1().Roles("team").Create(ctx, podReader, metav1.CreateOptions{})
		return err
	})
	secrets := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "secrets"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "delete"}, APIGroups: []string{""}, Resources: []string{"secrets"}}}}
	_, err := jane.RbacV1().Roles("team").Create(ctx, secrets, metav1.CreateOptions{})
	want := `roles.rbac.authorization.k8s.io "secrets" is forbidden: user "jane" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" + `{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete"]}`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("escalating role:\n got %v\nwant %s", err, want)
	}
	adminBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "jane-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"}},
	}
	if _, err := jane.RbacV1().RoleBindings("team").Create(ctx, adminBinding, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "is attempting to grant RBAC permissions not currently held") {
		t.Errorf("binding to cluster-admin: %v, want forbidden", err)
	}
	// A binding to a role whose rules jane holds is fine.
	own := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bob-reads"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}},
	}
	if _, err := jane.RbacV1().RoleBindings("team").Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Errorf("binding within jane's rights: %v", err)
	}
	// The escalate and bind verbs lift the checks.
	if _, err := e.admin.RbacV1().Roles("team").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "escalator"},
		Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"escalate"}, APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles"}},
			{Verbs: []string{"bind"}, APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, ResourceNames: []string{"cluster-admin"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.bind(t, "team", "jane-escalates", "Role", "escalator", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"})
	eventually(t, "escalate verb", func() error {
		_, err := jane.RbacV1().Roles("team").Create(ctx, secrets, metav1.CreateOptions{})
		return err
	})
	if _, err := jane.RbacV1().RoleBindings("team").Create(ctx, adminBinding, metav1.CreateOptions{}); err != nil {
		t.Errorf("bind verb on cluster-admin: %v", err)
	}
}

func TestAccessReviews(t *testing.T) {
	e := newRBACEnv(t, "")
	ctx := e.ctx
	mustNS(t, e.admin, "team")
	e.bind(t, "team", "jane-view", "ClusterRole", "system:aggregate-to-view", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"})
	jane := e2eClient(t, e.s, userNamed("jane"))
	ssar := func(verb, ns string) *authorizationv1.SelfSubjectAccessReview {
		t.Helper()
		r, err := jane.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "pods"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	eventually(t, "can-i list pods", func() error {
		if r := ssar("list", "team"); !r.Status.Allowed {
			return errorf("not allowed: %+v", r.Status)
		}
		return nil
	})
	if r := ssar("list", "team"); !strings.Contains(r.Status.Reason, `RoleBinding "jane-view"`) {
		t.Errorf("reason %q does not name the binding", r.Status.Reason)
	}
	if r := ssar("delete", "team"); r.Status.Allowed {
		t.Errorf("can-i delete pods: allowed")
	}
	if r := ssar("list", "default"); r.Status.Allowed {
		t.Errorf("can-i list pods in default: allowed")
	}
	if _, err := jane.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "exactly one of nonResourceAttributes or resourceAttributes must be specified") {
		t.Errorf("empty review: %v", err)
	}
	nr, err := jane.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}},
	}, metav1.CreateOptions{})
	if err != nil || !nr.Status.Allowed {
		t.Errorf("can-i get /healthz: %v %+v", err, nr)
	}

	// SubjectAccessReview needs its own permission: jane has none.
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "jane", ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "team", Verb: "get", Resource: "pods"}}}
	if _, err := jane.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("jane's SubjectAccessReview: %v, want forbidden", err)
	}
	got, err := e.admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil || !got.Status.Allowed {
		t.Errorf("admin's review of jane: %v %+v", err, got)
	}
	sar.Spec.User = ""
	if _, err := e.admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at least one of user or group must be specified") {
		t.Errorf("review of nobody: %v", err)
	}
	lsar := &authorizationv1.LocalSubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Namespace: "team"}, Spec: authorizationv1.SubjectAccessReviewSpec{User: "jane", ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "pods"}}}
	if _, err := e.admin.AuthorizationV1().LocalSubjectAccessReviews("team").Create(ctx, lsar, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must match metadata.namespace") {
		t.Errorf("local review of another namespace: %v", err)
	}
	lsar.Spec.ResourceAttributes.Namespace = "team"
	if got, err := e.admin.AuthorizationV1().LocalSubjectAccessReviews("team").Create(ctx, lsar, metav1.CreateOptions{}); err != nil || !got.Status.Allowed {
		t.Errorf("local review: %v %+v", err, got)
	}

	rules, err := jane.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "team"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var listsPods, selfReviews, discovery bool
	for _, r := range rules.Status.ResourceRules {
		listsPods = listsPods || (contains(r.Resources, "pods") && contains(r.Verbs, "list"))
		selfReviews = selfReviews || contains(r.Resources, "selfsubjectaccessreviews")
	}
	for _, r := range rules.Status.NonResourceRules {
		discovery = discovery || contains(r.NonResourceURLs, "/apis/*")
	}
	if !listsPods || !selfReviews || !discovery || rules.Status.Incomplete {
		t.Errorf("rules review misses jane's rules: %+v", rules.Status)
	}

	who, err := jane.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || who.Status.UserInfo.Username != "jane" || !contains(who.Status.UserInfo.Groups, authn.GroupAuthenticated) {
		t.Errorf("whoami: %v %+v", err, who)
	}

	tr, err := e.admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "jane-token"}}, metav1.CreateOptions{})
	if err != nil || !tr.Status.Authenticated || tr.Status.User.Username != "jane" || tr.Status.User.UID != "2" {
		t.Errorf("token review: %v %+v", err, tr)
	}
	tr, err = e.admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "nope"}}, metav1.CreateOptions{})
	if err != nil || tr.Status.Authenticated || tr.Status.Error == "" {
		t.Errorf("token review of a bad token: %v %+v", err, tr)
	}
	if _, err := jane.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "bob-token"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("jane's token review: %v, want forbidden", err)
	}
	// The reviews only answer create.
	if rec := serveAs(e.s, "GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "admin-token", "", nil); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("list of reviews: %d, want 405", rec.Code)
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func TestImpersonation(t *testing.T) {
	e := newRBACEnv(t, "")
	ctx := e.ctx
	whoami := func(token string, h http.Header) (*httptest.ResponseRecorder, authenticationv1.UserInfo) {
		rec := serveAs(e.s, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", token, `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`, h)
		var r authenticationv1.SelfSubjectReview
		_ = json.Unmarshal(rec.Body.Bytes(), &r)
		return rec, r.Status.UserInfo
	}
	rec, _ := whoami("jane-token", http.Header{"Impersonate-User": {"bob"}})
	if rec.Code != http.StatusForbidden || statusOf(t, rec).Message != `users "bob" is forbidden: User "jane" cannot impersonate resource "users" in API group "" at the cluster scope` {
		t.Errorf("jane as bob: %d %s", rec.Code, rec.Body)
	}
	rec, ui := whoami("admin-token", http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": {"ops", "dev"}, "Impersonate-Extra-Scopes": {"view"}})
	if rec.Code != http.StatusCreated || ui.Username != "bob" || strings.Join(ui.Groups, ",") != "ops,dev,system:authenticated" || len(ui.Extra["scopes"]) != 1 {
		t.Errorf("admin as bob: %d %+v %s", rec.Code, ui, rec.Body)
	}
	// The impersonated user's own rights apply.
	rec = serveAs(e.s, "GET", "/api/v1/namespaces/default/pods", "admin-token", "", http.Header{"Impersonate-User": {"bob"}})
	if rec.Code != http.StatusForbidden || !strings.Contains(statusOf(t, rec).Message, `User "bob" cannot list resource "pods"`) {
		t.Errorf("admin as bob lists pods: %d %s", rec.Code, rec.Body)
	}
	rec, _ = whoami("admin-token", http.Header{"Impersonate-Group": {"ops"}})
	if rec.Code != http.StatusBadRequest || !strings.Contains(statusOf(t, rec).Message, "without impersonating a user") {
		t.Errorf("group without user: %d %s", rec.Code, rec.Body)
	}
	// A ServiceAccount is impersonated through the serviceaccounts
	// resource, and gets its groups.
	if _, err := e.admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "impersonate-builder"},
		Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{"builder"}},
			{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"bob"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "jane-impersonates"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "impersonate-builder"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "jane as builder", func() error {
		rec, ui := whoami("jane-token", http.Header{"Impersonate-User": {"system:serviceaccount:default:builder"}})
		if rec.Code != http.StatusCreated {
			return errorf("%d %s", rec.Code, rec.Body)
		}
		if strings.Join(ui.Groups, ",") != "system:serviceaccounts,system:serviceaccounts:default,system:authenticated" {
			return errorf("groups %v", ui.Groups)
		}
		return nil
	})
	if rec, _ := whoami("jane-token", http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": {"system:masters"}}); rec.Code != http.StatusForbidden || !strings.Contains(statusOf(t, rec).Message, `groups "system:masters" is forbidden`) {
		t.Errorf("jane as bob in system:masters: %d %s", rec.Code, rec.Body)
	}
}

func TestNodeAuthorizer(t *testing.T) {
	e := newRBACEnv(t, "")
	ctx := e.ctx
	for _, n := range []string{"a", "b"} {
		if _, err := e.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s-" + n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c-" + n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p-" + n},
			Spec: corev1.PodSpec{
				NodeName:       n,
				Containers:     []corev1.Container{{Name: "c", Image: "busybox", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c-" + n}}}}}},
				Volumes:        []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s-" + n}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "dev", ResourceClaimName: ptr.To("rc-" + n)}},
			},
		}
		if _, err := e.admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node := e2eClient(t, e.s, &authn.User{Name: "system:node:a", Groups: []string{"system:nodes", authn.GroupAuthenticated}})
	eventually(t, "node a reads its pod's secret", func() error {
		_, err := node.CoreV1().Secrets("default").Get(ctx, "s-a", metav1.GetOptions{})
		return err
	})
	if _, err := node.CoreV1().ConfigMaps("default").Get(ctx, "c-a", metav1.GetOptions{}); err != nil {
		t.Errorf("node a reads its pod's configmap: %v", err)
	}
	_, err := node.CoreV1().Secrets("default").Get(ctx, "s-b", metav1.GetOptions{})
	want := `secrets "s-b" is forbidden: User "system:node:a" cannot get resource "secrets" in API group "" in the namespace "default": no relationship found between node 'a' and this object`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("node a reads node b's secret:\n got %v\nwant %s", err, want)
	}
	// The kubelet reads its pods' ResourceClaims to prepare them, only
	// those.
	if _, err := node.ResourceV1().ResourceClaims("default").Get(ctx, "rc-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node a gets its pod's ResourceClaim: %v, want allowed (and not found)", err)
	}
	if _, err := node.ResourceV1().ResourceClaims("default").Get(ctx, "rc-b", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node a gets node b's pod's ResourceClaim: %v, want forbidden", err)
	}
	if _, err := node.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node a lists ResourceClaims: %v, want forbidden", err)
	}
	// The kubelet keeps its own CSINode, never another node's.
	if _, err := node.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("node a creates its CSINode: %v", err)
	}
	_, err = node.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{})
	if want := `csinodes.storage.k8s.io "b" is forbidden: node "a" is not allowed to modify CSINode "b"`; !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("node a creates node b's CSINode:\n got %v\nwant %s", err, want)
	}
	if _, err := e.admin.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := node.StorageV1().CSINodes().Delete(ctx, "b", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node a deletes node b's CSINode: %v, want forbidden", err)
	}
	// Its DRA drivers publish ResourceSlices of node a, not of others.
	slice := func(name, node string) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "dra.example.com", NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	}
	own, err := node.ResourceV1().ResourceSlices().Create(ctx, slice("sa", "a"), metav1.CreateOptions{})
	if err != nil {
		t.Errorf("node a publishes its ResourceSlice: %v", err)
	} else {
		own.Spec.NodeName = ptr.To("b")
		if _, err := node.ResourceV1().ResourceSlices().Update(ctx, own, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("node a moves its ResourceSlice to node b: %v, want forbidden", err)
		}
	}
	if _, err := node.ResourceV1().ResourceSlices().Create(ctx, slice("sb", "b"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node a publishes a ResourceSlice of node b: %v, want forbidden", err)
	}
	if _, err := e.admin.ResourceV1().ResourceSlices().Create(ctx, slice("sb", "b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := node.ResourceV1().ResourceSlices().Delete(ctx, "sb", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node a deletes node b's ResourceSlice: %v, want forbidden", err)
	}
	if _, err := node.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node a lists secrets: %v", err)
	}
	if _, err := node.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=a"}); err != nil {
		t.Errorf("node a lists its pods: %v", err)
	}
	// NodeRestriction: only its own Node, Lease and pods.
	nb, err := node.CoreV1().Nodes().Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nb.Labels = map[string]string{"x": "y"}
	if _, err := node.CoreV1().Nodes().Update(ctx, nb, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `node "a" is not allowed to modify node "b"`) {
		t.Errorf("node a updates node b: %v", err)
	}
	na, _ := node.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
	na.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := node.CoreV1().Nodes().UpdateStatus(ctx, na, metav1.UpdateOptions{}); err != nil {
		t.Errorf("node a updates its own status: %v", err)
	}
	pb, _ := e.admin.CoreV1().Pods("default").Get(ctx, "p-b", metav1.GetOptions{})
	if _, err := node.CoreV1().Pods("default").UpdateStatus(ctx, pb, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `node "a" can only update pod status for pods with spec.nodeName set to itself`) {
		t.Errorf("node a updates p-b's status: %v", err)
	}
	pa, _ := e.admin.CoreV1().Pods("default").Get(ctx, "p-a", metav1.GetOptions{})
	if _, err := node.CoreV1().Pods("default").UpdateStatus(ctx, pa, metav1.UpdateOptions{}); err != nil {
		t.Errorf("node a updates p-a's status: %v", err)
	}
	if err := node.CoreV1().Pods("default").Delete(ctx, "p-b", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `can only delete pods with spec.nodeName set to itself`) {
		t.Errorf("node a deletes p-b: %v", err)
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: corev1.PodSpec{NodeName: "a", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := node.CoreV1().Pods("default").Create(ctx, plain, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "can only create mirror pods") {
		t.Errorf("node a creates a plain pod: %v", err)
	}
	lease := func(name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease}}
	}
	if _, err := node.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease("a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("node a creates its lease: %v", err)
	}
	if _, err := node.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease("b"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "can only access node lease with the same name as the requesting node") {
		t.Errorf("node a creates node b's lease: %v", err)
	}
	// The graph follows the pods: once p-b moves... a new pod on a
	// referencing s-b gives a access to it.
	moved := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-a2"},
		Spec:       corev1.PodSpec{NodeName: "a", Containers: []corev1.Container{{Name: "c", Image: "busybox", Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s-b"}, Key: "k"}}}}}}},
	}
	if _, err := e.admin.CoreV1().Pods("default").Create(ctx, moved, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node a reads a secret its new pod references", func() error {
		_, err := node.CoreV1().Secrets("default").Get(ctx, "s-b", metav1.GetOptions{})
		return err
	})
	if err := e.admin.CoreV1().Pods("default").Delete(ctx, "p-a2", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "access goes with the pod", func() error {
		_, err := node.CoreV1().Secrets("default").Get(ctx, "s-b", metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return nil
		}
		return errorf("got %v", err)
	})
}

func TestDefaultPolicy(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := func() (*Server, kubernetes.Interface) {
		s, err := New(Config{Store: st, Authenticator: authn.Union{}})
		if err != nil {
			t.Fatal(err)
		}
		return s, e2eClient(t, s, adminUser())
	}
	s, admin := start()
	ctx := context.Background()
	for _, name := range []string{"cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user", "system:public-info-viewer", "system:node", "system:kube-scheduler", "system:kube-controller-manager", "system:node-proxier"} {
		if _, err := admin.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("default ClusterRole %s: %v", name, err)
		}
	}
	crb, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, "cluster-admin", metav1.GetOptions{})
	if err != nil || crb.Subjects[0].Name != "system:masters" {
		t.Fatalf("cluster-admin binding: %v %+v", err, crb)
	}
	view, _ := admin.RbacV1().ClusterRoles().Get(ctx, "view", metav1.GetOptions{})
	if view.AggregationRule == nil || view.Labels["rbac.authorization.k8s.io/aggregate-to-edit"] != "true" {
		t.Errorf("view: %+v", view)
	}
	// A default role that lost a rule gets it back on restart; one the
	// admin pinned with autoupdate=false keeps the change.
	disc, _ := admin.RbacV1().ClusterRoles().Get(ctx, "system:discovery", metav1.GetOptions{})
	disc.Rules = nil
	if _, err := admin.RbacV1().ClusterRoles().Update(ctx, disc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	basic, _ := admin.RbacV1().ClusterRoles().Get(ctx, "system:basic-user", metav1.GetOptions{})
	basic.Rules = basic.Rules[:1]
	basic.Annotations["rbac.authorization.kubernetes.io/autoupdate"] = "false"
	if _, err := admin.RbacV1().ClusterRoles().Update(ctx, basic, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s2, admin2 := start()
	defer s2.Shutdown()
	disc, _ = admin2.RbacV1().ClusterRoles().Get(ctx, "system:discovery", metav1.GetOptions{})
	restored := false
	for _, r := range disc.Rules {
		restored = restored || contains(r.NonResourceURLs, "/apis/*")
	}
	if !restored {
		t.Errorf("system:discovery not reconciled: %+v", disc.Rules)
	}
	basic, _ = admin2.RbacV1().ClusterRoles().Get(ctx, "system:basic-user", metav1.GetOptions{})
	if len(basic.Rules) != 1 {
		t.Errorf("pinned system:basic-user changed on restart: %+v", basic.Rules)
	}
}

func TestAuthorizationModes(t *testing.T) {
	e := newRBACEnv(t, AuthorizationAlwaysAllow)
	if rec := serveAs(e.s, "GET", "/api/v1/nodes", "jane-token", "", nil); rec.Code != http.StatusOK {
		t.Errorf("AlwaysAllow: jane lists nodes: %d %s", rec.Code, rec.Body)
	}
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(Config{Store: st, AuthorizationMode: "Webhook"}); err == nil || !strings.Contains(err.Error(), `unknown authorization mode "Webhook"`) {
		t.Errorf("unknown mode: %v", err)
	}
}

// TestRBACDiscovery: the RBAC and review groups are served, reviews as
// create-only.
func TestRBACDiscovery(t *testing.T) {
	e := newRBACEnv(t, "")
	rl, err := e.admin.Discovery().ServerResourcesForGroupVersion("authorization.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rl.APIResources {
		if r.Name == "selfsubjectaccessreviews" {
			found = true
			if strings.Join(r.Verbs, ",") != "create" {
				t.Errorf("selfsubjectaccessreviews verbs %v", r.Verbs)
			}
		}
	}
	if !found {
		t.Errorf("no selfsubjectaccessreviews in %+v", rl)
	}
	if _, err := e.admin.Discovery().ServerResourcesForGroupVersion("rbac.authorization.k8s.io/v1"); err != nil {
		t.Error(err)
	}
}

func TestBootstrapTokens(t *testing.T) {
	e := newRBACEnv(t, "")
	ctx := e.ctx
	mk := func(id, secret string, data map[string]string) {
		t.Helper()
		d := map[string]string{"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true"}
		for k, v := range data {
			d[k] = v
		}
		if _, err := e.admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id}, Type: "bootstrap.kubernetes.io/token", StringData: d,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	future, past := time.Now().Add(time.Hour).UTC().Format(time.RFC3339), time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	mk("abcdef", "0123456789abcdef", map[string]string{"expiration": future, "auth-extra-groups": "system:bootstrappers:bonsai:default-node-token,admins"})
	mk("expird", "0123456789abcdef", map[string]string{"expiration": past})
	mk("nouse1", "0123456789abcdef", map[string]string{"usage-bootstrap-authentication": "false"})
	whoami := func(token string) (int, authenticationv1.UserInfo) {
		rec := serveAs(e.s, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", token, `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`, nil)
		var r authenticationv1.SelfSubjectReview
		_ = json.Unmarshal(rec.Body.Bytes(), &r)
		return rec.Code, r.Status.UserInfo
	}
	code, ui := whoami("abcdef.0123456789abcdef")
	if code != http.StatusCreated || ui.Username != "system:bootstrap:abcdef" || strings.Join(ui.Groups, ",") != "system:bootstrappers,system:bootstrappers:bonsai:default-node-token,system:authenticated" {
		t.Errorf("valid token: %d %+v", code, ui)
	}
	for _, tok := range []string{"abcdef.0123456789abcdee", "expird.0123456789abcdef", "nouse1.0123456789abcdef", "nosuch.0123456789abcdef"} {
		if code, _ := whoami(tok); code != http.StatusUnauthorized {
			t.Errorf("token %s: %d, want 401", tok, code)
		}
	}
	// The static token file still answers for its own tokens.
	if code, ui := whoami("jane-token"); code != http.StatusCreated || ui.Username != "jane" {
		t.Errorf("static token: %d %+v", code, ui)
	}
	if err := e.admin.CoreV1().Secrets("kube-system").Delete(ctx, "bootstrap-token-abcdef", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, _ := whoami("abcdef.0123456789abcdef"); code != http.StatusUnauthorized {
		t.Errorf("deleted token: %d, want 401", code)
	}
}

// TestSimulatorPolicy: the node simulator, as its in-process user, may
// list the node Leases (it adopts them after a restart), and has no more
// than that beyond the node role: it cannot list Secrets.
func TestSimulatorPolicy(t *testing.T) {
	e := newRBACEnv(t, "")
	sim := kubernetes.NewForConfigOrDie(e.s.ClientConfig(&authn.User{Name: "system:bonsai-simulator", Groups: []string{authn.GroupAuthenticated}}))
	if _, err := sim.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(e.ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("simulator lists node leases: %v", err)
	}
	if _, err := sim.CoreV1().Secrets("kube-system").List(e.ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("simulator lists secrets: %v, want forbidden", err)
	}
}
