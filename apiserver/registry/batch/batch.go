// Package batch holds the kinds of batch: their rules, defaults and
// table columns.
package batch

import (
	"fmt"
	"maps"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry/core"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("batch", "v1", "jobs"), Kind: "Job", Namespaced: true, Categories: []string{"all"}, Subresources: []string{"status"},
			Strategy: jobStrategy{}, Defaulter: defaultJob, Printer: &jobPrinter},
		{GVR: registry.GVR("batch", "v1", "cronjobs"), Kind: "CronJob", Namespaced: true, ShortNames: []string{"cj"}, Categories: []string{"all"}, Subresources: []string{"status"},
			Strategy: cronJobStrategy{}, Defaulter: defaultCronJobObject, Printer: &cronJobPrinter},
	}
}

// ---- jobs

type jobStrategy struct{ registry.GenerationStrategy }

// The legacy keys of the labels the selector generation sets, kept
// beside the batch.kubernetes.io ones as upstream does.
const (
	legacyJobNameLabel       = "job-name"
	legacyControllerUIDLabel = "controller-uid"
)

// Upstream's bounds for Indexed Jobs.
const (
	maxIndexedCompletions = 100000
	maxIndexedParallelism = 100000
)

// prepareForCreate generates the selector as upstream does unless the Job
// asks to choose its own (manualSelector): the template gets the
// controller-uid and job-name labels (new and legacy keys) where it lacks
// them, and the selector matches the controller-uid label. A label the
// user set is kept; validation then rejects a selector it breaks.
func (st jobStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	j := obj.(*batchv1.Job)
	j.Status = batchv1.JobStatus{}
	if j.Spec.ManualSelector != nil && *j.Spec.ManualSelector {
		return nil
	}
	uid := string(j.UID)
	if j.Spec.Template.Labels == nil {
		j.Spec.Template.Labels = map[string]string{}
	}
	for _, l := range []struct{ key, value string }{
		{legacyJobNameLabel, j.Name}, {batchv1.JobNameLabel, j.Name},
		{legacyControllerUIDLabel, uid}, {batchv1.ControllerUidLabel, uid},
	} {
		if _, set := j.Spec.Template.Labels[l.key]; !set {
			j.Spec.Template.Labels[l.key] = l.value
		}
	}
	if j.Spec.Selector == nil {
		j.Spec.Selector = &metav1.LabelSelector{}
	}
	if j.Spec.Selector.MatchLabels == nil {
		j.Spec.Selector.MatchLabels = map[string]string{}
	}
	if _, set := j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel]; !set {
		j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel] = uid
	}
	return nil
}

func (jobStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	j := obj.(*batchv1.Job)
	p := field.NewPath("spec")
	errs := core.ValidateSelector(j.Spec.Selector, j.Spec.Template.Labels, p)
	if j.Spec.ManualSelector == nil || !*j.Spec.ManualSelector {
		if got := j.Spec.Template.Labels[batchv1.ControllerUidLabel]; got != string(j.UID) {
			errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels").Key(batchv1.ControllerUidLabel), got, "must be '"+string(j.UID)+"'"))
		}
	}
	if rp := j.Spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever {
		errs = append(errs, field.NotSupported(p.Child("template", "spec", "restartPolicy"), rp, []string{"OnFailure", "Never"}))
	}
	errs = append(errs, validateJobSpec(&j.Spec, p)...)
	return append(errs, core.ValidatePodSpec(&j.Spec.Template.Spec, p.Child("template", "spec"))...)
}

