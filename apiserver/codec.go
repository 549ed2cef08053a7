package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/client-go/kubernetes/scheme"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"bonsai.dev/bonsai/apiserver/encryption"
	"bonsai.dev/bonsai/store"
)

// maxBodyBytes is kube-apiserver's request body limit (3 MiB).
const maxBodyBytes = 3 << 20

// readBody reads a request body up to the limit; over it is 413. A body
// of known length is read into a buffer of that size (and a byte more,
// to see the end), not grown from 512 bytes by doubling.
func readBody(r *http.Request) ([]byte, error) {
	size := 512
	if n := r.ContentLength; n > 0 && n <= maxBodyBytes {
		size = int(n) + 1
	}
	b, err := readAllInto(make([]byte, 0, size), io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("reading request body: %v", err))
	}
	if len(b) > maxBodyBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxBodyBytes))
	}
	return b, nil
}

// readAllInto is io.ReadAll appending to b.
func readAllInto(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// bodyToJSON turns a JSON or YAML body into JSON.
func bodyToJSON(r *http.Request, body []byte) ([]byte, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/yaml":
		j, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("error converting YAML to JSON: %v", err))
		}
		return j, nil
	case "", "application/json":
		return body, nil
	}
	return nil, unsupportedMediaType(builtinBodyTypes)
}

var (
	protobufSerializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
)

// protobufBytes is obj in Kubernetes' protobuf envelope, in the one
// buffer the serializer sizes for it. Encoding into a bytes.Buffer had
// the serializer fill its own buffer and copied that into a growing one:
// twice the allocation, for every stored object, response and watch
// event.
func protobufBytes(obj runtime.Object) ([]byte, error) {
	var w allocWriter
	if err := protobufSerializer.EncodeWithAllocator(obj, &w, &w); err != nil {
		return nil, err
	}
	return w.out, nil
}

// allocWriter is the allocator and the writer of one encoding: a write of
// the buffer it allocated last is kept as it is, not copied, since
// nothing else holds that buffer; any other write is appended.
type allocWriter struct{ buf, out []byte }

func (w *allocWriter) Allocate(n uint64) []byte {
	w.buf = make([]byte, n)
	return w.buf
}

func (w *allocWriter) Write(p []byte) (int, error) {
	if w.out == nil && len(p) > 0 && len(w.buf) > 0 && &p[0] == &w.buf[0] {
		w.out = p[:len(p):len(p)]
	} else {
		w.out = append(w.out, p...)
	}
	return len(p), nil
}

// decodeRequest decodes a create/update body (JSON, YAML or Kubernetes
// protobuf, which recent client-go sends by default) into obj.
func decodeRequest(w http.ResponseWriter, r *http.Request, body []byte, obj runtime.Object, fv fieldValidation) error {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/vnd.kubernetes.protobuf" {
		gvk := obj.GetObjectKind().GroupVersionKind()
		if err := decodeProtobuf(body, obj); err != nil {
			return apierrors.NewBadRequest("error decoding protobuf request body: " + err.Error())
		}
		if obj.GetObjectKind().GroupVersionKind().Empty() {
			obj.GetObjectKind().SetGroupVersionKind(gvk)
		}
		return nil
	}
	j, err := bodyToJSON(r, body)
	if err != nil {
		return err
	}
	return decodeInto(w, j, obj, fv)
}

// fieldValidation is the ?fieldValidation= directive.
type fieldValidation string

const (
	validationIgnore fieldValidation = "Ignore"
	validationWarn   fieldValidation = "Warn"
	validationStrict fieldValidation = "Strict"
)

// decodeInto decodes a JSON request body into obj, reporting unknown and
// duplicate fields per fieldValidation: Strict fails with 400, Warn adds a
// Warning header.
func decodeInto(w http.ResponseWriter, data []byte, obj runtime.Object, fv fieldValidation) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		// Unknown fields of a custom object are the schema's to judge
		// (checkCustomFields); duplicates are judged here.
		msgs, err := decodeUnstructured(data, u, fv)
		if err != nil {
			return err
		}
		return reportStrict(w, msgs, fv)
	}
	strictErrs, err := kjson.UnmarshalStrict(data, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return apierrors.NewBadRequest(decodeErrorMessage(err))
	}
	msgs := make([]string, len(strictErrs))
	for i, e := range strictErrs {
		msgs[i] = e.Error()
	}
	return reportStrict(w, msgs, fv)
}

