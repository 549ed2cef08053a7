package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestAdmissionWebhooksWithKubectl runs a webhook server built from
// testdata/webhook on the host and registers it by URL (mutating) and
// through a Service (validating) with kubectl; kubectl then sees the
// mutation, its warning and the denial, and a ValidatingAdmissionPolicy's
// denial. The server runs the control plane only (--disable-agent, so no
// service proxy): the Service is reached at its endpoints.
func TestAdmissionWebhooksWithKubectl(t *testing.T) {
	requireBinary(t)
	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1]
	s := startServer(t, t.TempDir())
	k := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: filepath.Join(s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	wh, err := testenv.StartWebhook(t.TempDir(), "e2e-webhook.default.svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wh.Stop)
	ca := base64.StdEncoding.EncodeToString(wh.CABundle)
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: e2e-webhook
  namespace: default
spec:
  ports:
  - name: https
    port: 443
    targetPort: %[1]d
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: e2e-webhook-host
  namespace: default
  labels:
    kubernetes.io/service-name: e2e-webhook
addressType: IPv4
endpoints:
- addresses: ["127.0.0.1"]
  conditions: {ready: true}
ports:
- name: https
  port: %[1]d
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: e2e-mutate
webhooks:
- name: mutate.e2e.bonsai.dev
  clientConfig:
    url: %[2]q
    caBundle: %[3]s
  rules:
  - operations: ["CREATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["configmaps"]
  namespaceSelector:
    matchLabels: {e2e-webhooks: "on"}
  sideEffects: None
  admissionReviewVersions: ["v1"]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: e2e-validate
webhooks:
- name: validate.e2e.bonsai.dev
  clientConfig:
    service:
      name: e2e-webhook
      namespace: default
      path: /validate
    caBundle: %[3]s
  rules:
  - operations: ["CREATE", "UPDATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["configmaps"]
  namespaceSelector:
    matchLabels: {e2e-webhooks: "on"}
  sideEffects: None
  admissionReviewVersions: ["v1"]
---
apiVersion: v1
kind: Namespace
metadata:
  name: hooked
  labels: {e2e-webhooks: "on"}
`, wh.Port, wh.URL("/mutate"), ca)
	k.must("apply", "-f", writeFile(t, "webhooks.yaml", manifest, 0o600))

	r := k.run("create", "configmap", "settings", "-n", "hooked", "--from-literal=mode=fast")
	if r.code != 0 || !strings.Contains(r.stderr, "Warning: configmap settings labelled by the e2e webhook") {
		t.Errorf("create through the mutating webhook: exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	if got := k.must("get", "configmap", "settings", "-n", "hooked", "-o", `jsonpath={.metadata.labels.e2e\.bonsai\.dev/mutated}`); got != "true" {
		t.Errorf("mutated label: %q", got)
	}
	// Outside the selected namespace nothing is called.
	if got := k.must("create", "configmap", "plain", "-n", "default", "--from-literal=a=b", "-o", "jsonpath={.metadata.labels}"); got != "" {
		t.Errorf("unselected namespace was mutated: %q", got)
	}
	denied := `apiVersion: v1
kind: ConfigMap
metadata:
  name: refused
  namespace: hooked
  labels: {e2e.bonsai.dev/deny: "yes"}
`
	stderr := k.fails("create", "-f", writeFile(t, "denied.yaml", denied, 0o600))
	if !strings.Contains(stderr, `Error from server (Forbidden): error when creating`) ||
		!strings.Contains(stderr, `admission webhook "validate.e2e.bonsai.dev" denied the request: objects labelled e2e.bonsai.dev/deny are refused`) {
		t.Errorf("denial through the Service:\n%s", stderr)
	}
	if got := k.run("get", "configmap", "refused", "-n", "hooked"); got.code == 0 {
		t.Errorf("a denied ConfigMap was stored")
	}
	// An update is validated too.
	stderr = k.fails("label", "configmap", "settings", "-n", "hooked", "e2e.bonsai.dev/deny=now")
	if !strings.Contains(stderr, `admission webhook "validate.e2e.bonsai.dev" denied the request`) {
		t.Errorf("denied update:\n%s", stderr)
	}
	out := k.must("get", "validatingwebhookconfigurations")
	if rows := fieldsOf(out); len(rows) != 2 || strings.Join(rows[0], " ") != "NAME WEBHOOKS AGE" || rows[1][0] != "e2e-validate" || rows[1][1] != "1" {
		t.Errorf("table:\n%s", out)
	}

	policy := `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: few-keys.e2e.bonsai.dev
spec:
  matchConstraints:
    resourceRules:
    - operations: ["CREATE", "UPDATE"]
      apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["configmaps"]
  validations:
  - expression: "!has(object.data) || size(object.data) <= 2"
    message: "at most two keys"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: few-keys-hooked
spec:
  policyName: few-keys.e2e.bonsai.dev
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {e2e-webhooks: "on"}
`
	k.must("apply", "-f", writeFile(t, "policy.yaml", policy, 0o600))
	if explain := k.must("explain", "validatingadmissionpolicy.spec.validations"); !strings.Contains(explain, "expression\t<string> -required-") {
		t.Errorf("kubectl explain:\n%s", explain)
	}
	stderr = k.fails("create", "configmap", "wide", "-n", "hooked", "--from-literal=a=1", "--from-literal=b=2", "--from-literal=c=3")
	if !strings.Contains(stderr, `configmaps "wide" is forbidden: ValidatingAdmissionPolicy 'few-keys.e2e.bonsai.dev' with binding 'few-keys-hooked' denied request: at most two keys`) {
		t.Errorf("policy denial:\n%s", stderr)
	}
	// Deleting the webhooks stops them at once.
	k.must("delete", "validatingwebhookconfiguration", "e2e-validate")
	k.must("delete", "validatingadmissionpolicybinding", "few-keys-hooked")
	if r := k.run("create", "-f", writeFile(t, "denied2.yaml", denied, 0o600)); r.code != 0 {
		t.Errorf("after deleting the validating webhook: exit %d\n%s", r.code, r.stderr)
	}
}

// TestAdmissionWebhookInAPod runs the webhook server in a pod of a real
// node, behind a Service with a selector: the API server calls one of the
// Service's ready endpoints, and kubectl sees the mutation and warning.
func TestAdmissionWebhookInAPod(t *testing.T) {
	e := startPodEnv(t)
	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1]
	k := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: filepath.Join(e.s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	dir := t.TempDir()
	bin, err := testenv.BuildWebhook(dir)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := testenv.WebhookCerts(filepath.Join(dir, "pki"), "pod-webhook.hooks.svc")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"bin/webhook": nil, "etc/webhook/tls.crt": nil, "etc/webhook/tls.key": nil}
	for name, src := range map[string]string{"bin/webhook": bin, "etc/webhook/tls.crt": filepath.Join(dir, "pki", "serving.crt"), "etc/webhook/tls.key": filepath.Join(dir, "pki", "serving.key")} {
		if files[name], err = os.ReadFile(src); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := testenv.BusyboxPath()
	if err != nil {
		t.Fatal(err)
	}
	layer, config, err := testenv.BusyboxLayer(bb, files)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.registry.Push("e2e/webhook", "1", layer, config); err != nil {
		t.Fatal(err)
	}
	manifest := `apiVersion: v1
kind: Namespace
metadata:
  name: hooks
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: pod-webhook
  namespace: hooks
spec:
  replicas: 1
  selector:
    matchLabels: {app: pod-webhook}
  template:
    metadata:
      labels: {app: pod-webhook}
    spec:
      containers:
      - name: webhook
        image: registry.bonsai.test/e2e/webhook:1
        command: ["/bin/webhook", "-listen", "0.0.0.0:8443", "-cert", "/etc/webhook/tls.crt", "-key", "/etc/webhook/tls.key"]
        ports:
        - containerPort: 8443
        readinessProbe:
          tcpSocket: {port: 8443}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: pod-webhook
  namespace: hooks
spec:
  selector: {app: pod-webhook}
  ports:
  - port: 443
    targetPort: 8443
`
	k.must("apply", "-f", writeFile(t, "pod-webhook.yaml", manifest, 0o600))
	k.must("rollout", "status", "-n", "hooks", "deployment/pod-webhook", "--timeout=90s")
	hook := fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: pod-mutate
webhooks:
- name: mutate.pod.e2e.bonsai.dev
  clientConfig:
    service: {name: pod-webhook, namespace: hooks, path: /mutate}
    caBundle: %s
  rules:
  - operations: ["CREATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["configmaps"]
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: app}
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: 5
`, base64.StdEncoding.EncodeToString(certs.CA.CertPEM))
	k.must("apply", "-f", writeFile(t, "pod-mutate.yaml", hook, 0o600))
	k.must("create", "namespace", "app")
	r := k.run("create", "configmap", "cfg", "-n", "app", "--from-literal=a=b")
	if r.code != 0 || !strings.Contains(r.stderr, "Warning: configmap cfg labelled by the e2e webhook") {
		t.Fatalf("create through the webhook in a pod: exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	if got := k.must("get", "configmap", "cfg", "-n", "app", "-o", `jsonpath={.metadata.labels.e2e\.bonsai\.dev/mutated}`); got != "true" {
		t.Errorf("mutated label: %q", got)
	}
	// With no pod behind the Service, the call fails and failurePolicy
	// Fail refuses the create.
	k.must("scale", "-n", "hooks", "deployment/pod-webhook", "--replicas=0")
	waitFor(t, 60*time.Second, "the webhook's endpoints to go", func() bool {
		return k.run("get", "pods", "-n", "hooks", "-o", "name").stdout == ""
	})
	stderr := k.fails("create", "configmap", "cfg2", "-n", "app", "--from-literal=a=b")
	if !strings.Contains(stderr, `Internal error occurred: failed calling webhook "mutate.pod.e2e.bonsai.dev": failed to call webhook`) {
		t.Errorf("webhook without pods:\n%s", stderr)
	}
}
