package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// memProbe measures how far a piece of work raises the process's resident
// memory: the kernel's peak (VmHWM, reset through clear_refs) over the
// resident size at the start, after a GC that returned what it could.
type memProbe struct {
	base uint64
	// allocBase is the Go heap's cumulative allocation at the start.
	allocBase uint64
}

func procStatusKB(t testing.TB, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", field, err)
			}
			return n << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

func startMemProbe(t testing.TB) *memProbe {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	// "5" resets the peak resident size to the current one.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset peak RSS: %v", err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return &memProbe{base: procStatusKB(t, "VmRSS"), allocBase: ms.TotalAlloc}
}

// growth is the peak resident size since start over the size at start,
// and the bytes the Go heap allocated meanwhile.
func (p *memProbe) growth(t testing.TB) (rss, allocated uint64) {
	t.Helper()
	peak := procStatusKB(t, "VmHWM")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if peak > p.base {
		rss = peak - p.base
	}
	return rss, ms.TotalAlloc - p.allocBase
}

// maxHostileGrowth is what one hostile request may add to the server's
// resident memory: the bound.
const maxHostileGrowth = 64 << 20

// blobCRD keeps whatever its objects' spec holds, so a custom object can
// be made as large as a client likes.
const blobCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: blobs.limits.example.com
spec:
  group: limits.example.com
  scope: Namespaced
  names: {plural: blobs, singular: blob, kind: Blob}
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
            x-kubernetes-preserve-unknown-fields: true