// decodeUnstructured decodes a request body into u, refusing duplicate
// fields as a typed decode does.
func decodeUnstructured(data []byte, u *unstructured.Unstructured, fv fieldValidation) ([]string, error) {
	var m map[string]any
	strictErrs, err := kjson.UnmarshalStrict(data, &m, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, apierrors.NewBadRequest(decodeErrorMessage(err))
	}
	if m == nil {
		return nil, apierrors.NewBadRequest("error decoding request body: the body is not a JSON object")
	}
	u.Object = m
	var msgs []string
	for _, e := range strictErrs {
		msgs = append(msgs, e.Error())
	}
	return msgs, nil
}

// unstructuredMeta reads an unstructured object's metadata.
func unstructuredMeta(u *unstructured.Unstructured) metav1.ObjectMeta {
	var om metav1.ObjectMeta
	if md, ok := u.Object["metadata"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(md, &om)
	}
	return om
}

// reportStrict reports a decode's unknown or duplicate fields per
// fieldValidation: Strict fails with 400, Warn adds Warning headers.
func reportStrict(w http.ResponseWriter, msgs []string, fv fieldValidation) error {
	if len(msgs) == 0 || fv == validationIgnore {
		return nil
	}
	if fv == validationStrict {
		return apierrors.NewBadRequest("strict decoding error: " + strings.Join(msgs, ", "))
	}
	if w != nil {
		for _, m := range msgs {
			addWarning(w, m)
		}
	}
	return nil
}

func decodeErrorMessage(err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("error decoding request body: %v at offset %d", syn, syn.Offset)
	}
	return "error decoding request body: " + err.Error()
}

// addWarning adds a Warning header as kube-apiserver does (299 code).
func addWarning(w http.ResponseWriter, msg string) {
	w.Header().Add("Warning", fmt.Sprintf("299 - %q", msg))
}

// decodeStored decodes a stored value and stamps its resourceVersion.
func decodeStored(res *resource, kv store.KeyValue) (runtime.Object, error) {
	if res.storage != nil {
		obj, err := decodeStored(res.storage, kv)
		if err != nil {
			return nil, err
		}
		out := res.fromStorage(obj)
		out.GetObjectKind().SetGroupVersionKind(res.gvk())
		return out, nil
	}
	if res.custom != nil {
		objs, err := res.custom.Decode([]store.KeyValue{kv})
		if err != nil {
			return nil, err
		}
		return objs[0], nil
	}
	obj := res.newObject()
	if bytes.HasPrefix(kv.Value, protobufPrefix) {
		if err := decodeProtobuf(kv.Value, obj); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		obj.GetObjectKind().SetGroupVersionKind(res.gvk())
	} else if encryption.IsEncrypted(kv.Value) {
		// Encrypted, and not by a provider the server has for it.
		return nil, encryption.Unreadable(kv.Key, kv.Value)
	} else if err := kjson.UnmarshalCaseSensitivePreserveInts(kv.Value, obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	setResourceVersion(obj, kv.Revision)
	if res.onRead != nil {
		res.onRead(obj)
	}
	return obj, nil
}

// decodeStoredMeta decodes only the metadata of a built-in object stored
// as protobuf, for a caller that needs nothing else (a metadata-only list
// or watch, such as the garbage collector's informers): a Pod's spec and
// status are three quarters of decoding it. ok is false where it cannot
// (a custom object, a kind stored as another, JSON, an envelope of
// another kind, metadata not in field 1 or there twice, anything
// malformed); decodeStored then decodes it all and reports errors.
func decodeStoredMeta(res *resource, kv store.KeyValue) (*metav1.PartialObjectMetadata, bool) {
	if res.storage != nil || res.custom != nil || !metadataIsField1(res) {
		return nil, false
	}
	gvk, raw, ok := protobufEnvelope(kv.Value)
	if !ok || gvk != res.gvk() {
		return nil, false
	}
	var metaBytes []byte
	found := false
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return nil, false
		}
		raw = raw[n:]
		if n = protowire.ConsumeFieldValue(num, typ, raw); n < 0 {
			return nil, false
		}
		if num == 1 {
			if found || typ != protowire.BytesType {
				return nil, false // merged occurrences: the full decode's business
			}
			metaBytes, _ = protowire.ConsumeBytes(raw[:n])
			found = true
		}
		raw = raw[n:]
	}
	p := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}}
	if err := p.ObjectMeta.Unmarshal(metaBytes); err != nil {
		return nil, false
	}
	setResourceVersion(p, kv.Revision)
	return p, true
}

