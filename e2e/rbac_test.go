package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"bonsai.dev/bonsai/apiserver/pki"
	"bonsai.dev/bonsai/kubelet/tlsbootstrap"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestRBAC: `bonsai server` under its default authorization (RBAC with
// the Node authorizer) with simulated nodes. Its own controllers,
// scheduler and simulated kubelets work under their default roles (a
// Deployment rolls out); a token-file user with a namespaced Role gets
// Kubernetes' 403 elsewhere and `kubectl auth can-i`, `auth whoami` and
// `--as` answer as on Kubernetes; a node's client certificate reads the
// secrets of its own pods and not another node's.
func TestRBAC(t *testing.T) {
	requireBinary(t)
	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1]
	tokens := writeFile(t, "tokens.csv", "jane-token,jane,1001\n", 0o600)
	policy := writeFile(t, "audit-policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  users: [jane]\n  omitStages: [RequestReceived]\n", 0o600)
	auditLog := filepath.Join(t.TempDir(), "audit.log")
	s := startServer(t, t.TempDir(), "--runtime=simulated", "--node-name=edge-1", "--simulated-nodes=2", "--token-file", tokens,
		"--audit-policy-file", policy, "--audit-log-path", auditLog)
	adminKubeconfig := filepath.Join(s.dataDir, "kubeconfig.yaml")
	admin := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: adminKubeconfig, cacheDir: t.TempDir()}
	jane := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: userKubeconfig(t, adminKubeconfig, func(a *clientcmdapi.AuthInfo) { a.Token = "jane-token" }), cacheDir: t.TempDir()}

	// The in-process components under RBAC: the Deployment controller,
	// ReplicaSet controller, scheduler and simulated kubelets.
	admin.must("create", "namespace", "team")
	admin.must("-n", "team", "create", "deployment", "web", "--image=busybox:1.36", "--replicas=2")
	admin.must("-n", "team", "rollout", "status", "deployment/web", "--timeout=60s")
	admin.must("wait", "--for=condition=Ready", "node/sim-0", "node/sim-1", "--timeout=60s")

	// The clusterrole-aggregation controller, as the controller manager,
	// fills edit from system:aggregate-to-edit and view.
	waitFor(t, 30*time.Second, "edit aggregated", func() bool {
		rules := admin.run("get", "clusterrole", "edit", "-o", "jsonpath={.rules[*].resources}").stdout
		return strings.Contains(rules, "deployments") && strings.Contains(rules, "pods/exec")
	})

	admin.must("-n", "team", "create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods")
	admin.must("-n", "team", "create", "rolebinding", "jane-reads", "--role=pod-reader", "--user=jane")

	waitFor(t, 30*time.Second, "jane lists pods in team", func() bool { return jane.run("-n", "team", "get", "pods").code == 0 })
	if out := jane.must("-n", "team", "get", "pods", "-o", "name"); len(strings.Fields(out)) != 2 {
		t.Errorf("jane sees pods %q, want the Deployment's two", out)
	}
	stderr := jane.fails("-n", "default", "get", "pods")
	if want := `Error from server (Forbidden): pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "default"`; !strings.Contains(stderr, want) {
		t.Errorf("jane lists pods in default:\n%s\nwant %s", stderr, want)
	}
	stderr = jane.fails("-n", "team", "delete", "deployment", "web")
	if want := `deployments.apps "web" is forbidden: User "jane" cannot delete resource "deployments" in API group "apps" in the namespace "team"`; !strings.Contains(stderr, want) {
		t.Errorf("jane deletes the deployment:\n%s\nwant %s", stderr, want)
	}

	// The audit log has jane's refused list, in Kubernetes' event format.
	waitFor(t, 10*time.Second, "jane's refusal in the audit log", func() bool {
		b, _ := os.ReadFile(auditLog)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, `"requestURI":"/api/v1/namespaces/default/pods?limit=500"`) &&
				strings.Contains(line, `"apiVersion":"audit.k8s.io/v1"`) && strings.Contains(line, `"kind":"Event"`) &&
				strings.Contains(line, `"authorization.k8s.io/decision":"forbid"`) && strings.Contains(line, `"code":403`) &&
				strings.Contains(line, `"username":"jane"`) && strings.Contains(line, `"stage":"ResponseComplete"`) {
				return true
			}
		}
		return false
	})

	if got := strings.TrimSpace(jane.must("auth", "can-i", "list", "pods", "-n", "team")); got != "yes" {
		t.Errorf("can-i list pods in team: %q", got)
	}
	if r := jane.run("auth", "can-i", "delete", "pods", "-n", "team"); r.code == 0 || strings.TrimSpace(r.stdout) != "no" {
		t.Errorf("can-i delete pods in team: exit %d %q", r.code, r.stdout)
	}
	if r := jane.run("auth", "can-i", "list", "pods", "-n", "default"); r.code == 0 || strings.TrimSpace(r.stdout) != "no" {
		t.Errorf("can-i list pods in default: exit %d %q", r.code, r.stdout)
	}
	if got := jane.must("auth", "can-i", "--list", "-n", "team"); !strings.Contains(got, "pods") || !strings.Contains(got, "selfsubjectaccessreviews.authorization.k8s.io") {
		t.Errorf("can-i --list:\n%s", got)
	}
	if kc.Minor >= 28 {
		who := jane.must("auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.uid} {.status.userInfo.groups}")
		if who != `jane 1001 ["system:authenticated"]` {
			t.Errorf("whoami: %q", who)
		}
		if who := admin.must("auth", "whoami", "--as", "jane", "-o", "jsonpath={.status.userInfo.username}"); who != "jane" {
			t.Errorf("whoami --as jane: %q", who)
		}
	}
	// `bonsai token create` makes a bootstrap token that authenticates.
	out, err := exec.Command(bonsaiBin, "token", "create", "--data-dir", s.dataDir, "--ttl", "1h", "--description", "e2e").CombinedOutput()
	if err != nil {
		t.Fatalf("bonsai token create: %v\n%s", err, out)
	}
	// It prints a join token: the CA's pin, then the bearer token.
	hash, tok, err := tlsbootstrap.ParseJoinToken(string(out))
	if err != nil {
		t.Fatalf("bonsai token create printed %q: %v", out, err)
	}
	if caCfg, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig); err != nil {
		t.Fatal(err)
	} else if block, _ := pem.Decode(caCfg.TLSClientConfig.CAData); block == nil {
		t.Fatal("admin kubeconfig has no CA")
	} else if ca, err := x509.ParseCertificate(block.Bytes); err != nil || tlsbootstrap.CAHash(ca) != hash {
		t.Errorf("join token pins %x, not the cluster CA (%v)", hash, err)
	}
	boot := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: userKubeconfig(t, adminKubeconfig, func(a *clientcmdapi.AuthInfo) { a.Token = tok }), cacheDir: t.TempDir()}
	if got := strings.TrimSpace(boot.must("auth", "can-i", "create", "selfsubjectaccessreviews.authorization.k8s.io")); got != "yes" {
		t.Errorf("bootstrap token can-i: %q", got)
	}
	if stderr := boot.fails("get", "pods"); !strings.Contains(stderr, `User "system:bootstrap:`+strings.Split(tok, ".")[0]+`" cannot list resource "pods"`) {
		t.Errorf("bootstrap token lists pods:\n%s", stderr)
	}
	if out, err := exec.Command(bonsaiBin, "token", "create", "--data-dir", s.dataDir, "--groups", "admins").CombinedOutput(); err == nil || !strings.Contains(string(out), `--groups: "admins" must start with "system:bootstrappers:"`) {
		t.Errorf("token create --groups admins: %v\n%s", err, out)
	}

	// The admin acting as jane has jane's rights, and jane may not act as
	// anyone.
	admin.must("-n", "team", "get", "pods", "--as", "jane")
	if stderr := admin.fails("-n", "team", "get", "secrets", "--as", "jane"); !strings.Contains(stderr, `secrets is forbidden: User "jane" cannot list resource "secrets" in API group "" in the namespace "team"`) {
		t.Errorf("admin --as jane lists secrets:\n%s", stderr)
	}
	if stderr := jane.fails("-n", "team", "get", "pods", "--as", "admin"); !strings.Contains(stderr, `users "admin" is forbidden: User "jane" cannot impersonate resource "users" in API group "" at the cluster scope`) {
		t.Errorf("jane --as admin:\n%s", stderr)
	}

	// Node certificates: sim-0 reads the secret of its own pod, not the
	// one of sim-1's pod.
	ca, err := pki.LoadAuthority(filepath.Join(s.dataDir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueClient("system:node:sim-0", []string{"system:nodes"})
	if err != nil {
		t.Fatal(err)
	}
	nodeKubeconfig := userKubeconfig(t, adminKubeconfig, func(a *clientcmdapi.AuthInfo) {
		a.ClientCertificateData, a.ClientKeyData = certPEM, keyPEM
	})
	adminCS := clientsetFor(t, adminKubeconfig)
	nodeCS := clientsetFor(t, nodeKubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []string{"sim-0", "sim-1"} {
		if _, err := adminCS.CoreV1().Secrets("team").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "for-" + n}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "uses-" + n},
			Spec: corev1.PodSpec{
				NodeName:   n,
				Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}},
				Volumes:    []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "for-" + n}}}},
			},
		}
		if _, err := adminCS.CoreV1().Pods("team").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "sim-0 reads its pod's secret", func() bool {
		_, err := nodeCS.CoreV1().Secrets("team").Get(ctx, "for-sim-0", metav1.GetOptions{})
		return err == nil
	})
	_, err = nodeCS.CoreV1().Secrets("team").Get(ctx, "for-sim-1", metav1.GetOptions{})
	if want := `secrets "for-sim-1" is forbidden: User "system:node:sim-0" cannot get resource "secrets" in API group "" in the namespace "team": no relationship found between node 'sim-0' and this object`; !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("sim-0 reads sim-1's pod's secret:\n got %v\nwant %s", err, want)
	}
	n1, err := nodeCS.CoreV1().Nodes().Get(ctx, "sim-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n1.Labels["stolen"] = "yes"
	if _, err := nodeCS.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("sim-0 updates node sim-1: %v", err)
	}
	nodeRestriction(t, ctx, adminCS, nodeCS)
}

