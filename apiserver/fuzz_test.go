package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/store"
)

// The fuzz targets drive the whole handler chain with what a broken or
// hostile client could send. Whatever the input, the server must not panic
// and must not answer 5xx: bad input is the client's fault, a 4xx with a
// metav1.Status body that repeats the code.

// fuzzServer is an API server over a fresh store with a few objects to
// patch, select and page through.
func fuzzServer(f *testing.F) http.Handler {
	f.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.OpenBadger(store.BadgerOptions{Dir: f.TempDir(), Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(Config{Store: st, AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443, Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Shutdown(); st.Close() })
	h := s.Handler()
	for _, o := range []struct {
		path string
		obj  any
	}{
		{"/api/v1/namespaces/default/configmaps", &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "target", Labels: map[string]string{"app": "web"}}, Data: map[string]string{"a": "1", "b": "2"}}},
		{"/api/v1/namespaces/default/configmaps", &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"app": "db", "tier": "back"}}}},
		{"/api/v1/namespaces/default/pods", &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: "target", Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{
				{Name: "app", Image: "nginx:1.27", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}, Env: []corev1.EnvVar{{Name: "A", Value: "1"}}},
				{Name: "log", Image: "busybox"},
			}}}},
		{"/api/v1/namespaces/default/services", &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Name: "target"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}},
		{"/apis/apps/v1/namespaces/default/deployments", &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "target"}, Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}}}}}}},
		{"/api/v1/nodes", &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"kubernetes.io/os": "linux"}}}},
	} {
		body, _ := json.Marshal(o.obj)
		req := httptest.NewRequest("POST", o.path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		if rr.Code != http.StatusCreated {
			f.Fatalf("seeding %s: %d %s", o.path, rr.Code, rr.Body.String())
		}
	}
	return h
}

// serve runs one request and checks the answer.
func serve(t *testing.T, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	checkAnswer(t, req, rr.Code, rr.Header(), rr.Body.Bytes())
	return rr
}

// checkAnswer fails on a 5xx and on an error answer that is not a
// metav1.Status carrying the same code.
func checkAnswer(t *testing.T, req *http.Request, code int, hdr http.Header, body []byte) {
	t.Helper()
	if code >= 200 && code < 300 {
		return
	}
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure || int(st.Code) != code {
		t.Fatalf("%s %s: %d answer is not a matching Status (%v): %q", req.Method, req.URL, code, err, body)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Status as %q", req.Method, req.URL, ct)
	}
	if code >= 500 && !isTooLargeResourceVersion(code, &st) {
		t.Fatalf("%s %s: %d %s: %s", req.Method, req.URL, code, st.Reason, st.Message)
	}
}

// isTooLargeResourceVersion is the one 5xx a client can cause on
// purpose: kube-apiserver answers a list from a future resourceVersion
// with 504, and client-go's reflector relies on that answer and its cause.
func isTooLargeResourceVersion(code int, st *metav1.Status) bool {
	return code == http.StatusGatewayTimeout && st.Reason == metav1.StatusReasonTimeout && apierrors.HasStatusCause(&apierrors.StatusError{ErrStatus: *st}, metav1.CauseTypeResourceVersionTooLarge)
}

var (
	createTargets = []string{
		"/api/v1/namespaces/default/configmaps",
		"/api/v1/namespaces/default/pods",
		"/api/v1/namespaces/default/services",
		"/api/v1/namespaces/default/secrets",
		"/apis/apps/v1/namespaces/default/deployments",
		"/apis/batch/v1/namespaces/default/cronjobs",
		"/apis/events.k8s.io/v1/namespaces/default/events",
		"/apis/networking.k8s.io/v1/namespaces/default/ingresses",
		"/api/v1/nodes",
		"/api/v1/namespaces",
	}
	bodyTypes        = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
	fieldValidations = []string{"", "Strict", "Warn", "Ignore"}
)