// metadataIsField1 says whether res's Go type keeps its ObjectMeta in
// protobuf field 1, as every built-in kind does; decided once per
// resource.
func metadataIsField1(res *resource) bool {
	if v, ok := metaField1.Load(res); ok {
		return v.(bool)
	}
	t := reflect.TypeOf(res.newObject())
	yes := false
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		if f, ok := t.Elem().FieldByName("ObjectMeta"); ok && f.Type == reflect.TypeOf(metav1.ObjectMeta{}) {
			yes = strings.HasPrefix(f.Tag.Get("protobuf"), "bytes,1,")
		}
	}
	metaField1.Store(res, yes)
	return yes
}

var metaField1 sync.Map // *resource -> bool

// decodeProtobuf is protobufSerializer.Decode(data, nil, into), for a
// built-in object of the envelope's own kind without first copying the
// object's bytes out of the envelope, as runtime.Unknown's Unmarshal
// does: every stored object read and every protobuf request body was
// allocated twice. Anything else (another kind, a malformed envelope)
// goes to the serializer.
func decodeProtobuf(data []byte, into runtime.Object) error {
	gvk, raw, ok := protobufEnvelope(data)
	if ok && gvk.Kind != "" && gvk.Version != "" {
		if u, isMessage := into.(interface {
			Reset()
			Unmarshal([]byte) error
		}); isMessage {
			if kinds, _, err := scheme.Scheme.ObjectKinds(into); err == nil && slices.Contains(kinds, gvk) {
				u.Reset()
				if err := u.Unmarshal(raw); err != nil {
					return err
				}
				into.GetObjectKind().SetGroupVersionKind(gvk)
				return nil
			}
		}
	}
	_, _, err := protobufSerializer.Decode(data, nil, into)
	return err
}

// decodeStatusWrite decodes a protobuf status write of a built-in kind
// into obj without its spec, which a status write never keeps (the
// stored object's stays): a Pod's spec is most of its encoding and of
// the time decoding it takes. spec decodes the request's spec into obj
// after all, for a reader of the request's whole object (a mutating
// webhook). ok is false, and obj untouched, where this does not apply:
// another encoding, a kind whose message does not hold metadata, spec
// and status as fields 1, 2 and 3, or a body the full decode should
// judge.
func decodeStatusWrite(r *http.Request, body []byte, obj runtime.Object) (spec func() error, ok bool) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/vnd.kubernetes.protobuf" {
		return nil, false
	}
	specField, layout := statusLayout(obj)
	u, isMessage := obj.(interface {
		Reset()
		protoMessage
	})
	if !layout || !isMessage {
		return nil, false
	}
	gvk, raw, ok := protobufEnvelope(body)
	if !ok || gvk.Kind == "" || gvk.Version == "" {
		return nil, false
	}
	if kinds, _, err := scheme.Scheme.ObjectKinds(obj); err != nil || !slices.Contains(kinds, gvk) {
		return nil, false
	}
	kept := make([]byte, 0, len(raw))
	var specBytes []byte
	found := false
	for b := raw; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, false
		}
		if num == 2 {
			if found || typ != protowire.BytesType {
				return nil, false // merged occurrences: the full decode's business
			}
			specBytes, _ = protowire.ConsumeBytes(b[n : n+m])
			found = true
		} else {
			kept = append(kept, b[:n+m]...)
		}
		b = b[n+m:]
	}
	u.Reset()
	if err := u.Unmarshal(kept); err != nil {
		return nil, false
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return func() error {
		spec := reflect.ValueOf(obj).Elem().Field(specField).Addr().Interface().(protoMessage)
		if err := spec.Unmarshal(specBytes); err != nil {
			return apierrors.NewBadRequest("error decoding protobuf request body: " + err.Error())
		}
		return nil
	}, true
}

