package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLogAdvisorFollowsTheNewestValueLog: the committer syncs the value
// log the advisor holds, so it must follow badger's rotations.
func TestLogAdvisorFollowsTheNewestValueLog(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenBadger(BadgerOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*badgerStore)
	newest := func() uint64 {
		names, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
		var max uint64
		for _, n := range names {
			fid, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(n), ".vlog"), 10, 32)
			if err == nil && fid > max {
				max = fid
			}
		}
		return max
	}
	held := func() uint64 {
		s.advisor.vlogMu.RLock()
		defer s.advisor.vlogMu.RUnlock()
		return s.advisor.vlogFid
	}
	first := newest()
	if first == 0 || held() != first {
		t.Fatalf("after open the advisor holds value log %d, newest is %d", held(), first)
	}
	// 20 MB of values: past one 16 MB value log.
	v := make([]byte, 4096)
	for i := 0; i < 5000; i++ {
		rand.Read(v)
		if _, err := st.Create(context.Background(), fmt.Sprintf("/registry/x/k%05d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	if newest() == first {
		t.Fatal("badger did not rotate its value log: the test proves nothing")
	}
	for deadline := time.Now().Add(5 * time.Second); held() != newest(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("advisor holds value log %d, newest is %d", held(), newest())
		}
	}
}
