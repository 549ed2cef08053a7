// Package flowcontrol holds the kinds of flowcontrol.apiserver.k8s.io/v1,
// API Priority and Fairness: FlowSchemas and PriorityLevelConfigurations
// (each with status), with v1's defaults, kube-apiserver's validation
// (the mandatory objects' fixed specs included) and kubectl get columns.
//
// bonsai's request limits are its own (apiserver/flowcontrol.go: a
// workload and a system level); the objects are served so that charts,
// operators and kubectl that read or write them work, and the mandatory
// and suggested configuration kube-apiserver keeps is kept here too
// (apiserver/flowcontrol_objects.go).
package flowcontrol

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/apiserver/pkg/util/shufflesharding"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Group is the API group's name.
const Group = "flowcontrol.apiserver.k8s.io"

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR(Group, "v1", "flowschemas"), Kind: "FlowSchema", Subresources: []string{"status"},
			Strategy: flowSchemaStrategy, Defaulter: DefaultFlowSchema, Printer: &flowSchemaPrinter},
		{GVR: registry.GVR(Group, "v1", "prioritylevelconfigurations"), Kind: "PriorityLevelConfiguration", Subresources: []string{"status"},
			Strategy: priorityLevelStrategy, Defaulter: DefaultPriorityLevel, Printer: &priorityLevelPrinter},
	}
}

// v1's defaults.
const (
	defaultMatchingPrecedence int32 = 1000
	defaultHandSize           int32 = 8
	defaultQueues             int32 = 64
	defaultQueueLengthLimit   int32 = 50
	defaultNominalShares      int32 = 30
	maxQueues                 int32 = 10_000_000
)

// DefaultFlowSchema applies v1's defaults.
func DefaultFlowSchema(obj runtime.Object) {
	fs := obj.(*flowcontrolv1.FlowSchema)
	if fs.Spec.MatchingPrecedence == 0 {
		fs.Spec.MatchingPrecedence = defaultMatchingPrecedence
	}
}

// DefaultPriorityLevel applies v1's defaults.
func DefaultPriorityLevel(obj runtime.Object) {
	spec := &obj.(*flowcontrolv1.PriorityLevelConfiguration).Spec
	zero := func(p **int32) {
		if *p == nil {
			*p = new(int32)
		}
	}
	if e := spec.Exempt; e != nil {
		zero(&e.NominalConcurrencyShares)
		zero(&e.LendablePercent)
	}
	if l := spec.Limited; l != nil {
		if l.NominalConcurrencyShares == nil {
			v := defaultNominalShares
			l.NominalConcurrencyShares = &v
		}
		zero(&l.LendablePercent)
		if q := l.LimitResponse.Queuing; q != nil {
			for _, d := range []struct {
				f *int32
				v int32
			}{{&q.HandSize, defaultHandSize}, {&q.Queues, defaultQueues}, {&q.QueueLengthLimit, defaultQueueLengthLimit}} {
				if *d.f == 0 {
					*d.f = d.v
				}
			}
		}
	}
}

// mandatory are the objects whose spec kube-apiserver fixes, defaulted.
var mandatorySchemas, mandatoryLevels = func() (map[string]*flowcontrolv1.FlowSchema, map[string]*flowcontrolv1.PriorityLevelConfiguration) {
	fs, pl := map[string]*flowcontrolv1.FlowSchema{}, map[string]*flowcontrolv1.PriorityLevelConfiguration{}
	for _, o := range bootstrap.MandatoryFlowSchemas {
		o = o.DeepCopy()
		DefaultFlowSchema(o)
		fs[o.Name] = o
	}
	for _, o := range bootstrap.MandatoryPriorityLevelConfigurations {
		o = o.DeepCopy()
		DefaultPriorityLevel(o)
		pl[o.Name] = o
	}
	return fs, pl
}()

// strategy holds both kinds' rules: spec validation on every write,
// condition types on status writes.
type strategy struct {
	registry.GenerationStrategy
	validate       func(runtime.Object) field.ErrorList
	conditionTypes func(runtime.Object) []string
}

