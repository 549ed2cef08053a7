// Package policy holds the kinds of policy: their rules and table
// columns.
package policy

import (
	"fmt"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("policy", "v1", "poddisruptionbudgets"), Kind: "PodDisruptionBudget", Namespaced: true, ShortNames: []string{"pdb"}, Subresources: []string{"status"},
			Strategy: pdbStrategy{}, Printer: &pdbPrinter},
	}
}

type pdbStrategy struct{ registry.GenerationStrategy }

func (pdbStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	pdb := obj.(*policyv1.PodDisruptionBudget)
	p := field.NewPath("spec")
	var errs field.ErrorList
	if pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable != nil {
		errs = append(errs, field.Invalid(p, pdb.Spec, "minAvailable and maxUnavailable cannot be both set"))
	}
	for name, v := range map[string]*intstr.IntOrString{"minAvailable": pdb.Spec.MinAvailable, "maxUnavailable": pdb.Spec.MaxUnavailable} {
		if v == nil {
			continue
		}
		if v.Type == intstr.Int && v.IntVal < 0 {
			errs = append(errs, field.Invalid(p.Child(name), v.IntVal, "must be greater than or equal to 0"))
		}
		if v.Type == intstr.String {
			var pct int
			if _, err := fmt.Sscanf(v.StrVal, "%d%%", &pct); err != nil || !strings.HasSuffix(v.StrVal, "%") {
				errs = append(errs, field.Invalid(p.Child(name), v.StrVal, "a valid percent string must be a numeric string followed by an ending '%'"))
			} else if pct < 0 || pct > 100 {
				errs = append(errs, field.Invalid(p.Child(name), v.StrVal, "must not be greater than 100%"))
			}
		}
	}
	if pdb.Spec.Selector != nil {
		errs = append(errs, registry.ValidateLabelSelector(pdb.Spec.Selector, p.Child("selector"))...)
	}
	return errs
}

func (st pdbStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return st.Validate(w, obj)
}

var pdbPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Min Available", registry.TString, "The minimum number of pods that must be available."),
		registry.Col("Max Unavailable", registry.TString, "The maximum number of pods that may be unavailable."),
		registry.Col("Allowed Disruptions", registry.TInteger, "Calculated number of pods that may be disrupted at this time."),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		p := o.(*policyv1.PodDisruptionBudget)
		minA, maxU := "N/A", "N/A"
		if p.Spec.MinAvailable != nil {
			minA = p.Spec.MinAvailable.String()
		}
		if p.Spec.MaxUnavailable != nil {
			maxU = p.Spec.MaxUnavailable.String()
		}
		return []any{p.Name, minA, maxU, int64(p.Status.DisruptionsAllowed), registry.Age(p)}
	},
}
