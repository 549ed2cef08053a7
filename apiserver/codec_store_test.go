package apiserver

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/store"
)

func podResource(tb testing.TB) *resource {
	for _, r := range builtinResources() {
		if r.gvr.Group == "" && r.gvr.Resource == "pods" {
			return r
		}
	}
	tb.Fatal("no pods resource")
	return nil
}

// benchPod is a pod as a Deployment's controller and the kubelet leave it.
func benchPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7c5d8f9b6d-x2x9z", Namespace: "default", UID: "0b6b7f6e-7c0e-4a3e-9c1e-2f1d3c4b5a69",
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7c5d8f9b6d"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7c5d8f9b6d", UID: "1b6b7f6e-7c0e-4a3e-9c1e-2f1d3c4b5a69"}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{},"f:name":{}}}}}`)}}},
		},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1.2.3",
			Ports:                  []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Resources:              corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("100m"), corev1.ResourceMemory: apiresource.MustParse("64Mi")}},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, SchedulerName: "default-scheduler",
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.42.0.17", HostIP: "192.168.1.10",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
}

func BenchmarkEncodeForStore(b *testing.B) {
	res, pod := podResource(b), benchPod()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeForStore(res, pod); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeStored(b *testing.B) {
	benchDecode(b, func(res *resource, kv store.KeyValue) bool {
		_, err := decodeStored(res, kv)
		return err == nil
	})
}

// BenchmarkDecodeStoredMeta is BenchmarkDecodeStored for a
// metadata-only list or watch: the pod's metadata alone.
func BenchmarkDecodeStoredMeta(b *testing.B) {
	benchDecode(b, func(res *resource, kv store.KeyValue) bool {
		_, ok := decodeStoredMeta(res, kv)
		return ok
	})
}

// benchDecode times decode on a stored Pod.
func benchDecode(b *testing.B, decode func(*resource, store.KeyValue) bool) {
	res := podResource(b)
	raw, err := encodeForStore(res, benchPod())
	if err != nil {
		b.Fatal(err)
	}
	kv := store.KeyValue{Key: "/pods/default/web", Value: raw, Revision: 7}
	b.ReportAllocs()
	for b.Loop() {
		if !decode(res, kv) {
			b.Fatal("not decoded")
		}
	}
}

// TestStoredEncoding checks that built-in objects are stored as
// Kubernetes' protobuf, and that objects stored as JSON (by an older
// bonsai) still read, watch and update.
func TestStoredEncoding(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(e.ctx, cm("new", map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var res *resource
	for _, r := range builtinResources() {
		if r.gvr.Group == "" && r.gvr.Resource == "configmaps" {
			res = r
		}
	}
	kv, err := e.st.Get(e.ctx, res.key("default", "new"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(kv.Value, protobufPrefix) {
		t.Errorf("stored ConfigMap starts %q, want Kubernetes' protobuf", kv.Value[:min(16, len(kv.Value))])
	}

	old := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"old","namespace":"default","uid":"5d1e2f3a-0000-4000-8000-000000000001","creationTimestamp":"2026-01-02T03:04:05Z"},"data":{"from":"json"}}`
	if _, err := e.st.Create(e.ctx, res.key("default", "old"), []byte(old)); err != nil {
		t.Fatal(err)
	}
	got, err := cms.Get(e.ctx, "old", metav1.GetOptions{})
	if err != nil || got.Data["from"] != "json" || got.UID != "5d1e2f3a-0000-4000-8000-000000000001" {
		t.Fatalf("JSON-stored ConfigMap read back as %+v (err %v)", got, err)
	}
	got.Data["from"] = "update"
	if _, err := cms.Update(e.ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if kv, err := e.st.Get(e.ctx, res.key("default", "old")); err != nil || !bytes.HasPrefix(kv.Value, protobufPrefix) {
		t.Errorf("after an update the ConfigMap is stored as %q (err %v), want protobuf", kv.Value[:min(16, len(kv.Value))], err)
	}
	list, err := cms.List(e.ctx, metav1.ListOptions{})
	names := map[string]string{}
	for _, c := range list.Items {
		names[c.Name] = c.Data["from"]
	}
	if err != nil || len(names) != 2 || names["old"] != "update" {
		t.Errorf("list: %v (err %v), want new and old (updated)", names, err)
	}
}

