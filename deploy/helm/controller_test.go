package helm

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// TestControllerErrorsInstallNothing runs the controller against the
// real API server: a HelmChart that cannot be installed says why in its
// status and a Warning event, and nothing of it is installed; fixed, it
// installs; deleted, it is uninstalled.
func TestControllerErrorsInstallNothing(t *testing.T) {
	env := clustertest.New(t, clustertest.Options{})
	cfg := env.ConfigFor(&authn.User{Name: "helm-test", Groups: []string{authn.GroupMasters, authn.GroupAuthenticated}})
	dir := t.TempDir()
	c, err := New(Config{RESTConfig: cfg, ChartDirs: []string{dir}, Logger: env.Log})
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(env.Ctx)
	dyn := dynamic.NewForConfigOrDie(cfg)
	cs := kubernetes.NewForConfigOrDie(cfg)
	charts := dyn.Resource(chartGVR).Namespace("default")

	content := base64.StdEncoding.EncodeToString(chartTgz(t, "x", "1.0.0"))
	failing := base64.StdEncoding.EncodeToString(chartTgz(t, "x", "1.0.0", `{{ fail "the chart says no" }}`))
	create := func(name, spec string) {
		t.Helper()
		u := helmChart(t, fmt.Sprintf("apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata: {name: %s, namespace: default}\nspec:\n%s", name, spec))
		clustertest.Eventually(t, 10*time.Second, func() error { // once the CRD is served
			_, err := charts.Create(env.Ctx, u, metav1.CreateOptions{})
			return err
		})
	}
	cases := map[string]struct{ spec, want string }{
		"badvalues":  {"  chartContent: " + content + "\n  valuesContent: 'greeting: [unclosed'\n", "spec.valuesContent: "},
		"badcontent": {"  chartContent: '%%% not base64'\n", "spec.chartContent is not base64"},
		"notachart":  {"  chartContent: " + base64.StdEncoding.EncodeToString([]byte("hello")) + "\n", "chartContent: not a chart archive"},
		"nofile":     {"  chart: https://%{KUBERNETES_API}%/static/charts/gone.tgz\n", "no file gone.tgz in " + dir},
		"failing":    {"  chartContent: " + failing + "\n", "the chart says no"},
		"helmv2":     {"  chartContent: " + content + "\n  helmVersion: v2\n", `spec.helmVersion "v2": only v3`},
	}
	for name, tc := range cases {
		create(name, tc.spec)
	}
	for name, tc := range cases {
		clustertest.Eventually(t, 20*time.Second, func() error {
			u, err := charts.Get(env.Ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			if msg := conditionMessage(conds, "Failed"); !strings.Contains(msg, tc.want) {
				return fmt.Errorf("%s: Failed condition %q, want one with %q", name, msg, tc.want)
			}
			evs, err := cs.CoreV1().Events("default").List(env.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == "Failed" && strings.Contains(e.Message, tc.want) {
					return nil
				}
			}
			return fmt.Errorf("%s: no Warning event with %q in %d events", name, tc.want, len(evs.Items))
		})
	}
	secrets, err := cs.CoreV1().Secrets("default").List(env.Ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := cs.CoreV1().ConfigMaps("default").List(env.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d release Secrets from broken HelmCharts", len(secrets.Items))
	}
	for _, cm := range cms.Items {
		if strings.HasSuffix(cm.Name, "-cm") {
			t.Errorf("ConfigMap %s from a broken HelmChart", cm.Name)
		}
	}

	// Fixed, badvalues installs; then deleted, it is uninstalled.
	u, err := charts.Get(env.Ctx, "badvalues", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, "greeting: fixed\n", "spec", "valuesContent"); err != nil {
		t.Fatal(err)
	}
	if _, err := charts.Update(env.Ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 20*time.Second, func() error {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(env.Ctx, "badvalues-cm", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data["greeting"] != "fixed" {
			return fmt.Errorf("greeting %q", cm.Data["greeting"])
		}
		_, err = cs.CoreV1().Secrets("default").Get(env.Ctx, "sh.helm.release.v1.badvalues.v1", metav1.GetOptions{})
		return err
	})
	clustertest.Eventually(t, 10*time.Second, func() error {
		u, err := charts.Get(env.Ctx, "badvalues", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if msg := conditionMessage(conds, "Failed"); msg != "" {
			return fmt.Errorf("still Failed: %s", msg)
		}
		if msg := conditionMessage(conds, "Deployed"); msg != "release default/badvalues revision 1" {
			return fmt.Errorf("Deployed: %q", msg)
		}
		return nil
	})
	// A broken HelmChart, never installed, goes too.
	for _, name := range []string{"badvalues", "badcontent"} {
		if err := charts.Delete(env.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clustertest.Eventually(t, 20*time.Second, func() error {
		if _, err := cs.CoreV1().ConfigMaps("default").Get(env.Ctx, "badvalues-cm", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("badvalues-cm: %v", err)
		}
		if _, err := cs.CoreV1().Secrets("default").Get(env.Ctx, "sh.helm.release.v1.badvalues.v1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("release Secret: %v", err)
		}
		for _, name := range []string{"badvalues", "badcontent"} {
			if _, err := charts.Get(env.Ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("HelmChart %s: %v", name, err)
			}
		}
		return nil
	})
}

// TestControllerUnmanaged: a HelmChart annotated unmanaged after it was
// installed is left alone, and deleting it leaves the release, the
// user's now, without hanging on the finalizer.
func TestControllerUnmanaged(t *testing.T) {
	env := clustertest.New(t, clustertest.Options{})
	cfg := env.ConfigFor(&authn.User{Name: "helm-test", Groups: []string{authn.GroupMasters, authn.GroupAuthenticated}})
	c, err := New(Config{RESTConfig: cfg, Logger: env.Log})
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(env.Ctx)
	charts := dynamic.NewForConfigOrDie(cfg).Resource(chartGVR).Namespace("default")
	cs := kubernetes.NewForConfigOrDie(cfg)
	content := base64.StdEncoding.EncodeToString(chartTgz(t, "x", "1.0.0"))
	u := helmChart(t, "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata: {name: handsoff, namespace: default}\nspec:\n  chartContent: "+content+"\n")
	clustertest.Eventually(t, 10*time.Second, func() error {
		_, err := charts.Create(env.Ctx, u, metav1.CreateOptions{})
		return err
	})
	clustertest.Eventually(t, 20*time.Second, func() error {
		_, err := cs.CoreV1().Secrets("default").Get(env.Ctx, "sh.helm.release.v1.handsoff.v1", metav1.GetOptions{})
		return err
	})
	clustertest.Eventually(t, 10*time.Second, func() error {
		u, err := charts.Get(env.Ctx, "handsoff", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ann := u.GetAnnotations()
		ann[AnnotationUnmanaged] = "true"
		u.SetAnnotations(ann)
		if err := unstructured.SetNestedField(u.Object, "greeting: ignored\n", "spec", "valuesContent"); err != nil {
			return err
		}
		_, err = charts.Update(env.Ctx, u, metav1.UpdateOptions{})
		return err
	})
	time.Sleep(time.Second)
	if cm, err := cs.CoreV1().ConfigMaps("default").Get(env.Ctx, "handsoff-cm", metav1.GetOptions{}); err != nil || cm.Data["greeting"] != "hello" {
		t.Errorf("an unmanaged HelmChart's release changed: %v %v", cm.Data, err)
	}
	if err := charts.Delete(env.Ctx, "handsoff", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 10*time.Second, func() error {
		if _, err := charts.Get(env.Ctx, "handsoff", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("HelmChart: %v", err)
		}
		return nil
	})
	if _, err := cs.CoreV1().Secrets("default").Get(env.Ctx, "sh.helm.release.v1.handsoff.v1", metav1.GetOptions{}); err != nil {
		t.Errorf("the release of an unmanaged HelmChart was uninstalled: %v", err)
	}
}

// TestControllerChartWithCRD: a chart's crds/ are installed first, and
// its custom resource of that kind with them, in one install (helm waits
// for the CRD and resets the REST mapper over the in-process API).
func TestControllerChartWithCRD(t *testing.T) {
	env := clustertest.New(t, clustertest.Options{})
	cfg := env.ConfigFor(&authn.User{Name: "helm-test", Groups: []string{authn.GroupMasters, authn.GroupAuthenticated}})
	c, err := New(Config{RESTConfig: cfg, Logger: env.Log})
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(env.Ctx)
	dyn := dynamic.NewForConfigOrDie(cfg)
	tgz := chartTgz(t, "gadgets", "1.0.0",
		`crds/gadget.yaml=apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Gadget, plural: gadgets, singular: gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\nspec: {size: {{ .Values.size | default 1 }}}\n")
	u := helmChart(t, "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata: {name: gadgets, namespace: default}\nspec:\n  chartContent: "+base64.StdEncoding.EncodeToString(tgz)+"\n  set: {size: 4}\n")
	clustertest.Eventually(t, 10*time.Second, func() error {
		_, err := dyn.Resource(chartGVR).Namespace("default").Create(env.Ctx, u, metav1.CreateOptions{})
		return err
	})
	gadgets := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}).Namespace("default")
	clustertest.Eventually(t, 30*time.Second, func() error {
		g, err := gadgets.Get(env.Ctx, "g1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if size, _, _ := unstructured.NestedInt64(g.Object, "spec", "size"); size != 4 {
			return fmt.Errorf("size %d", size)
		}
		return nil
	})
	// Once deployed, the HelmChart is not written again (no loop of
	// status writes and the syncs they cause).
	var rv string
	clustertest.Eventually(t, 10*time.Second, func() error {
		u, err := dyn.Resource(chartGVR).Namespace("default").Get(env.Ctx, "gadgets", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if conditionMessage(conds, "Deployed") == "" {
			return fmt.Errorf("not Deployed yet")
		}
		rv = u.GetResourceVersion()
		return nil
	})
	time.Sleep(2 * time.Second)
	u, err = dyn.Resource(chartGVR).Namespace("default").Get(env.Ctx, "gadgets", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u.GetResourceVersion() != rv {
		t.Errorf("the HelmChart was written again while up to date: resourceVersion %s, then %s", rv, u.GetResourceVersion())
	}
}

// TestControllerFailurePolicy: a release found failed (or left pending
// by a stop in the middle) is uninstalled and installed again under
// failurePolicy reinstall, and left as it is, with a Failed condition,
// under abort.
func TestControllerFailurePolicy(t *testing.T) {
	env := clustertest.New(t, clustertest.Options{})
	cfg := env.ConfigFor(&authn.User{Name: "helm-test", Groups: []string{authn.GroupMasters, authn.GroupAuthenticated}})
	// A short recheck: nothing else tells the controller of a release
	// changed behind its back.
	c, err := New(Config{RESTConfig: cfg, Logger: env.Log, Resync: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(env.Ctx)
	dyn := dynamic.NewForConfigOrDie(cfg)
	cs := kubernetes.NewForConfigOrDie(cfg)
	content := base64.StdEncoding.EncodeToString(chartTgz(t, "x", "1.0.0"))
	for _, name := range []string{"reinstalled", "pending", "aborted"} {
		policy := map[string]string{"aborted": "abort"}[name]
		u := helmChart(t, fmt.Sprintf("apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata: {name: %s, namespace: default}\nspec:\n  chartContent: %s\n  failurePolicy: '%s'\n", name, content, policy))
		clustertest.Eventually(t, 10*time.Second, func() error {
			_, err := dyn.Resource(chartGVR).Namespace("default").Create(env.Ctx, u, metav1.CreateOptions{})
			return err
		})
	}
	store := c.actionConfig("default").Releases
	for _, name := range []string{"reinstalled", "pending", "aborted"} {
		clustertest.Eventually(t, 20*time.Second, func() error {
			_, err := store.Deployed(name)
			return err
		})
		// The release breaks: an upgrade that failed, or bonsai stopped
		// in the middle of one.
		rel, err := store.Last(name)
		if err != nil {
			t.Fatal(err)
		}
		rel.Info.Status = release.StatusFailed
		if name == "pending" {
			rel.Info.Status = release.StatusPendingUpgrade
		}
		if err := store.Update(rel); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"reinstalled", "pending"} {
		clustertest.Eventually(t, 20*time.Second, func() error {
			rel, err := store.Last(name)
			if err != nil {
				return err
			}
			if rel.Info.Status != release.StatusDeployed {
				return fmt.Errorf("%s: %s", name, rel.Info.Status)
			}
			evs, err := cs.CoreV1().Events("default").List(env.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=Reinstall"})
			if err != nil {
				return err
			}
			if len(evs.Items) == 0 {
				return fmt.Errorf("%s: no Reinstall event", name)
			}
			return nil
		})
	}
	clustertest.Eventually(t, 20*time.Second, func() error {
		u, err := dyn.Resource(chartGVR).Namespace("default").Get(env.Ctx, "aborted", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if msg := conditionMessage(conds, "Failed"); !strings.Contains(msg, "release default/aborted is failed and failurePolicy is abort") {
			return fmt.Errorf("Failed condition %q", msg)
		}
		return nil
	})
	if rel, err := store.Last("aborted"); err != nil || rel.Info.Status != release.StatusFailed || rel.Version != 1 {
		t.Errorf("aborted: %v %v, want revision 1 left failed", rel.Info.Status, err)
	}
}
