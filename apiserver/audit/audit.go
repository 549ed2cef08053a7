// Package audit writes Kubernetes audit events (audit.k8s.io/v1 Event, one
// JSON object per line) for the requests an audit policy (audit.k8s.io/v1
// Policy) selects, as kube-apiserver's log backend does. It owns the
// policy file's format and its evaluation and the log file; the API
// server's handler chain decides when each stage happens.
//
// The types mirror audit.k8s.io/v1 field for field on the wire; they are
// declared here because k8s.io/apiserver's copy would raise direct
// dependencies (the Prometheus client) for the whole binary.
package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"gopkg.in/natefinch/lumberjack.v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// Level is how much of a request an event records.
type Level string

const (
	LevelNone            Level = "None"
	LevelMetadata        Level = "Metadata"
	LevelRequest         Level = "Request"
	LevelRequestResponse Level = "RequestResponse"
)

// Less says whether l records less than o.
func (l Level) Less(o Level) bool { return levelRank[l] < levelRank[o] }

var levelRank = map[Level]int{LevelNone: 0, LevelMetadata: 1, LevelRequest: 2, LevelRequestResponse: 3}

// Stage is a point in a request's handling where an event is written.
type Stage string

const (
	StageRequestReceived  Stage = "RequestReceived"
	StageResponseStarted  Stage = "ResponseStarted"
	StageResponseComplete Stage = "ResponseComplete"
	StagePanic            Stage = "Panic"
)

var stages = map[Stage]bool{StageRequestReceived: true, StageResponseStarted: true, StageResponseComplete: true, StagePanic: true}

// Event is an audit.k8s.io/v1 Event.
type Event struct {
	metav1.TypeMeta          `json:",inline"`
	Level                    Level                      `json:"level"`
	AuditID                  types.UID                  `json:"auditID"`
	Stage                    Stage                      `json:"stage"`
	RequestURI               string                     `json:"requestURI"`
	Verb                     string                     `json:"verb"`
	User                     authenticationv1.UserInfo  `json:"user"`
	ImpersonatedUser         *authenticationv1.UserInfo `json:"impersonatedUser,omitempty"`
	SourceIPs                []string                   `json:"sourceIPs,omitempty"`
	UserAgent                string                     `json:"userAgent,omitempty"`
	ObjectRef                *ObjectReference           `json:"objectRef,omitempty"`
	ResponseStatus           *metav1.Status             `json:"responseStatus,omitempty"`
	RequestObject            json.RawMessage            `json:"requestObject,omitempty"`
	ResponseObject           json.RawMessage            `json:"responseObject,omitempty"`
	RequestReceivedTimestamp metav1.MicroTime           `json:"requestReceivedTimestamp"`
	StageTimestamp           metav1.MicroTime           `json:"stageTimestamp"`
	Annotations              map[string]string          `json:"annotations,omitempty"`
}

