// Package coordination holds the kinds of coordination.k8s.io: their
// rules and table columns.
package coordination

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("coordination.k8s.io", "v1", "leases"), Kind: "Lease", Namespaced: true, Strategy: leaseStrategy{}, Printer: &leasePrinter},
	}
}

type leaseStrategy struct{ registry.DefaultStrategy }

func (leaseStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	l := obj.(*coordinationv1.Lease)
	var errs field.ErrorList
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "leaseDurationSeconds"), *d, "must be greater than 0"))
	}
	if t := l.Spec.LeaseTransitions; t != nil && *t < 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "leaseTransitions"), *t, "must be greater than or equal to 0"))
	}
	return errs
}

func (st leaseStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return st.Validate(w, obj)
}

var leasePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Holder", registry.TString, coordinationv1.LeaseSpec{}.SwaggerDoc()["holderIdentity"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		l := o.(*coordinationv1.Lease)
		return []any{l.Name, registry.StrOr(l.Spec.HolderIdentity, ""), registry.Age(l)}
	},
}
