// Package storagemigration holds the kind of storagemigration.k8s.io/v1:
// StorageVersionMigrations (with status), which ask for every stored
// object of one resource to be written again (after an encryption key
// rotation, say), with kube-apiserver's validation.
package storagemigration

import (
	"strings"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Group is the API group's name.
const Group = "storagemigration.k8s.io"

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR(Group, "v1", "storageversionmigrations"), Kind: "StorageVersionMigration", Subresources: []string{"status"},
			Strategy: strategy{}, Printer: registry.DefaultPrinter},
	}
}

type strategy struct{ registry.DefaultStrategy }

func (strategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validateSpec(&obj.(*storagemigrationv1.StorageVersionMigration).Spec)
}

func (strategy) ValidateUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	s, was := &obj.(*storagemigrationv1.StorageVersionMigration).Spec, &old.(*storagemigrationv1.StorageVersionMigration).Spec
	errs := validateSpec(s)
	if !equality.Semantic.DeepEqual(*s, *was) {
		errs = append(errs, field.Invalid(field.NewPath("spec"), *s, "field is immutable"))
	}
	return errs
}

func validateSpec(s *storagemigrationv1.StorageVersionMigrationSpec) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec", "resource")
	if s.Resource.Resource == "" {
		errs = append(errs, field.Required(p.Child("resource"), "resource is required to be set"))
	} else if msgs := validation.IsDNS1035Label(s.Resource.Resource); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("resource"), s.Resource.Resource, strings.Join(msgs, ",")))
	}
	if s.Resource.Group != "" {
		if msgs := validation.IsDNS1123Subdomain(s.Resource.Group); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("group"), s.Resource.Group, strings.Join(msgs, ",")))
		}
	}
	return errs
}

// ValidateStatusUpdate: valid conditions, status.resourceVersion set
// once, Succeeded and Failed never both true nor taken back.
func (strategy) ValidateStatusUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	n, o := obj.(*storagemigrationv1.StorageVersionMigration), old.(*storagemigrationv1.StorageVersionMigration)
	p := field.NewPath("status")
	errs := metav1validation.ValidateConditions(n.Status.Conditions, p.Child("conditions"))
	if o.Status.ResourceVersion != "" && o.Status.ResourceVersion != n.Status.ResourceVersion {
		errs = append(errs, field.Invalid(p.Child("resourceVersion"), n.Status.ResourceVersion, "field is immutable"))
	}
	succeeded, failed := IsTrue(n, storagemigrationv1.MigrationSucceeded), IsTrue(n, storagemigrationv1.MigrationFailed)
	if succeeded && failed {
		errs = append(errs, field.Invalid(p.Child("conditions"), n.Status.Conditions, "Both success and failed conditions cannot be true at the same time"))
	}
	if IsTrue(o, storagemigrationv1.MigrationSucceeded) && !succeeded {
		errs = append(errs, field.Invalid(p.Child("conditions"), n.Status.Conditions, "Success condition cannot be set to false once it is true"))
	}
	if IsTrue(o, storagemigrationv1.MigrationFailed) && !failed {
		errs = append(errs, field.Invalid(p.Child("conditions"), n.Status.Conditions, "Failed condition cannot be set to false once it is true"))
	}
	return errs
}

// IsTrue reports whether the migration's condition t is True.
func IsTrue(m *storagemigrationv1.StorageVersionMigration, t storagemigrationv1.MigrationConditionType) bool {
	c := meta.FindStatusCondition(m.Status.Conditions, string(t))
	return c != nil && c.Status == metav1.ConditionTrue
}
