package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// walkManifest is a small app as users write it. The Secret uses data, not
// stringData: kubectl reports stringData secrets as "configured" on every
// apply, on Kubernetes too.
const walkManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
data:
  mode: fast
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: shop
type: Opaque
data:
  password: aHVudGVyMg==
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels: {app: web}
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  selector: {app: web}
  ports:
  - name: http
    port: 80
    targetPort: 80
`

// kubectlRunner runs one kubectl binary against one bonsai.
type kubectlRunner struct {
	t          *testing.T
	bin        string
	kubeconfig string
	cacheDir   string
	env        []string
}

type kubectlResult struct {
	stdout, stderr string
	code           int
}

func (k *kubectlRunner) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"--cache-dir", k.cacheDir}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	cmd.Env = append(cmd.Env, k.env...)
	return cmd
}

// run runs kubectl to its end; no command of the walkthrough may take a
// minute, so one that does is reported rather than left hanging.
func (k *kubectlRunner) run(args ...string) kubectlResult {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr strings.Builder
	cmd := k.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		k.t.Fatalf("kubectl %s: no exit within a minute\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		k.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return kubectlResult{stdout: stdout.String(), stderr: stderr.String(), code: exitCode(err)}
}

// must runs kubectl and fails the test unless it exits 0.
func (k *kubectlRunner) must(args ...string) string {
	k.t.Helper()
	r := k.run(args...)
	if r.code != 0 {
		k.t.Fatalf("kubectl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs kubectl that must exit non-zero, and returns its stderr.
func (k *kubectlRunner) fails(args ...string) string {
	k.t.Helper()
	r := k.run(args...)
	if r.code == 0 {
		k.t.Fatalf("kubectl %s succeeded, want a failure\nstdout:\n%s", strings.Join(args, " "), r.stdout)
	}
	return r.stderr
}

// start runs kubectl in the background (watches, waits) with its stdout
// delivered line by line.
func (k *kubectlRunner) start(ctx context.Context, args ...string) (lines <-chan string, done <-chan kubectlResult) {
	k.t.Helper()
	cmd := k.command(ctx, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		k.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		k.t.Fatal(err)
	}
	lc := make(chan string, 100)
	dc := make(chan kubectlResult, 1)
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			select {
			case lc <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, pipe)
		close(lc)
		err := cmd.Wait()
		dc <- kubectlResult{stdout: all.String(), stderr: stderr.String(), code: exitCode(err)}
	}()
	return lc, dc
}

func wantLines(t *testing.T, what, got string, want ...string) {
	t.Helper()
	if strings.TrimRight(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n%s\nwant:\n%s", what, got, strings.Join(want, "\n"))
	}
}

// fieldsOf splits table output into rows of whitespace-separated cells.
func fieldsOf(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// squeeze collapses runs of blanks so describe's alignment, which depends
// on the longest label, does not matter.
func squeeze(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		b.WriteString(strings.Join(strings.Fields(l), " ") + "\n")
	}
	return b.String()
}

func wantContains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func writeFile(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubectlWalkthrough drives the oldest and the newest kubectl through
// what a user does with an app on day one and two.
func TestKubectlWalkthrough(t *testing.T) {
	requireBinary(t)
	for _, kc := range testenv.Kubectls(t) {
		t.Run(kc.Version, func(t *testing.T) {
			s := startServer(t, t.TempDir())
			k := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: filepath.Join(s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
			kubectlWalkthrough(t, k, kc.Minor)
		})
	}
}

func kubectlWalkthrough(t *testing.T, k *kubectlRunner, minor int) {
	manifest := writeFile(t, "app.yaml", walkManifest, 0o600)
	// kubectl 1.34 and later name the namespace of what they deleted.
	deleted := func(what string) string {
		if minor >= 34 {
			return what + " deleted from shop namespace"
		}
		return what + " deleted"
	}

	// Apply twice: the second apply finds nothing to change.
	wantLines(t, "first apply", k.must("apply", "-f", manifest),
		"namespace/shop created", "configmap/settings created", "secret/creds created",
		"deployment.apps/web created", "service/web created")
	wantLines(t, "second apply", k.must("apply", "-f", manifest),
		"namespace/shop unchanged", "configmap/settings unchanged", "secret/creds unchanged",
		"deployment.apps/web unchanged", "service/web unchanged")

	// get in every output format.
	yamlOut := k.must("get", "-n", "shop", "deployment/web", "-o", "yaml")
	wantContains(t, "get deployment -o yaml (defaults)", yamlOut,
		"  progressDeadlineSeconds: 600\n", "  revisionHistoryLimit: 10\n",
		"      maxSurge: 25%\n", "      maxUnavailable: 25%\n", "    type: RollingUpdate\n",
		"        imagePullPolicy: IfNotPresent\n", "          protocol: TCP\n",
		"        terminationMessagePath: /dev/termination-log\n", "        terminationMessagePolicy: File\n",
		"      dnsPolicy: ClusterFirst\n", "      restartPolicy: Always\n", "      schedulerName: default-scheduler\n",
		"      terminationGracePeriodSeconds: 30\n", "  generation: 1\n", "kubectl.kubernetes.io/last-applied-configuration",
	)
	var dep appsv1.Deployment
	if err := json.Unmarshal([]byte(k.must("get", "-n", "shop", "deployment/web", "-o", "json")), &dep); err != nil {
		t.Fatalf("get deployment -o json: %v", err)
	}
	if dep.Kind != "Deployment" || dep.APIVersion != "apps/v1" || dep.UID == "" || dep.ResourceVersion == "" ||
		dep.CreationTimestamp.IsZero() || *dep.Spec.Replicas != 1 || dep.Spec.Template.Spec.Containers[0].Image != "nginx:1.27" {
		t.Errorf("get deployment -o json: %+v", dep)
	}
	var svc corev1.Service
	if err := json.Unmarshal([]byte(k.must("get", "-n", "shop", "service/web", "-o", "json")), &svc); err != nil {
		t.Fatalf("get service -o json: %v", err)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP == "" || svc.Spec.SessionAffinity != corev1.ServiceAffinityNone ||
		svc.Spec.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("get service -o json spec: %+v", svc.Spec)
	}

	// The Deployment controller makes a ReplicaSet and its pod, which
	// stays Pending: this server runs no node.
	waitFor(t, 30*time.Second, "deployment/web to count its pod", func() bool {
		return k.must("get", "-n", "shop", "deployment/web", "-o", "jsonpath={.status.updatedReplicas}/{.status.unavailableReplicas}") == "1/1"
	})
	rows := fieldsOf(k.must("get", "-n", "shop", "deployment/web", "-o", "wide"))
	if len(rows) != 2 || strings.Join(rows[0], " ") != "NAME READY UP-TO-DATE AVAILABLE AGE CONTAINERS IMAGES SELECTOR" ||
		len(rows[1]) != 8 || strings.Join(rows[1][:4], " ") != "web 0/1 1 0" || strings.Join(rows[1][5:], " ") != "web nginx:1.27 app=web" {
		t.Errorf("get deployment -o wide: %q", rows)
	}
	rows = fieldsOf(k.must("get", "-n", "shop", "service/web", "-o", "wide"))
	if len(rows) != 2 || strings.Join(rows[0], " ") != "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE SELECTOR" ||
		len(rows[1]) != 7 || rows[1][0] != "web" || rows[1][1] != "ClusterIP" || rows[1][2] != svc.Spec.ClusterIP ||
		rows[1][3] != "<none>" || rows[1][4] != "80/TCP" || rows[1][6] != "app=web" {
		t.Errorf("get service -o wide: %q", rows)
	}

	if got := k.must("get", "-n", "shop", "deployment/web", "-o", "jsonpath={.spec.template.spec.containers[0].image} {.spec.strategy.rollingUpdate.maxSurge}"); got != "nginx:1.27 25%" {
		t.Errorf("get -o jsonpath = %q, want %q", got, "nginx:1.27 25%")
	}
	if got := k.must("get", "-n", "shop", "configmap/settings", "secret/creds", "-o", `jsonpath={range .items[*]}{.kind}/{.metadata.name}{"\n"}{end}`); got != "ConfigMap/settings\nSecret/creds\n" {
		t.Errorf("get -o jsonpath over a list = %q", got)
	}
	wantLines(t, "get -o custom-columns",
		k.must("get", "-n", "shop", "configmap/settings", "deployment/web", "-o", "custom-columns=KIND:.kind,NAME:.metadata.name,MODE:.data.mode,REPLICAS:.spec.replicas"),
		"KIND         NAME       MODE     REPLICAS",
		"ConfigMap    settings   fast     <none>",
		"Deployment   web        <none>   1")

	// describe
	desc := squeeze(k.must("describe", "-n", "shop", "deployment/web"))
	wantContains(t, "describe deployment", desc,
		"Name: web\n", "Namespace: shop\n", "Labels: app=web\n", "Selector: app=web\n",
		"Replicas: 1 desired | 1 updated | 1 total | 0 available | 1 unavailable\n",
		"StrategyType: RollingUpdate\n", "MinReadySeconds: 0\n",
		"RollingUpdateStrategy: 25% max unavailable, 25% max surge\n",
		"Image: nginx:1.27\n", "Port: 80/TCP\n")
	wantContains(t, "describe secret", squeeze(k.must("describe", "-n", "shop", "secret/creds")),
		"Name: creds\n", "Type: Opaque\n", "password: 7 bytes\n")
	wantContains(t, "describe configmap", squeeze(k.must("describe", "-n", "shop", "configmap/settings")),
		"Name: settings\n", "mode:\n----\nfast\n")
	wantContains(t, "describe service", squeeze(k.must("describe", "-n", "shop", "service/web")),
		"Name: web\n", "Selector: app=web\n", "Type: ClusterIP\n", "IP: "+svc.Spec.ClusterIP+"\n", "Port: http 80/TCP\n", "TargetPort: 80/TCP\n")

	// label and annotate
	wantLines(t, "label", k.must("label", "-n", "shop", "deployment/web", "tier=frontend"), "deployment.apps/web labeled")
	if got := k.must("get", "-n", "shop", "deployments", "-l", "tier=frontend", "-o", "name"); got != "deployment.apps/web\n" {
		t.Errorf("get -l tier=frontend = %q", got)
	}
	if r := k.run("label", "-n", "shop", "deployment/web", "tier=backend"); r.code == 0 || !strings.Contains(r.stderr, "'tier' already has a value (frontend), and --overwrite is false") {
		t.Errorf("label without --overwrite: exit %d, %s", r.code, r.stderr)
	}
	wantLines(t, "label --overwrite", k.must("label", "-n", "shop", "deployment/web", "tier=backend", "--overwrite"), "deployment.apps/web labeled")
	// kubectl 1.27 printed the verb, not the past tense.
	annotated := "deployment.apps/web annotated"
	if minor <= 27 {
		annotated = "deployment.apps/web annotate"
	}
	wantLines(t, "annotate", k.must("annotate", "-n", "shop", "deployment/web", "owner=team-a"), annotated)
	if got := k.must("get", "-n", "shop", "deployment/web", "-o", `jsonpath={.metadata.labels.tier} {.metadata.annotations.owner}`); got != "backend team-a" {
		t.Errorf("label and annotation = %q, want %q", got, "backend team-a")
	}
	wantLines(t, "unlabel", k.must("label", "-n", "shop", "deployment/web", "tier-"), "deployment.apps/web unlabeled")
	if got := k.must("get", "-n", "shop", "deployment/web", "-o", `jsonpath={.metadata.labels}`); got != `{"app":"web"}` {
		t.Errorf("labels after removing tier = %s", got)
	}

	// patch, one of each type
	wantLines(t, "strategic patch", k.must("patch", "-n", "shop", "deployment/web", "--type=strategic",
		"-p", `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}}}`), "deployment.apps/web patched")
	// Strategic merge matches containers by name: the port stays. The
	// generation counts the annotation above and this patch, as on
	// Kubernetes (a Deployment's annotations go to its ReplicaSets).
	if got := k.must("get", "-n", "shop", "deployment/web", "-o", `jsonpath={.spec.template.spec.containers[*].image} {.spec.template.spec.containers[0].ports[0].containerPort} {.metadata.generation}`); got != "nginx:1.28 80 3" {
		t.Errorf("after the strategic patch: %q, want %q", got, "nginx:1.28 80 3")
	}
	wantLines(t, "merge patch", k.must("patch", "-n", "shop", "configmap/settings", "--type=merge",
		"-p", `{"data":{"mode":"slow","extra":"1"}}`), "configmap/settings patched")
	if got := k.must("get", "-n", "shop", "configmap/settings", "-o", `jsonpath={.data}`); got != `{"extra":"1","mode":"slow"}` {
		t.Errorf("after the merge patch: %s", got)
	}
	wantLines(t, "json patch", k.must("patch", "-n", "shop", "service/web", "--type=json",
		"-p", `[{"op":"replace","path":"/spec/ports/0/targetPort","value":8080},{"op":"add","path":"/metadata/labels","value":{"exposed":"yes"}}]`), "service/web patched")
	if got := k.must("get", "-n", "shop", "service/web", "-o", `jsonpath={.spec.ports[0].port} {.spec.ports[0].targetPort} {.metadata.labels.exposed}`); got != "80 8080 yes" {
		t.Errorf("after the json patch: %q, want %q", got, "80 8080 yes")
	}
	wantLines(t, "no-op patch", k.must("patch", "-n", "shop", "configmap/settings", "--type=merge", "-p", `{"data":{"mode":"slow"}}`),
		"configmap/settings patched (no change)")
	if stderr := k.fails("patch", "-n", "shop", "service/web", "--type=json", "-p", `[{"op":"test","path":"/spec/type","value":"NodePort"}]`); !strings.Contains(stderr, "The request is invalid: the server rejected our request due to an error in our request") {
		t.Errorf("failed json patch test: %s", stderr)
	}

	// edit with a scripted editor; KUBE_EDITOR wins over EDITOR.
	editor := writeFile(t, "editor.sh", "#!/bin/sh\nexec sed -i 's/^  replicas: 1$/  replicas: 3/' \"$1\"\n", 0o700)
	k.env = []string{"KUBE_EDITOR=" + editor, "EDITOR=false"}
	wantLines(t, "edit", k.must("edit", "-n", "shop", "deployment/web"), "deployment.apps/web edited")
	k.env = nil
	if got := k.must("get", "-n", "shop", "deployment/web", "-o", "jsonpath={.spec.replicas}"); got != "3" {
		t.Errorf("replicas after kubectl edit = %q, want 3", got)
	}

	// replace an exported, modified object; its resourceVersion makes the
	// write conditional, so a stale copy is refused.
	exported := k.must("get", "-n", "shop", "configmap/settings", "-o", "yaml")
	if !strings.Contains(exported, "  mode: slow\n") {
		t.Fatalf("exported configmap:\n%s", exported)
	}
	replacement := writeFile(t, "settings.yaml", strings.Replace(exported, "  mode: slow\n", "  mode: replaced\n", 1), 0o600)
	wantLines(t, "replace", k.must("replace", "-f", replacement), "configmap/settings replaced")
	if got := k.must("get", "-n", "shop", "configmap/settings", "-o", "jsonpath={.data.mode}"); got != "replaced" {
		t.Errorf("mode after replace = %q", got)
	}
	if stderr := k.fails("replace", "-f", replacement); !strings.Contains(stderr, "the object has been modified; please apply your changes to the latest version and try again") {
		t.Errorf("replace with a stale resourceVersion: %s", stderr)
	}

	// diff: exit 1 with a diff while the cluster differs from the
	// manifest, 0 and nothing once they agree.
	r := k.run("diff", "-f", manifest)
	if r.code != 1 {
		t.Errorf("diff against a changed cluster: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantContains(t, "diff", r.stdout, "-  replicas: 3\n", "+  replicas: 1\n", "-      - image: nginx:1.28\n", "+      - image: nginx:1.27\n",
		"-  mode: replaced\n", "+  mode: fast\n", "-    targetPort: 8080\n", "+    targetPort: 80\n")
	wantLines(t, "apply after the changes", k.must("apply", "-f", manifest),
		"namespace/shop unchanged", "configmap/settings configured", "secret/creds unchanged",
		"deployment.apps/web configured", "service/web configured")
	if r := k.run("diff", "-f", manifest); r.code != 0 || r.stdout != "" {
		t.Errorf("diff against an agreeing cluster: exit %d, want 0 and no output\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Server-side apply: the whole manifest, then a second manager that
	// conflicts unless it forces.
	wantLines(t, "apply --server-side", k.must("apply", "--server-side", "-f", manifest),
		"namespace/shop serverside-applied", "configmap/settings serverside-applied", "secret/creds serverside-applied",
		"deployment.apps/web serverside-applied", "service/web serverside-applied")
	other := writeFile(t, "other.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: shop\ndata:\n  mode: other\n", 0o600)
	stderr := k.fails("apply", "--server-side", "--field-manager=other", "-f", other)
	wantContains(t, "conflicting apply --server-side", stderr, "Apply failed with 1 conflict", `conflict with "kubectl"`, ".data.mode")
	wantLines(t, "apply --server-side --force-conflicts", k.must("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", other),
		"configmap/settings serverside-applied")
	if got := k.must("get", "-n", "shop", "configmap/settings", "-o", "jsonpath={.data.mode}"); got != "other" {
		t.Errorf("mode after a forced apply = %q", got)
	}
	managers := k.must("get", "-n", "shop", "configmap/settings", "--show-managed-fields", "-o", `jsonpath={range .metadata.managedFields[*]}{.manager}:{.operation}{"\n"}{end}`)
	wantContains(t, "managers after the forced apply", managers, "other:Apply\n")

	// get --watch, with and without event types, sees a configmap created
	// while it runs.
	for _, w := range []struct {
		name      string
		args      []string
		want      []string
		watchOnly bool
	}{
		{"watched-events", []string{"--watch", "--output-watch-events"}, []string{"ADDED", "watched-events"}, false},
		{"watched-only", []string{"-w", "--watch-only"}, []string{"watched-only"}, true},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		args := append([]string{"get", "-n", "shop", "configmaps"}, w.args...)
		lines, done := k.start(ctx, args...)
		// Plain --watch prints the list first, so its first line says the
		// watch is about to start from that list's resourceVersion;
		// --watch-only prints nothing until an event, so give it time.
		if w.watchOnly {
			time.Sleep(2 * time.Second)
		} else {
			select {
			case <-lines:
			case <-ctx.Done():
			}
		}
		k.must("create", "-n", "shop", "configmap", w.name, "--from-literal=a=b")
		seen := false
		for !seen && ctx.Err() == nil {
			select {
			case l, ok := <-lines:
				if !ok {
					cancel()
				}
				seen = ok && allIn(l, w.want)
			case <-ctx.Done():
			}
		}
		cancel()
		res := <-done
		if !seen {
			t.Errorf("kubectl %s printed no line with %q:\n%s%s", strings.Join(args, " "), w.want, res.stdout, res.stderr)
		}
	}

	// wait --for=delete returns once a concurrent delete removed it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, waitDone := k.start(ctx, "wait", "-n", "shop", "--for=delete", "configmap/watched-only", "--timeout=50s")
	select {
	case res := <-waitDone:
		t.Fatalf("wait --for=delete of an existing object returned at once: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	case <-time.After(2 * time.Second):
	}
	wantLines(t, "delete", k.must("delete", "-n", "shop", "configmap/watched-only"), deleted(`configmap "watched-only"`))
	select {
	case res := <-waitDone:
		if res.code != 0 || res.stdout != "configmap/watched-only condition met\n" {
			t.Errorf("wait --for=delete: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Error("wait --for=delete did not return within 20s of the delete")
	}

	// delete with each --cascade; the garbage collector finishes each.
	wantLines(t, "delete --cascade=background", k.must("delete", "-n", "shop", "configmap/settings", "--cascade=background"),
		deleted(`configmap "settings"`))
	if stderr := k.fails("get", "-n", "shop", "configmap/settings"); !strings.Contains(stderr, `configmaps "settings" not found`) {
		t.Errorf("get after delete: %s", stderr)
	}
	// Foreground: kubectl waits for the Deployment, which goes only after
	// its ReplicaSet and pod.
	wantLines(t, "delete --cascade=foreground", k.must("delete", "-n", "shop", "deployment/web", "--cascade=foreground", "--timeout=50s"),
		deleted(`deployment.apps "web"`))
	if got := k.must("get", "-n", "shop", "replicasets,pods", "-l", "app=web", "-o", "name"); got != "" {
		t.Errorf("left after a foreground delete of deployment/web: %s", got)
	}
	// Orphan: the finalizer holds the secret until the collector has
	// released its dependents (it has none), then it goes.
	wantLines(t, "delete --cascade=orphan", k.must("delete", "-n", "shop", "secret/creds", "--cascade=orphan", "--timeout=50s"),
		deleted(`secret "creds"`))
	if stderr := k.fails("get", "-n", "shop", "secret/creds"); !strings.Contains(stderr, `secrets "creds" not found`) {
		t.Errorf("get after the orphan delete: %s", stderr)
	}

	// A waiting delete and wait --for=delete return once a finalizer
	// goes, and not before.
	k.must("apply", "-f", writeFile(t, "held.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: shop\n  finalizers: [example.com/hold]\n", 0o600))
	_, waitDone = k.start(ctx, "wait", "-n", "shop", "--for=delete", "configmap/held", "--timeout=50s")
	_, delDone := k.start(ctx, "delete", "-n", "shop", "configmap/held", "--timeout=50s")
	time.Sleep(2 * time.Second)
	for _, ch := range []<-chan kubectlResult{waitDone, delDone} {
		select {
		case res := <-ch:
			t.Fatalf("kubectl returned while the finalizer holds the object: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		default:
		}
	}
	if got := k.must("get", "-n", "shop", "configmap/held", "-o", `jsonpath={.metadata.finalizers} {.metadata.deletionTimestamp}`); !strings.HasPrefix(got, `["example.com/hold"] 20`) {
		t.Errorf("configmap held while deleted: %q, want its finalizer and a deletionTimestamp", got)
	}
	wantLines(t, "remove the finalizer", k.must("patch", "-n", "shop", "configmap/held", "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`),
		"configmap/held patched")
	for what, ch := range map[string]<-chan kubectlResult{"wait --for=delete": waitDone, "delete": delDone} {
		select {
		case res := <-ch:
			if res.code != 0 {
				t.Errorf("%s: exit %d\n%s%s", what, res.code, res.stdout, res.stderr)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not return within 20s of the finalizer's removal", what)
		}
	}
	if stderr := k.fails("get", "-n", "shop", "configmap/held"); !strings.Contains(stderr, `configmaps "held" not found`) {
		t.Errorf("get configmap after its finalizer went: %s", stderr)
	}

	// explain
	wantContains(t, "explain deployment.spec.strategy", k.must("explain", "deployment.spec.strategy"),
		"The deployment strategy to use to replace existing pods with new ones.", "rollingUpdate\t<RollingUpdateDeployment>")
}

func allIn(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
