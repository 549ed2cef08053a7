package openapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

var allVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

func testResources() []Resource {
	rw := []string{"get", "patch", "update"}
	return []Resource{
		{GVK: corev1.SchemeGroupVersion.WithKind("Pod"), ListKind: "PodList", Resource: "pods", Namespaced: true, Verbs: allVerbs,
			Object: &corev1.Pod{}, List: &corev1.PodList{}, ReturnsDeleted: true,
			Subresources: []Subresource{{Name: "status", GVK: corev1.SchemeGroupVersion.WithKind("Pod"), Verbs: rw},
				{Name: "binding", GVK: corev1.SchemeGroupVersion.WithKind("Binding"), Object: &corev1.Binding{}, Verbs: []string{"create"}}}},
		{GVK: corev1.SchemeGroupVersion.WithKind("Namespace"), ListKind: "NamespaceList", Resource: "namespaces", Verbs: allVerbs,
			Object: &corev1.Namespace{}, List: &corev1.NamespaceList{}},
		{GVK: corev1.SchemeGroupVersion.WithKind("ConfigMap"), ListKind: "ConfigMapList", Resource: "configmaps", Namespaced: true, Verbs: allVerbs,
			Object: &corev1.ConfigMap{}, List: &corev1.ConfigMapList{}},
		{GVK: appsv1.SchemeGroupVersion.WithKind("Deployment"), ListKind: "DeploymentList", Resource: "deployments", Namespaced: true, Verbs: allVerbs,
			Object: &appsv1.Deployment{}, List: &appsv1.DeploymentList{},
			Subresources: []Subresource{{Name: "status", GVK: appsv1.SchemeGroupVersion.WithKind("Deployment"), Verbs: rw},
				{Name: "scale", GVK: autoscalingv1.SchemeGroupVersion.WithKind("Scale"), Object: &autoscalingv1.Scale{}, Verbs: rw}}},
	}
}