func (s strategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return s.validate(obj)
}

func (s strategy) ValidateUpdate(_ *registry.WriteCtx, obj, _ runtime.Object) field.ErrorList {
	return s.validate(obj)
}

func (s strategy) ValidateStatusUpdate(_ *registry.WriteCtx, obj, _ runtime.Object) field.ErrorList {
	return validateConditionTypes(s.conditionTypes(obj))
}

var (
	flowSchemaStrategy = strategy{
		validate: func(o runtime.Object) field.ErrorList { return validateFlowSchema(o.(*flowcontrolv1.FlowSchema)) },
		conditionTypes: func(o runtime.Object) (types []string) {
			for _, c := range o.(*flowcontrolv1.FlowSchema).Status.Conditions {
				types = append(types, string(c.Type))
			}
			return types
		},
	}
	priorityLevelStrategy = strategy{
		validate: func(o runtime.Object) field.ErrorList {
			return validatePriorityLevel(o.(*flowcontrolv1.PriorityLevelConfiguration))
		},
		conditionTypes: func(o runtime.Object) (types []string) {
			for _, c := range o.(*flowcontrolv1.PriorityLevelConfiguration).Status.Conditions {
				types = append(types, string(c.Type))
			}
			return types
		},
	}
)

// validateConditionTypes: every condition has a type, each type once.
func validateConditionTypes(types []string) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("status", "conditions")
	seen := map[string]bool{}
	for i, t := range types {
		if seen[t] {
			errs = append(errs, field.Duplicate(p.Index(i).Child("type"), t))
		}
		seen[t] = true
		if t == "" {
			errs = append(errs, field.Required(p.Index(i).Child("type"), ""))
		}
	}
	return errs
}

var (
	supportedVerbs       = []string{"create", "delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch"}
	distinguisherMethods = []string{string(flowcontrolv1.FlowDistinguisherMethodByNamespaceType), string(flowcontrolv1.FlowDistinguisherMethodByUserType)}
	subjectKinds         = []string{string(flowcontrolv1.SubjectKindGroup), string(flowcontrolv1.SubjectKindServiceAccount), string(flowcontrolv1.SubjectKindUser)}
)

func validateFlowSchema(fs *flowcontrolv1.FlowSchema) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	s := &fs.Spec
	switch {
	case s.MatchingPrecedence <= 0:
		errs = append(errs, field.Invalid(p.Child("matchingPrecedence"), s.MatchingPrecedence, "must be a positive value"))
	case s.MatchingPrecedence > 10000:
		errs = append(errs, field.Invalid(p.Child("matchingPrecedence"), s.MatchingPrecedence, "must not be greater than 10000"))
	case s.MatchingPrecedence == 1 && fs.Name != flowcontrolv1.FlowSchemaNameExempt:
		errs = append(errs, field.Invalid(p.Child("matchingPrecedence"), s.MatchingPrecedence, "only the schema named 'exempt' may have matchingPrecedence 1"))
	}
	if d := s.DistinguisherMethod; d != nil && !slices.Contains(distinguisherMethods, string(d.Type)) {
		errs = append(errs, field.NotSupported(p.Child("distinguisherMethod", "type"), d, distinguisherMethods))
	}
	if name := s.PriorityLevelConfiguration.Name; name == "" {
		errs = append(errs, field.Required(p.Child("priorityLevelConfiguration", "name"), "must reference a priority level"))
	} else {
		for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
			errs = append(errs, field.Invalid(p.Child("priorityLevelConfiguration", "name"), name, msg))
		}
	}
	for i := range s.Rules {
		errs = append(errs, validateRule(&s.Rules[i], p.Child("rules").Index(i))...)
	}
	if m, ok := mandatorySchemas[fs.Name]; ok && !equality.Semantic.DeepEqual(fs.Spec, m.Spec) {
		errs = append(errs, field.Invalid(p, fs.Spec, fmt.Sprintf("spec of '%s' must equal the fixed value", fs.Name)))
	}
	return errs
}