// validateJobSpec checks the counts and policies of a Job as upstream's
// validation does.
func validateJobSpec(s *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	nonNegative := func(v *int32, name string) {
		if v != nil && *v < 0 {
			errs = append(errs, field.Invalid(p.Child(name), *v, "must be greater than or equal to 0"))
		}
	}
	nonNegative(s.Parallelism, "parallelism")
	nonNegative(s.Completions, "completions")
	nonNegative(s.BackoffLimit, "backoffLimit")
	nonNegative(s.TTLSecondsAfterFinished, "ttlSecondsAfterFinished")
	nonNegative(s.BackoffLimitPerIndex, "backoffLimitPerIndex")
	nonNegative(s.MaxFailedIndexes, "maxFailedIndexes")
	if s.ActiveDeadlineSeconds != nil && *s.ActiveDeadlineSeconds <= 0 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *s.ActiveDeadlineSeconds, "must be greater than 0"))
	}
	indexed := false
	if m := s.CompletionMode; m != nil {
		switch *m {
		case batchv1.IndexedCompletion:
			indexed = true
		case batchv1.NonIndexedCompletion:
		default:
			errs = append(errs, field.NotSupported(p.Child("completionMode"), *m, []string{string(batchv1.NonIndexedCompletion), string(batchv1.IndexedCompletion)}))
		}
	}
	if indexed {
		if s.Completions == nil {
			errs = append(errs, field.Required(p.Child("completions"), fmt.Sprintf("when completion mode is %s", batchv1.IndexedCompletion)))
		} else if *s.Completions > maxIndexedCompletions {
			errs = append(errs, field.Invalid(p.Child("completions"), *s.Completions, fmt.Sprintf("must be less than or equal to %d when completion mode is %s", maxIndexedCompletions, batchv1.IndexedCompletion)))
		}
		if s.Parallelism != nil && *s.Parallelism > maxIndexedParallelism {
			errs = append(errs, field.Invalid(p.Child("parallelism"), *s.Parallelism, fmt.Sprintf("must be less than or equal to %d when completion mode is %s", maxIndexedParallelism, batchv1.IndexedCompletion)))
		}
	}
	if s.BackoffLimitPerIndex != nil {
		if !indexed {
			errs = append(errs, field.Invalid(p.Child("backoffLimitPerIndex"), *s.BackoffLimitPerIndex, "requires indexed completion mode"))
		}
		if rp := s.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever {
			errs = append(errs, field.Invalid(p.Child("backoffLimitPerIndex"), *s.BackoffLimitPerIndex, "requires the pod template restartPolicy Never"))
		}
	}
	if s.MaxFailedIndexes != nil {
		if s.BackoffLimitPerIndex == nil {
			errs = append(errs, field.Required(p.Child("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
		}
		if s.Completions != nil && *s.MaxFailedIndexes > *s.Completions {
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *s.MaxFailedIndexes, "must be less than or equal to completions"))
		}
	}
	if s.PodFailurePolicy != nil {
		errs = append(errs, validatePodFailurePolicy(s, p)...)
	}
	if s.SuccessPolicy != nil {
		errs = append(errs, validateSuccessPolicy(s, indexed, p)...)
	}
	if r := s.PodReplacementPolicy; r != nil {
		switch {
		case *r != batchv1.Failed && *r != batchv1.TerminatingOrFailed:
			errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *r, []string{string(batchv1.TerminatingOrFailed), string(batchv1.Failed)}))
		case s.PodFailurePolicy != nil && *r != batchv1.Failed:
			errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *r, []string{string(batchv1.Failed)}))
		}
	}
	return errs
}

// validatePodFailurePolicy checks the policy of the Job spec at spec.
func validatePodFailurePolicy(s *batchv1.JobSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	p := spec.Child("podFailurePolicy")
	if rp := s.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever {
		errs = append(errs, field.NotSupported(spec.Child("template", "spec", "restartPolicy"), rp, []string{string(corev1.RestartPolicyNever)}))
	}
	actions := []string{string(batchv1.PodFailurePolicyActionFailJob), string(batchv1.PodFailurePolicyActionFailIndex), string(batchv1.PodFailurePolicyActionIgnore), string(batchv1.PodFailurePolicyActionCount)}
	for i, rule := range s.PodFailurePolicy.Rules {
		rp := p.Child("rules").Index(i)
		if !slices.Contains(actions, string(rule.Action)) {
			errs = append(errs, field.NotSupported(rp.Child("action"), rule.Action, actions))
		}
		if rule.Action == batchv1.PodFailurePolicyActionFailIndex && s.BackoffLimitPerIndex == nil {
			errs = append(errs, field.Invalid(rp.Child("action"), rule.Action, "requires the backoffLimitPerIndex to be set"))
		}
		switch {
		case rule.OnExitCodes != nil && len(rule.OnPodConditions) > 0:
			errs = append(errs, field.Invalid(rp, field.OmitValueType{}, "specifying both OnExitCodes and OnPodConditions is not supported"))
		case rule.OnExitCodes == nil && len(rule.OnPodConditions) == 0:
			errs = append(errs, field.Invalid(rp, field.OmitValueType{}, "specifying one of OnExitCodes and OnPodConditions is required"))
		case rule.OnExitCodes != nil:
			errs = append(errs, validateOnExitCodes(rule.OnExitCodes, rp.Child("onExitCodes"))...)
		}
	}
	return errs
}

