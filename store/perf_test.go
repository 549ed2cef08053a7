package store_test

import (
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"bonsai.dev/bonsai/store"
)

// BenchmarkBadgerCreate64 measures acknowledged creates from 64 concurrent
// writers with 1 KB incompressible values: the shape of make bench's
// throughput row, without the peer.
func BenchmarkBadgerCreate64(b *testing.B) {
	s, err := store.OpenBadger(store.BadgerOptions{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := n.Add(1)
				if i > int64(b.N) {
					return
				}
				v := make([]byte, 1024)
				rand.Read(v)
				if _, err := s.Create(ctx, fmt.Sprintf("/registry/perf/k%09d", i), v); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