// protoMessage is a generated type's protobuf decoder.
type protoMessage interface{ Unmarshal([]byte) error }

// statusLayouts caches statusLayout's answer by Go type.
var statusLayouts sync.Map // reflect.Type -> int

// statusLayout is the index of the Spec field of obj's struct when its
// protobuf message holds metadata, spec and status as fields 1, 2 and 3.
func statusLayout(obj runtime.Object) (spec int, ok bool) {
	t := reflect.TypeOf(obj)
	i, cached := statusLayouts.Load(t)
	if !cached {
		i, _ = statusLayouts.LoadOrStore(t, findStatusLayout(t))
	}
	return i.(int), i.(int) >= 0
}

func findStatusLayout(t reflect.Type) int {
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return -1
	}
	st := t.Elem()
	want := map[string]string{"ObjectMeta": "1,metadata", "Spec": "2,spec", "Status": "3,status"}
	spec, seen := -1, 0
	for i := 0; i < st.NumField(); i++ {
		f := st.Field(i)
		w, ok := want[f.Name]
		if !ok {
			continue
		}
		// "bytes,2,opt,name=spec"; a required field has no "opt"
		// (resource.k8s.io's DeviceTaintRule spec).
		parts := strings.Split(f.Tag.Get("protobuf"), ",")
		name := ""
		for _, p := range parts[min(2, len(parts)):] {
			if n, ok := strings.CutPrefix(p, "name="); ok {
				name = n
			}
		}
		if len(parts) < 3 || parts[0] != "bytes" || parts[1]+","+name != w {
			return -1
		}
		if f.Name == "Spec" {
			if _, ok := reflect.New(f.Type).Interface().(protoMessage); !ok {
				return -1
			}
			spec = i
		}
		seen++
	}
	if seen != len(want) {
		return -1
	}
	return spec
}

// protobufEnvelope reads a protobuf envelope (the prefix, then a
// runtime.Unknown): its type and the object's bytes, a slice of data.
func protobufEnvelope(data []byte) (gvk schema.GroupVersionKind, raw []byte, ok bool) {
	b, found := bytes.CutPrefix(data, protobufPrefix)
	if !found {
		return gvk, nil, false
	}
	var apiVersion string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return gvk, nil, false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return gvk, nil, false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return gvk, nil, false
		}
		b = b[n:]
		switch num {
		case 1: // typeMeta
			for len(v) > 0 {
				tnum, ttyp, tn := protowire.ConsumeTag(v)
				if tn < 0 || ttyp != protowire.BytesType {
					return gvk, nil, false
				}
				v = v[tn:]
				s, sn := protowire.ConsumeBytes(v)
				if sn < 0 {
					return gvk, nil, false
				}
				v = v[sn:]
				switch tnum {
				case 1:
					apiVersion = string(s)
				case 2:
					gvk.Kind = string(s)
				}
			}
		case 2: // raw
			raw = v
		}
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return gvk, nil, false
	}
	gvk.Group, gvk.Version = gv.Group, gv.Version
	return gvk, raw, true
}

// storedNow is the current time as the store gives it back: whole
// seconds, in the local zone. The writer's object is handed to watchers
// and later writes as it is (eventCache.offer), so it must hold the
// times that decoding its stored bytes would give.
func storedNow() metav1.Time {
	return storedTime(time.Now())
}

func storedTime(t time.Time) metav1.Time {
	return metav1.NewTime(time.Unix(t.Unix(), 0))
}

// storedManagedFieldTimes gives the managedFields entries' times (the
// field manager's clock, to the nanosecond, in UTC) as the store gives
// them back. Entries already so are left alone: the slice may be shared
// with a reader's object.
func storedManagedFieldTimes(entries []metav1.ManagedFieldsEntry) {
	for i, e := range entries {
		if e.Time != nil && e.Time.Time != storedTime(e.Time.Time).Time {
			t := storedTime(e.Time.Time)
			entries[i].Time = &t
		}
	}
}

