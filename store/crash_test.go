package store_test

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"bonsai.dev/bonsai/store"
)

const crashDirEnv = "BONSAI_STORE_CRASH_DIR"

// TestCrashChild is the writer that TestCrashRecovery kills. It runs only
// when started by that test.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("started by TestCrashRecovery only")
	}
	round := os.Getenv("BONSAI_STORE_CRASH_ROUND")
	s, err := store.OpenBadger(store.BadgerOptions{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	ack := func(kind, key string, rev uint64) {
		// One write(2) per line: whatever the parent reads was acknowledged.
		line := fmt.Sprintf("%s %s %d\n", kind, key, rev)
		mu.Lock()
		os.Stdout.WriteString(line)
		mu.Unlock()
	}
	fmt.Println("ready")
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			own := fmt.Sprintf("/registry/crash/own-%s-%d", round, w)
			ownRev, err := s.Create(ctx, own, []byte("0"))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(4)
			}
			ack("update", own, ownRev)
			for i := 0; ; i++ {
				key := fmt.Sprintf("/registry/crash/r%s-w%02d-%06d", round, w, i)
				rev, err := s.Create(ctx, key, crashValue(key))
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(4)
				}
				ack("create", key, rev)
				if ownRev, err = s.Update(ctx, own, []byte(strconv.Itoa(i)), ownRev); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(4)
				}
				ack("update", own, ownRev)
			}
		}(w)
	}
	wg.Wait()
}

// crashValue is a create's value: large enough for the value log, while the
// updates' small values stay in the tree, so both paths are crashed.
func crashValue(key string) []byte {
	return []byte(key + strings.Repeat(".", 640))
}

// TestCrashRecovery kills a writing process with SIGKILL at a random moment,
// reopens its store, and checks that every acknowledged write is there with
// its revision, that history replays them, and that new revisions continue
// above every acknowledged one.
func TestCrashRecovery(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 3
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	seen := map[string]uint64{} // creates across all rounds
	total := 0
	for round := 0; round < rounds; round++ {
		// The revision before this round, for the history check.
		s := openBadger(t, store.BadgerOptions{Dir: dir})
		before, _ := s.CurrentRevision(ctx)
		s.Close()

		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, "BONSAI_STORE_CRASH_ROUND="+strconv.Itoa(round))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child did not start: %s", round, stderr.String())
		}
		killAfter := time.Duration(20+rng.Intn(300)) * time.Millisecond
		timer := time.AfterFunc(killAfter, func() { cmd.Process.Signal(syscall.SIGKILL) })
		creates := map[string]uint64{}
		updates := map[string]uint64{}
		var maxAcked uint64
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 {
				continue // a test-framework line
			}
			rev, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatalf("bad ack line %q", sc.Text())
			}
			if f[0] == "create" {
				creates[f[1]] = rev
			} else if rev > updates[f[1]] {
				updates[f[1]] = rev
			}
			if rev > maxAcked {
				maxAcked = rev
			}
		}
		timer.Stop()
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child exited on its own (%v): %s", round, err, stderr.String())
		}
		if len(creates) == 0 {
			continue // killed before its first acknowledgement
		}

		s = openBadger(t, store.BadgerOptions{Dir: dir})
		for k, rev := range creates {
			seen[k] = rev
		}
		for k, rev := range seen {
			kv, err := s.Get(ctx, k)
			if err != nil || kv.Revision != rev || kv.Key != k || string(kv.Value) != string(crashValue(k)) {
				s.Close()
				t.Fatalf("round %d: acknowledged create %s at %d: got %+v %v", round, k, rev, kv, err)
			}
		}
		for k, rev := range updates {
			kv, err := s.Get(ctx, k)
			// A later, unacknowledged update may have landed too.
			if err != nil || kv.Revision < rev {
				s.Close()
				t.Fatalf("round %d: acknowledged update %s at %d: got %+v %v", round, k, rev, kv, err)
			}
		}
		// History has every acknowledged create of this round.
		w, err := s.Watch(ctx, "/registry/crash/", before)
		if err != nil {
			t.Fatal(err)
		}
		cur, _ := s.CurrentRevision(ctx)
		missing := len(creates)
		for missing > 0 {
			ev, ok := <-w.Events()
			if !ok {
				t.Fatalf("round %d: history ended early: %v", round, w.Err())
			}
			if rev, ok := creates[ev.Key]; ok && ev.Type == store.Added && ev.Revision == rev {
				missing--
			}
			if ev.Revision == cur && missing > 0 {
				t.Fatalf("round %d: history up to %d lacks %d acknowledged creates", round, cur, missing)
			}
		}
		w.Stop()
		rev, err := s.Create(ctx, fmt.Sprintf("/registry/crash/after-%d", round), []byte("x"))
		if err != nil || rev <= maxAcked {
			t.Fatalf("round %d: first write after recovery at %d, max acknowledged %d (%v)", round, rev, maxAcked, err)
		}
		s.Close()
		total += len(creates)
		t.Logf("round %d: killed after %v, %d creates acknowledged, max revision %d", round, killAfter, len(creates), maxAcked)
	}
	if total == 0 {
		t.Fatal("no round acknowledged any write: the test checked nothing")
	}
}