`

var blobs = schema.GroupVersionResource{Group: "limits.example.com", Version: "v1", Resource: "blobs"}

// annotationMap is the 1 KB annotation map.
func annotationMap() map[string]string {
	m := map[string]string{}
	for i := range 16 {
		m[fmt.Sprintf("k%02d", i)] = strings.Repeat("x", 56)
	}
	return m
}

// copyBomb is the patch: an add of a 1 KB map at path, then 16
// copies of the map into itself, each doubling it.
func copyBomb(path string) []byte {
	ops := []map[string]any{{"op": "add", "path": path, "value": annotationMap()}}
	for i := range 16 {
		ops = append(ops, map[string]any{"op": "copy", "from": path, "path": fmt.Sprintf("%s/c%d", path, i)})
	}
	b, _ := json.Marshal(ops)
	return b
}

// manyMembers is a JSON object of small string members, size bytes long
// or a little less: the most a body of that size can make the server
// build.
func manyMembers(size int) []byte {
	b := []byte{'{'}
	for i := 0; ; i++ {
		m := fmt.Sprintf(`"k%d":"v"`, i)
		if len(b)+len(m)+2 > size {
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m...)
	}
	return append(b, '}')
}

// wrap is member, a JSON value, inside objects named by path.
func wrap(member []byte, path ...string) []byte {
	var b []byte
	for _, p := range path {
		b = append(b, `{"`+p+`":`...)
	}
	b = append(b, member...)
	return append(b, strings.Repeat("}", len(path))...)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// nested is depth JSON objects one inside another.
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
}

// jsonPatchFailed is all kube-apiserver says of a JSON patch that fails
// to apply, the copy limit's refusal included.
const jsonPatchFailed = "the server rejected our request due to an error in our request"

type hostileCase struct {
	name, method, path, contentType string
	body                            []byte
	code                            int
	// message is a part of the Status message the refusal must carry.
	message string
}

func hostileCases() []hostileCase {
	const cmPath = "/api/v1/namespaces/default/configmaps/bomb"
	const crPath = "/apis/limits.example.com/v1/namespaces/default/blobs/bomb"
	const applyQuery = "?fieldManager=hostile"
	big := strings.Repeat("x", 1<<20)
	var tooManyOps bytes.Buffer
	tooManyOps.WriteString("[")
	for i := range 10001 {
		if i > 0 {
			tooManyOps.WriteString(",")
		}
		tooManyOps.WriteString(`{"op":"test","path":"/metadata/name","value":"bomb"}`)
	}
	tooManyOps.WriteString("]")
	// A body just under the 3 MiB limit, with room for what wraps it.
	many := manyMembers(maxBodyBytes - 200)
	// Members each nested 800 deep: the merge patch library copies each
	// level's bytes again at every level.
	deepMembers := []byte{'{'}
	for i := 0; len(deepMembers) < maxBodyBytes-10000; i++ {
		if i > 0 {
			deepMembers = append(deepMembers, ',')
		}
		deepMembers = append(deepMembers, fmt.Sprintf(`"k%d":%s`, i, nested(800))...)
	}
	deepMembers = append(deepMembers, '}')
	aliasBomb := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\n  annotations:\n    a0: &a0 [\"" + strings.Repeat("x", 64) + "\"]\n"
	for i := 1; i < 24; i++ {
		aliasBomb += fmt.Sprintf("    a%d: &a%d [*a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1)
	}
	tooLarge := "Request entity too large: limit is 1572864"
	return []hostileCase{
		{"json patch self-copies", "PATCH", cmPath, "application/json-patch+json", copyBomb("/metadata/annotations"),
			http.StatusUnprocessableEntity, jsonPatchFailed},
		{"json patch of 10001 operations", "PATCH", cmPath, "application/json-patch+json", tooManyOps.Bytes(),
			http.StatusRequestEntityTooLarge, "The allowed maximum operations in a JSON patch is 10000, got 10001"},
		{"json patch past the object limit", "PATCH", cmPath, "application/json-patch+json",
			mustJSON([]map[string]any{{"op": "add", "path": "/data/a", "value": big}, {"op": "copy", "from": "/data/a", "path": "/data/b"}}),
			http.StatusRequestEntityTooLarge, tooLarge},
		{"body over 3 MiB", "PATCH", cmPath, "application/merge-patch+json",
			mustJSON(map[string]any{"data": map[string]string{"a": strings.Repeat("x", 3<<20)}}),
			http.StatusRequestEntityTooLarge, "limit is 3145728"},
		{"merge patch of many members", "PATCH", cmPath, "application/merge-patch+json", wrap(many, "data"),
			http.StatusRequestEntityTooLarge, tooLarge},
		{"merge patch past the object limit", "PATCH", cmPath, "application/merge-patch+json",
			mustJSON(map[string]any{"data": map[string]string{"a": big, "b": big}}),
			http.StatusRequestEntityTooLarge, tooLarge},
		{"merge patch nested too deep", "PATCH", cmPath, "application/merge-patch+json", []byte(nested(10001)),
			http.StatusBadRequest, "Invalid JSON Patch"},
		{"strategic merge patch of many members", "PATCH", cmPath, "application/strategic-merge-patch+json", wrap(many, "data"),
			http.StatusRequestEntityTooLarge, tooLarge},
		{"strategic merge patch past the object limit", "PATCH", cmPath, "application/strategic-merge-patch+json",
			mustJSON(map[string]any{"data": map[string]string{"a": big, "b": big}}),
			http.StatusRequestEntityTooLarge, tooLarge},
		{"strategic merge patch nested too deep", "PATCH", cmPath, "application/strategic-merge-patch+json", []byte(nested(10001)),
			http.StatusBadRequest, "invalid JSON document"},
		{"json patch nested too deep", "PATCH", cmPath, "application/json-patch+json", []byte(`[{"op":"add","path":"/data/a","value":` + nested(10001) + `}]`),
			http.StatusBadRequest, "exceeded max depth"},
		{"apply of many members", "PATCH", cmPath + applyQuery, "application/apply-patch+yaml",
			[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bomb"},"data":` + string(manyMembers(maxBodyBytes-200)) + `}`),
			http.StatusRequestEntityTooLarge, tooLarge},
		{"merge patch of members nested deep", "PATCH", cmPath, "application/merge-patch+json", wrap(deepMembers, "data"),
			http.StatusRequestEntityTooLarge, "a merge patch may nest at most"},
		{"apply past the object limit", "PATCH", cmPath + applyQuery, "application/apply-patch+yaml",
			mustJSON(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "bomb"}, "data": map[string]string{"a": big, "b": big}}),
			http.StatusRequestEntityTooLarge, tooLarge},
		{"apply of aliases", "PATCH", cmPath + applyQuery, "application/apply-patch+yaml", []byte(aliasBomb),
			http.StatusBadRequest, "alias"},
		{"apply nested too deep", "PATCH", cmPath + applyQuery, "application/apply-patch+yaml",
			[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata: " + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + "\n"),
			http.StatusBadRequest, "exceeded max depth"},
		{"custom object json patch self-copies", "PATCH", crPath, "application/json-patch+json", copyBomb("/spec/m"),
			http.StatusUnprocessableEntity, jsonPatchFailed},
		{"custom object merge patch of many members", "PATCH", crPath, "application/merge-patch+json", wrap(many, "spec"),
			http.StatusRequestEntityTooLarge, tooLarge},
		{"custom object apply past the object limit", "PATCH", crPath + applyQuery, "application/apply-patch+yaml",
			mustJSON(map[string]any{"apiVersion": "limits.example.com/v1", "kind": "Blob", "metadata": map[string]any{"name": "bomb"}, "spec": map[string]string{"a": big, "b": big}}),
			http.StatusRequestEntityTooLarge, tooLarge},
	}
}