// TestDecodeProtobufAgrees holds decodeProtobuf to the serializer it
// stands in for: random objects of every built-in kind, decoded into
// their own type, into another kind's (the serializer's way then), and
// from envelopes that are cut short or carry no type.
func TestDecodeProtobufAgrees(t *testing.T) {
	s, _ := newTestServer(t)
	var other runtime.Object = &corev1.ConfigMap{}
	n := 0
	randomBuiltins(s, func(gvr schema.GroupVersionResource, res *resource, seed int64, obj runtime.Object) {
		var buf bytes.Buffer
		if err := protobufSerializer.Encode(obj, &buf); err != nil {
			return // kinds without a protobuf encoding
		}
		data := buf.Bytes()
		// The envelope is read in place: the object's bytes are
		// data's own.
		gvk, raw, ok := protobufEnvelope(data)
		if !ok || gvk != res.gvk() || len(raw) == 0 || !aliases(data, raw) {
			t.Fatalf("%s seed %d: envelope %v %v, %d bytes not data's", gvr, seed, gvk, ok, len(raw))
		}
		for _, in := range [][]byte{data, data[:len(data)/2], data[:4], append(append([]byte{}, protobufPrefix...), 0x12, 0)} {
			for _, target := range []runtime.Object{res.newObject(), other.DeepCopyObject()} {
				want, got := target.DeepCopyObject(), target.DeepCopyObject()
				_, _, wantErr := protobufSerializer.Decode(in, nil, want)
				gotErr := decodeProtobuf(in, got)
				if (wantErr == nil) != (gotErr == nil) {
					t.Fatalf("%s seed %d, %d bytes into %T: error %v, want %v", gvr, seed, len(in), target, gotErr, wantErr)
				}
				if wantErr == nil && !apiequality.Semantic.DeepEqual(got, want) {
					t.Fatalf("%s seed %d, %d bytes into %T:\ngot  %#v\nwant %#v", gvr, seed, len(in), target, got, want)
				}
				n++
			}
		}
	})
	if n < 500 {
		t.Fatalf("only %d decodes compared", n)
	}
}

// randomBuiltins calls f with eight random objects of every built-in
// kind the server stores itself.
func randomBuiltins(s *Server, f func(gvr schema.GroupVersionResource, res *resource, seed int64, obj runtime.Object)) {
	for gvr, res := range s.reg.byGVR {
		if res.custom != nil || res.storage != nil {
			continue
		}
		for seed := int64(0); seed < 8; seed++ {
			f(gvr, res, seed, randomObject(res, seed))
		}
	}
}

// aliases says whether part is a slice of whole's own bytes.
func aliases(whole, part []byte) bool {
	for i := range whole {
		if &whole[i] == &part[0] {
			return i+len(part) <= len(whole)
		}
	}
	return false
}

// TestReadBodySizes reads bodies of known and unknown length, at and over
// the limit.
func TestReadBodySizes(t *testing.T) {
	for _, c := range []struct {
		size    int
		known   bool
		tooLong bool
	}{{0, true, false}, {1, true, false}, {4000, true, false}, {4000, false, false}, {maxBodyBytes, true, false}, {maxBodyBytes + 1, false, true}, {maxBodyBytes + 1, true, true}} {
		body := bytes.Repeat([]byte{'x'}, c.size)
		// A byte per read: the body comes in pieces, as from a pipe.
		r := httptest.NewRequest(http.MethodPost, "/", iotest.OneByteReader(bytes.NewReader(body)))
		if c.known {
			r.ContentLength = int64(c.size)
		}
		got, err := readBody(r)
		if c.tooLong {
			if !apierrors.IsRequestEntityTooLargeError(err) {
				t.Errorf("%d bytes: %v, want 413", c.size, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("%d bytes (length known: %v): %d bytes, %v", c.size, c.known, len(got), err)
		}
	}
}

// TestDecodeStoredMetaAgrees: the metadata decoded alone from a stored
// object is the PartialObjectMetadata of the whole decoded object, for
// random objects of every built-in kind; a cut or foreign value is
// declined, for the whole decode to judge.
func TestDecodeStoredMetaAgrees(t *testing.T) {
	s, _ := newTestServer(t)
	n := 0
	randomBuiltins(s, func(gvr schema.GroupVersionResource, res *resource, seed int64, obj runtime.Object) {
		data, err := encodeForStore(res, obj)
		if err != nil || !bytes.HasPrefix(data, protobufPrefix) {
			return
		}
		kv := store.KeyValue{Key: "/k", Value: data, Revision: uint64(100 + seed)}
		full, err := decodeStored(res, kv)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := decodeStoredMeta(res, kv)
		if !ok {
			t.Fatalf("%s seed %d: declined", gvr, seed)
		}
		if want := partialMetadata(full); !apiequality.Semantic.DeepEqual(got, want) {
			t.Fatalf("%s seed %d:\ngot  %#v\nwant %#v", gvr, seed, got, want)
		}
		for _, cut := range [][]byte{data[:len(data)-1], data[:len(data)/2], data[:4]} {
			if _, ok := decodeStoredMeta(res, store.KeyValue{Value: cut}); ok {
				if _, err := decodeStored(res, store.KeyValue{Value: cut}); err != nil {
					t.Fatalf("%s seed %d, %d bytes: metadata decoded from a value the whole decode refuses: %v", gvr, seed, len(cut), err)
				}
			}
		}
		n++
	})
	if n < 350 {
		t.Fatalf("only %d objects compared", n)
	}
	cm := s.reg.byGVR[gvr("", "v1", "configmaps")]
	pod := s.reg.byGVR[gvr("", "v1", "pods")]
	data, err := encodeForStore(cm, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decodeStoredMeta(pod, store.KeyValue{Value: data}); ok {
		t.Error("a ConfigMap's value decoded as a Pod's metadata")
	}
	// Metadata twice (protobuf merges the two): declined.
	pdata, err := encodeForStore(pod, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	_, raw, _ := protobufEnvelope(pdata)
	extra, _ := (&metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}).Marshal()
	raw = protowire.AppendBytes(protowire.AppendTag(append([]byte{}, raw...), 1, protowire.BytesType), extra)
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Pod"}, Raw: raw}
	ub, _ := u.Marshal()
	if _, ok := decodeStoredMeta(pod, store.KeyValue{Value: append(append([]byte{}, protobufPrefix...), ub...)}); ok {
		t.Error("metadata in two occurrences decoded from one")
	}
	if _, ok := decodeStoredMeta(pod, store.KeyValue{Value: []byte(`{"metadata":{"name":"x"}}`)}); ok {
		t.Error("a JSON value decoded as protobuf metadata")
	}
}

// TestListMetaOnly: a list decodes metadata alone only when it sends
// nothing else and no field selector needs the rest.
func TestListMetaOnly(t *testing.T) {
	s, _ := newTestServer(t)
	res := s.reg.byGVR[gvr("", "v1", "pods")]
	data, err := encodeForStore(res, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}}, Spec: corev1.PodSpec{NodeName: "n"}})
	if err != nil {
		t.Fatal(err)
	}
	kv := store.KeyValue{Key: "/registry/pods/default/p", Value: data, Revision: 7}
	byNode, _ := fields.ParseSelector("spec.nodeName=n")
	for _, c := range []struct {
		o    listOptions
		want bool
	}{
		{listOptions{metadataOnly: true, fields: fields.Everything()}, true},
		{listOptions{metadataOnly: true}, true},
		{listOptions{metadataOnly: true, fields: byNode}, false},
		{listOptions{fields: fields.Everything()}, false},
	} {
		pm, ok := metaOnly(res, &c.o, kv)
		if ok != c.want || ok && (pm.Name != "p" || pm.ResourceVersion != "7" || pm.Labels["a"] != "b") {
			t.Errorf("%+v: %+v %v, want %v", c.o, pm, ok, c.want)
		}
	}
}

