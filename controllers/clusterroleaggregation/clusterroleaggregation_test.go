package clusterroleaggregation

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

func TestAggregation(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true})
	inf := client.NewInformers(e.Config)
	c, err := New(Config{RESTConfig: e.Config, Informers: inf, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go c.Run(e.Ctx)
	cs := kubernetes.NewForConfigOrDie(e.Config)
	ctx := e.Ctx
	roles := cs.RbacV1().ClusterRoles()

	// The default view role gathers system:aggregate-to-view's rules, and
	// edit gathers view's.
	waitRules(t, roles, "view", func(r []rbacv1.PolicyRule) bool { return grants(r, "list", "pods") })
	waitRules(t, roles, "edit", func(r []rbacv1.PolicyRule) bool { return grants(r, "list", "pods") && grants(r, "create", "pods") })
	waitRules(t, roles, "admin", func(r []rbacv1.PolicyRule) bool { return grants(r, "create", "rolebindings") })

	agg := &rbacv1.ClusterRole{
		ObjectMeta:      metav1.ObjectMeta{Name: "monitoring"},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"aggregate-to-monitoring": "true"}}}},
	}
	if _, err := roles.Create(ctx, agg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets", Labels: map[string]string{"aggregate-to-monitoring": "true"}},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}},
	}
	if _, err := roles.Create(ctx, src, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRules(t, roles, "monitoring", func(r []rbacv1.PolicyRule) bool { return grants(r, "get", "widgets") })
	// A role that stops matching takes its rules out.
	src, _ = roles.Get(ctx, "widgets", metav1.GetOptions{})
	src.Labels = nil
	if _, err := roles.Update(ctx, src, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRules(t, roles, "monitoring", func(r []rbacv1.PolicyRule) bool { return len(r) == 0 })
}

func grants(rules []rbacv1.PolicyRule, verb, resource string) bool {
	for _, r := range rules {
		if has(r.Verbs, verb) && has(r.Resources, resource) {
			return true
		}
	}
	return false
}

func has(xs []string, x string) bool {
	for _, y := range xs {
		if y == x || y == "*" {
			return true
		}
	}
	return false
}

func waitRules(t *testing.T, roles interface {
	Get(context.Context, string, metav1.GetOptions) (*rbacv1.ClusterRole, error)
}, name string, ok func([]rbacv1.PolicyRule) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := roles.Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && ok(r.Rules) {
			return
		}
		if time.Now().After(deadline) {
			if r != nil {
				t.Fatalf("ClusterRole %s rules: %+v", name, r.Rules)
			}
			t.Fatalf("ClusterRole %s: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