// protobufSeed is obj in Kubernetes' protobuf envelope, as client-go sends
// it.
func protobufSeed(f *testing.F, obj runtime.Object) []byte {
	var buf bytes.Buffer
	if err := protobufSerializer.Encode(obj, &buf); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

func FuzzCreateBody(f *testing.F) {
	h := fuzzServer(f)
	cmJSON := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"cm-","labels":{"app":"web"}},"data":{"k":"v"}}`
	podJSON := `{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"p-"},"spec":{"containers":[{"name":"app","image":"nginx","ports":[{"containerPort":80}],"resources":{"limits":{"cpu":"1","memory":"64Mi"}}}]}}`
	svcJSON := `{"apiVersion":"v1","kind":"Service","metadata":{"generateName":"s-"},"spec":{"type":"NodePort","selector":{"app":"web"},"ports":[{"port":80,"targetPort":"http"}]}}`
	deployYAML := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  generateName: d-\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n"
	cronYAML := "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  generateName: c-\nspec:\n  schedule: '*/5 * * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: OnFailure\n          containers: [{name: c, image: busybox}]\n"
	for _, s := range []struct {
		body           string
		ct, target, fv uint8
		dryRun         bool
	}{
		{cmJSON, 0, 0, 1, false},
		{podJSON, 0, 1, 0, true},
		{svcJSON, 0, 2, 1, false},
		{`{"apiVersion":"v1","kind":"Secret","metadata":{"generateName":"s-"},"type":"kubernetes.io/tls","stringData":{"tls.crt":"x"}}`, 0, 3, 2, false},
		{deployYAML, 1, 4, 1, false},
		{cronYAML, 1, 5, 0, true},
		{`{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"generateName":"e-"},"eventTime":"2025-01-01T00:00:00.000000Z","reportingController":"x","reportingInstance":"y","action":"A","reason":"R","type":"Normal","regarding":{"kind":"Pod","name":"p"}}`, 0, 6, 0, false},
		{`{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"generateName":"i-"},"spec":{"rules":[{"host":"a.example.com"}]}}`, 0, 7, 1, true},
		{`{"apiVersion":"v1","kind":"Node","metadata":{"generateName":"n-"},"status":{"capacity":{"cpu":"4"}}}`, 0, 8, 0, false},
		{"apiVersion: v1\nkind: Namespace\nmetadata:\n  generateName: ns-\n", 1, 9, 0, true},
		// Near misses: duplicate and unknown fields, wrong kinds, bad
		// quantities, nulls, deep nesting.
		{`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup","name":"dup2"},"bogus":1}`, 0, 0, 1, false},
		{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"}}`, 0, 0, 0, false},
		{`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"q"},"spec":{"containers":[{"name":"a","image":"b","resources":{"limits":{"cpu":"1x"}}}]}}`, 0, 1, 0, false},
		{`{"metadata":null,"spec":null}`, 0, 4, 0, false},
		{`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`, 0, 0, 0, false},
		{"- a\n- b\n", 1, 0, 0, false},
		{"a: &a [*a, *a]\n", 1, 0, 0, false},
		{"k8s\x00\x0a\x02v1", 2, 0, 0, false},
	} {
		f.Add([]byte(s.body), s.ct, s.target, s.fv, s.dryRun)
	}
	f.Add(protobufSeed(f, &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{GenerateName: "pb-"}, Data: map[string]string{"a": "b"}}), uint8(2), uint8(0), uint8(0), false)
	f.Add(protobufSeed(f, &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{GenerateName: "pb-"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "b"}}}}), uint8(2), uint8(1), uint8(0), true)
	f.Fuzz(func(t *testing.T, body []byte, ct, target, fv uint8, dryRun bool) {
		q := url.Values{}
		if v := fieldValidations[int(fv)%len(fieldValidations)]; v != "" {
			q.Set("fieldValidation", v)
		}
		if dryRun {
			q.Set("dryRun", "All")
		}
		path := createTargets[int(target)%len(createTargets)] + "?" + q.Encode()
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", bodyTypes[int(ct)%len(bodyTypes)])
		serve(t, h, req)
	})
}

var (
	patchTargets = []struct{ path, apiVersion, kind string }{
		{"/api/v1/namespaces/default/configmaps/target", "v1", "ConfigMap"},
		{"/api/v1/namespaces/default/pods/target", "v1", "Pod"},
		{"/api/v1/namespaces/default/services/target", "v1", "Service"},
		{"/apis/apps/v1/namespaces/default/deployments/target", "apps/v1", "Deployment"},
		{"/api/v1/namespaces/default/pods/target/status", "v1", "Pod"},
		{"/apis/apps/v1/namespaces/default/deployments/target/scale", "autoscaling/v1", "Scale"},
	}
	patchTypes = []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"}
)

