package apiserver

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/auth/rbac/validation"

	"bonsai.dev/bonsai/apiserver/authz"
)

// ensureDefaultPolicy creates the default ClusterRoles and
// ClusterRoleBindings, and on every start adds to them what they lack
// (rules, subjects, labels, annotations, aggregation selectors) as
// kube-apiserver's RBAC bootstrap reconciler does. An admin keeps a
// changed default by annotating it rbac.authorization.kubernetes.io/
// autoupdate=false; nothing an admin added is ever removed.
func (s *Server) ensureDefaultPolicy(ctx context.Context) error {
	for _, want := range authz.DefaultClusterRoles() {
		err := s.ensureCurrent(ctx, want.DeepCopy(), gvr(rbacv1.GroupName, "v1", "clusterroles"), func(o runtime.Object) bool {
			have := o.(*rbacv1.ClusterRole)
			if have.Annotations[authz.AutoUpdateAnnotation] == "false" {
				return false
			}
			before := have.DeepCopy()
			mergeMeta(&have.ObjectMeta, &want.ObjectMeta)
			if want.AggregationRule != nil {
				if have.AggregationRule == nil {
					have.AggregationRule = &rbacv1.AggregationRule{}
				}
				for _, sel := range want.AggregationRule.ClusterRoleSelectors {
					found := false
					for _, h := range have.AggregationRule.ClusterRoleSelectors {
						if apiequality.Semantic.DeepEqual(h, sel) {
							found = true
						}
					}
					if !found {
						have.AggregationRule.ClusterRoleSelectors = append(have.AggregationRule.ClusterRoleSelectors, sel)
					}
				}
			} else if ok, missing := validation.Covers(have.Rules, want.Rules); !ok {
				have.Rules = append(have.Rules, missing...)
			}
			return !apiequality.Semantic.DeepEqual(before, have)
		})
		if err != nil {
			return err
		}
	}
	for _, want := range authz.DefaultClusterRoleBindings() {
		err := s.ensureCurrent(ctx, want.DeepCopy(), gvr(rbacv1.GroupName, "v1", "clusterrolebindings"), func(o runtime.Object) bool {
			have := o.(*rbacv1.ClusterRoleBinding)
			if have.Annotations[authz.AutoUpdateAnnotation] == "false" {
				return false
			}
			before := have.DeepCopy()
			mergeMeta(&have.ObjectMeta, &want.ObjectMeta)
			for _, sub := range want.Subjects {
				found := false
				for _, h := range have.Subjects {
					if h == sub {
						found = true
					}
				}
				if !found {
					have.Subjects = append(have.Subjects, sub)
				}
			}
			return !apiequality.Semantic.DeepEqual(before, have)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// mergeMeta adds want's labels and annotations that have lacks.
func mergeMeta(have, want *metav1.ObjectMeta) {
	for k, v := range want.Labels {
		if _, ok := have.Labels[k]; !ok {
			if have.Labels == nil {
				have.Labels = map[string]string{}
			}
			have.Labels[k] = v
		}
	}
	for k, v := range want.Annotations {
		if _, ok := have.Annotations[k]; !ok {
			if have.Annotations == nil {
				have.Annotations = map[string]string{}
			}
			have.Annotations[k] = v
		}
	}
}
