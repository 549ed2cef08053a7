package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/apiserver/authn"
)

// BenchmarkCreateConfigMap measures the whole handler chain for a ConfigMap
// create (decode, defaulting, validation, managed fields, store, encode),
// without TLS or a client: the server's own cost per create.
func BenchmarkCreateConfigMap(b *testing.B) {
	s, _ := newTestServer(b)
	h := s.Handler()
	data := strings.Repeat("x", 900)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%d"},"data":{"k":%q}}`, i, data)
			r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/configmaps", bytes.NewBufferString(body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				b.Fatalf("create: %d %s", w.Code, w.Body.String())
			}
		}
	})
}

// BenchmarkCreateClientGo64 is make bench's "creates/s, 64 client-go
// clients" row in one process: 64 clientsets over TLS (one connection
// each) creating ConfigMaps, so a CPU profile shows client and server.
func BenchmarkCreateClientGo64(b *testing.B) {
	s, _ := newTestServer(b)
	srv := httptest.NewTLSServer(s.Handler())
	defer srv.Close()
	const clients = 64
	var css []*kubernetes.Clientset
	for i := 0; i < clients; i++ {
		cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1, UserAgent: fmt.Sprintf("bench-%d", i)}
		css = append(css, kubernetes.NewForConfigOrDie(cfg))
	}
	data := strings.Repeat("x", 900)
	var n atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, cs := range css {
		wg.Add(1)
		go func(cs *kubernetes.Clientset) {
			defer wg.Done()
			for {
				i := n.Add(1)
				if i > int64(b.N) {
					return
				}
				c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": data}}
				if _, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		}(cs)
	}
	wg.Wait()
}

// BenchmarkPodStatusUpdate is a kubelet's status write for a running pod
// (a PUT of pods/status in protobuf, as client-go sends it), through the
// whole handler chain: the write the simulated nodes make for every pod
// the scheduler binds.
func BenchmarkPodStatusUpdate(b *testing.B) {
	s, _ := newTestServer(b)
	h := s.Handler()
	const pods = 64
	send := func(method, path string, obj runtime.Object, want int) runtime.Object {
		var body bytes.Buffer
		if err := protobufSerializer.Encode(obj, &body); err != nil {
			b.Fatal(err)
		}
		r := httptest.NewRequest(method, path, &body)
		r.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
		r.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			b.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body.String())
		}
		out, _, err := protobufSerializer.Decode(w.Body.Bytes(), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	live := make([]*corev1.Pod, pods)
	for i := range live {
		p := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Labels: map[string]string{"app": "bench"}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{
				Name: "c", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: apiresource.MustParse("10m"), corev1.ResourceMemory: apiresource.MustParse("16Mi"),
				}},
			}}},
		}
		live[i] = send(http.MethodPost, "/api/v1/namespaces/default/pods", p, http.StatusCreated).(*corev1.Pod)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := live[i%pods]
		ready := corev1.ConditionTrue
		if i/pods%2 == 1 {
			ready = corev1.ConditionFalse
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.42.0.9", HostIP: "10.0.0.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}, {Type: corev1.ContainersReady, Status: ready}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Image: "busybox", Ready: ready == corev1.ConditionTrue, Started: ptr.To(true)}}}
		live[i%pods] = send(http.MethodPut, "/api/v1/namespaces/default/pods/"+p.Name+"/status", p, http.StatusOK).(*corev1.Pod)
	}
}

// processCPU is the CPU time this process has used, user and system:
// with writes waiting on fsyncs, a benchmark's ns/op is mostly waiting.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkInProcessPodLifecycle is what a pod's start makes the server
// do, through client-go over the in-process transport as bonsai's
// components call it: the create, the scheduler's pods/binding, and a
// simulated kubelet's read and status write of the running pod. Run in
// parallel, as the scheduler's binders and the simulator's workers are;
// cpu-ns/op is the whole process's CPU per pod.
func BenchmarkInProcessPodLifecycle(b *testing.B) {
	s, _ := newTestServer(b)
	cs := kubernetes.NewForConfigOrDie(s.ClientConfig(&authn.User{Name: "test-admin", Groups: []string{authn.GroupMasters}}))
	pods := cs.CoreV1().Pods("default")
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", next.Add(1)), Labels: map[string]string{"app": "bench"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: apiresource.MustParse("10m"), corev1.ResourceMemory: apiresource.MustParse("16Mi"),
					}}}}},
			}
			p, err := pods.Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				b.Error(err)
				return
			}
			bind := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
			if err := pods.Bind(ctx, bind, metav1.CreateOptions{}); err != nil {
				b.Error(err)
				return
			}
			if p, err = pods.Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
				b.Error(err)
				return
			}
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.42.0.9", HostIP: "10.0.0.1",
				Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Image: "busybox", Ready: true, Started: ptr.To(true)}}}
			if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
