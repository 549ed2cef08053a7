// Package apps holds the kinds of apps: their rules, defaults and table
// columns.
package apps

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry/core"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("apps", "v1", "deployments"), Kind: "Deployment", Namespaced: true, ShortNames: []string{"deploy"}, Categories: []string{"all"}, Subresources: []string{"status", "scale"},
			Strategy: deploymentStrategy{}, Defaulter: defaultDeploymentObject, Printer: &deploymentPrinter},
		{GVR: registry.GVR("apps", "v1", "replicasets"), Kind: "ReplicaSet", Namespaced: true, ShortNames: []string{"rs"}, Categories: []string{"all"}, Subresources: []string{"status", "scale"},
			Strategy: replicaSetStrategy{}, Defaulter: defaultReplicaSet, Printer: &replicaSetPrinter},
		{GVR: registry.GVR("apps", "v1", "statefulsets"), Kind: "StatefulSet", Namespaced: true, ShortNames: []string{"sts"}, Categories: []string{"all"}, Subresources: []string{"status", "scale"},
			Strategy: statefulSetStrategy{}, Defaulter: defaultStatefulSetObject, Printer: &statefulSetPrinter},
		{GVR: registry.GVR("apps", "v1", "daemonsets"), Kind: "DaemonSet", Namespaced: true, ShortNames: []string{"ds"}, Categories: []string{"all"}, Subresources: []string{"status"},
			Strategy: daemonSetStrategy{}, Defaulter: defaultDaemonSetObject, Printer: &daemonSetPrinter},
		{GVR: registry.GVR("apps", "v1", "controllerrevisions"), Kind: "ControllerRevision", Namespaced: true, Printer: &controllerRevisionPrinter},
	}
}

// validateWorkload checks what Deployments, ReplicaSets and StatefulSets
// share: a selector matching the template, replicas, the pod template.
func validateWorkload(sel *metav1.LabelSelector, tmpl *corev1.PodTemplateSpec, replicas *int32) field.ErrorList {
	p := field.NewPath("spec")
	errs := core.ValidateSelector(sel, tmpl.Labels, p)
	errs = append(errs, core.ValidateReplicas(replicas, p)...)
	return append(errs, core.ValidatePodSpec(&tmpl.Spec, p.Child("template", "spec"))...)
}

type deploymentStrategy struct{ registry.GenerationStrategy }

func (deploymentStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validateDeploymentSpec(&obj.(*appsv1.Deployment).Spec)
}

func (st deploymentStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	return append(errs, core.ValidateSelectorImmutable(obj.(*appsv1.Deployment).Spec.Selector, old.(*appsv1.Deployment).Spec.Selector, field.NewPath("spec"))...)
}

type replicaSetStrategy struct{ registry.GenerationStrategy }

func (replicaSetStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validateReplicaSetSpec(&obj.(*appsv1.ReplicaSet).Spec)
}

func (st replicaSetStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	return append(errs, core.ValidateSelectorImmutable(obj.(*appsv1.ReplicaSet).Spec.Selector, old.(*appsv1.ReplicaSet).Spec.Selector, field.NewPath("spec"))...)
}

type statefulSetStrategy struct{ registry.GenerationStrategy }

func (statefulSetStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	s := obj.(*appsv1.StatefulSet)
	// Containers mount the claims of volumeClaimTemplates by name: the
	// controller adds those volumes to each pod, so the template is
	// checked as if it had them.
	tmpl := s.Spec.Template.DeepCopy()
	for _, c := range s.Spec.VolumeClaimTemplates {
		tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, corev1.Volume{Name: c.Name,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name}}})
	}
	errs := validateWorkload(s.Spec.Selector, tmpl, s.Spec.Replicas)
	return append(errs, validateStatefulSetSpec(&s.Spec, field.NewPath("spec"))...)
}

func (st statefulSetStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	s, o := obj.(*appsv1.StatefulSet), old.(*appsv1.StatefulSet)
	p := field.NewPath("spec")
	errs = append(errs, core.ValidateSelectorImmutable(s.Spec.Selector, o.Spec.Selector, p)...)
	if s.Spec.ServiceName != o.Spec.ServiceName || s.Spec.PodManagementPolicy != o.Spec.PodManagementPolicy || !apiequality.Semantic.DeepEqual(s.Spec.VolumeClaimTemplates, o.Spec.VolumeClaimTemplates) {
		errs = append(errs, field.Forbidden(p, "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"))
	}
	return errs
}