// TestDecodeStatusWrite holds the status write's decode to the full one:
// random objects of every built-in kind with a spec and a status decode
// to the full decode's object without its spec, and to all of it once
// the spec is asked for; other kinds and other encodings are left to the
// full decode, as is a body cut short.
func TestDecodeStatusWrite(t *testing.T) {
	s, _ := newTestServer(t)
	protobufReq := httptest.NewRequest(http.MethodPut, "/", nil)
	protobufReq.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
	jsonReq := httptest.NewRequest(http.MethodPut, "/", nil)
	jsonReq.Header.Set("Content-Type", "application/json")
	kinds := map[string]bool{}
	randomBuiltins(s, func(gvr schema.GroupVersionResource, res *resource, seed int64, obj runtime.Object) {
		var buf bytes.Buffer
		if err := protobufSerializer.Encode(obj, &buf); err != nil {
			return
		}
		data := buf.Bytes()
		want := res.newObject()
		if err := decodeProtobuf(data, want); err != nil {
			t.Fatal(err)
		}
		got := res.newObject()
		spec, ok := decodeStatusWrite(protobufReq, data, got)
		specField := reflect.ValueOf(want).Elem().FieldByName("Spec")
		hasLayout := specField.IsValid() && reflect.ValueOf(want).Elem().FieldByName("Status").IsValid()
		if ok != hasLayout {
			t.Fatalf("%s: decoded without spec %v, has spec and status %v", gvr, ok, hasLayout)
		}
		if !ok {
			return
		}
		kinds[res.gvk().Kind] = true
		withoutSpec := want.DeepCopyObject()
		reflect.ValueOf(withoutSpec).Elem().FieldByName("Spec").SetZero()
		if !apiequality.Semantic.DeepEqual(got, withoutSpec) {
			t.Fatalf("%s seed %d without spec:\ngot  %#v\nwant %#v", gvr, seed, got, withoutSpec)
		}
		if err := spec(); err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(got, want) {
			t.Fatalf("%s seed %d with spec:\ngot  %#v\nwant %#v", gvr, seed, got, want)
		}
		if _, ok := decodeStatusWrite(jsonReq, data, res.newObject()); ok {
			t.Fatalf("%s: a JSON request decoded as protobuf", gvr)
		}
		if _, ok := decodeStatusWrite(protobufReq, data[:len(data)-1], res.newObject()); ok {
			t.Fatalf("%s: a body cut short decoded", gvr)
		}
	})
	for _, k := range []string{"Pod", "Node", "Deployment", "Service", "PersistentVolumeClaim", "Job"} {
		if !kinds[k] {
			t.Errorf("%s status writes were not decoded without spec (%d kinds were)", k, len(kinds))
		}
	}
}