func FuzzPatch(f *testing.F) {
	h := fuzzServer(f)
	for _, s := range []struct {
		body        string
		typ, target uint8
	}{
		{`[{"op":"add","path":"/data/c","value":"3"},{"op":"remove","path":"/data/a"}]`, 0, 0},
		{`[{"op":"test","path":"/metadata/name","value":"target"},{"op":"replace","path":"/metadata/labels/app","value":"api"}]`, 0, 0},
		{`[{"op":"move","from":"/data/b","path":"/data/z"},{"op":"copy","from":"/data/z","path":"/data/y"}]`, 0, 0},
		{`[{"op":"replace","path":"/spec/containers/0/image","value":"nginx:1.28"}]`, 0, 1},
		{`[{"op":"add","path":"/spec/ports/-","value":{"name":"https","port":443}}]`, 0, 2},
		{`[{"op":"replace","path":"/spec/replicas","value":5}]`, 0, 5},
		{`[{"op":"add","path":"/status/conditions","value":[{"type":"Ready","status":"True"}]}]`, 0, 4},
		{`{"data":{"a":null,"n":"v"},"metadata":{"annotations":{"x":"y"}}}`, 1, 0},
		{`{"spec":{"type":"NodePort","ports":[{"port":80,"nodePort":30080}]}}`, 1, 2},
		{`{"metadata":{"resourceVersion":"1"}}`, 1, 0},
		{`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:2"}]}}}}`, 2, 3},
		{`{"spec":{"containers":[{"name":"log","$patch":"delete"}]}}`, 2, 1},
		{`{"$setElementOrder/containers":[{"name":"log"},{"name":"app"}],"spec":{"containers":[{"name":"app","env":[{"name":"B","value":"2"}]}]}}`, 2, 1},
		{`{"spec":{"$retainKeys":["selector"],"selector":{"app":"x"}}}`, 2, 2},
		{`{"spec":{"replicas":3}}`, 2, 5},
		{`{"status":{"phase":"Running","podIP":"10.42.0.9"}}`, 1, 4},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: target\ndata:\n  a: applied\n", 3, 0},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: target\nspec:\n  replicas: 4\n", 3, 3},
		{"apiVersion: v1\nkind: Service\nmetadata:\n  name: target\nspec:\n  ports:\n  - port: 8080\n    name: alt\n", 3, 2},
		{"apiVersion: v1\nkind: Pod\nmetadata:\n  name: target\nspec:\n  containers:\n  - name: app\n    image: nginx:1.29\n", 3, 1},
		{`null`, 1, 0},
		{`[]`, 0, 3},
		{`{"kind":"Pod"}`, 3, 0},
	} {
		f.Add([]byte(s.body), s.typ, s.target, false, false)
	}
	f.Fuzz(func(t *testing.T, body []byte, typ, target uint8, dryRun, force bool) {
		tgt := patchTargets[int(target)%len(patchTargets)]
		q := url.Values{}
		ct := patchTypes[int(typ)%len(patchTypes)]
		if ct == "application/apply-patch+yaml" {
			q.Set("fieldManager", "fuzz")
			if force {
				q.Set("force", "true")
			}
		}
		if dryRun {
			q.Set("dryRun", "All")
		}
		req := httptest.NewRequest("PATCH", tgt.path+"?"+q.Encode(), bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		checkAnswer(t, req, rr.Code, rr.Header(), rr.Body.Bytes())
	})
}

var selectorTargets = []string{
	"/api/v1/namespaces/default/configmaps",
	"/api/v1/pods",
	"/api/v1/namespaces/default/pods",
	"/api/v1/nodes",
	"/api/v1/namespaces",
	"/api/v1/namespaces/default/secrets",
	"/api/v1/namespaces/default/events",
	"/apis/apps/v1/deployments",
}

var selectorAccepts = []string{
	"application/json",
	"application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
	"application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json",
	"application/yaml",
}

// cancelOnHeader ends a watch's context once the watch has answered, so a
// fuzzed watch that is accepted returns at once, and one that is refused
// is checked like any other answer.
type cancelOnHeader struct {
	*httptest.ResponseRecorder
	once   sync.Once
	cancel context.CancelFunc
}

func (c *cancelOnHeader) WriteHeader(code int) {
	c.ResponseRecorder.WriteHeader(code)
	c.once.Do(c.cancel)
}

