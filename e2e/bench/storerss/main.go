// Command storerss is the bench's measure of the embedded store's memory:
// it opens a badger store with default options, fills it, lets it settle
// and prints its resident set. It links the store and nothing else, so
// the figure is the store's, not a test harness's.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"bonsai.dev/bonsai/store"
)

func main() {
	dir := flag.String("dir", "", "store directory (created)")
	objects := flag.Int("objects", 10000, "objects to create")
	size := flag.Int("size", 500, "value size in bytes")
	flag.Parse()
	if err := run(*dir, *objects, *size); err != nil {
		fmt.Fprintln(os.Stderr, "storerss:", err)
		os.Exit(1)
	}
}

func run(dir string, objects, size int) error {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: dir})
	if err != nil {
		return err
	}
	defer st.Close()
	const writers = 16
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < objects; i += writers {
				v := make([]byte, size)
				rand.Read(v)
				if _, err := st.Create(context.Background(), fmt.Sprintf("/registry/bench/rss/k%06d", i), v); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	// Settled: what an idle store holds, not the garbage of filling it.
	time.Sleep(2 * time.Second)
	runtime.GC()
	debug.FreeOSMemory()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			fmt.Printf("VmRSS_kB %d\n", kb)
			return nil
		}
	}
	return fmt.Errorf("no VmRSS in /proc/self/status")
}