func validateRule(r *flowcontrolv1.PolicyRulesWithSubjects, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.Subjects) == 0 {
		errs = append(errs, field.Required(p.Child("subjects"), "subjects must contain at least one value"))
	}
	for i := range r.Subjects {
		errs = append(errs, validateSubject(&r.Subjects[i], p.Child("subjects").Index(i))...)
	}
	if len(r.ResourceRules) == 0 && len(r.NonResourceRules) == 0 {
		errs = append(errs, field.Required(p, "at least one of resourceRules and nonResourceRules has to be non-empty"))
	}
	for i := range r.ResourceRules {
		errs = append(errs, validateResourceRule(&r.ResourceRules[i], p.Child("resourceRules").Index(i))...)
	}
	for i := range r.NonResourceRules {
		rr, rp := &r.NonResourceRules[i], p.Child("nonResourceRules").Index(i)
		errs = append(errs, validateVerbs(rr.Verbs, rp.Child("verbs"))...)
		up := rp.Child("nonResourceURLs")
		switch {
		case len(rr.NonResourceURLs) == 0:
			errs = append(errs, field.Required(up, "nonResourceURLs must contain at least one value"))
		case slices.Contains(rr.NonResourceURLs, "*"):
			if len(rr.NonResourceURLs) > 1 {
				errs = append(errs, field.Invalid(up, rr.NonResourceURLs, "if '*' is present, must not specify other non-resource URLs"))
			}
		default:
			for j, u := range rr.NonResourceURLs {
				if msg := nonResourceURLError(u); msg != "" {
					errs = append(errs, field.Invalid(up.Index(j), u, msg))
				}
			}
		}
	}
	return errs
}

func validateSubject(s *flowcontrolv1.Subject, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	forbid := func(set bool, name, kind string) {
		if set {
			errs = append(errs, field.Forbidden(p.Child(name), fmt.Sprintf("%s is forbidden when subject kind is not '%s'", name, kind)))
		}
	}
	switch s.Kind {
	case flowcontrolv1.SubjectKindServiceAccount:
		sp := p.Child("serviceAccount")
		if sa := s.ServiceAccount; sa == nil {
			errs = append(errs, field.Required(sp, "serviceAccount is required when subject kind is 'ServiceAccount'"))
		} else {
			if sa.Name == "" {
				errs = append(errs, field.Required(sp.Child("name"), ""))
			} else if sa.Name != flowcontrolv1.NameAll {
				for _, msg := range apivalidation.ValidateServiceAccountName(sa.Name, false) {
					errs = append(errs, field.Invalid(sp.Child("name"), sa.Name, msg))
				}
			}
			if sa.Namespace == "" {
				errs = append(errs, field.Required(sp.Child("namespace"), "must specify namespace for service account"))
			} else {
				for _, msg := range apivalidation.ValidateNamespaceName(sa.Namespace, false) {
					errs = append(errs, field.Invalid(sp.Child("namespace"), sa.Namespace, msg))
				}
			}
		}
		forbid(s.User != nil, "user", "User")
		forbid(s.Group != nil, "group", "Group")
	case flowcontrolv1.SubjectKindUser:
		if s.User == nil {
			errs = append(errs, field.Required(p.Child("user"), "user is required when subject kind is 'User'"))
		} else if s.User.Name == "" {
			errs = append(errs, field.Required(p.Child("user", "name"), ""))
		}
		forbid(s.ServiceAccount != nil, "serviceAccount", "ServiceAccount")
		forbid(s.Group != nil, "group", "Group")
	case flowcontrolv1.SubjectKindGroup:
		if s.Group == nil {
			errs = append(errs, field.Required(p.Child("group"), "group is required when subject kind is 'Group'"))
		} else if s.Group.Name == "" {
			errs = append(errs, field.Required(p.Child("group", "name"), ""))
		}
		forbid(s.ServiceAccount != nil, "serviceAccount", "ServiceAccount")
		forbid(s.User != nil, "user", "User")
	default:
		errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, subjectKinds))
	}
	return errs
}

