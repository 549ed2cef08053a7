package apiserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/apiserver/admission"
	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/store"
)

// take returns the warnings since the last take.
func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// The messages of upstream's checks for the pods of these tests.
const (
	psaPrivilegedDetail = `host namespaces (hostNetwork=true), privileged (container "c" must not set securityContext.privileged=true)`
	psaRestrictedDetail = `allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), ` +
		`unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), ` +
		`runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), ` +
		`seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`
)

// psaPlainSpec meets baseline, not restricted.
func psaPlainSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
}

// psaPrivilegedSpec breaks baseline: the host's network, a privileged
// container.
func psaPrivilegedSpec() corev1.PodSpec {
	s := psaPlainSpec()
	s.HostNetwork = true
	priv := true
	s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &priv}
	return s
}

func psaPod(name string, spec corev1.PodSpec) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

// psaEnv is an API server with PodSecurity configured from an
// AdmissionConfiguration file and audit logging to a file, served over
// TLS to a client-go clientset that records warnings.
type psaEnv struct {
	cs       *kubernetes.Clientset
	warnings *warningRecorder
	srvURL   string
	http     *http.Client
	auditLog string
	ctx      context.Context
}

func newPSAEnv(t *testing.T) *psaEnv {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(cfgPath, []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: privileged
    exemptions:
      namespaces: [ops]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	adm, err := admission.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := audit.ParsePolicy([]byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  omitStages: [RequestReceived]\n"))
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.log")
	log, err := audit.OpenLog(logPath, audit.Rotation{MaxSizeMB: 100})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: st, Admission: adm, AuditPolicy: policy, AuditLog: log,
		AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Shutdown(); st.Close(); log.Close() })
	w := &warningRecorder{}
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, WarningHandler: w})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &psaEnv{cs: cs, warnings: w, srvURL: srv.URL, http: srv.Client(), auditLog: logPath, ctx: ctx}
}

// namespace creates a namespace with its default ServiceAccount (no
// controller runs here to make it) and returns the warnings of its
// create.
func (e *psaEnv) namespace(t *testing.T, name string, labels map[string]string) []string {
	t.Helper()
	if _, err := e.cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	warnings := e.warnings.take()
	if _, err := e.cs.CoreV1().ServiceAccounts(name).Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.warnings.take()
	return warnings
}

// auditAnnotations are the annotations of the first ResponseComplete
// event of verb on resource in namespace.
func (e *psaEnv) auditAnnotations(t *testing.T, verb, resource, namespace string) map[string]string {
	t.Helper()
	for _, ev := range readAuditFile(t, e.auditLog) {
		if ev.Stage == audit.StageResponseComplete && ev.Verb == verb && ev.ObjectRef != nil &&
			ev.ObjectRef.Resource == resource && ev.ObjectRef.Namespace == namespace {
			return ev.Annotations
		}
	}
	t.Fatalf("no audit event for %s %s in %s", verb, resource, namespace)
	return nil
}

// psaAnnotations picks the pod-security.kubernetes.io/ annotations.
func psaAnnotations(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			out[k] = v
		}
	}
	return out
}

