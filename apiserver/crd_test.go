package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// crontabCRD is upstream's documentation example, with a status and
// scale subresource, printer columns, a selectable field, defaults and
// CEL rules.
const crontabCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.labelSelector
    additionalPrinterColumns:
    - name: Spec
      type: string
      jsonPath: .spec.cronSpec
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    selectableFields:
    - jsonPath: .spec.color
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "self.minReplicas <= self.replicas"
              message: "replicas must be at least minReplicas"
            - rule: "!has(oldSelf.color) || self.color == oldSelf.color"
              message: "color is immutable"
            properties:
              cronSpec:
                type: string
                pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'
              image:
                type: string
              color:
                type: string
                enum: [red, blue]
                default: red
              replicas:
                type: integer
                minimum: 0
                default: 1
              minReplicas:
                type: integer
                default: 0
              port:
                x-kubernetes-int-or-string: true
              tags:
                type: array
                x-kubernetes-list-type: set
                items:
                  type: string
          status:
            type: object
            properties:
              replicas:
                type: integer
              labelSelector:
                type: string
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

var crontabs = schema.GroupVersionResource{Group: "stable.example.com", Version: "v1", Resource: "crontabs"}

func createCRD(t *testing.T, env *testEnv, manifest string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict([]byte(manifest), &crd); err != nil {
		t.Fatal(err)
	}
	c := crdclient.NewForConfigOrDie(env.cfg)
	out, err := c.CustomResourceDefinitions().Create(env.ctx, &crd, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	return out
}

// waitServed waits until discovery lists the resource, which is when
// clients can use it.
func waitServed(t *testing.T, env *testEnv, gvr schema.GroupVersionResource, served bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		l, err := env.cs.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		found := false
		if err == nil {
			for _, r := range l.APIResources {
				found = found || r.Name == gvr.Resource
			}
		}
		if found == served {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s served=%v not reached in 10s", gvr, served)
	return 0
}

func crontab(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "stable.example.com/v1", "kind": "CronTab",
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
}

func TestCRDServesResourceWithStatus(t *testing.T) {
	env := newTestEnv(t)
	createCRD(t, env, crontabCRD)
	if d := waitServed(t, env, crontabs, true); d > time.Second {
		t.Errorf("served after %v, want within 1s", d)
	}
	c := crdclient.NewForConfigOrDie(env.cfg)
	crd, err := c.CustomResourceDefinitions().Get(env.ctx, "crontabs.stable.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range []apiextensionsv1.CustomResourceDefinitionConditionType{apiextensionsv1.NamesAccepted, apiextensionsv1.Established} {
		found := false
		for _, cond := range crd.Status.Conditions {
			if cond.Type == ct && cond.Status == apiextensionsv1.ConditionTrue {
				found = true
			}
		}
		if !found {
			t.Errorf("condition %s not True: %+v", ct, crd.Status.Conditions)
		}
	}
	if crd.Status.AcceptedNames.Kind != "CronTab" || len(crd.Status.StoredVersions) != 1 || crd.Status.StoredVersions[0] != "v1" {
		t.Errorf("status = %+v", crd.Status)
	}
	// Discovery: short names and categories, both formats.
	l, err := env.cs.Discovery().ServerResourcesForGroupVersion("stable.example.com/v1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range l.APIResources {
		names = append(names, r.Name)
		if r.Name == "crontabs" && (r.Kind != "CronTab" || !r.Namespaced || strings.Join(r.ShortNames, ",") != "ct" || strings.Join(r.Categories, ",") != "all") {
			t.Errorf("discovery entry %+v", r)
		}
	}
	if strings.Join(names, ",") != "crontabs,crontabs/status,crontabs/scale" {
		t.Errorf("resources = %v", names)
	}
	req := httptestGet("/apis")
	req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	rec := serve(t, env.s.Handler(), req)
	if !strings.Contains(rec.Body.String(), `"name":"stable.example.com"`) || !strings.Contains(rec.Body.String(), `"resource":"crontabs"`) {
		t.Errorf("aggregated discovery lacks the CRD: %s", rec.Body.String())
	}

	// OpenAPI v2 and v3 describe the kind with its schema, for kubectl
	// explain and client-side validation.
	rec = serve(t, env.s.Handler(), httptestGet("/openapi/v3/apis/stable.example.com/v1"))
	var v3 struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Properties map[string]map[string]any `json:"properties"`
				} `json:"properties"`
				GVK []map[string]string `json:"x-kubernetes-group-version-kind"`
			} `json:"schemas"`
		} `json:"components"`
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &v3); err != nil {
		t.Fatalf("v3: %v: %s", err, rec.Body.String())
	}
	ctDef := v3.Components.Schemas["com.example.stable.v1.CronTab"]
	if ctDef.Properties["spec"].Properties["cronSpec"]["pattern"] == nil || len(ctDef.GVK) != 1 || ctDef.GVK[0]["kind"] != "CronTab" {
		t.Errorf("v3 CronTab = %+v", ctDef)
	}
	if _, ok := v3.Components.Schemas["com.example.stable.v1.CronTabList"]; !ok {
		t.Error("v3 has no CronTabList")
	}
	if _, ok := v3.Paths["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}/scale"]; !ok {
		t.Error("v3 has no scale path")
	}
	if rec := serve(t, env.s.Handler(), httptestGet("/openapi/v2")); !strings.Contains(rec.Body.String(), `"com.example.stable.v1.CronTab"`) {
		t.Error("OpenAPI v2 lacks CronTab")
	}

	ns := "default"
	dc := env.dyn.Resource(crontabs).Namespace(ns)
	// Defaults on create; generation 1; status dropped on create.
	in := crontab("daily", map[string]any{"cronSpec": "* * * * */5", "image": "img", "replicas": int64(2), "unknown": "x"})
	in.Object["status"] = map[string]any{"replicas": int64(9)}
	out, err := dc.Create(env.ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(out.Object, "spec", "color"); got != "red" {
		t.Errorf("default color = %q", got)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(out.Object, "spec", "unknown"); found {
		t.Errorf("unknown field not pruned: %v", out.Object["spec"])
	}
	if _, found := out.Object["status"]; found {
		t.Errorf("status kept on create: %v", out.Object["status"])
	}
	if out.GetGeneration() != 1 {
		t.Errorf("generation = %d", out.GetGeneration())
	}
	// Strict field validation refuses unknown fields.
	_, err = dc.Create(env.ctx, crontab("strict", map[string]any{"bogus": true}), metav1.CreateOptions{FieldValidation: "Strict"})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "spec.bogus"`) {
		t.Errorf("strict create: %v", err)
	}

	// Status subresource: spec writes keep status, status writes keep
	// spec; only spec bumps generation.
	out.Object["status"] = map[string]any{"replicas": int64(2), "labelSelector": "app=cron"}
	st, err := dc.UpdateStatus(env.ctx, out, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetGeneration() != 1 {
		t.Errorf("status write bumped generation to %d", st.GetGeneration())
	}
	st.Object["status"] = map[string]any{"replicas": int64(0)}
	unstructured.SetNestedField(st.Object, int64(3), "spec", "replicas")
	up, err := dc.Update(env.ctx, st, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(up.Object, "status", "replicas"); r != 2 || up.GetGeneration() != 2 {
		t.Errorf("after spec update: status.replicas=%d generation=%d", r, up.GetGeneration())
	}

	// Scale subresource.
	sc, err := dc.Get(env.ctx, "daily", metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(sc.Object, "spec", "replicas"); r != 3 || sc.GetKind() != "Scale" {
		t.Errorf("scale = %v", sc.Object)
	}
	if sel, _, _ := unstructured.NestedString(sc.Object, "status", "selector"); sel != "app=cron" {
		t.Errorf("scale selector = %q", sel)
	}
	patched, err := dc.Patch(env.ctx, "daily", types.MergePatchType, []byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{}, "scale")
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(patched.Object, "spec", "replicas"); r != 5 {
		t.Errorf("scaled to %d", r)
	}

	// Strategic merge patch is 415; JSON and merge patches work.
	_, err = dc.Patch(env.ctx, "daily", types.StrategicMergePatchType, []byte(`{"spec":{"image":"x"}}`), metav1.PatchOptions{})
	if !apierrors.IsUnsupportedMediaType(err) {
		t.Errorf("strategic merge patch: %v", err)
	}
	if _, err := dc.Patch(env.ctx, "daily", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/image","value":"img2"}]`), metav1.PatchOptions{}); err != nil {
		t.Errorf("json patch: %v", err)
	}

	// Server-side apply.
	apply := []byte(`{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"applied","labels":{"team":"a"}},"spec":{"cronSpec":"* * * * *","color":"blue"}}`)
	ap, err := dc.Patch(env.ctx, "applied", types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "test"})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(ap.GetManagedFields()) == 0 || ap.GetLabels()["team"] != "a" {
		t.Errorf("applied = %v", ap.Object)
	}
	// Metadata is merged field by field, as for built-in kinds: a second
	// manager's label and finalizer join the first's, and the first
	// giving its label up removes only that one.
	if _, err = dc.Patch(env.ctx, "applied", types.ApplyPatchType, []byte(`{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"applied","labels":{"team":"a"},"finalizers":["example.com/a"]},"spec":{"cronSpec":"* * * * *","color":"blue"}}`), metav1.PatchOptions{FieldManager: "test"}); err != nil {
		t.Fatal(err)
	}
	other := []byte(`{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"applied","labels":{"tier":"b"},"finalizers":["example.com/b"]}}`)
	if ap, err = dc.Patch(env.ctx, "applied", types.ApplyPatchType, other, metav1.PatchOptions{FieldManager: "other"}); err != nil {
		t.Fatalf("second manager's apply: %v", err)
	}
	if l := ap.GetLabels(); l["team"] != "a" || l["tier"] != "b" || len(ap.GetFinalizers()) != 2 {
		t.Errorf("after a second manager's apply: labels %v, finalizers %v", l, ap.GetFinalizers())
	}
	withoutLabel := []byte(`{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"applied"},"spec":{"cronSpec":"* * * * *","color":"blue"}}`)
	if ap, err = dc.Patch(env.ctx, "applied", types.ApplyPatchType, withoutLabel, metav1.PatchOptions{FieldManager: "test"}); err != nil {
		t.Fatalf("re-apply without the label: %v", err)
	}
	if l := ap.GetLabels(); l["team"] != "" || l["tier"] != "b" || !slices.Equal(ap.GetFinalizers(), []string{"example.com/b"}) {
		t.Errorf("after the first manager dropped its label and finalizer: labels %v, finalizers %v, want only tier=b and example.com/b", l, ap.GetFinalizers())
	}
	if _, err = dc.Patch(env.ctx, "applied", types.ApplyPatchType, []byte(`{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"applied","labels":{"team":"a"}},"spec":{"cronSpec":"* * * * *","color":"blue"}}`), metav1.PatchOptions{FieldManager: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err = dc.Patch(env.ctx, "applied", types.ApplyPatchType, []byte(`{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"applied"}}`), metav1.PatchOptions{FieldManager: "other"}); err != nil {
		t.Fatal(err)
	}

	// Field selectors: metadata.name and the selectable field.
	list, err := dc.List(env.ctx, metav1.ListOptions{FieldSelector: "spec.color=blue"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].GetName() != "applied" {
		t.Errorf("spec.color=blue selected %d items", len(list.Items))
	}
	if _, err := dc.List(env.ctx, metav1.ListOptions{FieldSelector: "spec.image=x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unselectable field: %v", err)
	}
	list, err = dc.List(env.ctx, metav1.ListOptions{LabelSelector: "team=a"})
	if err != nil || len(list.Items) != 1 {
		t.Errorf("label selector: %v, %d items", err, len(list.Items))
	}

	// Server-side table with the printer columns.
	req = httptestGet("/apis/stable.example.com/v1/namespaces/default/crontabs")
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	rec = serve(t, env.s.Handler(), req)
	var table metav1.Table
	if err := json.Unmarshal(rec.Body.Bytes(), &table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if strings.Join(cols, ",") != "Name,Spec,Replicas" || len(table.Rows) != 2 {
		t.Fatalf("table = %s", rec.Body.String())
	}
	if got := table.Rows[1].Cells; got[0] != "daily" || got[1] != "* * * * */5" || got[2] != float64(5) {
		t.Errorf("row = %v", got)
	}

	// The other version shows the same object (None conversion).
	v1beta1 := env.dyn.Resource(schema.GroupVersionResource{Group: "stable.example.com", Version: "v1beta1", Resource: "crontabs"}).Namespace(ns)
	b, err := v1beta1.Get(env.ctx, "daily", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetAPIVersion() != "stable.example.com/v1beta1" || b.GetUID() != up.GetUID() {
		t.Errorf("v1beta1 view = %v", b.Object)
	}

	// A default added to the CRD later shows on objects stored before it.
	c2 := crdclient.NewForConfigOrDie(env.cfg)
	crd2, err := c2.CustomResourceDefinitions().Get(env.ctx, "crontabs.stable.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	props := crd2.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	props.Properties["timezone"] = apiextensionsv1.JSONSchemaProps{Type: "string", Default: &apiextensionsv1.JSON{Raw: []byte(`"UTC"`)}}
	crd2.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = props
	if _, err := c2.CustomResourceDefinitions().Update(env.ctx, crd2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := dc.Get(env.ctx, "daily", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tz, _, _ := unstructured.NestedString(got.Object, "spec", "timezone"); tz == "UTC" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("default not applied on read: %v", got.Object["spec"])
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Protobuf-only clients get 406.
	req = httptestGet("/apis/stable.example.com/v1/namespaces/default/crontabs/daily")
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	if rec := serve(t, env.s.Handler(), req); rec.Code != http.StatusNotAcceptable {
		t.Errorf("protobuf-only get = %d", rec.Code)
	}
}

func TestCustomObjectValidation(t *testing.T) {
	env := newTestEnv(t)
	createCRD(t, env, crontabCRD)
	waitServed(t, env, crontabs, true)
	dc := env.dyn.Resource(crontabs).Namespace("default")
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		field string
		msg   string
	}{
		{"type", map[string]any{"image": int64(3)}, "spec.image", `Invalid value: "integer": spec.image in body must be of type string: "integer"`},
		{"pattern", map[string]any{"cronSpec": "never"}, "spec.cronSpec", `spec.cronSpec in body should match`},
		{"enum", map[string]any{"color": "green"}, "spec.color", `Unsupported value: "green": supported values: "red", "blue"`},
		{"minimum", map[string]any{"replicas": int64(-1)}, "spec.replicas", `should be greater than or equal to 0`},
		{"cel", map[string]any{"replicas": int64(1), "minReplicas": int64(2)}, "spec", `replicas must be at least minReplicas`},
		{"set", map[string]any{"tags": []any{"a", "a"}}, "spec.tags[1]", `Duplicate value: "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dc.Create(env.ctx, crontab("bad-"+tc.name, tc.spec), metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("err = %v, want 422", err)
			}
			st := err.(apierrors.APIStatus).Status()
			found := false
			for _, c := range st.Details.Causes {
				found = found || (c.Field == tc.field && strings.Contains(c.Message, tc.msg))
			}
			if !found || !strings.Contains(st.Message, `CronTab.stable.example.com "bad-`+tc.name+`" is invalid`) {
				t.Errorf("status = %+v", st)
			}
			if _, err := dc.Get(env.ctx, "bad-"+tc.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("invalid object stored: %v", err)
			}
		})
	}
	// int-or-string takes both.
	for _, port := range []any{int64(80), "http"} {
		if _, err := dc.Create(env.ctx, crontab("port-"+strings.ToLower(strings.Trim(strings.ReplaceAll(toJSON(port), `"`, ""), " ")), map[string]any{"port": port}), metav1.CreateOptions{}); err != nil {
			t.Errorf("port %v: %v", port, err)
		}
	}
	// Transition rule: color is immutable once set.
	obj, err := dc.Create(env.ctx, crontab("immutable", map[string]any{"color": "blue"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedField(obj.Object, "red", "spec", "color")
	if _, err := dc.Update(env.ctx, obj, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "color is immutable") {
		t.Errorf("transition rule: %v", err)
	}
	// Dry run stores nothing.
	if _, err := dc.Create(env.ctx, crontab("dry", map[string]any{}), metav1.CreateOptions{DryRun: []string{"All"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Get(env.ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("dry run stored: %v", err)
	}
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestCRDRules(t *testing.T) {
	env := newTestEnv(t)
	c := crdclient.NewForConfigOrDie(env.cfg)
	base := func(name, group, plural string) *apiextensionsv1.CustomResourceDefinition {
		return &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: group, Scope: apiextensionsv1.ClusterScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: "Widget"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
			},
		}
	}
	for _, tc := range []struct {
		name string
		crd  *apiextensionsv1.CustomResourceDefinition
		msg  string
	}{
		{"name", base("widgets.other.example.com", "example.com", "widgets"), `must be spec.names.plural+"."+spec.group`},
		{"builtin group", base("widgets.apps", "apps", "widgets"), `should be a domain with at least one dot`},
		{"builtin dotted group", base("widgets.networking.k8s.io", "networking.k8s.io", "widgets"), `cannot be claimed`},
		{"not structural", func() *apiextensionsv1.CustomResourceDefinition {
			crd := base("widgets.example.com", "example.com", "widgets")
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema = &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {}}}
			return crd
		}(), `must not be empty for specified object fields`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "builtin dotted group" {
				tc.crd.Annotations = map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/1"}
			}
			_, err := c.CustomResourceDefinitions().Create(env.ctx, tc.crd, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want 422 with %q", err, tc.msg)
			}
		})
	}

	// A second CRD of the group asking for a taken kind is not accepted;
	// as upstream, the last conflict checked (the list kind) is reported.
	first := base("widgets.example.com", "example.com", "widgets")
	if _, err := c.CustomResourceDefinitions().Create(env.ctx, first, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitServed(t, env, schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, true)
	second := base("gadgets.example.com", "example.com", "gadgets")
	if _, err := c.CustomResourceDefinitions().Create(env.ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := c.CustomResourceDefinitions().Get(env.ctx, "gadgets.example.com", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var cond *apiextensionsv1.CustomResourceDefinitionCondition
		for i := range got.Status.Conditions {
			if got.Status.Conditions[i].Type == apiextensionsv1.NamesAccepted {
				cond = &got.Status.Conditions[i]
			}
		}
		if cond != nil {
			if cond.Status != apiextensionsv1.ConditionFalse || cond.Reason != "ListKindConflict" || cond.Message != `"WidgetList" is already in use` {
				t.Errorf("NamesAccepted = %+v", cond)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no NamesAccepted condition")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := env.dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}).List(env.ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("conflicting CRD served: %v", err)
	}
}

func TestCRDDeletionRemovesObjects(t *testing.T) {
	env := newTestEnv(t)
	createCRD(t, env, crontabCRD)
	waitServed(t, env, crontabs, true)
	dc := env.dyn.Resource(crontabs).Namespace("default")
	w, err := dc.Watch(env.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, n := range []string{"a", "b"} {
		if _, err := dc.Create(env.ctx, crontab(n, map[string]any{}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	held := crontab("held", map[string]any{})
	held.SetFinalizers([]string{"example.com/hold"})
	if _, err := dc.Create(env.ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if ev := <-w.ResultChan(); ev.Type != watch.Added {
			t.Fatalf("event %v", ev.Type)
		}
	}
	c := crdclient.NewForConfigOrDie(env.cfg)
	if err := c.CustomResourceDefinitions().Delete(env.ctx, "crontabs.stable.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// New objects are refused while it terminates; the held one stays.
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := dc.List(env.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 1 && l.Items[0].GetName() == "held" && l.Items[0].GetDeletionTimestamp() != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("objects left: %d", len(l.Items))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := dc.Create(env.ctx, crontab("late", map[string]any{}), metav1.CreateOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("create while terminating: %v", err)
	}
	crd, err := c.CustomResourceDefinitions().Get(env.ctx, "crontabs.stable.example.com", metav1.GetOptions{})
	if err != nil || len(crd.Finalizers) != 1 || crd.Finalizers[0] != apiextensionsv1.CustomResourceCleanupFinalizer {
		t.Fatalf("terminating CRD: %v %v", err, crd.Finalizers)
	}
	// Releasing the held object lets the CRD go, and the resource with it.
	if _, err := dc.Patch(env.ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitServed(t, env, crontabs, false)
	// Open watches end with the resource.
	timeout := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-w.ResultChan():
		case <-timeout:
			t.Fatal("watch still open after the CRD went")
		}
	}
	if rec := serve(t, env.s.Handler(), httptestGet("/openapi/v2")); strings.Contains(rec.Body.String(), "com.example.stable.v1.CronTab") {
		t.Error("OpenAPI v2 still describes CronTab")
	}
	if _, err := c.CustomResourceDefinitions().Get(env.ctx, "crontabs.stable.example.com", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("CRD still there: %v", err)
	}
	if _, err := dc.List(env.ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("list after deletion: %v", err)
	}
	// Recreating it serves an empty resource: nothing came back.
	createCRD(t, env, crontabCRD)
	waitServed(t, env, crontabs, true)
	l, err := dc.List(env.ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 0 {
		t.Errorf("after recreate: %v, %d items", err, len(l.Items))
	}
}

// gizmoConverter is a conversion webhook: v1's spec.replicas is v2's
// spec.count. It refuses objects whose spec.refuse is set, and tries to
// rename what it converts (the API server must keep the name).
func gizmoConverter(t *testing.T, calls *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var review apiextensionsv1.ConversionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			t.Errorf("bad review: %v", err)
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
		for _, raw := range review.Request.Objects {
			var u unstructured.Unstructured
			if err := u.UnmarshalJSON(raw.Raw); err != nil {
				t.Error(err)
			}
			if refuse, _, _ := unstructured.NestedBool(u.Object, "spec", "refuse"); refuse {
				resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: "refused"}
				break
			}
			spec, _, _ := unstructured.NestedMap(u.Object, "spec")
			if review.Request.DesiredAPIVersion == "conv.example.com/v2" {
				if v, ok := spec["replicas"]; ok {
					spec["count"] = v
					delete(spec, "replicas")
				}
			} else if v, ok := spec["count"]; ok {
				spec["replicas"] = v
				delete(spec, "count")
			}
			unstructured.SetNestedMap(u.Object, spec, "spec")
			u.SetAPIVersion(review.Request.DesiredAPIVersion)
			u.SetName("renamed")
			u.SetLabels(map[string]string{"converted": "yes"})
			b, _ := u.MarshalJSON()
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: b})
		}
		review.Response, review.Request = resp, nil
		json.NewEncoder(w).Encode(&review)
	}
}

func TestCRDWebhookConversion(t *testing.T) {
	env := newTestEnv(t)
	var calls atomic.Int32
	hook := httptest.NewTLSServer(gizmoConverter(t, &calls))
	defer hook.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw})
	schemaOf := func(field string) *apiextensionsv1.CustomResourceValidation {
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{field: {Type: "integer"}, "refuse": {Type: "boolean"}}},
		}}}
	}
	url := hook.URL + "/convert"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmos.conv.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "conv.example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gizmos", Kind: "Gizmo"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaOf("replicas")},
				{Name: "v2", Served: true, Schema: schemaOf("count")},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
				ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: ca}, ConversionReviewVersions: []string{"v1"},
			}},
		},
	}
	if _, err := crdclient.NewForConfigOrDie(env.cfg).CustomResourceDefinitions().Create(env.ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v1 := schema.GroupVersionResource{Group: "conv.example.com", Version: "v1", Resource: "gizmos"}
	v2 := v1.GroupResource().WithVersion("v2")
	waitServed(t, env, v2, true)

	// Created through v2, stored in v1, read through both.
	in := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "conv.example.com/v2", "kind": "Gizmo",
		"metadata": map[string]any{"name": "g"}, "spec": map[string]any{"count": int64(3)}}}
	out, err := env.dyn.Resource(v2).Namespace("default").Create(env.ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := unstructured.NestedInt64(out.Object, "spec", "count"); n != 3 || out.GetName() != "g" {
		t.Errorf("created = %v", out.Object)
	}
	got, err := env.dyn.Resource(v1).Namespace("default").Get(env.ctx, "g", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); n != 3 || got.GetName() != "g" || got.GetLabels()["converted"] != "yes" {
		t.Errorf("v1 view = %v", got.Object)
	}
	if calls.Load() == 0 {
		t.Error("the webhook was never called")
	}
	// A list is converted in one review.
	for _, n := range []string{"h", "i"} {
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "conv.example.com/v1", "kind": "Gizmo",
			"metadata": map[string]any{"name": n}, "spec": map[string]any{"replicas": int64(1)}}}
		if _, err := env.dyn.Resource(v1).Namespace("default").Create(env.ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := calls.Load()
	list, err := env.dyn.Resource(v2).Namespace("default").List(env.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 || calls.Load() != before+1 {
		t.Errorf("list of %d items took %d webhook calls", len(list.Items), calls.Load()-before)
	}
	for _, it := range list.Items {
		if _, found, _ := unstructured.NestedInt64(it.Object, "spec", "count"); !found || it.GetAPIVersion() != "conv.example.com/v2" {
			t.Errorf("listed %v", it.Object)
		}
	}
	// A refusal is the webhook's error, not stored data.
	in = in.DeepCopy()
	in.SetName("refused")
	unstructured.SetNestedField(in.Object, true, "spec", "refuse")
	_, err = env.dyn.Resource(v2).Namespace("default").Create(env.ctx, in, metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "conversion webhook for conv.example.com/v1, Kind=Gizmo failed: refused") {
		t.Errorf("refused conversion: %v", err)
	}
	if _, err := env.dyn.Resource(v1).Namespace("default").Get(env.ctx, "refused", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("refused object stored: %v", err)
	}
	// A caBundle that does not sign the webhook's certificate: not trusted.
	crd2, err := crdclient.NewForConfigOrDie(env.cfg).CustomResourceDefinitions().Get(env.ctx, "gizmos.conv.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crd2.Spec.Conversion.Webhook.ClientConfig.CABundle = otherCA(t)
	if _, err := crdclient.NewForConfigOrDie(env.cfg).CustomResourceDefinitions().Update(env.ctx, crd2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := env.dyn.Resource(v2).Namespace("default").Get(env.ctx, "g", metav1.GetOptions{})
		if err != nil && strings.Contains(err.Error(), "certificate") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("untrusted webhook: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// otherCA is a self-signed CA certificate, PEM, that signs nothing else.
func otherCA(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// After a restart, the API server is ready only once the stored CRDs are
// served: a custom object is never a 404 to a client that waited for
// /readyz.
func TestCRDServedWhenReadyAfterRestart(t *testing.T) {
	env := newTestEnv(t)
	createCRD(t, env, crontabCRD)
	waitServed(t, env, crontabs, true)
	if _, err := env.dyn.Resource(crontabs).Namespace("default").Create(env.ctx, crontab("kept", map[string]any{}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.s.Shutdown()
	s2, err := New(Config{Store: env.st})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec := httptest.NewRecorder()
		s2.Handler().ServeHTTP(rec, httptestGet("/readyz"))
		if rec.Code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not ready after restart")
		}
		time.Sleep(time.Millisecond)
	}
	rec := serve(t, s2.Handler(), httptestGet("/apis/stable.example.com/v1/namespaces/default/crontabs/kept"))
	if rec.Code != http.StatusOK {
		t.Errorf("custom object right after ready: %d %s", rec.Code, rec.Body.String())
	}
	rec = serve(t, s2.Handler(), httptestGet("/readyz?verbose"))
	if !strings.Contains(rec.Body.String(), "[+]poststarthook/crd-informer-synced ok") {
		t.Errorf("readyz = %s", rec.Body.String())
	}
}

// Two CRDs created back to back that ask for the same kind: exactly one
// gets it, however close together their namings run.
func TestCRDNamesRace(t *testing.T) {
	env := newTestEnv(t)
	c := crdclient.NewForConfigOrDie(env.cfg)
	for i := 0; i < 5; i++ {
		group := fmt.Sprintf("race%d.example.com", i)
		for _, plural := range []string{"alphas", "betas"} {
			crd := &apiextensionsv1.CustomResourceDefinition{
				ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
				Spec: apiextensionsv1.CustomResourceDefinitionSpec{
					Group: group, Scope: apiextensionsv1.ClusterScoped,
					Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: "Same"},
					Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
						Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
				},
			}
			if _, err := c.CustomResourceDefinitions().Create(env.ctx, crd, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			accepted, decided := 0, 0
			for _, plural := range []string{"alphas", "betas"} {
				got, err := c.CustomResourceDefinitions().Get(env.ctx, plural+"."+group, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, cond := range got.Status.Conditions {
					if cond.Type == apiextensionsv1.NamesAccepted {
						decided++
						if cond.Status == apiextensionsv1.ConditionTrue {
							accepted++
						}
					}
				}
			}
			if decided == 2 {
				if accepted != 1 {
					t.Errorf("group %s: %d CRDs accepted the same kind", group, accepted)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %s: names not decided", group)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

const gadgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: gadgets, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [owner]
            properties:
              owner: {type: string, format: email}
              note: {type: string, nullable: true}
              count: {type: integer}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
              template:
                type: object
                x-kubernetes-embedded-resource: true
                x-kubernetes-preserve-unknown-fields: true
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
`

func TestCustomObjectSchemaKeywords(t *testing.T) {
	env := newTestEnv(t)
	createCRD(t, env, gadgetCRD)
	gadgets := schema.GroupVersionResource{Group: "stable.example.com", Version: "v1", Resource: "gadgets"}
	waitServed(t, env, gadgets, true)
	dc := env.dyn.Resource(gadgets).Namespace("default")
	gadget := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "stable.example.com/v1", "kind": "Gadget", "metadata": map[string]any{"name": name}, "spec": spec}}
	}
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		field string
		msg   string
	}{
		{"required", map[string]any{}, "spec.owner", "Required value"},
		{"format", map[string]any{"owner": "not-an-email"}, "spec.owner", "spec.owner in body must be of type email"},
		{"not nullable", map[string]any{"owner": "a@b.c", "count": nil}, "spec.count", "must be of type integer"},
		{"map keys", map[string]any{"owner": "a@b.c", "ports": []any{map[string]any{"name": "http", "port": int64(80)}, map[string]any{"name": "http", "port": int64(81)}}}, "spec.ports[1]", `Duplicate value: {"name":"http"}`},
		{"embedded kind", map[string]any{"owner": "a@b.c", "template": map[string]any{"apiVersion": "v1", "metadata": map[string]any{"name": "x"}}}, "spec.template.kind", "Required value"},
		{"embedded name", map[string]any{"owner": "a@b.c", "template": map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "a/b"}}}, "spec.template.metadata.name", "may not contain '/'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dc.Create(env.ctx, gadget("bad", tc.spec), metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("err = %v, want 422", err)
			}
			found := false
			for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
				found = found || (c.Field == tc.field && strings.Contains(c.Message, tc.msg))
			}
			if !found {
				t.Errorf("causes = %+v", err.(apierrors.APIStatus).Status().Details.Causes)
			}
		})
	}
	// What is valid: null where nullable, an embedded object with its
	// metadata, unknown fields kept where the schema preserves them.
	out, err := dc.Create(env.ctx, gadget("good", map[string]any{
		"owner": "a@b.c", "note": nil,
		"template": map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "bogus": "x"}, "spec": map[string]any{"any": "thing"}},
		"extra":    map[string]any{"free": map[string]any{"form": int64(1)}},
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := out.Object["spec"].(map[string]any)
	if v, ok := spec["note"]; !ok || v != nil {
		t.Errorf("nullable note = %v, %v", v, ok)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(out.Object, "spec", "extra", "free", "form"); !found {
		t.Errorf("preserved fields dropped: %v", spec["extra"])
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(out.Object, "spec", "template", "spec", "any"); !found {
		t.Errorf("embedded object's fields dropped: %v", spec["template"])
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(out.Object, "spec", "template", "metadata", "bogus"); found {
		t.Errorf("embedded object's metadata not pruned: %v", spec["template"])
	}
}

// Versions: storage moves are recorded in storedVersions; an unserved
// version is a 404; objects keep their data across the move.
func TestCRDVersions(t *testing.T) {
	env := newTestEnv(t)
	createCRD(t, env, crontabCRD)
	waitServed(t, env, crontabs, true)
	dc := env.dyn.Resource(crontabs).Namespace("default")
	if _, err := dc.Create(env.ctx, crontab("old", map[string]any{"image": "a"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := crdclient.NewForConfigOrDie(env.cfg)
	crd, err := c.CustomResourceDefinitions().Get(env.ctx, "crontabs.stable.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// v1beta1 becomes the storage version; v1 stops being served.
	crd.Spec.Versions[0].Storage, crd.Spec.Versions[0].Served = false, false
	crd.Spec.Versions[1].Storage = true
	crd.Spec.Versions[0].Subresources = nil
	crd, err = c.CustomResourceDefinitions().Update(env.ctx, crd, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(crd.Status.StoredVersions, ","); got != "v1,v1beta1" {
		t.Errorf("storedVersions = %s", got)
	}
	waitServed(t, env, crontabs, false)
	if _, err := dc.Get(env.ctx, "old", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("unserved version: %v", err)
	}
	beta := env.dyn.Resource(crontabs.GroupResource().WithVersion("v1beta1")).Namespace("default")
	got, err := beta.Get(env.ctx, "old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img, _, _ := unstructured.NestedString(got.Object, "spec", "image"); img != "a" || got.GetAPIVersion() != "stable.example.com/v1beta1" {
		t.Errorf("through v1beta1: %v", got.Object)
	}
	// A storage version cannot leave spec.versions while stored.
	crd.Spec.Versions = crd.Spec.Versions[1:]
	if _, err := c.CustomResourceDefinitions().Update(env.ctx, crd, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.storedVersions[0]") {
		t.Errorf("dropping a stored version: %v", err)
	}
}