func validateVerbs(verbs []string, p *field.Path) field.ErrorList {
	switch {
	case len(verbs) == 0:
		return field.ErrorList{field.Required(p, "verbs must contain at least one value")}
	case slices.Contains(verbs, "*"):
		if len(verbs) > 1 {
			return field.ErrorList{field.Invalid(p, verbs, "if '*' is present, must not specify other verbs")}
		}
	default:
		for _, v := range verbs {
			if !slices.Contains(supportedVerbs, v) {
				return field.ErrorList{field.NotSupported(p, verbs, supportedVerbs)}
			}
		}
	}
	return nil
}

func validateResourceRule(r *flowcontrolv1.ResourcePolicyRule, p *field.Path) field.ErrorList {
	errs := validateVerbs(r.Verbs, p.Child("verbs"))
	for _, l := range []struct {
		name, what string
		items      []string
	}{{"apiGroups", "api group", r.APIGroups}, {"resources", "resource", r.Resources}} {
		if len(l.items) == 0 {
			errs = append(errs, field.Required(p.Child(l.name), "resource rules must supply at least one "+l.what))
		} else if len(l.items) > 1 && slices.Contains(l.items, "*") {
			errs = append(errs, field.Invalid(p.Child(l.name), l.items, "if '*' is present, must not specify other "+l.what+"s"))
		}
	}
	np := p.Child("namespaces")
	switch {
	case len(r.Namespaces) == 0 && !r.ClusterScope:
		errs = append(errs, field.Required(np, "resource rules that are not cluster scoped must supply at least one namespace"))
	case slices.Contains(r.Namespaces, "*"):
		if len(r.Namespaces) > 1 {
			errs = append(errs, field.Invalid(np, r.Namespaces, "if '*' is present, must not specify other namespaces"))
		}
	default:
		for i, ns := range r.Namespaces {
			for _, msg := range apivalidation.ValidateNamespaceName(ns, false) {
				errs = append(errs, field.Invalid(np.Index(i), ns, "each member of this list must be '*' or a DNS-1123 label; "+msg))
			}
		}
	}
	return errs
}

// nonResourceURLError is what is wrong with a rule's non-resource URL.
func nonResourceURLError(u string) string {
	switch {
	case u == "":
		return "must not be empty"
	case u == "/":
		return ""
	case !strings.HasPrefix(u, "/"):
		return "must start with slash"
	case strings.Contains(u, " "):
		return "must not contain white-space"
	case strings.Contains(u, "//"):
		return "must not contain double slash"
	}
	if n := strings.Count(u, "*"); n > 1 || (n == 1 && !strings.HasSuffix(u, "/*")) {
		return "wildcard can only do suffix matching"
	}
	return ""
}

// preserveZeroSharesAnnotation is a v1beta3 round-trip annotation that v1
// objects may not carry.
const preserveZeroSharesAnnotation = "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares"

