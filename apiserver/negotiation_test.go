package apiserver

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const (
	acceptedTypes       = "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
	acceptedStreamTypes = "only the following media types are accepted: application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"
	acceptedBodies      = "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
	acceptedPatches     = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
)

// What other clients than client-go send: Accept lists with q-values and
// wildcards, conversions with fallbacks, bodies with a charset. Each
// answer is kube-apiserver's for the same request.
func TestContentNegotiation(t *testing.T) {
	env := newTestEnv(t)
	h := env.s.Handler()
	const list = "/api/v1/namespaces/default/configmaps"
	create := func(name string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `"}}`
	}
	for _, tc := range []struct {
		name        string
		method      string
		path        string
		accept      string
		contentType string
		body        string
		code        int
		ct          string // the answer's Content-Type
		kind        string // the answer's kind, when JSON or YAML
		msg         string // the Status message of an error
	}{
		{name: "no accept", method: "GET", path: list, code: 200, ct: "application/json", kind: "ConfigMapList"},
		{name: "q-values", method: "GET", path: list, accept: "application/vnd.kubernetes.protobuf;q=0.5, application/json;q=0.9", code: 200, ct: "application/json", kind: "ConfigMapList"},
		// kube-apiserver orders by q but does not drop q=0 clauses.
		{name: "q=0", method: "GET", path: list, accept: "application/json;q=0", code: 200, ct: "application/json", kind: "ConfigMapList"},
		{name: "any", method: "GET", path: list, accept: "*/*", code: 200, ct: "application/json", kind: "ConfigMapList"},
		{name: "more specific first", method: "GET", path: list, accept: "application/*;q=0.8, application/yaml", code: 200, ct: "application/yaml", kind: "ConfigMapList"},
		{name: "charset ignored", method: "GET", path: list, accept: "application/json; charset=utf-8", code: 200, ct: "application/json", kind: "ConfigMapList"},
		{name: "unserved", method: "GET", path: list, accept: "text/html", code: 406, msg: acceptedTypes},
		{name: "protobuf", method: "GET", path: list, accept: "application/vnd.kubernetes.protobuf, application/json", code: 200, ct: "application/vnd.kubernetes.protobuf"},
		{name: "table", method: "GET", path: list, accept: "application/json;as=Table;v=v1;g=meta.k8s.io", code: 200, ct: "application/json", kind: "Table"},
		{name: "table fallback", method: "GET", path: list, accept: "application/json;as=Table;v=v2;g=meta.k8s.io, application/json", code: 200, ct: "application/json", kind: "ConfigMapList"},
		{name: "table in yaml", method: "GET", path: list, accept: "application/yaml;as=Table;v=v1;g=meta.k8s.io", code: 200, ct: "application/yaml", kind: "Table"},
		{name: "no protobuf table", method: "GET", path: list, accept: "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io", code: 406, msg: acceptedTypes},
		{name: "no protobuf table, fallback", method: "GET", path: list, accept: "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json", code: 200, ct: "application/json", kind: "ConfigMapList"},
		{name: "metadata", method: "GET", path: list, accept: "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", code: 200, ct: "application/json", kind: "PartialObjectMetadataList"},
		{name: "unknown conversion", method: "GET", path: list, accept: "application/json;as=Deployment;v=v1;g=apps", code: 406, msg: acceptedTypes},
		{name: "stream param outside a watch", method: "GET", path: list, accept: "application/json;stream=watch", code: 200, ct: "application/json", kind: "ConfigMapList"},
		{name: "unknown stream", method: "GET", path: list, accept: "application/json;stream=sse", code: 406, msg: acceptedTypes},
		{name: "watch, json stream", method: "GET", path: list + "?watch=True", accept: "application/json;stream=watch", code: 200, ct: "application/json"},
		{name: "watch, protobuf stream", method: "GET", path: list + "?watch=1", accept: "application/vnd.kubernetes.protobuf;stream=watch", code: 200, ct: "application/vnd.kubernetes.protobuf;stream=watch"},
		{name: "watch, yaml", method: "GET", path: list + "?watch=true", accept: "application/yaml", code: 406, msg: acceptedStreamTypes},
		{name: "watch, table", method: "GET", path: list + "?watch=true", accept: "application/json;as=Table;v=v1;g=meta.k8s.io", code: 200, ct: "application/json"},
		{name: "create, charset", method: "POST", path: list, contentType: "application/json; charset=utf-8", body: create("a"), code: 201, ct: "application/json", kind: "ConfigMap"},
		{name: "create, yaml", method: "POST", path: list, contentType: "application/yaml", body: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n", code: 201, ct: "application/json", kind: "ConfigMap"},
		{name: "create, unknown body", method: "POST", path: list, contentType: "text/plain", body: create("c"), code: 415, msg: acceptedBodies},
		{name: "create, patch type", method: "POST", path: list, contentType: "application/merge-patch+json", body: create("c"), code: 415, msg: acceptedBodies},
		{name: "create, answer in yaml", method: "POST", path: list, accept: "application/yaml", body: create("d"), code: 201, ct: "application/yaml", kind: "ConfigMap"},
		{name: "merge patch, charset", method: "PATCH", path: list + "/a", contentType: "application/merge-patch+json; charset=utf-8", body: `{"data":{"k":"v"}}`, code: 200, ct: "application/json", kind: "ConfigMap"},
		{name: "patch as json", method: "PATCH", path: list + "/a", contentType: "application/json", body: `{"data":{"k":"v"}}`, code: 415, msg: acceptedPatches},
		{name: "patch without type", method: "PATCH", path: list + "/a", body: `{"data":{"k":"v"}}`, code: 415, msg: acceptedPatches},
		{name: "apply yaml", method: "PATCH", path: list + "/e?fieldManager=py", contentType: "application/apply-patch+yaml", body: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\ndata:\n  k: v\n", code: 201, ct: "application/json", kind: "ConfigMap"},
		{name: "apply without manager", method: "PATCH", path: list + "/e", contentType: "application/apply-patch+yaml", body: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\n", code: 422,
			msg: `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`},
		{name: "force outside apply", method: "PATCH", path: list + "/a?force=True", contentType: "application/merge-patch+json", body: `{}`, code: 422,
			msg: `PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch`},
		{name: "bad dry run", method: "POST", path: list + "?dryRun=true", body: create("f"), code: 422,
			msg: `CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["true"]: supported values: "All"`},
		{name: "bad limit", method: "GET", path: list + "?limit=ten", code: 400, msg: `strconv.ParseInt: parsing "ten": invalid syntax`},
		{name: "negative limit lists all", method: "GET", path: list + "?limit=-1", code: 200, ct: "application/json", kind: "ConfigMapList"},
		{name: "bad includeObject", method: "GET", path: list + "?includeObject=All", accept: "application/json;as=Table;v=v1;g=meta.k8s.io", code: 400,
			msg: `Unable to convert to Table as requested: includeObject: Invalid value: "All": must be 'Metadata', 'Object', 'None', or empty`},
		{name: "bad resourceVersion", method: "GET", path: list + "?resourceVersion=abc", code: 400,
			msg: `invalid resource version: resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax`},
		{name: "bad grace period", method: "DELETE", path: list + "/a?gracePeriodSeconds=soon", code: 400, msg: `strconv.ParseInt: parsing "soon": invalid syntax`},
		{name: "delete, propagation from the query", method: "DELETE", path: list + "/b?propagationPolicy=Later", code: 422,
			msg: `DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Later": supported values: "Foreground", "Background", "Orphan", "nil"`},
		{name: "delete, the body's options win", method: "DELETE", path: list + "/b?propagationPolicy=Later", body: `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`, code: 200, ct: "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			var rec *httptest.ResponseRecorder
			if strings.Contains(tc.path, "watch=") {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				w := &cancelOnHeader{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
				h.ServeHTTP(w, req.WithContext(ctx))
				rec = w.ResponseRecorder
			} else {
				rec = serve(t, h, req)
			}
			if rec.Code != tc.code {
				t.Fatalf("%s %s (Accept %q, Content-Type %q) = %d, want %d: %s", tc.method, tc.path, tc.accept, tc.contentType, rec.Code, tc.code, rec.Body.Bytes())
			}
			if tc.msg != "" {
				var st metav1.Status
				if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Message != tc.msg || int(st.Code) != tc.code {
					t.Errorf("status %+v (%v)\nwant message %s", st, err, tc.msg)
				}
				return
			}
			if got := rec.Header().Get("Content-Type"); got != tc.ct {
				t.Errorf("Content-Type %q, want %q", got, tc.ct)
			}
			if tc.kind != "" {
				var tm metav1.TypeMeta
				if err := yaml.Unmarshal(rec.Body.Bytes(), &tm); err != nil || tm.Kind != tc.kind {
					t.Errorf("kind %q (%v), want %q: %.200s", tm.Kind, err, tc.kind, rec.Body.Bytes())
				}
			}
		})
	}
}
