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
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