// TestPodSecurityEnforce: a privileged pod in an enforce=baseline
// namespace is refused with 403 and upstream's message, over TLS to
// client-go, nothing is stored, and the refusal is in the audit log; a
// pod that meets baseline is created.
func TestPodSecurityEnforce(t *testing.T) {
	e := newPSAEnv(t)
	e.namespace(t, "base", map[string]string{"pod-security.kubernetes.io/enforce": "baseline"})
	pods := e.cs.CoreV1().Pods("base")
	_, err := pods.Create(e.ctx, psaPod("priv", psaPrivilegedSpec()), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("privileged pod in a baseline namespace: %v, want 403 Forbidden", err)
	}
	st := err.(apierrors.APIStatus).Status()
	want := `pods "priv" is forbidden: violates PodSecurity "baseline:latest": ` + psaPrivilegedDetail
	if st.Code != http.StatusForbidden || st.Message != want {
		t.Errorf("status %d %q,\nwant 403 %q", st.Code, st.Message, want)
	}
	if w := e.warnings.take(); len(w) > 0 {
		t.Errorf("a refusal came with warnings: %q", w)
	}
	if _, err := pods.Get(e.ctx, "priv", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused pod was stored: %v", err)
	}
	if diff := cmp.Diff(map[string]string{"pod-security.kubernetes.io/enforce-policy": "baseline:latest"},
		psaAnnotations(e.auditAnnotations(t, "create", "pods", "base"))); diff != "" {
		t.Errorf("audit annotations (-want +got):\n%s", diff)
	}
	// A dry run is refused the same way.
	if _, err := pods.Create(e.ctx, psaPod("priv", psaPrivilegedSpec()), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("dry-run create: %v, want 403", err)
	}
	if _, err := pods.Create(e.ctx, psaPod("plain", psaPlainSpec()), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a pod that meets baseline: %v", err)
	}

	// An ephemeral container is held to the namespace's level too.
	p, err := pods.Get(e.ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debug", Image: "busybox", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullAlways,
		SecurityContext: &corev1.SecurityContext{Privileged: &yes}}}}
	_, err = pods.UpdateEphemeralContainers(e.ctx, "plain", p, metav1.UpdateOptions{})
	if want := `pods "plain" is forbidden: violates PodSecurity "baseline:latest": privileged (container "debug" must not set securityContext.privileged=true)`; !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("privileged ephemeral container: %v, want %q", err, want)
	}
	// A label change is no pod spec change: never evaluated.
	if _, err := pods.Patch(e.ctx, "plain", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"x"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("label patch: %v", err)
	}

	// The plugin's metrics are kube-apiserver's.
	resp, err := e.http.Get(e.srvURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `pod_security_evaluations_total{decision="deny",mode="enforce",policy_level="baseline",policy_version="latest",request_operation="create",resource="pod",subresource=""} 2`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// TestPodSecurityWarnAndAudit: warn and audit namespaces let the pod in,
// with upstream's warning and audit annotation; workloads get the warning
// of their template and are never refused, not even where enforce would
// refuse their pods.
func TestPodSecurityWarnAndAudit(t *testing.T) {
	e := newPSAEnv(t)
	e.namespace(t, "warned", map[string]string{"pod-security.kubernetes.io/warn": "baseline"})
	e.namespace(t, "audited", map[string]string{"pod-security.kubernetes.io/audit": "baseline"})
	e.namespace(t, "restricted-warn", map[string]string{"pod-security.kubernetes.io/warn": "restricted"})
	e.namespace(t, "restricted", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})

	if _, err := e.cs.CoreV1().Pods("warned").Create(e.ctx, psaPod("priv", psaPrivilegedSpec()), metav1.CreateOptions{}); err != nil {
		t.Fatalf("privileged pod in a warn=baseline namespace: %v", err)
	}
	if diff := cmp.Diff([]string{`would violate PodSecurity "baseline:latest": ` + psaPrivilegedDetail}, e.warnings.take()); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}

	if _, err := e.cs.CoreV1().Pods("audited").Create(e.ctx, psaPod("priv", psaPrivilegedSpec()), metav1.CreateOptions{}); err != nil {
		t.Fatalf("privileged pod in an audit=baseline namespace: %v", err)
	}
	if w := e.warnings.take(); len(w) > 0 {
		t.Errorf("audit mode warned: %q", w)
	}
	if diff := cmp.Diff(map[string]string{
		"pod-security.kubernetes.io/enforce-policy":   "privileged:latest",
		"pod-security.kubernetes.io/audit-violations": `would violate PodSecurity "baseline:latest": ` + psaPrivilegedDetail,
	}, psaAnnotations(e.auditAnnotations(t, "create", "pods", "audited"))); diff != "" {
		t.Errorf("audit annotations (-want +got):\n%s", diff)
	}

	one := int32(1)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: psaPlainSpec()},
		},
	}
	wantWarn := []string{`would violate PodSecurity "restricted:latest": ` + psaRestrictedDetail}
	for _, ns := range []string{"restricted-warn", "restricted"} {
		if _, err := e.cs.AppsV1().Deployments(ns).Create(e.ctx, deploy.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatalf("deployment in %s: %v", ns, err)
		}
		if diff := cmp.Diff(wantWarn, e.warnings.take()); diff != "" {
			t.Errorf("deployment in %s: warnings (-want +got):\n%s", ns, diff)
		}
	}
	// An update of a workload is evaluated again, as upstream's, but not
	// a write of its scale.
	if _, err := e.cs.AppsV1().Deployments("restricted-warn").Patch(e.ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantWarn, e.warnings.take()); diff != "" {
		t.Errorf("deployment update: warnings (-want +got):\n%s", diff)
	}
	scale, err := e.cs.AppsV1().Deployments("restricted-warn").GetScale(e.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 3
	if _, err := e.cs.AppsV1().Deployments("restricted-warn").UpdateScale(e.ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := e.warnings.take(); len(w) > 0 {
		t.Errorf("scale update warned: %q", w)
	}
}

// TestPodSecurityNamespaceLabels: labels are checked (422 for a bad
// level or version), and tightening a namespace's enforce level dry-runs
// its pods and warns about those that would be refused, for a dry run of
// the change as for the change itself; new pods then meet the level.
func TestPodSecurityNamespaceLabels(t *testing.T) {
	e := newPSAEnv(t)
	nss := e.cs.CoreV1().Namespaces()
	_, err := nss.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bad", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "strict"}}}, metav1.CreateOptions{})
	want := `Namespace "bad" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted`
	if !apierrors.IsInvalid(err) || err.Error() != want {
		t.Fatalf("bad level: %v, want 422 %q", err, want)
	}
	if st := err.(apierrors.APIStatus).Status(); st.Code != http.StatusUnprocessableEntity || st.Details == nil || len(st.Details.Causes) != 1 ||
		st.Details.Causes[0].Field != "metadata.labels[pod-security.kubernetes.io/enforce]" {
		t.Errorf("bad level status: %+v", st)
	}
	if _, err := nss.Get(e.ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused namespace was stored: %v", err)
	}

	e.namespace(t, "apps", nil)
	for _, name := range []string{"web", "worker"} {
		if _, err := e.cs.CoreV1().Pods("apps").Create(e.ctx, psaPod(name, psaPlainSpec()), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.cs.CoreV1().Pods("apps").Create(e.ctx, psaPod("host", psaPrivilegedSpec()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.warnings.take()

	_, err = nss.Patch(e.ctx, "apps", types.MergePatchType, []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/warn-version":"1.30"}}}`), metav1.PatchOptions{})
	want = `Namespace "apps" is invalid: metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: "1.30": must be "latest" or "v1.x"`
	if !apierrors.IsInvalid(err) || err.Error() != want {
		t.Errorf("bad version: %v, want 422 %q", err, want)
	}

	restrict := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`)
	wantWarn := []string{
		`existing pods in namespace "apps" violate the new PodSecurity enforce level "restricted:latest"`,
		`host: host namespaces, privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile`,
		`web (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile`,
	}
	// kubectl label --dry-run=server: the warnings, nothing stored.
	if _, err := nss.Patch(e.ctx, "apps", types.MergePatchType, restrict, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantWarn, e.warnings.take()); diff != "" {
		t.Errorf("dry-run label change: warnings (-want +got):\n%s", diff)
	}
	if ns, err := nss.Get(e.ctx, "apps", metav1.GetOptions{}); err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "" {
		t.Fatalf("dry run stored the label: %v %v", ns.Labels, err)
	}
	if _, err := nss.Patch(e.ctx, "apps", types.MergePatchType, restrict, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantWarn, e.warnings.take()); diff != "" {
		t.Errorf("label change: warnings (-want +got):\n%s", diff)
	}
	// The same level again checks nothing.
	if _, err := nss.Patch(e.ctx, "apps", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := e.warnings.take(); len(w) > 0 {
		t.Errorf("an unchanged enforce level warned: %q", w)
	}
	// The new level holds at once for new pods.
	_, err = e.cs.CoreV1().Pods("apps").Create(e.ctx, psaPod("late", psaPlainSpec()), metav1.CreateOptions{})
	if want := `pods "late" is forbidden: violates PodSecurity "restricted:latest": ` + psaRestrictedDetail; !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("pod after the label change: %v, want %q", err, want)
	}
}

// TestPodSecurityExemptNamespace: a namespace exempted by the
// AdmissionConfiguration file runs privileged pods whatever its labels,
// and its label change is answered with upstream's notice.
func TestPodSecurityExemptNamespace(t *testing.T) {
	e := newPSAEnv(t)
	warnings := e.namespace(t, "ops", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	if diff := cmp.Diff([]string{`namespace "ops" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored`}, warnings); diff != "" {
		t.Errorf("exempt namespace create: warnings (-want +got):\n%s", diff)
	}
	if _, err := e.cs.CoreV1().Pods("ops").Create(e.ctx, psaPod("priv", psaPrivilegedSpec()), metav1.CreateOptions{}); err != nil {
		t.Fatalf("privileged pod in the exempt namespace: %v", err)
	}
	if w := e.warnings.take(); len(w) > 0 {
		t.Errorf("exempt pod warned: %q", w)
	}
	if diff := cmp.Diff(map[string]string{"pod-security.kubernetes.io/exempt": "namespace"},
		psaAnnotations(e.auditAnnotations(t, "create", "pods", "ops"))); diff != "" {
		t.Errorf("audit annotations (-want +got):\n%s", diff)
	}
	// Another namespace with the same label is held to it.
	e.namespace(t, "dev", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	if _, err := e.cs.CoreV1().Pods("dev").Create(e.ctx, psaPod("priv", psaPrivilegedSpec()), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("privileged pod in a restricted namespace: %v, want 403", err)
	}
}