func validateOnExitCodes(r *batchv1.PodFailurePolicyOnExitCodesRequirement, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Operator != batchv1.PodFailurePolicyOnExitCodesOpIn && r.Operator != batchv1.PodFailurePolicyOnExitCodesOpNotIn {
		errs = append(errs, field.NotSupported(p.Child("operator"), r.Operator, []string{string(batchv1.PodFailurePolicyOnExitCodesOpIn), string(batchv1.PodFailurePolicyOnExitCodesOpNotIn)}))
	}
	if len(r.Values) == 0 {
		errs = append(errs, field.Required(p.Child("values"), "at least one value is required"))
	}
	for i, v := range r.Values {
		vp := p.Child("values").Index(i)
		if i > 0 && v <= r.Values[i-1] {
			errs = append(errs, field.Invalid(vp, v, "must be ordered and unique"))
		}
		if r.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && v == 0 {
			errs = append(errs, field.Invalid(vp, v, "must not be 0 for the In operator"))
		}
	}
	return errs
}

// validateSuccessPolicy checks the policy of the Job spec at spec.
func validateSuccessPolicy(s *batchv1.JobSpec, indexed bool, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	p := spec.Child("successPolicy")
	if !indexed {
		errs = append(errs, field.Invalid(spec.Child("completionMode"), s.CompletionMode, "requires indexed completion mode"))
	}
	for i, rule := range s.SuccessPolicy.Rules {
		rp := p.Child("rules").Index(i)
		if rule.SucceededIndexes == nil && rule.SucceededCount == nil {
			errs = append(errs, field.Required(rp, "at least one of succeededCount or succeededIndexes must be specified"))
		}
		if c := rule.SucceededCount; c != nil {
			if *c < 0 {
				errs = append(errs, field.Invalid(rp.Child("succeededCount"), *c, "must be greater than or equal to 0"))
			} else if s.Completions != nil && *c > *s.Completions {
				errs = append(errs, field.Invalid(rp.Child("succeededCount"), *c, fmt.Sprintf("must be less than or equal to %d (the number of specified completions)", *s.Completions)))
			}
		}
	}
	return errs
}

func (st jobStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	j, o := obj.(*batchv1.Job), old.(*batchv1.Job)
	errs := st.Validate(w, obj)
	p := field.NewPath("spec")
	errs = append(errs, core.ValidateSelectorImmutable(j.Spec.Selector, o.Spec.Selector, p)...)
	immutable := func(changed bool, name string, v any) {
		if changed {
			errs = append(errs, field.Invalid(p.Child(name), v, "field is immutable"))
		}
	}
	// Completions may change only with parallelism, on an Indexed Job
	// (elastic Indexed Jobs).
	elastic := isIndexedSpec(&j.Spec) && j.Spec.Completions != nil && j.Spec.Parallelism != nil && *j.Spec.Completions == *j.Spec.Parallelism
	immutable(!elastic && !apiequality.Semantic.DeepEqual(j.Spec.Completions, o.Spec.Completions), "completions", j.Spec.Completions)
	immutable(!apiequality.Semantic.DeepEqual(j.Spec.CompletionMode, o.Spec.CompletionMode), "completionMode", j.Spec.CompletionMode)
	immutable(!apiequality.Semantic.DeepEqual(j.Spec.PodFailurePolicy, o.Spec.PodFailurePolicy), "podFailurePolicy", j.Spec.PodFailurePolicy)
	immutable(!apiequality.Semantic.DeepEqual(j.Spec.BackoffLimitPerIndex, o.Spec.BackoffLimitPerIndex), "backoffLimitPerIndex", j.Spec.BackoffLimitPerIndex)
	immutable(!apiequality.Semantic.DeepEqual(j.Spec.ManagedBy, o.Spec.ManagedBy), "managedBy", j.Spec.ManagedBy)
	immutable(!apiequality.Semantic.DeepEqual(j.Spec.SuccessPolicy, o.Spec.SuccessPolicy), "successPolicy", j.Spec.SuccessPolicy)
	// The pod template is immutable, except that a suspended Job that
	// never started may change where its pods go (mutable scheduling
	// directives).
	tmpl, oldTmpl := j.Spec.Template.DeepCopy(), o.Spec.Template.DeepCopy()
	if suspendedUnstarted(o) {
		for _, t := range []*corev1.PodTemplateSpec{tmpl, oldTmpl} {
			t.Labels, t.Annotations = nil, nil
			t.Spec.NodeSelector, t.Spec.Affinity, t.Spec.Tolerations, t.Spec.SchedulingGates = nil, nil, nil, nil
		}
	}
	immutable(!apiequality.Semantic.DeepEqual(tmpl, oldTmpl), "template", field.OmitValueType{})
	return errs
}