func (c *cancelOnHeader) Write(b []byte) (int, error) {
	c.once.Do(c.cancel)
	return c.ResponseRecorder.Write(b)
}

func FuzzSelectors(f *testing.F) {
	h := fuzzServer(f)
	// A real continue token to mutate.
	req := httptest.NewRequest("GET", "/api/v1/namespaces/default/configmaps?limit=1", nil)
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	var page corev1.ConfigMapList
	if err := json.Unmarshal(rr.Body.Bytes(), &page); err != nil || page.Continue == "" {
		f.Fatalf("no continue token: %v %s", err, rr.Body.String())
	}
	type seed struct {
		labels, fields, limit, cont, rv, rvMatch string
		target, accept                           uint8
		watch                                    bool
	}
	for _, s := range []seed{
		{"app=web", "", "", "", "", "", 0, 0, false},
		{"app in (web,db),!tier", "metadata.name!=other", "1", "", "", "", 0, 1, false},
		{"env notin (prod), tier", "", "10", "", "0", "", 0, 2, false},
		{"", "spec.nodeName=node-1,status.phase!=Running", "", "", "", "", 1, 1, false},
		{"", "metadata.namespace==default", "", "", "", "NotOlderThan", 2, 0, false},
		{"", "spec.unschedulable=false", "", "", "1", "Exact", 3, 0, false},
		{"", "status.phase=Active", "", "", "", "", 4, 3, false},
		{"", "type=kubernetes.io/tls", "", "", "", "", 5, 0, false},
		{"", "involvedObject.kind=Pod,involvedObject.name=web", "", "", "", "", 6, 0, false},
		{"app=web", "", "1", page.Continue, "", "", 0, 0, false},
		{"", "", "1", page.Continue[:len(page.Continue)/2], "", "", 0, 0, false},
		{"", "", "-1", "", "99999999999", "", 0, 0, false},
		{"a!=b", "", "abc", "", "abc", "Bogus", 7, 0, false},
		{"app=web", "metadata.name=target", "", "", "", "", 0, 0, true},
		{"", "", "", "", "1", "", 1, 1, true},
		{"", "", "", "", "0", "NotOlderThan", 2, 2, true},
		{"x=(", "=", "", "", "", "", 0, 0, true},
		{"", "spec.nodeName=", "", "", "18446744073709551615", "", 3, 0, true},
	} {
		f.Add(s.labels, s.fields, s.limit, s.cont, s.rv, s.rvMatch, s.target, s.accept, s.watch)
	}
	f.Fuzz(func(t *testing.T, labelSel, fieldSel, limit, cont, rv, rvMatch string, target, accept uint8, watch bool) {
		q := url.Values{}
		for k, v := range map[string]string{"labelSelector": labelSel, "fieldSelector": fieldSel, "limit": limit, "continue": cont, "resourceVersion": rv, "resourceVersionMatch": rvMatch} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if watch {
			q.Set("watch", "true")
			// Half the watches ask for the watch-list protocol.
			if target%2 == 1 {
				q.Set("sendInitialEvents", "true")
				q.Set("allowWatchBookmarks", "true")
			}
		}
		req := httptest.NewRequest("GET", selectorTargets[int(target)%len(selectorTargets)]+"?"+q.Encode(), nil)
		req.Header.Set("Accept", selectorAccepts[int(accept)%len(selectorAccepts)])
		if !watch {
			serve(t, h, req)
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := &cancelOnHeader{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
		h.ServeHTTP(w, req.WithContext(ctx))
		checkAnswer(t, req, w.Code, w.Header(), w.Body.Bytes())
		if w.Code == http.StatusOK {
			checkWatchStream(t, req, w.Body.Bytes())
		}
	})
}

// checkWatchStream checks the events of an accepted watch: an ERROR event
// is a Status, never a server error.
func checkWatchStream(t *testing.T, req *http.Request, body []byte) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("GET %s: watch event is not JSON (%v): %q", req.URL, err, sc.Bytes())
		}
		if ev.Type != "ERROR" {
			continue
		}
		var st metav1.Status
		if err := json.Unmarshal(ev.Object, &st); err != nil || st.Kind != "Status" || st.Code >= 500 {
			t.Fatalf("GET %s: watch error event %s", req.URL, ev.Object)
		}
	}
}
