package podsecurity

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/pod-security-admission/api"
)

// namespaces is a NamespaceGetter over a fixed set of namespaces' labels.
type namespaces map[string]map[string]string

func (n namespaces) GetNamespace(_ context.Context, name string) (*corev1.Namespace, error) {
	l, ok := n[name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, nil
}

// pods is a PodLister over fixed pods; listed says a list happened.
type pods struct {
	byNS   map[string][]*corev1.Pod
	listed bool
}

func (p *pods) ListPods(_ context.Context, namespace string) ([]*corev1.Pod, error) {
	p.listed = true
	var out []*corev1.Pod
	for _, pod := range p.byNS[namespace] {
		out = append(out, pod.DeepCopy())
	}
	return out, nil
}

const (
	enforce = "pod-security.kubernetes.io/enforce"
	audit   = "pod-security.kubernetes.io/audit"
	warn    = "pod-security.kubernetes.io/warn"
)

// The namespaces of the tests: one per mode and level.
var testNamespaces = namespaces{
	"plain":              nil,
	"enforce-baseline":   {enforce: "baseline"},
	"warn-baseline":      {warn: "baseline"},
	"audit-baseline":     {audit: "baseline"},
	"enforce-restricted": {enforce: "restricted"},
	"warn-restricted":    {warn: "restricted"},
	"exempt":             {enforce: "restricted"},
	"bad-label":          {enforce: "strict"},
}

// The messages of upstream's checks for the pods below.
const (
	privilegedDetail = `host namespaces (hostNetwork=true), privileged (container "c" must not set securityContext.privileged=true)`
	restrictedDetail = `allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), ` +
		`unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), ` +
		`runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), ` +
		`seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`
	restrictedReasons = `allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile`
)

// plainSpec meets baseline, not restricted.
func plainSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
}

// privilegedSpec breaks baseline twice: the host's network, a privileged
// container.
func privilegedSpec() corev1.PodSpec {
	s := plainSpec()
	s.HostNetwork = true
	priv := true
	s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &priv}
	return s
}

func pod(ns, name string, spec corev1.PodSpec) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func podRequest(op admissionv1.Operation, subresource string, obj, old *corev1.Pod) *Request {
	r := &Request{
		Operation: op, Resource: corev1.SchemeGroupVersion.WithResource("pods"), Subresource: subresource,
		Kind: corev1.SchemeGroupVersion.WithKind("Pod"), Namespace: obj.Namespace, Name: obj.Name,
		UserName: "alice", Object: obj,
	}
	if old != nil {
		r.OldObject = old
	}
	return r
}