func validatePriorityLevel(pl *flowcontrolv1.PriorityLevelConfiguration) field.ErrorList {
	var errs field.ErrorList
	if _, ok := pl.Annotations[preserveZeroSharesAnnotation]; ok {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations"), fmt.Sprintf("annotation '%s' is forbidden", preserveZeroSharesAnnotation)))
	}
	p := field.NewPath("spec")
	s := &pl.Spec
	if (pl.Name == flowcontrolv1.PriorityLevelConfigurationNameExempt) != (s.Type == flowcontrolv1.PriorityLevelEnablementExempt) {
		errs = append(errs, field.Invalid(p.Child("type"), s.Type, "must be 'Exempt' if and only if `name` is 'exempt'"))
	}
	switch s.Type {
	case flowcontrolv1.PriorityLevelEnablementExempt:
		if s.Limited != nil {
			errs = append(errs, field.Forbidden(p.Child("limited"), "must be nil if the type is not Limited"))
		}
		if e := s.Exempt; e != nil {
			ep := p.Child("exempt")
			if e.NominalConcurrencyShares != nil && *e.NominalConcurrencyShares < 0 {
				errs = append(errs, field.Invalid(ep.Child("nominalConcurrencyShares"), *e.NominalConcurrencyShares, "must be a non-negative integer"))
			}
			errs = append(errs, validateLendable(e.LendablePercent, ep)...)
		}
	case flowcontrolv1.PriorityLevelEnablementLimited:
		if s.Exempt != nil {
			errs = append(errs, field.Forbidden(p.Child("exempt"), "must be nil if the type is Limited"))
		}
		if s.Limited == nil {
			errs = append(errs, field.Required(p.Child("limited"), "must not be empty when type is Limited"))
		} else {
			errs = append(errs, validateLimited(s.Limited, p.Child("limited"))...)
		}
	case "":
		errs = append(errs, field.Required(p.Child("type"), ""))
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), s.Type, []string{string(flowcontrolv1.PriorityLevelEnablementExempt), string(flowcontrolv1.PriorityLevelEnablementLimited)}))
	}
	if m, ok := mandatoryLevels[pl.Name]; ok {
		have := s.DeepCopy()
		msg := fmt.Sprintf("spec of '%s' must equal the fixed value", pl.Name)
		if pl.Name == flowcontrolv1.PriorityLevelConfigurationNameExempt {
			// Only the exempt level's spec.exempt may be tuned.
			have.Exempt = m.Spec.Exempt
			msg = fmt.Sprintf("spec of '%s' except the 'spec.exempt' field must equal the fixed value", pl.Name)
		}
		if !equality.Semantic.DeepEqual(*have, m.Spec) {
			errs = append(errs, field.Invalid(p, pl.Spec, msg))
		}
	}
	return errs
}

func validateLendable(v *int32, p *field.Path) field.ErrorList {
	if v != nil && (*v < 0 || *v > 100) {
		return field.ErrorList{field.Invalid(p.Child("lendablePercent"), *v, "must be between 0 and 100, inclusive")}
	}
	return nil
}

func validateLimited(l *flowcontrolv1.LimitedPriorityLevelConfiguration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if l.NominalConcurrencyShares != nil && *l.NominalConcurrencyShares < 0 {
		errs = append(errs, field.Invalid(p.Child("nominalConcurrencyShares"), *l.NominalConcurrencyShares, "must be a non-negative integer"))
	}
	errs = append(errs, validateLendable(l.LendablePercent, p)...)
	if b := l.BorrowingLimitPercent; b != nil && *b < 0 {
		errs = append(errs, field.Invalid(p.Child("borrowingLimitPercent"), *b, "if specified, must be a non-negative integer"))
	}
	rp := p.Child("limitResponse")
	switch r := l.LimitResponse; r.Type {
	case flowcontrolv1.LimitResponseTypeReject:
		if r.Queuing != nil {
			errs = append(errs, field.Forbidden(rp.Child("queuing"), "must be nil if limited.limitResponse.type is not Limited"))
		}
	case flowcontrolv1.LimitResponseTypeQueue:
		if r.Queuing == nil {
			errs = append(errs, field.Required(rp.Child("queuing"), "must not be empty if limited.limitResponse.type is Limited"))
		} else {
			errs = append(errs, validateQueuing(r.Queuing, rp.Child("queuing"))...)
		}
	case "":
		errs = append(errs, field.Required(rp.Child("type"), ""))
	default:
		errs = append(errs, field.NotSupported(rp.Child("type"), r.Type, []string{string(flowcontrolv1.LimitResponseTypeQueue), string(flowcontrolv1.LimitResponseTypeReject)}))
	}
	return errs
}