// protobufPrefix starts Kubernetes' protobuf encoding of an object, as
// kube-apiserver stores built-in objects in etcd. Values without it are
// JSON: what bonsai stored before, read as ever.
var protobufPrefix = []byte{'k', '8', 's', 0}

func setResourceVersion(obj runtime.Object, rev uint64) {
	if m, err := metaOf(obj); err == nil {
		m.SetResourceVersion(fmt.Sprint(rev))
	}
}

// encodeForStore serialises an object without its resourceVersion: the
// store's revision is the resourceVersion.
func encodeForStore(res *resource, obj runtime.Object) ([]byte, error) {
	if res.storage != nil {
		return encodeForStore(res.storage, res.toStorage(obj))
	}
	if res.custom != nil {
		return res.custom.Encode(obj)
	}
	m, err := metaOf(obj)
	if err != nil {
		return nil, err
	}
	rv := m.GetResourceVersion()
	m.SetResourceVersion("")
	defer m.SetResourceVersion(rv)
	obj.GetObjectKind().SetGroupVersionKind(res.gvk())
	storedManagedFieldTimes(m.GetManagedFields())
	// Protobuf, as kube-apiserver stores built-in kinds: several times
	// cheaper than JSON to decode, which every read and every watch
	// event does. A kind without protobuf methods stays JSON.
	if _, ok := obj.(interface{ Marshal() ([]byte, error) }); ok {
		if b, err := protobufBytes(obj); err == nil {
			return b, nil
		}
	}
	return json.Marshal(obj)
}

// output formats a response can take.
type outputFormat int

const (
	outJSON outputFormat = iota
	outYAML
	outTable
	outPartialMetadata
	// outProtobuf is Kubernetes' protobuf, which client-go asks for first:
	// several times cheaper to encode here and to decode in the client.
	outProtobuf
	// outPartialMetadataProtobuf is outPartialMetadata in protobuf, which
	// client-go's metadata client (the garbage collector's, say) asks for
	// first.
	outPartialMetadataProtobuf
	// outTableYAML and outPartialMetadataYAML are the same shapes in YAML.
	outTableYAML
	outPartialMetadataYAML
)

// protobuf says whether the format is written in Kubernetes' protobuf.
func (f outputFormat) protobuf() bool {
	return f == outProtobuf || f == outPartialMetadataProtobuf
}

// metadataOnly says whether objects go out as PartialObjectMetadata.
func (f outputFormat) metadataOnly() bool {
	return f == outPartialMetadata || f == outPartialMetadataProtobuf || f == outPartialMetadataYAML
}

// table says whether objects go out as rows of a Table.
func (f outputFormat) table() bool { return f == outTable || f == outTableYAML }

// encoding is how writeObject writes an object of the format once it has
// its shape (a table, a PartialObjectMetadata): JSON, YAML or protobuf.
func (f outputFormat) encoding() outputFormat {
	switch {
	case f.protobuf():
		return outProtobuf
	case f == outYAML || f == outTableYAML || f == outPartialMetadataYAML:
		return outYAML
	}
	return outJSON
}

const protobufContentType = "application/vnd.kubernetes.protobuf"

// servedMediaTypes are the media types responses take, in kube-apiserver's
// order (the first is what a client without Accept gets); JSON and
// protobuf also frame watch streams.
var servedMediaTypes = []runtime.SerializerInfo{
	{MediaType: "application/json", MediaTypeType: "application", MediaTypeSubType: "json", EncodesAsText: true, StreamSerializer: &runtime.StreamSerializerInfo{EncodesAsText: true}},
	{MediaType: "application/yaml", MediaTypeType: "application", MediaTypeSubType: "yaml", EncodesAsText: true},
	{MediaType: protobufContentType, MediaTypeType: "application", MediaTypeSubType: "vnd.kubernetes.protobuf", StreamSerializer: &runtime.StreamSerializerInfo{}},
}

// mediaRestrictions are what an endpoint serves besides its objects as
// they are, as kube-apiserver's request scope says: Tables in JSON or
// YAML, PartialObjectMetadata in any form; custom objects themselves
// have no protobuf form.
type mediaRestrictions struct{ custom bool }