func isIndexedSpec(s *batchv1.JobSpec) bool {
	return s.CompletionMode != nil && *s.CompletionMode == batchv1.IndexedCompletion
}

func suspendedUnstarted(j *batchv1.Job) bool {
	return j.Spec.Suspend != nil && *j.Spec.Suspend && j.Status.StartTime == nil
}

// ---- cronjobs

type cronJobStrategy struct{ registry.GenerationStrategy }

func (cronJobStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	c := obj.(*batchv1.CronJob)
	var errs field.ErrorList
	if c.Spec.Schedule == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "schedule"), ""))
	}
	if len(c.Name) > 52 {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), c.Name, "must be no more than 52 characters"))
	}
	// The job template is checked as a Job's spec would be.
	p := field.NewPath("spec", "jobTemplate", "spec")
	t := &c.Spec.JobTemplate.Spec
	if rp := t.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever {
		errs = append(errs, field.NotSupported(p.Child("template", "spec", "restartPolicy"), rp, []string{"OnFailure", "Never"}))
	}
	errs = append(errs, validateJobSpec(t, p)...)
	return append(errs, core.ValidatePodSpec(&t.Template.Spec, p.Child("template", "spec"))...)
}

func (st cronJobStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return st.Validate(w, obj)
}

func defaultJob(obj runtime.Object) {
	o := obj.(*batchv1.Job)
	// A Job without labels takes its template's, as upstream.
	if len(o.Labels) == 0 && o.Spec.Template.Labels != nil {
		o.Labels = maps.Clone(o.Spec.Template.Labels)
	}
	defaultJobSpec(&o.Spec)
}

func defaultCronJobObject(obj runtime.Object) {
	o := obj.(*batchv1.CronJob)
	defaultCronJob(o)
}

// defaultJobSpec is upstream's SetDefaults_Job for a Job's spec. A
// CronJob's job template gets only the nested defaults (defaultJobTemplate):
// the Job the CronJob creates is defaulted when it is created.
func defaultJobSpec(s *batchv1.JobSpec) {
	if s.Completions == nil && s.Parallelism == nil {
		s.Completions = ptrTo[int32](1)
		s.Parallelism = ptrTo[int32](1)
	}
	if s.Parallelism == nil {
		s.Parallelism = ptrTo[int32](1)
	}
	if s.BackoffLimit == nil {
		if s.BackoffLimitPerIndex != nil {
			s.BackoffLimit = ptrTo[int32](2147483647)
		} else {
			s.BackoffLimit = ptrTo[int32](6)
		}
	}
	if s.CompletionMode == nil {
		s.CompletionMode = ptrTo(batchv1.NonIndexedCompletion)
	}
	if s.Suspend == nil {
		s.Suspend = ptrTo(false)
	}
	if s.PodReplacementPolicy == nil {
		if s.PodFailurePolicy != nil {
			s.PodReplacementPolicy = ptrTo(batchv1.Failed)
		} else {
			s.PodReplacementPolicy = ptrTo(batchv1.TerminatingOrFailed)
		}
	}
	if s.ManualSelector == nil {
		s.ManualSelector = ptrTo(false)
	}
	defaultJobTemplate(s)
}

// defaultJobTemplate applies the defaults of the types inside a JobSpec:
// the pod spec, and pod failure policy condition patterns matching True.
func defaultJobTemplate(s *batchv1.JobSpec) {
	if s.PodFailurePolicy != nil {
		for i := range s.PodFailurePolicy.Rules {
			for k := range s.PodFailurePolicy.Rules[i].OnPodConditions {
				if c := &s.PodFailurePolicy.Rules[i].OnPodConditions[k]; c.Status == "" {
					c.Status = corev1.ConditionTrue
				}
			}
		}
	}
	core.DefaultPodSpec(&s.Template.Spec)
}

