// Package openapi owns the API server's OpenAPI documents: Swagger 2.0 at
// /openapi/v2 and OpenAPI 3.0 per group version under /openapi/v3, built
// by reflection over the Go types of the served kinds. kubectl reads them to
// learn that the server validates fields itself (apply, create, edit), to
// compute strategic merge patches, and to print `kubectl explain`.
package openapi

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Resource is what the documents need to know about one served resource.
type Resource struct {
	GVK        schema.GroupVersionKind
	ListKind   string
	Resource   string // plural, as in the URL
	Namespaced bool
	Verbs      []string
	// Object and List are zero values of the kind and its list kind; their
	// Go types are what the schemas are reflected from.
	Object runtime.Object
	List   runtime.Object
	// ReturnsDeleted: DELETE answers with the object rather than a Status.
	ReturnsDeleted bool
	Subresources   []Subresource
	// Schema, for a custom resource, is its CRD's structural schema:
	// the kind is described by it rather than by Object's Go type.
	Schema *spec.Schema
}

// Subresource is one subresource of a Resource.
type Subresource struct {
	Name string
	// GVK and Object are the subresource's kind; Object nil means the
	// parent's (status).
	GVK    schema.GroupVersionKind
	Object runtime.Object
	Verbs  []string
}

// Handler serves the documents. It builds them on first request and keeps
// the serialized bytes until Invalidate.
type Handler struct {
	resources func() []Resource
	// Delegated lists the v3 group version paths ("apis/<group>/<version>")
	// other servers document (aggregated APIs): the root lists them, and
	// their documents are the caller's to serve.
	Delegated func() []string

	mu       sync.Mutex
	v2       *v2Doc
	v3       *v3Docs
	modified time.Time
}

type v2Doc struct {
	json, proto []byte
	etag        string
}

type v3Docs struct {
	root []byte
	gvs  map[string]gvDoc // by groupVersionPath
}

type gvDoc struct {
	json []byte
	hash string
}

// NewHandler returns a handler over the resources the function lists; it
// is called again after each Invalidate.
func NewHandler(resources func() []Resource) *Handler {
	return &Handler{resources: resources, modified: time.Now()}
}

// Invalidate drops the cached documents, for when the set of resources
// changes; the next request rebuilds them.
func (h *Handler) Invalidate() {
	h.mu.Lock()
	h.v2, h.v3 = nil, nil
	h.modified = time.Now()
	h.mu.Unlock()
}

func hashOf(b []byte) string { return fmt.Sprintf("%X", sha512.Sum512(b)) }

func info() *spec.Info {
	return &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: "unversioned"}}
}

// BuildV2 builds the Swagger 2.0 document over every resource.
func BuildV2(resources []Resource) *spec.Swagger {
	b := newBuilder(false)
	doc := &spec.Swagger{SwaggerProps: spec.SwaggerProps{
		Swagger: "2.0", Info: info(), Paths: &spec.Paths{Paths: map[string]spec.PathItem{}},
	}}
	for _, r := range resources {
		_, tag := opGroup(r.GVK.GroupVersion())
		for _, p := range paths(b, r) {
			doc.Paths.Paths[p.path] = v2Path(p, tag)
		}
	}
	doc.Definitions = spec.Definitions{}
	for name, s := range b.definitions() {
		doc.Definitions[name] = *s
	}
	doc.SecurityDefinitions = spec.SecurityDefinitions{"BearerToken": {
		SecuritySchemeProps: spec.SecuritySchemeProps{Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication"},
	}}
	doc.Security = []map[string][]string{{"BearerToken": {}}}
	return doc
}

// BuildV3 builds one OpenAPI 3.0 document per group version, keyed by
// where it is served under /openapi/v3 ("api/v1", "apis/apps/v1").
func BuildV3(resources []Resource) map[string]*spec3.OpenAPI {
	byGV := map[schema.GroupVersion][]Resource{}
	for _, r := range resources {
		gv := r.GVK.GroupVersion()
		byGV[gv] = append(byGV[gv], r)
	}
	out := map[string]*spec3.OpenAPI{}
	for gv, rs := range byGV {
		b := newBuilder(true)
		doc := &spec3.OpenAPI{Version: "3.0.0", Info: info(), Paths: &spec3.Paths{Paths: map[string]*spec3.Path{}}}
		_, tag := opGroup(gv)
		for _, r := range rs {
			for _, p := range paths(b, r) {
				doc.Paths.Paths[p.path] = v3Path(p, tag)
			}
		}
		doc.Components = &spec3.Components{
			Schemas: b.definitions(),
			SecuritySchemes: spec3.SecuritySchemes{"BearerToken": {SecuritySchemeProps: spec3.SecuritySchemeProps{
				Type: "apiKey", Name: "authorization", In: "header", Description: "Bearer Token authentication",
			}}},
		}
		doc.SecurityRequirement = []map[string][]string{{"BearerToken": {}}}
		out[groupVersionPath(gv)] = doc
	}
	return out
}

func (h *Handler) getV2() (*v2Doc, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.v2 != nil {
		return h.v2, nil
	}
	body, err := json.Marshal(BuildV2(h.resources()))
	if err != nil {
		return nil, err
	}
	h.v2 = &v2Doc{json: body, etag: hashOf(body)}
	return h.v2, nil
}

// v2Proto converts the JSON document to gnostic's protobuf form, which is
// the only form client-go's discovery client decodes (it never looks at the
// Content-Type). Done on first request for it: most clients never ask.
func (h *Handler) v2Proto(d *v2Doc) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d.proto != nil {
		return d.proto, nil
	}
	doc, err := openapi_v2.ParseDocument(d.json)
	if err != nil {
		return nil, err
	}
	pb, err := proto.Marshal(doc)
	if err != nil {
		return nil, err
	}
	d.proto = pb
	return pb, nil
}