func TestDefName(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{appsv1.Deployment{}, "io.k8s.api.apps.v1.Deployment"},
		{metav1.ObjectMeta{}, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
	} {
		if got := defName(reflect.TypeOf(tc.v)); got != tc.want {
			t.Errorf("defName(%T) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// TestDefNameWithoutModelName checks the package-path rule on its own, for
// types that do not name themselves.
func TestDefNameWithoutModelName(t *testing.T) {
	type local struct{}
	got := defName(reflect.TypeOf(local{}))
	if got != "dev.bonsai.bonsai.apiserver.openapi.local" {
		t.Errorf("defName(local) = %q", got)
	}
}

func TestV3Definitions(t *testing.T) {
	docs := BuildV3(testResources())
	core, apps := docs["api/v1"], docs["apis/apps/v1"]
	if core == nil || apps == nil {
		t.Fatalf("documents: got %v", keys(docs))
	}
	defs := core.Components.Schemas

	container := defs["io.k8s.api.core.v1.Container"]
	if container == nil {
		t.Fatal("no io.k8s.api.core.v1.Container")
	}
	want := (corev1.Container{}).SwaggerDoc()["image"]
	if got := container.Properties["image"].Description; got != want || want == "" {
		t.Errorf("Container.image description = %q, want %q", got, want)
	}
	if !contains(container.Required, "name") || contains(container.Required, "image") {
		t.Errorf("Container required = %v, want name and not image", container.Required)
	}

	containers := defs["io.k8s.api.core.v1.PodSpec"].Properties["containers"]
	wantExt := spec.Extensions{"x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"}
	if diff := cmp.Diff(wantExt, containers.Extensions); diff != "" {
		t.Errorf("PodSpec.containers extensions (-want +got):\n%s", diff)
	}
	if got := containers.Items.Schema.Ref.String(); got != "#/components/schemas/io.k8s.api.core.v1.Container" {
		t.Errorf("PodSpec.containers items = %q", got)
	}

	// A described reference is wrapped in allOf so the description stays.
	meta := defs["io.k8s.api.core.v1.Pod"].Properties["metadata"]
	if len(meta.AllOf) != 1 || meta.AllOf[0].Ref.String() != "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" || meta.Description == "" {
		t.Errorf("Pod.metadata = %+v", meta)
	}
	// TypeMeta is inlined.
	if _, ok := defs["io.k8s.api.core.v1.Pod"].Properties["apiVersion"]; !ok {
		t.Error("Pod has no apiVersion: TypeMeta not flattened")
	}

	gvk := func(s *spec.Schema) any { return s.Extensions["x-kubernetes-group-version-kind"] }
	wantGVK := []any{map[string]any{"group": "apps", "version": "v1", "kind": "Deployment"}}
	if diff := cmp.Diff(wantGVK, gvk(apps.Components.Schemas["io.k8s.api.apps.v1.Deployment"])); diff != "" {
		t.Errorf("Deployment x-kubernetes-group-version-kind (-want +got):\n%s", diff)
	}

	wantIOS := `{"format":"int-or-string","oneOf":[{"type":"integer"},{"type":"string"}],"x-kubernetes-int-or-string":true}`
	if diff := cmp.Diff(fromJSON(t, wantIOS), asJSON(t, defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"])); diff != "" {
		t.Errorf("IntOrString (-want +got):\n%s", diff)
	}
	q := asJSON(t, defs["io.k8s.apimachinery.pkg.api.resource.Quantity"]).(map[string]any)
	delete(q, "description")
	if diff := cmp.Diff(fromJSON(t, `{"oneOf":[{"type":"string"},{"type":"number"}]}`), any(q)); diff != "" {
		t.Errorf("Quantity (-want +got):\n%s", diff)
	}
	if ts := defs["io.k8s.apimachinery.pkg.apis.meta.v1.Time"]; ts == nil || ts.Format != "date-time" || !cmp.Equal(ts.Type, spec.StringOrArray{"string"}) {
		t.Errorf("Time = %+v", ts)
	}
	if raw := defs["io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1"]; raw == nil || !cmp.Equal(raw.Type, spec.StringOrArray{"object"}) || len(raw.Properties) != 0 {
		t.Errorf("FieldsV1 = %+v", raw)
	}
	data := defs["io.k8s.api.core.v1.ConfigMap"].Properties["binaryData"]
	if data.AdditionalProperties == nil || data.AdditionalProperties.Schema.Format != "byte" {
		t.Errorf("ConfigMap.binaryData = %+v", data)
	}
}

func TestV2Definitions(t *testing.T) {
	doc := BuildV2(testResources())
	ios := doc.Definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]
	if !cmp.Equal(ios.Type, spec.StringOrArray{"string"}) || ios.Format != "int-or-string" || len(ios.OneOf) != 0 {
		t.Errorf("v2 IntOrString = %+v", ios.SchemaProps)
	}
	meta := doc.Definitions["io.k8s.api.apps.v1.Deployment"].Properties["metadata"]
	if meta.Ref.String() != "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" || meta.Description == "" {
		t.Errorf("v2 Deployment.metadata = %+v", meta)
	}
	// Every reference resolves: kubectl refuses the whole document otherwise.
	body, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range strings.Split(string(body), `"$ref":"#/definitions/`)[1:] {
		name := m[:strings.IndexByte(m, '"')]
		if _, ok := doc.Definitions[name]; !ok {
			t.Errorf("dangling reference to %s", name)
		}
	}
}

func TestPatchDeclaresFieldValidation(t *testing.T) {
	apps := BuildV3(testResources())["apis/apps/v1"]
	item := apps.Paths.Paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]
	if item == nil || item.Patch == nil {
		t.Fatalf("no patch on deployments: %v", keys(apps.Paths.Paths))
	}
	op := item.Patch
	if op.OperationId != "patchAppsV1NamespacedDeployment" {
		t.Errorf("operationId = %q", op.OperationId)
	}
	if diff := cmp.Diff(map[string]string{"group": "apps", "version": "v1", "kind": "Deployment"}, op.Extensions["x-kubernetes-group-version-kind"]); diff != "" {
		t.Errorf("patch gvk (-want +got):\n%s", diff)
	}
	var names []string
	for _, p := range op.Parameters {
		if p.In == "query" {
			names = append(names, p.Name)
		}
	}
	if diff := cmp.Diff([]string{"dryRun", "fieldManager", "fieldValidation", "force"}, names); diff != "" {
		t.Errorf("patch query parameters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sorted(patchConsumes), keys(op.RequestBody.Content)); diff != "" {
		t.Errorf("patch content types (-want +got):\n%s", diff)
	}
	scale := apps.Paths.Paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]
	if scale == nil || scale.Put == nil || scale.Put.Extensions["x-kubernetes-group-version-kind"].(map[string]string)["kind"] != "Scale" {
		t.Errorf("scale path = %+v", scale)
	}
	if apps.Paths.Paths["/apis/apps/v1/deployments"] == nil {
		t.Error("no list across namespaces")
	}
	core := BuildV3(testResources())["api/v1"]
	if core.Paths.Paths["/api/v1/namespaces/{name}"] == nil || core.Paths.Paths["/api/v1/namespaces/{namespace}/pods/{name}/binding"].Post == nil {
		t.Errorf("core paths: %v", keys(core.Paths.Paths))
	}
}

func TestServeV3(t *testing.T) {
	h := NewHandler(testResources)
	get := func(url string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeV3(w, httptest.NewRequest("GET", url, nil))
		return w
	}
	w := get("/openapi/v3")
	var root struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &root); err != nil {
		t.Fatal(err)
	}
	var gvs []string
	for gv, u := range root.Paths {
		gvs = append(gvs, gv)
		if !strings.HasPrefix(u.ServerRelativeURL, "/openapi/v3/"+gv+"?hash=") || len(u.ServerRelativeURL) != len("/openapi/v3/"+gv+"?hash=")+128 {
			t.Errorf("%s: serverRelativeURL %q", gv, u.ServerRelativeURL)
		}
	}
	if diff := cmp.Diff([]string{"api/v1", "apis/apps/v1"}, sorted(gvs)); diff != "" {
		t.Errorf("root (-want +got):\n%s", diff)
	}

	u := root.Paths["apis/apps/v1"].ServerRelativeURL
	w = get(u)
	if w.Code != 200 || w.Header().Get("Cache-Control") != "public, immutable" {
		t.Errorf("GET %s: %d %v", u, w.Code, w.Header())
	}
	var doc spec3.OpenAPI
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Components.Schemas["io.k8s.api.apps.v1.Deployment"] == nil {
		t.Error("apps/v1 document lacks Deployment")
	}
	if w = get("/openapi/v3/apis/apps/v1?hash=0"); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != u {
		t.Errorf("stale hash: %d %q", w.Code, w.Header().Get("Location"))
	}
	if w = get("/openapi/v3/apis/apps/v1"); w.Code != 200 || w.Header().Get("Cache-Control") != "" {
		t.Errorf("no hash: %d %v", w.Code, w.Header())
	}
	if w = get("/openapi/v3/apis/nope/v1"); w.Code != 404 {
		t.Errorf("unknown group version: %d", w.Code)
	}

	h.Invalidate()
	if w = get("/openapi/v3"); w.Code != 200 {
		t.Errorf("after Invalidate: %d", w.Code)
	}
}

func TestServeV2Protobuf(t *testing.T) {
	h := NewHandler(testResources)
	r := httptest.NewRequest("GET", "/openapi/v2", nil)
	r.Header.Set("Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
	w := httptest.NewRecorder()
	h.ServeV2(w, r)
	if w.Code != 200 || w.Header().Get("Content-Type") != mimeV2Proto {
		t.Fatalf("GET /openapi/v2 protobuf: %d %v", w.Code, w.Header())
	}
	var doc openapi_v2.Document
	if err := proto.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range doc.GetDefinitions().GetAdditionalProperties() {
		if d.Name == "io.k8s.api.apps.v1.Deployment" {
			found = true
		}
	}
	if !found {
		t.Error("protobuf document lacks Deployment")
	}

	w = httptest.NewRecorder()
	h.ServeV2(w, httptest.NewRequest("GET", "/openapi/v2", nil))
	var sw spec.Swagger
	if err := json.Unmarshal(w.Body.Bytes(), &sw); err != nil || sw.Swagger != "2.0" {
		t.Errorf("JSON v2: %v %q", err, sw.Swagger)
	}
}

func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return fromJSON(t, string(b))
}

func fromJSON(t *testing.T, s string) any {
	t.Helper()
	var out any
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return sorted(out)
}

func sorted(xs []string) []string {
	out := append([]string(nil), xs...)
	sort.Strings(out)
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// A CRD's schema goes into Swagger 2.0 as kube-apiserver publishes it
// there (kubectl 1.27's client-side validation refuses anyOf in it):
// without junctors, nullable and unknown-preserving fields untyped; the
// OpenAPI 3.0 document keeps it whole.
func TestCustomResourceSwagger2(t *testing.T) {
	var crdSchema spec.Schema
	if err := json.Unmarshal([]byte(`{"type":"object","properties":{"spec":{"type":"object","required":["port","note"],"properties":{
		"port":{"anyOf":[{"type":"integer"},{"type":"string"}],"x-kubernetes-int-or-string":true},
		"note":{"type":"string","nullable":true},
		"raw":{"type":"object","x-kubernetes-preserve-unknown-fields":true,"properties":{"a":{"type":"string"}}},
		"list":{"type":"array","items":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}}`), &crdSchema); err != nil {
		t.Fatal(err)
	}
	gvk := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	r := Resource{GVK: gvk, ListKind: "WidgetList", Resource: "widgets", Namespaced: true, Verbs: []string{"get", "list", "patch"}, Schema: &crdSchema}
	v2 := BuildV2([]Resource{r})
	def, ok := v2.Definitions["com.example.v1.Widget"]
	if !ok {
		t.Fatalf("no definition: %v", keys(v2.Definitions))
	}
	raw, _ := json.Marshal(def)
	for _, banned := range []string{"anyOf", "nullable"} {
		if strings.Contains(string(raw), banned) {
			t.Errorf("swagger 2.0 definition has %s: %s", banned, raw)
		}
	}
	sp := def.Properties["spec"]
	if !slices.Equal(sp.Required, []string{"port"}) || len(sp.Properties["note"].Type) != 0 || len(sp.Properties["raw"].Type) != 0 || sp.Properties["raw"].Properties != nil {
		t.Errorf("spec in swagger 2.0: %s", raw)
	}
	if it := sp.Properties["list"].Items; it == nil || len(it.Schema.Type) != 0 {
		t.Errorf("list items in swagger 2.0: %s", raw)
	}
	if c := v2.Paths.Paths["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"].Patch.Consumes; slices.Contains(c, "application/strategic-merge-patch+json") {
		t.Errorf("custom resource patch consumes %v", c)
	}
	v3 := BuildV3([]Resource{r})["apis/example.com/v1"]
	raw3, _ := json.Marshal(v3.Components.Schemas["com.example.v1.Widget"])
	if !strings.Contains(string(raw3), "anyOf") || !strings.Contains(string(raw3), `"nullable":true`) {
		t.Errorf("openapi 3.0 lost the schema's anyOf or nullable: %s", raw3)
	}
	// metadata keeps its description in both: a sibling of $ref in v2,
	// wrapped in allOf in v3 (whose $ref siblings are ignored), as
	// upstream, so kubectl explain <crd>.metadata describes it.
	const mdDoc = "Standard object's metadata."
	if md := def.Properties["metadata"]; !strings.HasPrefix(md.Description, mdDoc) || !strings.HasSuffix(md.Ref.String(), ".ObjectMeta") {
		t.Errorf("swagger 2.0 metadata = %+v", md)
	}
	md3 := v3.Components.Schemas["com.example.v1.Widget"].Properties["metadata"]
	if !strings.HasPrefix(md3.Description, mdDoc) || md3.Ref.String() != "" || len(md3.AllOf) != 1 || !strings.HasSuffix(md3.AllOf[0].Ref.String(), ".ObjectMeta") {
		t.Errorf("openapi 3.0 metadata = %+v", md3)
	}
	// The CRD's own schema is left as it was.
	if crdSchema.Properties["spec"].Properties["port"].AnyOf == nil {
		t.Error("the CRD's schema was changed")
	}
}