type daemonSetStrategy struct{ registry.GenerationStrategy }

// A DaemonSet's template generation, which the daemonset controller
// labels its pods with (pod-template-generation): apps/v1 has no field
// for it, so kube-apiserver keeps it in this annotation, starting at 1 and
// counting template changes; clients cannot set it.
const daemonSetTemplateGeneration = appsv1.DeprecatedTemplateGeneration

func (daemonSetStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	d := obj.(*appsv1.DaemonSet)
	d.Status = appsv1.DaemonSetStatus{}
	gen, err := templateGeneration(d)
	if err != nil {
		return err
	}
	setTemplateGeneration(d, max(gen, 1))
	return nil
}

func (daemonSetStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	d, o := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
	d.Status = o.Status
	if _, err := templateGeneration(d); err != nil {
		return err
	}
	gen, err := templateGeneration(o)
	if err != nil {
		return err
	}
	if !apiequality.Semantic.DeepEqual(d.Spec.Template, o.Spec.Template) {
		gen++
	}
	setTemplateGeneration(d, gen)
	return nil
}

// templateGeneration reads the annotation; 0 when absent. A value that is
// not a number is refused, as kube-apiserver's conversion refuses it.
func templateGeneration(d *appsv1.DaemonSet) (int64, error) {
	v, ok := d.Annotations[daemonSetTemplateGeneration]
	if !ok {
		return 0, nil
	}
	gen, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("annotation %s: %q is not an integer", daemonSetTemplateGeneration, v))
	}
	return gen, nil
}

func setTemplateGeneration(d *appsv1.DaemonSet, gen int64) {
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[daemonSetTemplateGeneration] = strconv.FormatInt(gen, 10)
}

func (daemonSetStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	d := obj.(*appsv1.DaemonSet)
	p := field.NewPath("spec")
	errs := core.ValidateSelector(d.Spec.Selector, d.Spec.Template.Labels, p)
	if d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(p.Child("template", "spec", "restartPolicy"), d.Spec.Template.Spec.RestartPolicy, []string{"Always"}))
	}
	errs = append(errs, validateDaemonSetSpec(&d.Spec, p)...)
	return append(errs, core.ValidatePodSpec(&d.Spec.Template.Spec, p.Child("template", "spec"))...)
}

func (st daemonSetStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	return append(errs, core.ValidateSelectorImmutable(obj.(*appsv1.DaemonSet).Spec.Selector, old.(*appsv1.DaemonSet).Spec.Selector, field.NewPath("spec"))...)
}

// A Deployment's and a ReplicaSet's status writes may change annotations,
// as upstream's status strategies allow (they reset spec, and a
// Deployment's labels, only): the Deployment controller records the
// rollout's revision on the Deployment through its status.
func (deploymentStrategy) StatusWritesAnnotations() {}
func (replicaSetStrategy) StatusWritesAnnotations() {}

// Validation of the DaemonSet and StatefulSet fields their controllers
// act on, with kube-apiserver's messages: a value the controller cannot
// honour is refused at the door rather than reinterpreted later.

func nonNegative(v int64, p *field.Path) field.ErrorList {
	if v < 0 {
		return field.ErrorList{field.Invalid(p, v, "must be greater than or equal to 0")}
	}
	return nil
}

// intOrPercent checks a non-negative integer or a percentage of at most
// 100%.
func intOrPercent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch v.Type {
	case intstr.String:
		for _, msg := range validation.IsValidPercent(v.StrVal) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
		if n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%")); err == nil && n > 100 {
			errs = append(errs, field.Invalid(p, v, "must not be greater than 100%"))
		}
	case intstr.Int:
		errs = append(errs, nonNegative(int64(v.IntValue()), p)...)
	default:
		errs = append(errs, field.Invalid(p, v, "must be an integer or percentage (e.g '5%')"))
	}
	return errs
}

// isZero: 0 or 0%; an invalid value is left to intOrPercent.
func isZero(v *intstr.IntOrString) bool {
	if v == nil {
		return true
	}
	if v.Type == intstr.String {
		n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
		return err == nil && n == 0
	}
	return v.IntValue() == 0
}