func (h *Handler) getV3() (*v3Docs, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.v3 != nil {
		return h.v3, nil
	}
	docs := &v3Docs{gvs: map[string]gvDoc{}}
	var root struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	root.Paths = map[string]struct {
		ServerRelativeURL string `json:"serverRelativeURL"`
	}{}
	for path, doc := range BuildV3(h.resources()) {
		body, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		d := gvDoc{json: body, hash: hashOf(body)}
		docs.gvs[path] = d
		root.Paths[path] = struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		}{gvURL(path, d.hash)}
	}
	body, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	docs.root = body
	h.v3 = docs
	return docs, nil
}

func gvURL(path, hash string) string {
	return "/openapi/v3/" + path + "?" + url.Values{"hash": {hash}}.Encode()
}

// Clients ask for the v2 protobuf under either name, but the answer must
// carry the one without "@": client-go parses the response's Content-Type
// and fails the request on the other.
const (
	mimeV2Proto   = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
	mimeV2ProtoAt = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
)

// wantsProto says whether the client prefers the protobuf v2 document over
// JSON: the first acceptable media type in its Accept header decides.
func wantsProto(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		// Not mime.ParseMediaType: these types contain "@", which it rejects.
		mt, _, _ := strings.Cut(part, ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case mimeV2Proto, mimeV2ProtoAt:
			return true
		case "application/json", "application/*", "*/*":
			return false
		}
	}
	return false
}

// ServeV2 answers GET /openapi/v2.
func (h *Handler) ServeV2(w http.ResponseWriter, r *http.Request) {
	d, err := h.getV2()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body, ctype := d.json, "application/json"
	if wantsProto(r) {
		if body, err = h.v2Proto(d); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		ctype = mimeV2Proto
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Vary", "Accept")
	// One ETag for both forms is fine because of Vary: Accept, and lets
	// kubectl's disk cache revalidate without downloading.
	w.Header().Set("Etag", strconv.Quote(d.etag))
	http.ServeContent(w, r, "", h.lastModified(), bytes.NewReader(body))
}

func (h *Handler) lastModified() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.modified
}

// ServeV3 answers GET /openapi/v3 (the list of group versions) and
// /openapi/v3/<group version path>.
func (h *Handler) ServeV3(w http.ResponseWriter, r *http.Request) {
	docs, err := h.getV3()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	path := strings.Trim(strings.TrimPrefix(r.URL.Path, "/openapi/v3"), "/")
	if path == "" {
		root, err := h.withDelegated(docs.root)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Etag", strconv.Quote(hashOf(root)))
		http.ServeContent(w, r, "", h.lastModified(), bytes.NewReader(root))
		return
	}
	d, ok := docs.gvs[path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if !acceptsJSON(r) {
		// Kubernetes also offers protobuf here; every client that asks for
		// it accepts JSON too except when told otherwise, so say so.
		http.Error(w, "only application/json is served", http.StatusNotAcceptable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Vary", "Accept")
	w.Header().Set("Etag", strconv.Quote(d.hash))
	if hash := r.URL.Query().Get("hash"); hash != "" {
		if hash != d.hash {
			// The client holds an old root: send it to the current
			// document, as kube-apiserver does.
			http.Redirect(w, r, gvURL(path, d.hash), http.StatusMovedPermanently)
			return
		}
		// The URL names these exact bytes, so caches may keep them forever.
		w.Header().Set("Cache-Control", "public, immutable")
		w.Header().Set("Expires", time.Now().AddDate(1, 0, 0).UTC().Format(http.TimeFormat))
	}
	http.ServeContent(w, r, "", h.lastModified(), bytes.NewReader(d.json))
}

// withDelegated adds the delegated group versions to the root document,
// without a hash: their documents change without this server knowing.
func (h *Handler) withDelegated(root []byte) ([]byte, error) {
	if h.Delegated == nil {
		return root, nil
	}
	paths := h.Delegated()
	if len(paths) == 0 {
		return root, nil
	}
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(root, &doc); err != nil {
		return nil, err
	}
	for _, p := range paths {
		if _, local := doc.Paths[p]; !local {
			ref, _ := json.Marshal(map[string]string{"serverRelativeURL": "/openapi/v3/" + p})
			doc.Paths[p] = ref
		}
	}
	return json.Marshal(doc)
}

func acceptsJSON(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return true
	}
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := strings.Cut(part, ";")
		if mt = strings.ToLower(strings.TrimSpace(mt)); mt == "application/json" || mt == "application/*" || mt == "*/*" {
			return true
		}
	}
	return false
}