func (m mediaRestrictions) AllowsMediaTypeTransform(mimeType, mimeSubType string, gvk *schema.GroupVersionKind) bool {
	if gvk == nil {
		return !m.custom || mimeSubType != "vnd.kubernetes.protobuf"
	}
	if gvk.Group != metav1.GroupName || (gvk.Version != "v1" && gvk.Version != "v1beta1") {
		return false
	}
	switch gvk.Kind {
	case "Table":
		return mimeType == "application" && (mimeSubType == "json" || mimeSubType == "yaml")
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		return true
	}
	return false
}

func (mediaRestrictions) AllowsServerVersion(v string) bool {
	return v == metav1.SchemeGroupVersion.Version
}
func (mediaRestrictions) AllowsStreamSchema(s string) bool { return s == "watch" }

// notAcceptable is the 406 listing what an endpoint serves, as
// kube-apiserver words it.
func notAcceptable(stream bool) error {
	var types []string
	for _, info := range servedMediaTypes {
		switch {
		case !stream:
			types = append(types, info.MediaType)
		case info.StreamSerializer != nil:
			types = append(types, info.MediaType+";stream=watch")
		}
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReasonNotAcceptable,
		Message: "only the following media types are accepted: " + strings.Join(types, ", ")}}
}

// negotiate picks the response format from Accept with kube-apiserver's
// own negotiation: q-values, wildcards, as=Table and
// as=PartialObjectMetadata conversions, stream=watch. A watch needs a
// format that frames a stream: the chosen one, or 406.
func negotiate(r *http.Request, res *resource, watch bool) (outputFormat, error) {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return outJSON, nil
	}
	m, ok := negotiation.NegotiateMediaTypeOptions(accept, servedMediaTypes, mediaRestrictions{custom: res != nil && res.custom != nil})
	if !ok {
		return 0, notAcceptable(false)
	}
	if watch && m.Accepted.StreamSerializer == nil {
		return 0, notAcceptable(true)
	}
	yaml, pb := m.Accepted.MediaTypeSubType == "yaml", m.Accepted.MediaTypeSubType == "vnd.kubernetes.protobuf"
	switch {
	case m.Convert == nil:
	case m.Convert.Kind == "Table":
		if yaml {
			return outTableYAML, nil
		}
		return outTable, nil
	default: // PartialObjectMetadata, PartialObjectMetadataList
		switch {
		case yaml:
			return outPartialMetadataYAML, nil
		case pb:
			return outPartialMetadataProtobuf, nil
		}
		return outPartialMetadata, nil
	}
	switch {
	case yaml:
		return outYAML, nil
	case pb:
		return outProtobuf, nil
	}
	return outJSON, nil
}

// writeObject writes obj with the given HTTP code in the negotiated format.
func writeObject(w http.ResponseWriter, code int, obj any, format outputFormat) {
	var body []byte
	var err error
	ct := "application/json"
	ro, typed := obj.(runtime.Object)
	switch {
	case format == outYAML:
		ct = "application/yaml"
		body, err = yaml.Marshal(obj)
	case format == outProtobuf && typed:
		ct = protobufContentType
		body, err = protobufBytes(ro)
	default:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		err = enc.Encode(obj)
		body = buf.Bytes()
	}
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(body)
}

// writeError answers with the Status of an API error, or a 500 for any
// other error.
func writeError(w http.ResponseWriter, err error) {
	var st apierrors.APIStatus
	switch {
	case errors.As(err, &st):
	case errors.As(err, new(*store.SpaceError)):
		st, _ = storageSpace(err)
	case errors.Is(err, context.DeadlineExceeded):
		st = errRequestTimeout
	default:
		st = apierrors.NewInternalError(err)
	}
	s := st.Status()
	writeStatus(w, &s)
}

// qualified is how Kubernetes names a resource in messages: "pods",
// "deployments.apps".
func qualified(res *resource) schema.GroupResource {
	return schema.GroupResource{Group: res.gvr.Group, Resource: res.gvr.Resource}
}

