package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/testsupport/testenv"
)

const deployAppYAML = `apiVersion: v1
kind: Namespace
metadata: {name: deploy-e2e}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm-a, namespace: deploy-e2e}
data: {k: a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm-b}
data: {k: b}
`

// A custom resource in the same file as its CRD: applied once the kind
// is served.
const deployCRDYAML = `apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: deploy-e2e}
spec: {size: 3}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// Its fault is on line 8; its second object names no namespace, so it
// goes to kube-system, as in k3s.
const deployBrokenYAML = `apiVersion: v1
kind: ConfigMap
metadata: {name: cm-broken-1, namespace: deploy-e2e}
---
apiVersion: v1
kind: ConfigMap
metadata:
	name: cm-broken-2
`

// TestManifestsDirWithKubectl: <data-dir>/server/manifests is applied at
// start and on change, as k3s's; a removed file's objects go, a user's stay.
func TestManifestsDirWithKubectl(t *testing.T) {
	requireBinary(t)
	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1]
	dir := t.TempDir()
	mdir := filepath.Join(dir, "server", "manifests")
	if err := os.MkdirAll(mdir, 0o700); err != nil {
		t.Fatal(err)
	}
	put := func(name, content string) {
		t.Helper()
		// Written aside and renamed in, as an editor or a provisioner does.
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(mdir, name)); err != nil {
			t.Fatal(err)
		}
	}
	put("app.yaml", deployAppYAML)
	put("crd.yaml", deployCRDYAML)
	put("broken.yaml", deployBrokenYAML)
	put("skipped.json", `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-skip", "namespace": "default"}}`)
	put("skipped.json.skip", "")
	put("notes.txt", "not a manifest")
	// Its namespace comes from a file applied after it: tried again.
	put("0-early.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-early, namespace: deploy-late}\ndata: {k: early}\n")
	put("z-late.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: deploy-late}\n")

	s := startServer(t, dir)
	k := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: filepath.Join(s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	get := func(args ...string) (string, bool) {
		r := k.run(append([]string{"get"}, args...)...)
		return r.stdout, r.code == 0
	}
	waitFor := func(what string, timeout time.Duration, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > timeout {
				t.Fatalf("%s: not within %v", what, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(start)
	}
	data := func(ns, name string) string {
		out, _ := get("configmap", name, "-n", ns, "-o", "jsonpath={.data.k}")
		return out
	}

	waitFor("app.yaml applied", 30*time.Second, func() bool { return data("deploy-e2e", "cm-a") == "a" && data("kube-system", "cm-b") == "b" })
	waitFor("a ConfigMap after its namespace, from a later file", 30*time.Second, func() bool { return data("deploy-late", "cm-early") == "early" })
	waitFor("the Widget after its CRD", 30*time.Second, func() bool {
		out, _ := get("widgets.example.com", "w1", "-n", "deploy-e2e", "-o", "jsonpath={.spec.size}")
		return out == "3"
	})
	if got := k.must("get", "configmap", "cm-a", "-n", "deploy-e2e", "-o", `jsonpath={.metadata.labels.bonsai\.dev/manifest} {.metadata.managedFields[*].manager}`); got != "app bonsai-deploy" {
		t.Errorf("cm-a label and managers: %q", got)
	}
	sum := sha256.Sum256([]byte(deployAppYAML))
	if got := k.must("get", "addons.k3s.cattle.io", "app", "-n", "kube-system", "-o", "jsonpath={.spec.source} {.spec.checksum}"); got != filepath.Join(mdir, "app.yaml")+" "+hex.EncodeToString(sum[:]) {
		t.Errorf("Addon app: %q", got)
	}

	// The broken file: an event and a log line naming file:line, nothing
	// of it applied, the others applied all the same (above).
	waitFor("the broken file's Warning event", 15*time.Second, func() bool {
		out := k.must("get", "events", "-n", "kube-system", "-o", `jsonpath={range .items[*]}{.type} {.reason} {.involvedObject.kind}/{.involvedObject.name}: {.message}{"\n"}{end}`)
		return strings.Contains(out, "Warning ParseManifestFailed Addon/broken: broken.yaml:8: ")
	})
	if !strings.Contains(s.stderrText(), "broken.yaml:8: ") {
		t.Errorf("no log line names broken.yaml:8:\n%s", s.stderrText())
	}
	if _, ok := get("configmap", "cm-broken-1", "-n", "deploy-e2e"); ok {
		t.Error("cm-broken-1 of the broken file was applied")
	}
	if got := k.must("get", "addons.k3s.cattle.io", "broken", "-n", "kube-system", "-o", "jsonpath={.status.error}"); !strings.HasPrefix(got, "broken.yaml:8: ") {
		t.Errorf("Addon broken's status.error: %q", got)
	}
	// .skip: not applied.
	if _, ok := get("configmap", "cm-skip", "-n", "default"); ok {
		t.Error("cm-skip was applied despite skipped.json.skip")
	}

	// A user's object in the same namespace, and one with a file's name
	// elsewhere, are left alone throughout.
	k.must("create", "configmap", "by-hand", "-n", "deploy-e2e", "--from-literal=k=user")

	// A file added while running; then edited; then removed.
	put("later.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-later, namespace: deploy-e2e}\ndata: {k: v1}\n")
	took := waitFor("later.yaml applied", 10*time.Second, func() bool { return data("deploy-e2e", "cm-later") == "v1" })
	t.Logf("a new file applied in %v", took)
	put("later.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-later, namespace: deploy-e2e}\ndata: {k: v2}\n")
	waitFor("later.yaml's edit applied", 10*time.Second, func() bool { return data("deploy-e2e", "cm-later") == "v2" })

	// An object dropped from a file is deleted.
	put("app.yaml", strings.Split(deployAppYAML, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-b}")[0])
	waitFor("cm-b, dropped from app.yaml, deleted", 10*time.Second, func() bool { _, ok := get("configmap", "cm-b", "-n", "kube-system"); return !ok })

	// Fixing the broken file applies it.
	put("broken.yaml", strings.Replace(deployBrokenYAML, "\tname", "  name", 1))
	waitFor("the fixed file applied", 10*time.Second, func() bool { _, ok := get("configmap", "cm-broken-2", "-n", "kube-system"); return ok })

	if err := os.Remove(filepath.Join(mdir, "later.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor("later.yaml's objects deleted", 10*time.Second, func() bool { _, ok := get("configmap", "cm-later", "-n", "deploy-e2e"); return !ok })
	waitFor("later.yaml's Addon deleted", 10*time.Second, func() bool { _, ok := get("addons.k3s.cattle.io", "later", "-n", "kube-system"); return !ok })
	if data("deploy-e2e", "by-hand") != "user" {
		t.Error("the user's ConfigMap was changed or deleted")
	}
	if data("deploy-e2e", "cm-a") != "a" {
		t.Error("cm-a of app.yaml is gone")
	}

	// While bonsai is stopped a file is removed, and it starts with
	// another --disable'd: what both deployed goes, the rest stays.
	if code, _ := s.sigterm(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if err := os.Remove(filepath.Join(mdir, "broken.yaml")); err != nil {
		t.Fatal(err)
	}
	s = startServer(t, dir, "--disable=crd")
	waitFor("broken.yaml's objects deleted after a restart", 30*time.Second, func() bool { _, ok := get("configmap", "cm-broken-2", "-n", "kube-system"); return !ok })
	waitFor("the --disable'd file's CRD deleted", 30*time.Second, func() bool { _, ok := get("crd", "widgets.example.com"); return !ok })
	if data("deploy-e2e", "by-hand") != "user" || data("deploy-e2e", "cm-a") != "a" {
		t.Error("a restart changed objects it should have left")
	}
	if got := k.must("get", "addons.k3s.cattle.io", "-n", "kube-system", "-o", "name"); got != "addon.k3s.cattle.io/0-early\naddon.k3s.cattle.io/app\naddon.k3s.cattle.io/z-late\n" {
		t.Errorf("Addons after the restart: %q", got)
	}
}
