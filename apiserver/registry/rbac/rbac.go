// Package rbac holds the kinds of rbac.authorization.k8s.io: their rules
// and table columns.
package rbac

import (
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("rbac.authorization.k8s.io", "v1", "clusterrolebindings"), Kind: "ClusterRoleBinding", Strategy: rbacStrategy{}, Defaulter: defaultBinding, Printer: &bindingPrinter},
		{GVR: registry.GVR("rbac.authorization.k8s.io", "v1", "clusterroles"), Kind: "ClusterRole", Strategy: rbacStrategy{}, Printer: &rolePrinter},
		{GVR: registry.GVR("rbac.authorization.k8s.io", "v1", "rolebindings"), Kind: "RoleBinding", Namespaced: true, Strategy: rbacStrategy{}, Defaulter: defaultBinding, Printer: &bindingPrinter},
		{GVR: registry.GVR("rbac.authorization.k8s.io", "v1", "roles"), Kind: "Role", Namespaced: true, Strategy: rbacStrategy{}, Printer: &rolePrinter},
	}
}

// defaultBinding applies rbac/v1's defaults to a (Cluster)RoleBinding: a
// roleRef without an apiGroup is rbac.authorization.k8s.io's, and so is a
// User or Group subject's; a ServiceAccount subject's is the core group.
func defaultBinding(obj runtime.Object) {
	var ref *rbacv1.RoleRef
	var subjects []rbacv1.Subject
	switch o := obj.(type) {
	case *rbacv1.RoleBinding:
		ref, subjects = &o.RoleRef, o.Subjects
	case *rbacv1.ClusterRoleBinding:
		ref, subjects = &o.RoleRef, o.Subjects
	default:
		return
	}
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
	for i := range subjects {
		if s := &subjects[i]; s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

// rbacStrategy validates Roles, ClusterRoles and their bindings as
// Kubernetes' rbac validation does.
type rbacStrategy struct{ registry.DefaultStrategy }

func (rbacStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	switch o := obj.(type) {
	case *rbacv1.Role:
		return validateRules(o.Rules, true)
	case *rbacv1.ClusterRole:
		errs := validateRules(o.Rules, false)
		if o.AggregationRule != nil {
			p := field.NewPath("aggregationRule", "clusterRoleSelectors")
			if len(o.AggregationRule.ClusterRoleSelectors) == 0 {
				errs = append(errs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
			}
			for i, sel := range o.AggregationRule.ClusterRoleSelectors {
				if _, err := metav1.LabelSelectorAsSelector(&sel); err != nil {
					errs = append(errs, field.Invalid(p.Index(i), sel, err.Error()))
				}
			}
		}
		return errs
	case *rbacv1.RoleBinding:
		return validateBinding(o.RoleRef, o.Subjects, true)
	case *rbacv1.ClusterRoleBinding:
		return validateBinding(o.RoleRef, o.Subjects, false)
	}
	return nil
}

func (st rbacStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	var ref, oldRef rbacv1.RoleRef
	switch o := obj.(type) {
	case *rbacv1.RoleBinding:
		ref, oldRef = o.RoleRef, old.(*rbacv1.RoleBinding).RoleRef
	case *rbacv1.ClusterRoleBinding:
		ref, oldRef = o.RoleRef, old.(*rbacv1.ClusterRoleBinding).RoleRef
	default:
		return errs
	}
	if !apiequality.Semantic.DeepEqual(ref, oldRef) {
		errs = append(errs, field.Invalid(field.NewPath("roleRef"), ref, "cannot change roleRef"))
	}
	return errs
}

func validateRules(rules []rbacv1.PolicyRule, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	for i, r := range rules {
		p := field.NewPath("rules").Index(i)
		if len(r.Verbs) == 0 {
			errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(r.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(r.APIGroups) > 0 || len(r.Resources) > 0 || len(r.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(r.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(r.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(p.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if !slices.Contains(kinds, ref.Kind) {
		errs = append(errs, field.NotSupported(p.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	for i, s := range subjects {
		sp := field.NewPath("subjects").Index(i)
		if s.Name == "" {
			errs = append(errs, field.Required(sp.Child("name"), ""))
		}
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if s.APIGroup != "" {
				errs = append(errs, field.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{""}))
			}
			if !namespaced && s.Namespace == "" {
				errs = append(errs, field.Required(sp.Child("namespace"), ""))
			}
		case rbacv1.UserKind, rbacv1.GroupKind:
			if s.APIGroup != rbacv1.GroupName {
				errs = append(errs, field.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
			}
		default:
			errs = append(errs, field.NotSupported(sp.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
		}
	}
	return errs
}

var rolePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Created At", registry.TDate, registry.ObjectMetaDoc["creationTimestamp"])),
	Cells: func(o runtime.Object) []any {
		m := o.(metav1.Object)
		return []any{m.GetName(), createdAt(m)}
	},
}

func createdAt(m metav1.Object) string {
	t := m.GetCreationTimestamp()
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

var bindingPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Role", registry.TString, rbacv1.RoleBinding{}.SwaggerDoc()["roleRef"]),
		registry.AgeCol,
		registry.Wide(registry.Col("Users", registry.TString, "Users in the roleBinding")),
		registry.Wide(registry.Col("Groups", registry.TString, "Groups in the roleBinding")),
		registry.Wide(registry.Col("ServiceAccounts", registry.TString, "ServiceAccounts in the roleBinding")),
	),
	Cells: func(o runtime.Object) []any {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		switch b := o.(type) {
		case *rbacv1.RoleBinding:
			ref, subjects = b.RoleRef, b.Subjects
		case *rbacv1.ClusterRoleBinding:
			ref, subjects = b.RoleRef, b.Subjects
		}
		var users, groups, sas []string
		for _, s := range subjects {
			switch s.Kind {
			case rbacv1.UserKind:
				users = append(users, s.Name)
			case rbacv1.GroupKind:
				groups = append(groups, s.Name)
			case rbacv1.ServiceAccountKind:
				sas = append(sas, s.Namespace+"/"+s.Name)
			}
		}
		m := o.(metav1.Object)
		return []any{m.GetName(), ref.Kind + "/" + ref.Name, registry.Age(m), strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
	},
}