// ObjectReference is what a resource request acts on.
type ObjectReference struct {
	Resource        string    `json:"resource,omitempty"`
	Namespace       string    `json:"namespace,omitempty"`
	Name            string    `json:"name,omitempty"`
	UID             types.UID `json:"uid,omitempty"`
	APIGroup        string    `json:"apiGroup,omitempty"`
	APIVersion      string    `json:"apiVersion,omitempty"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	Subresource     string    `json:"subresource,omitempty"`
}

// Policy is an audit.k8s.io/v1 Policy.
type Policy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Rules             []PolicyRule `json:"rules"`
	OmitStages        []Stage      `json:"omitStages,omitempty"`
	OmitManagedFields bool         `json:"omitManagedFields,omitempty"`
}

// PolicyRule maps requests to a level; the first matching rule wins.
type PolicyRule struct {
	Level             Level            `json:"level"`
	Users             []string         `json:"users,omitempty"`
	UserGroups        []string         `json:"userGroups,omitempty"`
	Verbs             []string         `json:"verbs,omitempty"`
	Resources         []GroupResources `json:"resources,omitempty"`
	Namespaces        []string         `json:"namespaces,omitempty"`
	NonResourceURLs   []string         `json:"nonResourceURLs,omitempty"`
	OmitStages        []Stage          `json:"omitStages,omitempty"`
	OmitManagedFields *bool            `json:"omitManagedFields,omitempty"`
}

// GroupResources selects resources of one group.
type GroupResources struct {
	Group         string   `json:"group,omitempty"`
	Resources     []string `json:"resources,omitempty"`
	ResourceNames []string `json:"resourceNames,omitempty"`
}

// LoadPolicy reads and checks a policy file (YAML or JSON). Unknown
// fields are errors, as kube-apiserver's strict decoding makes them.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePolicy(data)
}

// ParsePolicy parses and checks a policy.
func ParsePolicy(data []byte) (*Policy, error) {
	var p Policy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("decoding audit policy: %v", err)
	}
	if p.APIVersion != "audit.k8s.io/v1" || p.Kind != "Policy" {
		return nil, fmt.Errorf("audit policy: apiVersion %q kind %q, want audit.k8s.io/v1 Policy", p.APIVersion, p.Kind)
	}
	if len(p.Rules) == 0 {
		return nil, fmt.Errorf("audit policy: no rules (kube-apiserver refuses a policy that logs nothing)")
	}
	var errs []string
	for _, s := range p.OmitStages {
		if !stages[s] {
			errs = append(errs, fmt.Sprintf("omitStages: Unsupported value: %q", s))
		}
	}
	for i, r := range p.Rules {
		at := fmt.Sprintf("rules[%d]", i)
		if _, ok := levelRank[r.Level]; !ok {
			errs = append(errs, fmt.Sprintf("%s.level: Unsupported value: %q: supported values: \"None\", \"Metadata\", \"Request\", \"RequestResponse\"", at, r.Level))
		}
		if len(r.NonResourceURLs) > 0 && (len(r.Resources) > 0 || len(r.Namespaces) > 0) {
			errs = append(errs, fmt.Sprintf("%s.nonResourceURLs: Invalid value: rules cannot apply to both regular resources and non-resource URLs", at))
		}
		for j, u := range r.NonResourceURLs {
			if u == "" || (u != "*" && !strings.HasPrefix(u, "/")) || strings.Contains(strings.TrimSuffix(u, "*"), "*") {
				errs = append(errs, fmt.Sprintf("%s.nonResourceURLs[%d]: Invalid value: %q: non-resource URLs must begin with / and may end with *", at, j, u))
			}
		}
		for j, gr := range r.Resources {
			for k, res := range gr.Resources {
				if res == "" {
					errs = append(errs, fmt.Sprintf("%s.resources[%d].resources[%d]: Required value", at, j, k))
				}
			}
			if len(gr.ResourceNames) > 0 && len(gr.Resources) == 0 {
				errs = append(errs, fmt.Sprintf("%s.resources[%d].resourceNames: Invalid value: using resourceNames requires at least one resource", at, j))
			}
		}
		for _, s := range r.OmitStages {
			if !stages[s] {
				errs = append(errs, fmt.Sprintf("%s.omitStages: Unsupported value: %q", at, s))
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid audit policy: %s", strings.Join(errs, "; "))
	}
	return &p, nil
}

// Attributes are what a rule matches on.
type Attributes struct {
	User            string
	Groups          []string
	Verb            string
	ResourceRequest bool
	APIGroup        string
	Resource        string
	Subresource     string
	Namespace       string
	Name            string
	Path            string
}

// LevelFor is the level of the first matching rule (None when none
// matches) and the stages to omit.
func (p *Policy) LevelFor(a Attributes) (Level, map[Stage]bool) {
	for i := range p.Rules {
		r := &p.Rules[i]
		if !r.matches(a) {
			continue
		}
		omit := map[Stage]bool{}
		for _, s := range p.OmitStages {
			omit[s] = true
		}
		for _, s := range r.OmitStages {
			omit[s] = true
		}
		return r.Level, omit
	}
	return LevelNone, nil
}

func (r *PolicyRule) matches(a Attributes) bool {
	if len(r.Users) > 0 && !has(r.Users, a.User) {
		return false
	}
	if len(r.UserGroups) > 0 {
		found := false
		for _, g := range a.Groups {
			found = found || has(r.UserGroups, g)
		}
		if !found {
			return false
		}
	}
	if len(r.Verbs) > 0 && !has(r.Verbs, a.Verb) {
		return false
	}
	if len(r.Namespaces) > 0 || len(r.Resources) > 0 {
		if !a.ResourceRequest {
			return false
		}
		if len(r.Namespaces) > 0 && !has(r.Namespaces, a.Namespace) {
			return false
		}
		if len(r.Resources) > 0 && !r.resourceMatches(a) {
			return false
		}
		return true
	}
	if len(r.NonResourceURLs) > 0 {
		if a.ResourceRequest {
			return false
		}
		for _, u := range r.NonResourceURLs {
			if u == "*" || u == a.Path || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.Path, strings.TrimSuffix(u, "*"))) {
				return true
			}
		}
		return false
	}
	return true
}

// resourceMatches follows Kubernetes: "pods" matches pods only, "pods/log"
// the subresource, "pods/*" every subresource of pods, "*/log" the
// subresource of any resource, "*" everything in the group.
func (r *PolicyRule) resourceMatches(a Attributes) bool {
	combined := a.Resource
	if a.Subresource != "" {
		combined += "/" + a.Subresource
	}
	for _, gr := range r.Resources {
		if gr.Group != a.APIGroup {
			continue
		}
		if len(gr.Resources) == 0 {
			return true
		}
		for _, res := range gr.Resources {
			if res == combined || res == "*" ||
				(res == a.Resource+"/*") ||
				(strings.HasPrefix(res, "*/") && a.Subresource != "" && res[2:] == a.Subresource) {
				if len(gr.ResourceNames) == 0 || has(gr.ResourceNames, a.Name) {
					return true
				}
			}
		}
	}
	return false
}

func has(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Log writes events as JSON lines.
type Log struct {
	mu sync.Mutex
	w  io.Writer
	c  io.Closer
}

// Rotation bounds an audit log file as kube-apiserver's
// --audit-log-maxsize, --audit-log-maxbackup and --audit-log-maxage do:
// past MaxSizeMB the file is renamed with a timestamp and a new one
// started; only the newest MaxBackups of those (0: all) younger than
// MaxAgeDays (0: any age) are kept.
type Rotation struct {
	MaxSizeMB, MaxBackups, MaxAgeDays int
}

// OpenLog appends to path ("-": standard output), rotating it as rot says.
func OpenLog(path string, rot Rotation) (*Log, error) {
	if path == "-" {
		return &Log{w: os.Stdout}, nil
	}
	// Open once here so that a path that cannot be written is an error at
	// start, not at the first event.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	f.Close()
	lj := &lumberjack.Logger{Filename: path, MaxSize: rot.MaxSizeMB, MaxBackups: rot.MaxBackups, MaxAge: rot.MaxAgeDays}
	return &Log{w: lj, c: lj}, nil
}

// NewLog writes to w (tests).
func NewLog(w io.Writer) *Log { return &Log{w: w} }

// Write writes one event.
func (l *Log) Write(ev *Event) error {
	ev.APIVersion, ev.Kind = "audit.k8s.io/v1", "Event"
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.w.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (l *Log) Close() error {
	if l.c != nil {
		return l.c.Close()
	}
	return nil
}