func validateDaemonSetSpec(s *appsv1.DaemonSetSpec, p *field.Path) field.ErrorList {
	errs := nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))
	if s.RevisionHistoryLimit != nil {
		errs = append(errs, nonNegative(int64(*s.RevisionHistoryLimit), p.Child("revisionHistoryLimit"))...)
	}
	sp := p.Child("updateStrategy")
	switch s.UpdateStrategy.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
	case appsv1.RollingUpdateDaemonSetStrategyType:
		ru := s.UpdateStrategy.RollingUpdate
		if ru == nil {
			return append(errs, field.Required(sp.Child("rollingUpdate"), ""))
		}
		rp := sp.Child("rollingUpdate")
		if ru.MaxUnavailable != nil {
			errs = append(errs, intOrPercent(*ru.MaxUnavailable, rp.Child("maxUnavailable"))...)
		}
		if ru.MaxSurge != nil {
			errs = append(errs, intOrPercent(*ru.MaxSurge, rp.Child("maxSurge"))...)
		}
		// Exactly one of them drives the update.
		switch unavailable, surge := !isZero(ru.MaxUnavailable), !isZero(ru.MaxSurge); {
		case unavailable && surge:
			errs = append(errs, field.Invalid(rp.Child("maxSurge"), ru.MaxSurge, "may not be set when maxUnavailable is non-zero"))
		case !unavailable && !surge:
			errs = append(errs, field.Required(rp.Child("maxUnavailable"), "cannot be 0 when maxSurge is 0"))
		}
	default:
		errs = append(errs, field.NotSupported(sp, s.UpdateStrategy, []string{string(appsv1.RollingUpdateDaemonSetStrategyType), string(appsv1.OnDeleteDaemonSetStrategyType)}))
	}
	return errs
}

func validateStatefulSetSpec(s *appsv1.StatefulSetSpec, p *field.Path) field.ErrorList {
	errs := nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))
	if s.Ordinals != nil {
		errs = append(errs, nonNegative(int64(s.Ordinals.Start), p.Child("ordinals.start"))...)
	}
	switch s.PodManagementPolicy {
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	default:
		errs = append(errs, field.Invalid(p.Child("podManagementPolicy"), s.PodManagementPolicy, fmt.Sprintf("must be '%s' or '%s'", appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement)))
	}
	sp := p.Child("updateStrategy")
	switch ru := s.UpdateStrategy.RollingUpdate; s.UpdateStrategy.Type {
	case appsv1.OnDeleteStatefulSetStrategyType:
		if ru != nil {
			errs = append(errs, field.Invalid(sp.Child("rollingUpdate"), ru, fmt.Sprintf("only allowed for updateStrategy '%s'", appsv1.RollingUpdateStatefulSetStrategyType)))
		}
	case appsv1.RollingUpdateStatefulSetStrategyType:
		if ru == nil {
			break
		}
		rp := sp.Child("rollingUpdate")
		if ru.Partition != nil {
			errs = append(errs, nonNegative(int64(*ru.Partition), rp.Child("partition"))...)
		}
		if ru.MaxUnavailable != nil {
			errs = append(errs, intOrPercent(*ru.MaxUnavailable, rp.Child("maxUnavailable"))...)
			if isZero(ru.MaxUnavailable) {
				errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), *ru.MaxUnavailable, "cannot be 0"))
			}
		}
	default:
		errs = append(errs, field.Invalid(sp, s.UpdateStrategy, fmt.Sprintf("must be '%s' or '%s'", appsv1.RollingUpdateStatefulSetStrategyType, appsv1.OnDeleteStatefulSetStrategyType)))
	}
	if pol := s.PersistentVolumeClaimRetentionPolicy; pol != nil {
		pp := p.Child("persistentVolumeClaimRetentionPolicy")
		valid := []string{string(appsv1.RetainPersistentVolumeClaimRetentionPolicyType), string(appsv1.DeletePersistentVolumeClaimRetentionPolicyType)}
		for _, f := range []struct {
			name string
			v    appsv1.PersistentVolumeClaimRetentionPolicyType
		}{{"whenDeleted", pol.WhenDeleted}, {"whenScaled", pol.WhenScaled}} {
			if f.v != appsv1.RetainPersistentVolumeClaimRetentionPolicyType && f.v != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
				errs = append(errs, field.NotSupported(pp.Child(f.name), f.v, valid))
			}
		}
	}
	return errs
}