// TestHostilePatchesStayWithinMemory sends the patches of the issue that
// took a server from 78 MB to 905 MB, and their kin on every patch type
// and on a custom object: each must be refused as kube-apiserver refuses
// it, change nothing, and raise the resident memory by at most 64 MB.
func TestHostilePatchesStayWithinMemory(t *testing.T) {
	e := newTestEnv(t)
	// The self-copies fail on the copy limit, kube-apiserver's, which
	// starting a server sets.
	p, err := jsonpatch.DecodePatch(copyBomb("/a"))
	if err != nil {
		t.Fatal(err)
	}
	var copyErr *jsonpatch.AccumulatedCopySizeError
	if _, err := applyJSONPatch(p, []byte(`{}`)); !errors.As(err, &copyErr) || !strings.Contains(err.Error(), "exceeding the limit 3145728") {
		t.Fatalf("self-copies: %v, want the accumulated copy size limit of 3145728", err)
	}
	createCRD(t, e, blobCRD)
	waitServed(t, e, blobs, true)
	h := e.s.Handler()
	send := func(method, path, ct string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		return rr
	}
	for _, c := range []struct{ path, body string }{
		{"/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bomb"},"data":{"k":"v"}}`},
		{"/apis/limits.example.com/v1/namespaces/default/blobs", `{"apiVersion":"limits.example.com/v1","kind":"Blob","metadata":{"name":"bomb"},"spec":{"m":{}}}`},
	} {
		if rr := send("POST", c.path, "application/json", []byte(c.body)); rr.Code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", c.path, rr.Code, rr.Body)
		}
	}
	resourceVersion := func(path string) string {
		rr := send("GET", strings.Split(path, "?")[0], "", nil)
		var m metav1.PartialObjectMetadata
		if rr.Code != http.StatusOK || json.Unmarshal(rr.Body.Bytes(), &m) != nil {
			t.Fatalf("get %s: %d %s", path, rr.Code, rr.Body)
		}
		return m.ResourceVersion
	}
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			before := resourceVersion(tc.path)
			probe := startMemProbe(t)
			rr := send(tc.method, tc.path, tc.contentType, tc.body)
			rss, allocated := probe.growth(t)
			t.Logf("%d-byte body: %d %.300s; RSS +%.1f MB, %.1f MB allocated", len(tc.body), rr.Code, rr.Body.String(), float64(rss)/(1<<20), float64(allocated)/(1<<20))
			var st metav1.Status
			if err := json.Unmarshal(rr.Body.Bytes(), &st); err != nil || int(st.Code) != rr.Code {
				t.Errorf("answer is not a Status of its code (%v): %.200s", err, rr.Body)
			}
			if rr.Code != tc.code || !strings.Contains(st.Message, tc.message) {
				t.Errorf("got %d %q, want %d with %q", rr.Code, st.Message, tc.code, tc.message)
			}
			if rss > maxHostileGrowth {
				t.Errorf("resident memory grew %d MB, more than %d MB", rss>>20, maxHostileGrowth>>20)
			}
			if after := resourceVersion(tc.path); after != before {
				t.Errorf("a refused patch changed the object: resourceVersion %s -> %s", before, after)
			}
		})
	}
}

// limitServer is an API server on a fresh store of the backend, with
// apiserver's object limit apiLimit (0: the default) and the store's own
// default limit.
func limitServer(t *testing.T, backend string, apiLimit int) http.Handler {
	t.Helper()
	var st store.Store
	var err error
	switch backend {
	case "badger":
		st, err = store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	case "etcd":
		e := testenv.EtcdForTest(t)
		st, err = store.OpenEtcd(store.EtcdOptions{Endpoint: e.Endpoint, CompactInterval: -1, DialTimeout: 30 * time.Second})
	}
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newServerOn(t, st, Config{MaxObjectSize: apiLimit})
	return s.Handler()
}

// do sends one request to h and decodes a Status answer.
func do(h http.Handler, method, path, ct string, body []byte) (int, metav1.Status, []byte) {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	var st metav1.Status
	if rr.Code >= 300 {
		json.Unmarshal(rr.Body.Bytes(), &st)
	}
	return rr.Code, st, rr.Body.Bytes()
}

func configMapJSON(name string, data map[string]string) []byte {
	return mustJSON(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}, "data": data})
}

// TestObjectSizeLimit: a write of an object over the limit is refused
// with 413 and kube-apiserver's message on create, update, every patch
// type and apply, dry runs too, and changes nothing, on both store
// backends; the limit is the server's to set; the store refuses what
// gets past a server set higher than it.
func TestObjectSizeLimit(t *testing.T) {
	const cms = "/api/v1/namespaces/default/configmaps"
	const dry = "?dryRun=All"
	over := strings.Repeat("x", DefaultMaxObjectSize+1)
	for _, backend := range []string{"badger", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			h := limitServer(t, backend, 0)
			if code, _, body := do(h, "POST", cms, "application/json", configMapJSON("sized", map[string]string{"a": "1"})); code != http.StatusCreated {
				t.Fatalf("create: %d %s", code, body)
			}
			_, _, orig := do(h, "GET", cms+"/sized", "", nil)
			for _, tc := range []struct {
				name, method, path, ct string
				body                   []byte
			}{
				{"create", "POST", cms, "application/json", configMapJSON("new", map[string]string{"a": over})},
				{"dry-run create", "POST", cms + dry, "application/json", configMapJSON("new", map[string]string{"a": over})},
				{"update", "PUT", cms + "/sized", "application/json", configMapJSON("sized", map[string]string{"a": over})},
				{"dry-run update", "PUT", cms + "/sized" + dry, "application/json", configMapJSON("sized", map[string]string{"a": over})},
				{"json patch", "PATCH", cms + "/sized", "application/json-patch+json", mustJSON([]map[string]any{{"op": "add", "path": "/data/b", "value": over}})},
				{"merge patch", "PATCH", cms + "/sized", "application/merge-patch+json", wrap(mustJSON(map[string]string{"b": over}), "data")},
				{"dry-run merge patch", "PATCH", cms + "/sized" + dry, "application/merge-patch+json", wrap(mustJSON(map[string]string{"b": over}), "data")},
				{"strategic merge patch", "PATCH", cms + "/sized", "application/strategic-merge-patch+json", wrap(mustJSON(map[string]string{"b": over}), "data")},
				{"apply", "PATCH", cms + "/sized?fieldManager=t", "application/apply-patch+yaml", configMapJSON("sized", map[string]string{"b": over})},
				{"apply that creates", "PATCH", cms + "/new?fieldManager=t", "application/apply-patch+yaml", configMapJSON("new", map[string]string{"b": over})},
				{"dry-run apply", "PATCH", cms + "/sized?fieldManager=t&dryRun=All", "application/apply-patch+yaml", configMapJSON("sized", map[string]string{"b": over})},
			} {
				code, st, body := do(h, tc.method, tc.path, tc.ct, tc.body)
				if code != http.StatusRequestEntityTooLarge || st.Code != 413 || st.Reason != metav1.StatusReasonRequestEntityTooLarge || st.Message != "Request entity too large: limit is 1572864" {
					t.Errorf("%s: %d %.300s, want 413 Request entity too large: limit is 1572864", tc.name, code, body)
				}
			}
			if code, _, _ := do(h, "GET", cms+"/new", "", nil); code != http.StatusNotFound {
				t.Errorf("a refused create left an object: GET %d", code)
			}
			if _, _, now := do(h, "GET", cms+"/sized", "", nil); !bytes.Equal(now, orig) {
				t.Errorf("refused writes changed the object:\n%s\nwas\n%s", now, orig)
			}
		})
		t.Run(backend+"/set by the server", func(t *testing.T) {
			h := limitServer(t, backend, 64<<10)
			if code, _, body := do(h, "POST", cms, "application/json", configMapJSON("fits", map[string]string{"a": strings.Repeat("x", 60<<10)})); code != http.StatusCreated {
				t.Fatalf("create under the limit: %d %.300s", code, body)
			}
			code, st, _ := do(h, "POST", cms, "application/json", configMapJSON("over", map[string]string{"a": strings.Repeat("x", 64<<10)}))
			if code != http.StatusRequestEntityTooLarge || st.Message != "Request entity too large: limit is 65536" {
				t.Errorf("create over the limit: %d %q", code, st.Message)
			}
		})
		t.Run(backend+"/past a server set higher than its store", func(t *testing.T) {
			// A Deployment has no size rule of its own: only the store
			// stands in the way.
			h := limitServer(t, backend, 4<<20)
			big := strings.Repeat("x", 800<<10)
			dep := mustJSON(map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "big"},
				"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]string{"app": "big"}},
					"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "big"}},
						"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox",
							"env": []any{map[string]string{"name": "A", "value": big}, map[string]string{"name": "B", "value": big}}}}}}}})
			code, st, body := do(h, "POST", "/apis/apps/v1/namespaces/default/deployments", "application/json", dep)
			if code != http.StatusRequestEntityTooLarge || st.Message != "Request entity too large: limit is 1572864" {
				t.Errorf("create past the store's limit: %d %.300s", code, body)
			}
			if code, _, _ := do(h, "GET", "/apis/apps/v1/namespaces/default/deployments/big", "", nil); code != http.StatusNotFound {
				t.Errorf("the store kept a refused object: GET %d", code)
			}
		})
	}
}

// TestManagedFieldsDroppedWhenTooLarge: a write that is over the limit
// only with its managedFields is stored without them, as kube-apiserver
// retries such a write; an apply, whose managedFields are its point, is
// refused.
func TestManagedFieldsDroppedWhenTooLarge(t *testing.T) {
	h := limitServer(t, "badger", 0)
	const cms = "/api/v1/namespaces/default/configmaps"
	// About 1 MB of keys, ConfigMap validation's limit, and as much
	// again of managedFields naming each.
	data := map[string]string{}
	for i := 0; i < 4300; i++ {
		data[fmt.Sprintf("k%08d%s", i, strings.Repeat("x", 231))] = ""
	}
	var cm struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Data     map[string]string `json:"data"`
	}
	code, _, body := do(h, "POST", cms, "application/json", configMapJSON("keys", data))
	if code != http.StatusCreated || json.Unmarshal(body, &cm) != nil {
		t.Fatalf("create: %d %.300s", code, body)
	}
	if len(cm.Metadata.ManagedFields) != 0 || len(cm.Data) != len(data) {
		t.Errorf("created with %d managedFields entries and %d keys, want none and %d", len(cm.Metadata.ManagedFields), len(cm.Data), len(data))
	}
	code, _, body = do(h, "PATCH", cms+"/keys", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"a":"b"}}}`))
	if code != http.StatusOK || json.Unmarshal(body, &cm) != nil || cm.Metadata.Labels["a"] != "b" || len(cm.Metadata.ManagedFields) != 0 {
		t.Errorf("merge patch: %d, labels %v, %d managedFields entries; want 200 with the label and none", code, cm.Metadata.Labels, len(cm.Metadata.ManagedFields))
	}
	code, st, _ := do(h, "PATCH", cms+"/keys?fieldManager=t", "application/apply-patch+yaml", configMapJSON("keys", data))
	if code != http.StatusRequestEntityTooLarge || st.Message != "Request entity too large: limit is 1572864" {
		t.Errorf("apply: %d %q, want 413", code, st.Message)
	}
}