func validateQueuing(q *flowcontrolv1.QueuingConfiguration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if q.QueueLengthLimit <= 0 {
		errs = append(errs, field.Invalid(p.Child("queueLengthLimit"), q.QueueLengthLimit, "must be positive"))
	}
	if q.Queues <= 0 {
		errs = append(errs, field.Invalid(p.Child("queues"), q.Queues, "must be positive"))
	} else if q.Queues > maxQueues {
		errs = append(errs, field.Invalid(p.Child("queues"), q.Queues, fmt.Sprintf("must not be greater than %d", maxQueues)))
	}
	switch {
	case q.HandSize <= 0:
		errs = append(errs, field.Invalid(p.Child("handSize"), q.HandSize, "must be positive"))
	case q.HandSize > q.Queues:
		errs = append(errs, field.Invalid(p.Child("handSize"), q.HandSize, fmt.Sprintf("should not be greater than queues (%d)", q.Queues)))
	case shufflesharding.RequiredEntropyBits(int(q.Queues), int(q.HandSize)) > shufflesharding.MaxHashBits:
		errs = append(errs, field.Invalid(p.Child("handSize"), q.HandSize,
			fmt.Sprintf("required entropy bits of deckSize %d and handSize %d should not be greater than %d", q.Queues, q.HandSize, shufflesharding.MaxHashBits)))
	}
	return errs
}

// The columns are upstream's, numbers in columns of type string included
// (as they are on the wire).
var flowSchemaPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("PriorityLevel", registry.TString, flowcontrolv1.PriorityLevelConfigurationReference{}.SwaggerDoc()["name"]),
		registry.Col("MatchingPrecedence", registry.TString, flowcontrolv1.FlowSchemaSpec{}.SwaggerDoc()["matchingPrecedence"]),
		registry.Col("DistinguisherMethod", registry.TString, flowcontrolv1.FlowSchemaSpec{}.SwaggerDoc()["distinguisherMethod"]),
		registry.AgeCol,
		registry.Col("MissingPL", registry.TString, "references a broken or non-existent PriorityLevelConfiguration")),
	Cells: func(o runtime.Object) []any {
		fs := o.(*flowcontrolv1.FlowSchema)
		method := "<none>"
		if fs.Spec.DistinguisherMethod != nil {
			method = string(fs.Spec.DistinguisherMethod.Type)
		}
		missing := "?"
		for _, c := range fs.Status.Conditions {
			if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
				missing = string(c.Status)
				break
			}
		}
		return []any{fs.Name, fs.Spec.PriorityLevelConfiguration.Name, int64(fs.Spec.MatchingPrecedence), method, registry.Age(fs), missing}
	},
	// In the order requests are matched: precedence, then name.
	Order: func(objs []runtime.Object) {
		slices.SortStableFunc(objs, func(a, b runtime.Object) int {
			x, y := a.(*flowcontrolv1.FlowSchema), b.(*flowcontrolv1.FlowSchema)
			if c := cmp.Compare(x.Spec.MatchingPrecedence, y.Spec.MatchingPrecedence); c != 0 {
				return c
			}
			return strings.Compare(x.Name, y.Name)
		})
	},
}

var priorityLevelPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Type", registry.TString, flowcontrolv1.PriorityLevelConfigurationSpec{}.SwaggerDoc()["type"]),
		registry.Col("NominalConcurrencyShares", registry.TString, flowcontrolv1.LimitedPriorityLevelConfiguration{}.SwaggerDoc()["nominalConcurrencyShares"]),
		registry.Col("Queues", registry.TString, flowcontrolv1.QueuingConfiguration{}.SwaggerDoc()["queues"]),
		registry.Col("HandSize", registry.TString, flowcontrolv1.QueuingConfiguration{}.SwaggerDoc()["handSize"]),
		registry.Col("QueueLengthLimit", registry.TString, flowcontrolv1.QueuingConfiguration{}.SwaggerDoc()["queueLengthLimit"]),
		registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		pl := o.(*flowcontrolv1.PriorityLevelConfiguration)
		var shares, queues, hand, length any = "<none>", "<none>", "<none>", "<none>"
		if l := pl.Spec.Limited; l != nil {
			if l.NominalConcurrencyShares != nil {
				shares = int64(*l.NominalConcurrencyShares)
			}
			if q := l.LimitResponse.Queuing; q != nil {
				queues, hand, length = int64(q.Queues), int64(q.HandSize), int64(q.QueueLengthLimit)
			}
		}
		return []any{pl.Name, string(pl.Spec.Type), shares, queues, hand, length, registry.Age(pl)}
	},
}