// What kube-apiserver checks of a Deployment's and a ReplicaSet's spec
// beyond the selector, replicas and pod template (validateWorkload): the
// rollout strategy and its fenceposts, the durations, and the template's
// restart policy.

// surgeIntOrPercent checks a Deployment's maxSurge: a non-negative
// integer or percentage, which unlike maxUnavailable (intOrPercent) may
// exceed 100%.
func surgeIntOrPercent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	if v.Type == intstr.String {
		var errs field.ErrorList
		for _, msg := range validation.IsValidPercent(v.StrVal) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
		return errs
	}
	return nonNegative(int64(v.IntValue()), p)
}

func validateDeploymentStrategy(st *appsv1.DeploymentStrategy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch st.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if st.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(path.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		ru := st.RollingUpdate
		if ru == nil {
			return append(errs, field.Required(path.Child("rollingUpdate"), "this should be defaulted and never be nil"))
		}
		rp := path.Child("rollingUpdate")
		if ru.MaxUnavailable != nil {
			errs = append(errs, intOrPercent(*ru.MaxUnavailable, rp.Child("maxUnavailable"))...)
		}
		if ru.MaxSurge != nil {
			errs = append(errs, surgeIntOrPercent(*ru.MaxSurge, rp.Child("maxSurge"))...)
		}
		if isZero(ru.MaxSurge) && isZero(ru.MaxUnavailable) {
			errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), ru.MaxUnavailable, "may not be 0 when `maxSurge` is 0"))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("type"), st.Type, []string{string(appsv1.RecreateDeploymentStrategyType), string(appsv1.RollingUpdateDeploymentStrategyType)}))
	}
	return errs
}

// validateRestartAlways: a controller's pods are replaced, never left
// terminated, so their template must restart them.
func validateRestartAlways(t *corev1.PodTemplateSpec, path *field.Path) field.ErrorList {
	if t.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		return field.ErrorList{field.NotSupported(path.Child("template", "spec", "restartPolicy"), t.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)})}
	}
	return nil
}

func validateDeploymentSpec(s *appsv1.DeploymentSpec) field.ErrorList {
	p := field.NewPath("spec")
	errs := validateWorkload(s.Selector, &s.Template, s.Replicas)
	errs = append(errs, validateRestartAlways(&s.Template, p)...)
	errs = append(errs, validateDeploymentStrategy(&s.Strategy, p.Child("strategy"))...)
	errs = append(errs, nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))...)
	if s.RevisionHistoryLimit != nil {
		errs = append(errs, nonNegative(int64(*s.RevisionHistoryLimit), p.Child("revisionHistoryLimit"))...)
	}
	if pd := s.ProgressDeadlineSeconds; pd != nil {
		errs = append(errs, nonNegative(int64(*pd), p.Child("progressDeadlineSeconds"))...)
		if *pd <= s.MinReadySeconds {
			errs = append(errs, field.Invalid(p.Child("progressDeadlineSeconds"), *pd, "must be greater than minReadySeconds"))
		}
	}
	return errs
}

func validateReplicaSetSpec(s *appsv1.ReplicaSetSpec) field.ErrorList {
	p := field.NewPath("spec")
	errs := validateWorkload(s.Selector, &s.Template, s.Replicas)
	errs = append(errs, validateRestartAlways(&s.Template, p)...)
	return append(errs, nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))...)
}

// prepareForUpdate: a Deployment's generation counts annotation changes
// too, as upstream's does, because its ReplicaSets copy its annotations;
// a spec change bumps it already.
func (st deploymentStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	if err := st.GenerationStrategy.PrepareForUpdate(w, obj, old); err != nil {
		return err
	}
	d, o := obj.(*appsv1.Deployment), old.(*appsv1.Deployment)
	if apiequality.Semantic.DeepEqual(d.Spec, o.Spec) && !apiequality.Semantic.DeepEqual(d.Annotations, o.Annotations) {
		d.Generation = o.Generation + 1
	}
	return nil
}

func defaultDeploymentObject(obj runtime.Object) {
	o := obj.(*appsv1.Deployment)
	defaultDeployment(o)
}

