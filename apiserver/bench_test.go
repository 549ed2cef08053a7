package apiserver

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"bonsai.dev/bonsai/store"
)

// BenchmarkCreateConfigMap measures the whole handler chain for a ConfigMap
// create (decode, defaulting, validation, managed fields, store, encode),
// without TLS or a client: the server's own cost per create.
func BenchmarkCreateConfigMap(b *testing.B) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s, err := New(Config{Store: st, AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
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