// nodeRestriction holds a real node client certificate (system:node:sim-0)
// to NodeRestriction's rules: what steers workloads or secrets to the
// node is refused, what a kubelet needs is not.
func nodeRestriction(t *testing.T, ctx context.Context, adminCS, nodeCS kubernetes.Interface) {
	forbidden := func(what string, err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want 403 containing %q", what, err, want)
		}
	}
	patch := func(labels string) error {
		_, err := nodeCS.CoreV1().Nodes().Patch(ctx, "sim-0", types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`), metav1.PatchOptions{})
		return err
	}
	forbidden("sim-0 labels itself node-restriction", patch(`{"node-restriction.kubernetes.io/pci":"true"}`), "is not allowed to modify labels: node-restriction.kubernetes.io/pci")
	forbidden("sim-0 labels itself control-plane", patch(`{"node-role.kubernetes.io/control-plane":""}`), "is not allowed to modify labels: node-role.kubernetes.io/control-plane")
	if err := patch(`{"site":"plant-7","node.kubernetes.io/instance-type":"edge"}`); err != nil {
		t.Errorf("sim-0 sets labels a kubelet may set: %v", err)
	}
	_, err := nodeCS.CoreV1().Nodes().Patch(ctx, "sim-0", types.MergePatchType, []byte(`{"spec":{"taints":[{"key":"mine","effect":"NoSchedule"}]}}`), metav1.PatchOptions{})
	forbidden("sim-0 changes its taints", err, `node "sim-0" is not allowed to modify taints`)

	// Mirror pods: only owned by the node and referencing no other object.
	n0, err := adminCS.CoreV1().Nodes().Get(ctx, "sim-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	controller := true
	mirror := func(name string, mutate func(*corev1.Pod)) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kubernetes.io/config.mirror": "x"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "sim-0", UID: n0.UID, Controller: &controller}}},
			Spec: corev1.PodSpec{NodeName: "sim-0", Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
		}
		if mutate != nil {
			mutate(p)
		}
		_, err := nodeCS.CoreV1().Pods("team").Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	if err := mirror("static-ok", nil); err != nil {
		t.Errorf("sim-0 creates its own mirror pod: %v", err)
	}
	forbidden("mirror pod reading a configmap", mirror("static-cm", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}}}
	}), `node "sim-0" can not create pods that reference configmaps`)
	forbidden("mirror pod reading sim-1's secret", mirror("static-secret", func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "for-sim-1"}, Key: "k"}}}}
	}), "reference secrets")
	forbidden("mirror pod with a claim", mirror("static-pvc", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	}), `node "sim-0" can not create pods that reference persistentvolumeclaims`)
	forbidden("mirror pod without an owner", mirror("static-orphan", func(p *corev1.Pod) { p.OwnerReferences = nil }),
		`node "sim-0" can only create pods with an owner reference set to itself`)
	forbidden("mirror pod owned by another node", mirror("static-other", func(p *corev1.Pod) { p.OwnerReferences[0].Name = "sim-1" }),
		`node "sim-0" can only create pods with an owner reference set to itself`)
	if _, err := nodeCS.CoreV1().Secrets("team").Get(ctx, "for-sim-1", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("sim-0 reads sim-1's secret after the mirror pod attempts: %v", err)
	}

	// Tokens: only bound to a pod on the node.
	token := func(ref *authenticationv1.BoundObjectReference) error {
		_, err := nodeCS.CoreV1().ServiceAccounts("team").CreateToken(ctx, "default", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: ref}}, metav1.CreateOptions{})
		return err
	}
	podRef := func(name string) *authenticationv1.BoundObjectReference {
		p, err := adminCS.CoreV1().Pods("team").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: p.UID}
	}
	forbidden("sim-0 asks for an unbound token", token(nil), "node requested token not bound to a pod")
	forbidden("sim-0 asks for a token of sim-1's pod", token(podRef("uses-sim-1")), "node requested token bound to a pod scheduled on a different node")
	if err := token(podRef("uses-sim-0")); err != nil {
		t.Errorf("sim-0 asks for a token of its own pod: %v", err)
	}
}

// userKubeconfig is the admin kubeconfig with its credentials replaced.
func userKubeconfig(t *testing.T, adminPath string, set func(*clientcmdapi.AuthInfo)) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(adminPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	a := clientcmdapi.NewAuthInfo()
	set(a)
	cfg.AuthInfos[ctx.AuthInfo] = a
	p := filepath.Join(t.TempDir(), "kubeconfig.yaml")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func clientsetFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}