func defaultReplicaSet(obj runtime.Object) {
	o := obj.(*appsv1.ReplicaSet)
	if o.Spec.Replicas == nil {
		o.Spec.Replicas = ptrTo[int32](1)
	}
	core.DefaultPodSpec(&o.Spec.Template.Spec)
}

func defaultStatefulSetObject(obj runtime.Object) {
	o := obj.(*appsv1.StatefulSet)
	defaultStatefulSet(o)
}

func defaultDaemonSetObject(obj runtime.Object) {
	o := obj.(*appsv1.DaemonSet)
	defaultDaemonSet(o)
}

func defaultDeployment(d *appsv1.Deployment) {
	if d.Spec.Replicas == nil {
		d.Spec.Replicas = ptrTo[int32](1)
	}
	st := &d.Spec.Strategy
	if st.Type == "" {
		st.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if st.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if st.RollingUpdate == nil {
			st.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		if st.RollingUpdate.MaxUnavailable == nil {
			st.RollingUpdate.MaxUnavailable = ptrTo(intstr.FromString("25%"))
		}
		if st.RollingUpdate.MaxSurge == nil {
			st.RollingUpdate.MaxSurge = ptrTo(intstr.FromString("25%"))
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = ptrTo[int32](10)
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		d.Spec.ProgressDeadlineSeconds = ptrTo[int32](600)
	}
	core.DefaultPodSpec(&d.Spec.Template.Spec)
}

func defaultStatefulSet(s *appsv1.StatefulSet) {
	if s.Spec.Replicas == nil {
		s.Spec.Replicas = ptrTo[int32](1)
	}
	if s.Spec.PodManagementPolicy == "" {
		s.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	// Only an unset strategy gets rollingUpdate filled in: upstream leaves
	// an explicit "RollingUpdate" without parameters as it is.
	if s.Spec.UpdateStrategy.Type == "" {
		s.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
		if s.Spec.UpdateStrategy.RollingUpdate == nil {
			s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
	}
	if s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && s.Spec.UpdateStrategy.RollingUpdate != nil {
		if s.Spec.UpdateStrategy.RollingUpdate.Partition == nil {
			s.Spec.UpdateStrategy.RollingUpdate.Partition = ptrTo[int32](0)
		}
		if s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == nil {
			s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptrTo(intstr.FromInt32(1))
		}
	}
	if s.Spec.RevisionHistoryLimit == nil {
		s.Spec.RevisionHistoryLimit = ptrTo[int32](10)
	}
	if s.Spec.PersistentVolumeClaimRetentionPolicy == nil {
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	p := s.Spec.PersistentVolumeClaimRetentionPolicy
	if p.WhenDeleted == "" {
		p.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if p.WhenScaled == "" {
		p.WhenScaled = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	for i := range s.Spec.VolumeClaimTemplates {
		pvc := &s.Spec.VolumeClaimTemplates[i]
		if pvc.Spec.VolumeMode == nil {
			pvc.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
		}
		if pvc.Status.Phase == "" {
			pvc.Status.Phase = corev1.ClaimPending
		}
	}
	core.DefaultPodSpec(&s.Spec.Template.Spec)
}

func defaultDaemonSet(d *appsv1.DaemonSet) {
	if d.Spec.UpdateStrategy.Type == "" {
		d.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if d.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if d.Spec.UpdateStrategy.RollingUpdate == nil {
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == nil {
			d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptrTo(intstr.FromInt32(1))
		}
		if d.Spec.UpdateStrategy.RollingUpdate.MaxSurge == nil {
			d.Spec.UpdateStrategy.RollingUpdate.MaxSurge = ptrTo(intstr.FromInt32(0))
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = ptrTo[int32](10)
	}
	core.DefaultPodSpec(&d.Spec.Template.Spec)
}

var deploymentPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Ready", registry.TString, "Number of the pod with ready state"),
		registry.Col("Up-to-date", registry.TInteger, appsv1.DeploymentStatus{}.SwaggerDoc()["updatedReplicas"]),
		registry.Col("Available", registry.TInteger, appsv1.DeploymentStatus{}.SwaggerDoc()["availableReplicas"]),
		registry.AgeCol, registry.ContainersCol, registry.ImagesCol,
		registry.Wide(registry.Col("Selector", registry.TString, appsv1.DeploymentSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		d := o.(*appsv1.Deployment)
		// Unlike the other workloads, an empty selector prints empty here.
		sel := "<invalid>"
		if s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
			sel = s.String()
		}
		cells := []any{d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, registry.ReplicasOr1(d.Spec.Replicas)), int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas), registry.Age(d)}
		return append(registry.WithContainers(cells, d.Spec.Template.Spec.Containers), sel)
	},
}

var replicaSetPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Desired", registry.TInteger, appsv1.ReplicaSetSpec{}.SwaggerDoc()["replicas"]),
		registry.Col("Current", registry.TInteger, appsv1.ReplicaSetStatus{}.SwaggerDoc()["replicas"]),
		registry.Col("Ready", registry.TInteger, appsv1.ReplicaSetStatus{}.SwaggerDoc()["readyReplicas"]),
		registry.AgeCol, registry.ContainersCol, registry.ImagesCol,
		registry.Wide(registry.Col("Selector", registry.TString, appsv1.ReplicaSetSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		rs := o.(*appsv1.ReplicaSet)
		cells := []any{rs.Name, registry.ReplicasOr1(rs.Spec.Replicas), int64(rs.Status.Replicas), int64(rs.Status.ReadyReplicas), registry.Age(rs)}
		return append(registry.WithContainers(cells, rs.Spec.Template.Spec.Containers), metav1.FormatLabelSelector(rs.Spec.Selector))
	},
}

var statefulSetPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Ready", registry.TString, "Number of the pod with ready state"), registry.AgeCol, registry.ContainersCol, registry.ImagesCol),
	Cells: func(o runtime.Object) []any {
		s := o.(*appsv1.StatefulSet)
		cells := []any{s.Name, fmt.Sprintf("%d/%d", s.Status.ReadyReplicas, registry.ReplicasOr1(s.Spec.Replicas)), registry.Age(s)}
		return registry.WithContainers(cells, s.Spec.Template.Spec.Containers)
	},
}

var daemonSetPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Desired", registry.TInteger, appsv1.DaemonSetStatus{}.SwaggerDoc()["desiredNumberScheduled"]),
		registry.Col("Current", registry.TInteger, appsv1.DaemonSetStatus{}.SwaggerDoc()["currentNumberScheduled"]),
		registry.Col("Ready", registry.TInteger, appsv1.DaemonSetStatus{}.SwaggerDoc()["numberReady"]),
		registry.Col("Up-to-date", registry.TInteger, appsv1.DaemonSetStatus{}.SwaggerDoc()["updatedNumberScheduled"]),
		registry.Col("Available", registry.TInteger, appsv1.DaemonSetStatus{}.SwaggerDoc()["numberAvailable"]),
		registry.Col("Node Selector", registry.TString, corev1.PodSpec{}.SwaggerDoc()["nodeSelector"]),
		registry.AgeCol, registry.ContainersCol, registry.ImagesCol,
		registry.Wide(registry.Col("Selector", registry.TString, appsv1.DaemonSetSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		d := o.(*appsv1.DaemonSet)
		st := d.Status
		cells := []any{d.Name, int64(st.DesiredNumberScheduled), int64(st.CurrentNumberScheduled), int64(st.NumberReady),
			int64(st.UpdatedNumberScheduled), int64(st.NumberAvailable), labels.FormatLabels(d.Spec.Template.Spec.NodeSelector), registry.Age(d)}
		return append(registry.WithContainers(cells, d.Spec.Template.Spec.Containers), metav1.FormatLabelSelector(d.Spec.Selector))
	},
}

var controllerRevisionPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Controller", registry.TString, "Controller of the object"),
		registry.Col("Revision", registry.TInteger, appsv1.ControllerRevision{}.SwaggerDoc()["revision"]),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		r := o.(*appsv1.ControllerRevision)
		controller := "<none>"
		if ref := metav1.GetControllerOf(r); ref != nil {
			gk := schema.GroupKind{Kind: ref.Kind}
			if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil {
				gk.Group = gv.Group
			}
			controller = ref.Name
			if !gk.Empty() {
				controller = strings.ToLower(gk.String()) + "/" + ref.Name
			}
		}
		return []any{r.Name, controller, r.Revision, registry.Age(r)}
	},
}

func ptrTo[T any](v T) *T { return &v }