func defaultCronJob(c *batchv1.CronJob) {
	if c.Spec.ConcurrencyPolicy == "" {
		c.Spec.ConcurrencyPolicy = batchv1.AllowConcurrent
	}
	if c.Spec.Suspend == nil {
		c.Spec.Suspend = ptrTo(false)
	}
	if c.Spec.SuccessfulJobsHistoryLimit == nil {
		c.Spec.SuccessfulJobsHistoryLimit = ptrTo[int32](3)
	}
	if c.Spec.FailedJobsHistoryLimit == nil {
		c.Spec.FailedJobsHistoryLimit = ptrTo[int32](1)
	}
	defaultJobTemplate(&c.Spec.JobTemplate.Spec)
}

var jobPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Status", registry.TString, "Status of the job."),
		registry.Col("Completions", registry.TString, batchv1.JobStatus{}.SwaggerDoc()["succeeded"]),
		registry.Col("Duration", registry.TString, "Time required to complete the job."),
		registry.AgeCol, registry.ContainersCol, registry.ImagesCol,
		registry.Wide(registry.Col("Selector", registry.TString, batchv1.JobSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		j := o.(*batchv1.Job)
		var completions string
		switch {
		case j.Spec.Completions != nil:
			completions = fmt.Sprintf("%d/%d", j.Status.Succeeded, *j.Spec.Completions)
		case j.Spec.Parallelism != nil && *j.Spec.Parallelism > 1:
			completions = fmt.Sprintf("%d/1 of %d", j.Status.Succeeded, *j.Spec.Parallelism)
		default:
			completions = fmt.Sprintf("%d/1", j.Status.Succeeded)
		}
		var dur string
		switch st := j.Status; {
		case st.StartTime == nil:
		case st.CompletionTime == nil:
			dur = duration.HumanDuration(time.Since(st.StartTime.Time))
		default:
			dur = duration.HumanDuration(st.CompletionTime.Sub(st.StartTime.Time))
		}
		cells := []any{j.Name, jobStatus(j), completions, dur, registry.Age(j)}
		return append(registry.WithContainers(cells, j.Spec.Template.Spec.Containers), metav1.FormatLabelSelector(j.Spec.Selector))
	},
}

func jobStatus(j *batchv1.Job) string {
	has := func(t batchv1.JobConditionType) bool {
		for _, c := range j.Status.Conditions {
			if c.Type == t {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	switch {
	case has(batchv1.JobComplete):
		return "Complete"
	case has(batchv1.JobFailed):
		return "Failed"
	case j.DeletionTimestamp != nil:
		return "Terminating"
	case has(batchv1.JobSuspended):
		return "Suspended"
	case has(batchv1.JobFailureTarget):
		return "FailureTarget"
	}
	return "Running"
}

var cronJobPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Schedule", registry.TString, batchv1.CronJobSpec{}.SwaggerDoc()["schedule"]),
		registry.Col("Timezone", registry.TString, batchv1.CronJobSpec{}.SwaggerDoc()["timeZone"]),
		// Upstream declares this boolean but prints True/False words.
		registry.Col("Suspend", registry.TString, batchv1.CronJobSpec{}.SwaggerDoc()["suspend"]),
		registry.Col("Active", registry.TInteger, batchv1.CronJobStatus{}.SwaggerDoc()["active"]),
		registry.Col("Last Schedule", registry.TString, batchv1.CronJobStatus{}.SwaggerDoc()["lastScheduleTime"]),
		registry.AgeCol, registry.ContainersCol, registry.ImagesCol,
		registry.Wide(registry.Col("Selector", registry.TString, batchv1.JobSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		c := o.(*batchv1.CronJob)
		last := "<none>"
		if t := c.Status.LastScheduleTime; t != nil {
			last = registry.Since(t.Time)
		}
		js := c.Spec.JobTemplate.Spec
		cells := []any{c.Name, c.Spec.Schedule, registry.StrOr(c.Spec.TimeZone, "<none>"), registry.BoolWord(c.Spec.Suspend), int64(len(c.Status.Active)), last, registry.Age(c)}
		return append(registry.WithContainers(cells, js.Template.Spec.Containers), metav1.FormatLabelSelector(js.Selector))
	},
}

func ptrTo[T any](v T) *T { return &v }