// tooLargeResourceVersion is the 504 of a read from a revision the store
// has not reached, with the cause client-go's reflector looks for
// (apierrors.IsTooLargeResourceVersion) before it falls back to a
// list from the latest revision.
func tooLargeResourceVersion(asked, current uint64) error {
	msg := "Too large resource version"
	if asked > 0 {
		msg = fmt.Sprintf("Too large resource version: %d, current: %d", asked, current)
	}
	err := apierrors.NewTimeoutError(msg, 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

// storeError maps a store error to the API error kube-apiserver returns.
func storeError(err error, res *resource, name string) error {
	gr := qualified(res)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return apierrors.NewNotFound(gr, name)
	case errors.Is(err, store.ErrExists):
		return apierrors.NewAlreadyExists(gr, name)
	case errors.Is(err, store.ErrConflict):
		return apierrors.NewConflict(gr, name, errors.New(optimisticLockMsg))
	case errors.Is(err, store.ErrCompacted):
		return apierrors.NewResourceExpired("The resourceVersion for the provided list is too old.")
	case errors.Is(err, store.ErrFutureRevision):
		return tooLargeResourceVersion(0, 0)
	case errors.Is(err, store.ErrInvalidContinue):
		return apierrors.NewBadRequest("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
	case errors.Is(err, store.ErrInvalidKey):
		return apierrors.NewBadRequest(err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return errRequestTimeout
	}
	var tooLarge *store.ValueTooLargeError
	if errors.As(err, &tooLarge) {
		return objectTooLarge(tooLarge.Limit)
	}
	if st, ok := storageSpace(err); ok {
		return st
	}
	return apierrors.NewInternalError(err)
}

// storageSpace is the answer to a write refused for want of space: the
// store over its quota or its disk full. kube-apiserver passes etcd's
// NOSPACE refusal on as an error it does not know, a 500 with no reason
// and the error's text ("etcdserver: mvcc: database space exceeded");
// so does bonsai, with a text that says what is full and what to do.
func storageSpace(err error) (*apierrors.StatusError, bool) {
	var space *store.SpaceError
	if !errors.As(err, &space) {
		return nil, false
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonUnknown, Message: space.Error(),
	}}, true
}

const optimisticLockMsg = "the object has been modified; please apply your changes to the latest version and try again"

func invalid(res *resource, name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: res.gvr.Group, Kind: res.kind}, name, errs)
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

// unsupportedMediaType is the 415 of a body in a media type the
// endpoint does not read, listing those it does, as kube-apiserver words
// it.
func unsupportedMediaType(accepted []string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: "the body of the request was in an unknown format - accepted media types include: " + strings.Join(accepted, ", ")}}
}

// The patch types an endpoint takes, in kube-apiserver's order: custom
// objects have no patch strategies to merge by.
var (
	builtinPatchTypes = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType)}
	customPatchTypes  = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.ApplyYAMLPatchType)}
)

// patchTypeOf is a PATCH's Content-Type without its parameters (a
// charset), read as kube-apiserver reads it.
func patchTypeOf(r *http.Request) types.PatchType {
	ct := r.Header.Get("Content-Type")
	if i := strings.Index(ct, ";"); i > 0 {
		ct = ct[:i]
	}
	return types.PatchType(ct)
}

// patchType is a PATCH's patch type, or 415 when the endpoint does not
// take it.
func patchType(r *http.Request, res *resource) (types.PatchType, error) {
	pt := patchTypeOf(r)
	accepted := builtinPatchTypes
	if res.custom != nil {
		accepted = customPatchTypes
	}
	if !slices.Contains(accepted, string(pt)) {
		return "", unsupportedMediaType(accepted)
	}
	return pt, nil
}

// The media types a create's or update's body may take; custom objects
// have no protobuf.
var (
	builtinBodyTypes = []string{"application/json", "application/yaml", protobufContentType}
	customBodyTypes  = []string{"application/json", "application/yaml"}
)

// checkBodyMediaType answers 415 for a create's or an update's body in a
// media type the endpoint does not read; no Content-Type means JSON.
func checkBodyMediaType(r *http.Request, res *resource) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	accepted := builtinBodyTypes
	if res != nil && res.custom != nil {
		accepted = customBodyTypes
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && slices.Contains(accepted, mt) {
		return nil
	}
	return unsupportedMediaType(accepted)
}
