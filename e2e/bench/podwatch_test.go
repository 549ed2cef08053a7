package main

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// TestReadPodWatch feeds the light watch reader frames made by
// apimachinery's protobuf serializers as watch streams use them (the
// event raw, its object in the envelope), and
// checks every field it reads against the pods they came from.
func TestReadPodWatch(t *testing.T) {
	ps := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	raw := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	encodeWith := func(s runtime.Encoder, obj runtime.Object) []byte {
		var b bytes.Buffer
		if err := s.Encode(obj, &b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	encode := func(obj runtime.Object) []byte { return encodeWith(ps, obj) }
	encodeEvent := func(obj runtime.Object) []byte { return encodeWith(raw, obj) }
	pod := func(name, rv, node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: rv, Labels: map[string]string{"app": "x"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
				Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}},
			Status: corev1.PodStatus{Phase: phase, PodIP: "10.42.0.9", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	events := []struct {
		typ string
		obj runtime.Object
	}{
		{"ADDED", pod("p1", "10", "", corev1.PodPending)},
		{"MODIFIED", pod("p1", "11", "node-7", corev1.PodPending)},
		{"BOOKMARK", &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{ResourceVersion: "12"}}},
		{"MODIFIED", pod("p1", "13", "node-7", corev1.PodRunning)},
		{"DELETED", pod("p2", "14", "node-8", corev1.PodSucceeded)},
	}
	var stream bytes.Buffer
	for _, e := range events {
		frame := encodeEvent(&metav1.WatchEvent{Type: e.typ, Object: runtime.RawExtension{Raw: encode(e.obj)}})
		stream.Write(binary.BigEndian.AppendUint32(nil, uint32(len(frame))))
		stream.Write(frame)
	}
	var got []podEvent
	if err := readPodWatch(&stream, func(ev podEvent) { got = append(got, ev) }); err != nil {
		t.Fatal(err)
	}
	want := []podEvent{
		{typ: "ADDED", name: "p1", phase: "Pending", resourceVersion: "10"},
		{typ: "MODIFIED", name: "p1", nodeName: "node-7", phase: "Pending", resourceVersion: "11"},
		{typ: "BOOKMARK", resourceVersion: "12"},
		{typ: "MODIFIED", name: "p1", nodeName: "node-7", phase: "Running", resourceVersion: "13"},
		{typ: "DELETED", name: "p2", nodeName: "node-8", phase: "Succeeded", resourceVersion: "14"},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(podEvent{})); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// An ERROR event ends the stream with an error.
	var errStream bytes.Buffer
	frame := encodeEvent(&metav1.WatchEvent{Type: "ERROR", Object: runtime.RawExtension{Raw: encode(&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Code: 410})}})
	errStream.Write(binary.BigEndian.AppendUint32(nil, uint32(len(frame))))
	errStream.Write(frame)
	if err := readPodWatch(&errStream, func(podEvent) {}); err == nil {
		t.Error("an ERROR event read without an error")
	}
}
