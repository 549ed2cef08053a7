package apiserver

import (
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The RBAC kinds print as kube-apiserver prints them: roles with their
// creation time, bindings with their role and (wide) subjects.
func init() {
	for _, r := range []string{"roles", "clusterroles"} {
		printers[schema.GroupResource{Group: rbacv1.GroupName, Resource: r}] = rolePrinter
	}
	for _, r := range []string{"rolebindings", "clusterrolebindings"} {
		printers[schema.GroupResource{Group: rbacv1.GroupName, Resource: r}] = bindingPrinter
	}
}

var rolePrinter = printer{
	Columns: cols(nameCol, col("Created At", tDate, objectMetaDoc["creationTimestamp"])),
	Cells: func(o runtime.Object) []any {
		m, _ := metaOf(o)
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

var bindingPrinter = printer{
	Columns: cols(nameCol,
		col("Role", tString, rbacv1.RoleBinding{}.SwaggerDoc()["roleRef"]),
		ageCol,
		wide(col("Users", tString, "Users in the roleBinding")),
		wide(col("Groups", tString, "Groups in the roleBinding")),
		wide(col("ServiceAccounts", tString, "ServiceAccounts in the roleBinding")),
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
		m, _ := metaOf(o)
		return []any{m.GetName(), ref.Kind + "/" + ref.Name, age(m), strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
	},
}
