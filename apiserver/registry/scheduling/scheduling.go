// Package scheduling holds the kinds of scheduling.k8s.io: their rules,
// defaults and table columns.
package scheduling

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("scheduling.k8s.io", "v1", "priorityclasses"), Kind: "PriorityClass", ShortNames: []string{"pc"},
			Strategy: priorityClassStrategy{}, Defaulter: defaultPriorityClass, Printer: &priorityClassPrinter},
	}
}

type priorityClassStrategy struct{ registry.DefaultStrategy }

// highestUserPriority is the largest value a PriorityClass not named
// system-* may have, as Kubernetes defines it.
const highestUserPriority = 1000000000

func (priorityClassStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	pc := obj.(*schedulingv1.PriorityClass)
	var errs field.ErrorList
	system := pc.Name == "system-node-critical" || pc.Name == "system-cluster-critical"
	if strings.HasPrefix(pc.Name, "system-") && !system {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "name"), "priority class names with 'system-' prefix are reserved for system use only"))
	}
	if !system && pc.Value > highestUserPriority {
		errs = append(errs, field.Forbidden(field.NewPath("value"), fmt.Sprintf("maximum allowed value of a user defined priority is %d", highestUserPriority)))
	}
	if p := pc.PreemptionPolicy; p != nil && *p != corev1.PreemptLowerPriority && *p != corev1.PreemptNever {
		errs = append(errs, field.NotSupported(field.NewPath("preemptionPolicy"), *p, []string{"Never", "PreemptLowerPriority"}))
	}
	return errs
}

func (st priorityClassStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	pc, o := obj.(*schedulingv1.PriorityClass), old.(*schedulingv1.PriorityClass)
	errs := st.Validate(w, obj)
	if pc.Value != o.Value {
		errs = append(errs, field.Forbidden(field.NewPath("value"), "may not be changed in an update."))
	}
	return errs
}

func defaultPriorityClass(obj runtime.Object) {
	o := obj.(*schedulingv1.PriorityClass)
	if o.PreemptionPolicy == nil {
		o.PreemptionPolicy = ptrTo(corev1.PreemptLowerPriority)
	}
}

var priorityClassPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Value", registry.TInteger, schedulingv1.PriorityClass{}.SwaggerDoc()["value"]),
		registry.Col("Global-Default", registry.TBoolean, schedulingv1.PriorityClass{}.SwaggerDoc()["globalDefault"]),
		registry.AgeCol,
		registry.Col("PreemptionPolicy", registry.TString, schedulingv1.PriorityClass{}.SwaggerDoc()["preemptionPolicy"]),
	),
	Cells: func(o runtime.Object) []any {
		p := o.(*schedulingv1.PriorityClass)
		policy := ""
		if p.PreemptionPolicy != nil {
			policy = string(*p.PreemptionPolicy)
		}
		return []any{p.Name, int64(p.Value), p.GlobalDefault, registry.Age(p), policy}
	},
}

func ptrTo[T any](v T) *T { return &v }