// FuzzPatchAmplification drives each patch type with patches built to
// make the server build much more than it was sent: a value copied into
// itself, members repeated up to the body limit, values nested deep.
// Whatever the input, the answer is a success or a Status of a 4xx, a
// success's object is within the object limit, and the request raises
// the resident memory by at most maxHostileGrowth.
func FuzzPatchAmplification(f *testing.F) {
	h := fuzzServer(f)
	f.Add(uint8(0), mustJSON(annotationMap()), uint8(16), uint16(0), uint8(0))
	f.Add(uint8(0), []byte(`"`+strings.Repeat("x", 1024)+`"`), uint8(12), uint16(0), uint8(0))
	f.Add(uint8(0), []byte(`[1,2,3]`), uint8(40), uint16(0), uint8(3))
	f.Add(uint8(1), []byte(`"v"`), uint8(0), uint16(65535), uint8(0))
	f.Add(uint8(1), []byte(`{"a":"b"}`), uint8(0), uint16(4000), uint8(20))
	f.Add(uint8(1), []byte(`null`), uint8(0), uint16(65535), uint8(0))
	f.Add(uint8(2), []byte(`"v"`), uint8(0), uint16(65535), uint8(0))
	f.Add(uint8(2), []byte(`{"$patch":"delete"}`), uint8(0), uint16(65535), uint8(0))
	f.Add(uint8(3), []byte(`"v"`), uint8(0), uint16(65535), uint8(0))
	f.Add(uint8(3), []byte(`"`+strings.Repeat("y", 4096)+`"`), uint8(0), uint16(400), uint8(0))
	f.Add(uint8(1), []byte(`1`), uint8(0), uint16(1), uint8(255))
	f.Fuzz(func(t *testing.T, typ uint8, value []byte, copies uint8, members uint16, depth uint8) {
		if !json.Valid(value) {
			value = mustJSON(string(value))
		}
		// depth*40 levels: past the decoders' limit of 10,000 at the top.
		for range int(depth) * 40 {
			value = append(append([]byte(`{"a":`), value...), '}')
		}
		var ct, query string
		var body []byte
		switch typ % 4 {
		case 0: // JSON patch: an add, then copies of the value into itself.
			ct = "application/json-patch+json"
			ops := []byte(`[{"op":"add","path":"/metadata/annotations","value":` + string(value) + `}`)
			for i := range int(copies) % 64 {
				ops = fmt.Appendf(ops, `,{"op":"copy","from":"/metadata/annotations","path":"/metadata/annotations/c%d"}`, i)
			}
			body = append(ops, ']')
		case 1, 2, 3: // merge, strategic merge, apply: members up to the body limit.
			m := []byte{'{'}
			for i := 0; i < int(members)*8; i++ {
				next := fmt.Sprintf(`"k%d":%s`, i, value)
				if len(m)+len(next)+200 > maxBodyBytes {
					break
				}
				if i > 0 {
					m = append(m, ',')
				}
				m = append(m, next...)
			}
			m = append(m, '}')
			switch typ % 4 {
			case 1:
				ct, body = "application/merge-patch+json", wrap(m, "data")
			case 2:
				ct, body = "application/strategic-merge-patch+json", wrap(m, "data")
			case 3:
				ct, query = "application/apply-patch+yaml", "?fieldManager=fuzz"
				body = []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"target"},"data":` + string(m) + `}`)
			}
		}
		req := httptest.NewRequest("PATCH", "/api/v1/namespaces/default/configmaps/target"+query, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		rr := httptest.NewRecorder()
		probe := startMemProbe(t)
		h.ServeHTTP(rr, req)
		rss, _ := probe.growth(t)
		checkAnswer(t, req, rr.Code, rr.Header(), rr.Body.Bytes())
		if rss > maxHostileGrowth {
			t.Fatalf("%s of %d bytes (%d): resident memory grew %d MB", ct, len(body), rr.Code, rss>>20)
		}
		if rr.Code < 300 {
			var cm corev1.ConfigMap
			if err := json.Unmarshal(rr.Body.Bytes(), &cm); err != nil {
				t.Fatalf("%s: answer is not a ConfigMap: %v", ct, err)
			}
			cm.ManagedFields = nil
			if n := cm.Size(); n > DefaultMaxObjectSize {
				t.Fatalf("%s: stored a ConfigMap of %d bytes, over the limit", ct, n)
			}
		}
	})
}

// TestPatchFloor: the floor counts what a patch's result surely keeps,
// and nothing it may not.
func TestPatchFloor(t *testing.T) {
	cmShape := newGoShape(reflect.TypeFor[*corev1.ConfigMap](), "")
	podShape := newGoShape(reflect.TypeFor[*corev1.Pod](), "")
	crShape := customShape{&structuralschema.Structural{Properties: map[string]structuralschema.Structural{
		"spec": {Properties: map[string]structuralschema.Structural{"known": {}}},
	}}}
	big := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name      string
		sh        shape
		strategic bool
		body      string
		min, max  int
		ok        bool
	}{
		{"map member", cmShape, false, `{"data":{"k":"` + big + `"}}`, 1000, 1020, true},
		{"deletion", cmShape, false, `{"data":{"k":null}}`, 0, 0, true},
		{"unknown field", cmShape, false, `{"bogus":"` + big + `","data":{"k":"v"}}`, 1, 20, true},
		{"status of the main resource", podShape, false, `{"status":{"message":"` + big + `"}}`, 0, 0, true},
		{"server metadata", cmShape, false, `{"metadata":{"managedFields":[{"manager":"` + big + `"}],"resourceVersion":"` + big + `"}}`, 0, 0, true},
		{"binary data", cmShape, false, `{"binaryData":{"b":"` + strings.Repeat("QUJD", 250) + `"}}`, 740, 770, true},
		{"opaque values", podShape, false, `{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"` + big + `"}}}]}}`, 1, 1020, true},
		{"strategic directives", podShape, true, `{"metadata":{"$deleteFromPrimitiveList/finalizers":["` + big + `"]},"$setElementOrder/x":[{"name":"` + big + `"}]}`, 0, 0, true},
		{"strategic deletion", cmShape, true, `{"data":{"$patch":"delete","k":"` + big + `"}}`, 0, 0, true},
		{"strategic merged list", podShape, true, `{"spec":{"containers":[{"name":"` + big + `"},{"name":"` + big + `"}]}}`, 0, 0, true},
		{"merge patch replaces lists", podShape, false, `{"spec":{"containers":[{"name":"` + big + `"},{"name":"` + big + `"}]}}`, 2000, 2020, true},
		{"strategic replaced list", podShape, true, `{"spec":{"containers":[{"name":"c","args":["` + big + `","` + big + `"]}]}}`, 0, 0, true},
		{"custom known and pruned", crShape, false, `{"spec":{"known":"` + big + `","pruned":"` + big + `"}}`, 1000, 1030, true},
		{"custom metadata", crShape, false, `{"apiVersion":"` + big + `","metadata":{"labels":{"a":"` + big + `"}}}`, 1000, 1030, true},
		{"malformed", cmShape, false, `{"data":`, 0, 0, false},
		{"too deep", cmShape, false, nested(10002), 0, 0, false},
	} {
		got, _, ok := patchFloor([]byte(tc.body), tc.sh, tc.strategic)
		if ok != tc.ok || got < tc.min || got > tc.max {
			t.Errorf("%s: floor %d, %v; want %d-%d, %v", tc.name, got, ok, tc.min, tc.max, tc.ok)
		}
	}
	// Each byte counts once per level it is nested at (an object's
	// opening brace at none).
	if _, nesting, _ := patchFloor([]byte(`{"a":{"b":[1]}}`), cmShape, false); nesting != 14+8+2 {
		t.Errorf("nesting %d, want %d", nesting, 14+8+2)
	}
}