func newTestPlugin(t *testing.T, cfg *Configuration, p *pods) *Plugin {
	t.Helper()
	if p == nil {
		p = &pods{}
	}
	pl, err := New(cfg, testNamespaces, p, api.MajorMinorVersion(1, 37))
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func exemptions(t *testing.T) *Configuration {
	t.Helper()
	cfg, err := LoadConfiguration([]byte(`apiVersion: pod-security.admission.config.k8s.io/v1
kind: PodSecurityConfiguration
exemptions:
  usernames: [system:exempt-user]
  namespaces: [exempt]
  runtimeClasses: [kata]
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// statusOf is the Status of a Decision's error; nil when allowed.
func statusOf(t *testing.T, d Decision) *metav1.Status {
	t.Helper()
	if d.Err == nil {
		return nil
	}
	se, ok := d.Err.(*apierrors.StatusError)
	if !ok {
		t.Fatalf("error %T %v is not a StatusError", d.Err, d.Err)
	}
	return &se.ErrStatus
}

func TestPods(t *testing.T) {
	pl := newTestPlugin(t, exemptions(t), nil)
	withImage := func(p *corev1.Pod, image string) *corev1.Pod {
		p = p.DeepCopy()
		p.Spec.Containers[0].Image = image
		return p
	}
	withLabel := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.Labels = map[string]string{"app": "x"}
		return p
	}
	kata := "kata"
	kataSpec := privilegedSpec()
	kataSpec.RuntimeClassName = &kata
	priv := pod("enforce-baseline", "p", privilegedSpec())
	ephemeral := pod("enforce-baseline", "p", plainSpec())
	withEphemeral := ephemeral.DeepCopy()
	yes := true
	withEphemeral.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debug", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: &yes}}}}
	for _, tc := range []struct {
		name        string
		req         *Request
		wantCode    int32
		wantMessage string
		wantWarn    []string
		wantAudit   map[string]string
	}{{
		name:        "privileged pod in an enforce=baseline namespace is refused",
		req:         podRequest(admissionv1.Create, "", priv, nil),
		wantCode:    http.StatusForbidden,
		wantMessage: `pods "p" is forbidden: violates PodSecurity "baseline:latest": ` + privilegedDetail,
		wantAudit:   map[string]string{"pod-security.kubernetes.io/enforce-policy": "baseline:latest"},
	}, {
		name:      "privileged pod in a warn=baseline namespace is warned about",
		req:       podRequest(admissionv1.Create, "", pod("warn-baseline", "p", privilegedSpec()), nil),
		wantWarn:  []string{`would violate PodSecurity "baseline:latest": ` + privilegedDetail},
		wantAudit: map[string]string{"pod-security.kubernetes.io/enforce-policy": "privileged:latest"},
	}, {
		name: "privileged pod in an audit=baseline namespace is audited",
		req:  podRequest(admissionv1.Create, "", pod("audit-baseline", "p", privilegedSpec()), nil),
		wantAudit: map[string]string{
			"pod-security.kubernetes.io/enforce-policy":   "privileged:latest",
			"pod-security.kubernetes.io/audit-violations": `would violate PodSecurity "baseline:latest": ` + privilegedDetail,
		},
	}, {
		name:      "a namespace without labels is privileged",
		req:       podRequest(admissionv1.Create, "", pod("plain", "p", privilegedSpec()), nil),
		wantAudit: map[string]string{"pod-security.kubernetes.io/enforce-policy": "privileged:latest"},
	}, {
		name:        "enforce=restricted warns at restricted too, but a refusal carries no warning",
		req:         podRequest(admissionv1.Create, "", pod("enforce-restricted", "p", plainSpec()), nil),
		wantCode:    http.StatusForbidden,
		wantMessage: `pods "p" is forbidden: violates PodSecurity "restricted:latest": ` + restrictedDetail,
		wantAudit:   map[string]string{"pod-security.kubernetes.io/enforce-policy": "restricted:latest"},
	}, {
		name:      "exempt namespace",
		req:       podRequest(admissionv1.Create, "", pod("exempt", "p", privilegedSpec()), nil),
		wantAudit: map[string]string{"pod-security.kubernetes.io/exempt": "namespace"},
	}, {
		name: "exempt user",
		req: func() *Request {
			r := podRequest(admissionv1.Create, "", priv, nil)
			r.UserName = "system:exempt-user"
			return r
		}(),
		wantAudit: map[string]string{"pod-security.kubernetes.io/exempt": "user"},
	}, {
		name:      "exempt runtime class",
		req:       podRequest(admissionv1.Create, "", pod("enforce-baseline", "p", kataSpec), nil),
		wantAudit: map[string]string{"pod-security.kubernetes.io/exempt": "runtimeClass"},
	}, {
		name: "an update that changes no image is not evaluated",
		req:  podRequest(admissionv1.Update, "", withLabel(priv), priv),
	}, {
		name:        "an update that changes an image is",
		req:         podRequest(admissionv1.Update, "", withImage(priv, "busybox:2"), priv),
		wantCode:    http.StatusForbidden,
		wantMessage: `pods "p" is forbidden: violates PodSecurity "baseline:latest": ` + privilegedDetail,
		wantAudit:   map[string]string{"pod-security.kubernetes.io/enforce-policy": "baseline:latest"},
	}, {
		name: "status writes are not evaluated",
		req:  podRequest(admissionv1.Update, "status", withImage(priv, "busybox:2"), priv),
	}, {
		name:        "a privileged ephemeral container is refused",
		req:         podRequest(admissionv1.Update, "ephemeralcontainers", withEphemeral, ephemeral),
		wantCode:    http.StatusForbidden,
		wantMessage: `pods "p" is forbidden: violates PodSecurity "baseline:latest": privileged (container "debug" must not set securityContext.privileged=true)`,
		wantAudit:   map[string]string{"pod-security.kubernetes.io/enforce-policy": "baseline:latest"},
	}, {
		name:        "a bad namespace label evaluates restricted and says so in the audit event",
		req:         podRequest(admissionv1.Create, "", pod("bad-label", "p", plainSpec()), nil),
		wantCode:    http.StatusForbidden,
		wantMessage: `pods "p" is forbidden: violates PodSecurity "restricted:latest": ` + restrictedDetail,
		wantAudit: map[string]string{
			"pod-security.kubernetes.io/enforce-policy": "restricted:latest",
			"pod-security.kubernetes.io/error":          `Failed to parse policy: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted`,
		},
	}, {
		name: "deletes are not evaluated",
		req:  podRequest(admissionv1.Delete, "", priv, nil),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := pl.Validate(context.Background(), tc.req)
			st := statusOf(t, d)
			switch {
			case tc.wantCode == 0 && st != nil:
				t.Fatalf("refused: %v", d.Err)
			case tc.wantCode != 0 && st == nil:
				t.Fatalf("allowed, want %d", tc.wantCode)
			case st != nil && (st.Code != tc.wantCode || st.Message != tc.wantMessage || st.Reason != metav1.StatusReasonForbidden):
				t.Errorf("status %d %s %q,\nwant %d Forbidden %q", st.Code, st.Reason, st.Message, tc.wantCode, tc.wantMessage)
			}
			if st != nil && (st.Details == nil || st.Details.Name != "p" || st.Details.Kind != "pods") {
				t.Errorf("details %+v", st.Details)
			}
			if diff := cmp.Diff(tc.wantWarn, d.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAudit, d.AuditAnnotations); diff != "" {
				t.Errorf("audit annotations (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWorkloads: every kind with a pod template gets the warning (never a
// refusal) of its template, in warn and in enforce namespaces alike, as
// upstream evaluates templates for warn and audit only.
func TestWorkloads(t *testing.T) {
	pl := newTestPlugin(t, nil, nil)
	tmpl := corev1.PodTemplateSpec{Spec: plainSpec()}
	objs := []struct {
		gvr schema.GroupVersionResource
		obj runtime.Object
	}{
		{appsv1.SchemeGroupVersion.WithResource("deployments"), &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: tmpl}}},
		{appsv1.SchemeGroupVersion.WithResource("replicasets"), &appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Template: tmpl}}},
		{appsv1.SchemeGroupVersion.WithResource("statefulsets"), &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Template: tmpl}}},
		{appsv1.SchemeGroupVersion.WithResource("daemonsets"), &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: tmpl}}},
		{batchv1.SchemeGroupVersion.WithResource("jobs"), &batchv1.Job{Spec: batchv1.JobSpec{Template: tmpl}}},
		{batchv1.SchemeGroupVersion.WithResource("cronjobs"), &batchv1.CronJob{Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}}}},
		{corev1.SchemeGroupVersion.WithResource("replicationcontrollers"), &corev1.ReplicationController{Spec: corev1.ReplicationControllerSpec{Template: &tmpl}}},
		{corev1.SchemeGroupVersion.WithResource("podtemplates"), &corev1.PodTemplate{Template: tmpl}},
	}
	want := []string{`would violate PodSecurity "restricted:latest": ` + restrictedDetail}
	for _, o := range objs {
		for _, ns := range []string{"warn-restricted", "enforce-restricted"} {
			t.Run(o.gvr.Resource+" in "+ns, func(t *testing.T) {
				if !pl.Handles(o.gvr.GroupResource()) {
					t.Fatal("not handled")
				}
				d := pl.Validate(context.Background(), &Request{Operation: admissionv1.Create, Resource: o.gvr, Namespace: ns, Name: "w", UserName: "alice", Object: o.obj})
				if d.Err != nil {
					t.Fatalf("refused: %v", d.Err)
				}
				if diff := cmp.Diff(want, d.Warnings); diff != "" {
					t.Errorf("warnings (-want +got):\n%s", diff)
				}
				if _, ok := d.AuditAnnotations["pod-security.kubernetes.io/enforce-policy"]; ok {
					t.Errorf("a workload has an enforce-policy annotation: %v", d.AuditAnnotations)
				}
			})
		}
	}
	// Subresources (scale, status) are not evaluated.
	d := pl.Validate(context.Background(), &Request{Operation: admissionv1.Update, Resource: objs[0].gvr, Subresource: "scale", Namespace: "warn-restricted", Name: "w", Object: objs[0].obj, OldObject: objs[0].obj})
	if d.Err != nil || len(d.Warnings) > 0 {
		t.Errorf("scale: %+v", d)
	}
	for _, gr := range []schema.GroupResource{corev1.Resource("configmaps"), {Group: "apps", Resource: "controllerrevisions"}, corev1.Resource("services")} {
		if pl.Handles(gr) {
			t.Errorf("%s handled", gr)
		}
	}
}

func nsRequest(op admissionv1.Operation, name string, labels, oldLabels map[string]string) *Request {
	r := &Request{
		Operation: op, Resource: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: corev1.SchemeGroupVersion.WithKind("Namespace"),
		Namespace: name, Name: name, UserName: "alice",
		Object: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}},
	}
	if op == admissionv1.Update {
		r.OldObject = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: oldLabels}}
	}
	return r
}

func TestNamespaces(t *testing.T) {
	controller := metav1.NewControllerRef(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs", UID: "rs-uid"}}, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	replica := func(name string) *corev1.Pod {
		p := pod("apps", name, plainSpec())
		p.OwnerReferences = []metav1.OwnerReference{*controller}
		return p
	}
	existing := &pods{byNS: map[string][]*corev1.Pod{
		"apps":   {pod("apps", "web", plainSpec()), replica("rs-b"), replica("rs-a"), pod("apps", "host", privilegedSpec())},
		"exempt": {pod("exempt", "web", plainSpec())},
	}}
	pl := newTestPlugin(t, exemptions(t), existing)
	for _, tc := range []struct {
		name        string
		req         *Request
		wantCode    int32
		wantMessage string
		wantWarn    []string
		wantList    bool
	}{{
		name: "create with valid labels",
		req:  nsRequest(admissionv1.Create, "apps", map[string]string{enforce: "restricted", "pod-security.kubernetes.io/enforce-version": "v1.30"}, nil),
	}, {
		name:        "create with a bad level",
		req:         nsRequest(admissionv1.Create, "apps", map[string]string{enforce: "strict"}, nil),
		wantCode:    http.StatusUnprocessableEntity,
		wantMessage: `Namespace "apps" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted`,
	}, {
		name:        "update to a bad version",
		req:         nsRequest(admissionv1.Update, "apps", map[string]string{warn: "baseline", "pod-security.kubernetes.io/warn-version": "1.30"}, nil),
		wantCode:    http.StatusUnprocessableEntity,
		wantMessage: `Namespace "apps" is invalid: metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: "1.30": must be "latest" or "v1.x"`,
	}, {
		name: "an update that keeps a bad label it had is allowed",
		req:  nsRequest(admissionv1.Update, "apps", map[string]string{enforce: "strict", "team": "a"}, map[string]string{enforce: "strict"}),
	}, {
		name: "tightening enforce dry-runs the namespace's pods",
		req:  nsRequest(admissionv1.Update, "apps", map[string]string{enforce: "restricted"}, nil),
		wantWarn: []string{
			`existing pods in namespace "apps" violate the new PodSecurity enforce level "restricted:latest"`,
			`host: host namespaces, privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile`,
			// Pods with the same violations are one warning, under
			// the first name in order.
			`rs-a (and 2 other pods): ` + restrictedReasons,
		},
		wantList: true,
	}, {
		name:     "tightening to baseline names only the pods baseline refuses",
		req:      nsRequest(admissionv1.Update, "apps", map[string]string{enforce: "baseline"}, map[string]string{enforce: "privileged"}),
		wantWarn: []string{`existing pods in namespace "apps" violate the new PodSecurity enforce level "baseline:latest"`, `host: host namespaces, privileged`},
		wantList: true,
	}, {
		name: "relaxing enforce lists nothing",
		req:  nsRequest(admissionv1.Update, "apps", map[string]string{enforce: "baseline"}, map[string]string{enforce: "restricted"}),
	}, {
		name: "the same enforce level lists nothing",
		req:  nsRequest(admissionv1.Update, "apps", map[string]string{enforce: "restricted", "team": "a"}, map[string]string{enforce: "restricted"}),
	}, {
		name:     "an exempt namespace is told its labels are ignored",
		req:      nsRequest(admissionv1.Update, "exempt", map[string]string{enforce: "restricted"}, nil),
		wantWarn: []string{`namespace "exempt" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored`},
	}, {
		name: "status and finalize are not evaluated",
		req: func() *Request {
			r := nsRequest(admissionv1.Update, "apps", map[string]string{enforce: "strict"}, nil)
			r.Subresource = "status"
			return r
		}(),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			existing.listed = false
			d := pl.Validate(context.Background(), tc.req)
			st := statusOf(t, d)
			switch {
			case tc.wantCode == 0 && st != nil:
				t.Fatalf("refused: %v", d.Err)
			case tc.wantCode != 0 && st == nil:
				t.Fatalf("allowed, want %d", tc.wantCode)
			case st != nil && (st.Code != tc.wantCode || st.Message != tc.wantMessage):
				t.Errorf("status %d %q,\nwant %d %q", st.Code, st.Message, tc.wantCode, tc.wantMessage)
			}
			if diff := cmp.Diff(tc.wantWarn, d.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if existing.listed != tc.wantList {
				t.Errorf("pods listed: %v, want %v", existing.listed, tc.wantList)
			}
		})
	}
}

func TestLoadConfiguration(t *testing.T) {
	def, err := LoadConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := def.Defaults; d.Enforce != "privileged" || d.Audit != "privileged" || d.Warn != "privileged" ||
		d.EnforceVersion != "latest" || d.AuditVersion != "latest" || d.WarnVersion != "latest" {
		t.Errorf("defaults: %+v", d)
	}
	if e := def.Exemptions; len(e.Namespaces)+len(e.Usernames)+len(e.RuntimeClasses) > 0 {
		t.Errorf("exemptions: %+v", e)
	}
	cfg, err := LoadConfiguration([]byte(`{"apiVersion":"pod-security.admission.config.k8s.io/v1","kind":"PodSecurityConfiguration","defaults":{"enforce":"baseline","warn":"restricted"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Defaults; d.Enforce != "baseline" || d.Warn != "restricted" || d.Audit != "privileged" || d.EnforceVersion != "latest" {
		t.Errorf("partial defaults: %+v", d)
	}
	for _, tc := range []struct{ data, want string }{
		{`{"apiVersion":"pod-security.admission.config.k8s.io/v1","kind":"PodSecurityConfiguration","defaults":{"enforce":"strict"}}`,
			`defaults.enforce: Invalid value: "strict": must be one of privileged, baseline, restricted`},
		{`{"apiVersion":"pod-security.admission.config.k8s.io/v1","kind":"PodSecurityConfiguration","defaults":{"audit-version":"1.30"}}`,
			`defaults.audit-version: Invalid value: "1.30": must be "latest" or "v1.x"`},
		{`{"apiVersion":"pod-security.admission.config.k8s.io/v1","kind":"PodSecurityConfiguration","exemptions":{"namespaces":["Not_A_Name"]}}`,
			`exemptions.namespaces[0]: Invalid value: "Not_A_Name"`},
		{`{"apiVersion":"pod-security.admission.config.k8s.io/v1","kind":"PodSecurityConfiguration","exemptions":{"usernames":["a","a"]}}`,
			`exemptions.usernames[1]: Duplicate value: "a"`},
		{`{"apiVersion":"pod-security.admission.config.k8s.io/v9","kind":"PodSecurityConfiguration"}`, `no kind "PodSecurityConfiguration" is registered for version "pod-security.admission.config.k8s.io/v9"`},
		{`{"kind":"PodSecurityConfiguration"}`, `Object 'apiVersion' is missing`},
	} {
		_, err := LoadConfiguration([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.data, err, tc.want)
		}
	}
	// The defaults of a configuration are the defaults of its namespaces.
	pl, err := New(cfg, testNamespaces, &pods{}, api.MajorMinorVersion(1, 37))
	if err != nil {
		t.Fatal(err)
	}
	d := pl.Validate(context.Background(), podRequest(admissionv1.Create, "", pod("plain", "p", privilegedSpec()), nil))
	if st := statusOf(t, d); st == nil || st.Message != `pods "p" is forbidden: violates PodSecurity "baseline:latest": `+privilegedDetail {
		t.Errorf("default enforce=baseline: %v", d.Err)
	}
	d = pl.Validate(context.Background(), podRequest(admissionv1.Create, "", pod("plain", "p", plainSpec()), nil))
	if d.Err != nil || len(d.Warnings) != 1 || !strings.HasPrefix(d.Warnings[0], `would violate PodSecurity "restricted:latest"`) {
		t.Errorf("default warn=restricted: %+v", d)
	}
}
