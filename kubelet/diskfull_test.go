package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"bonsai.dev/bonsai/kubelet/containerd/ctdtest"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestDiskFullOfLogsAndImages puts what a single-disk node keeps on one
// 128 MB file system: bonsai's store, containerd's images (content and
// unpacked snapshots) and a container's log, written by the runtime's
// log copier. An unused image with a large layer takes its share, then a
// container logs until the disk is full. On the full disk the store
// refuses writes with ErrDiskFull and keeps serving reads, the log holds
// whole records only, and nothing crashes. The kubelet's image GC, at
// the file system's real usage, removes the unused image; the store then
// takes writes again, without a restart, and every acknowledged write is
// there, also after a reopen.
func TestDiskFullOfLogsAndImages(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a 128 MB file system")
	}
	mnt := testenv.Tmpfs(t, 128<<20)
	rt, _ := ctdtest.StartIn(t, mnt)
	ctx := context.Background()

	opts := store.BadgerOptions{Dir: filepath.Join(mnt, "db"), MemoryMB: 6, QuotaBytes: 1 << 30}
	st, err := store.OpenBadger(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	acked := map[string][]byte{}
	for i := 0; i < 200; i++ {
		key := fmt.Sprintf("/registry/core/configmaps/default/cm-%03d", i)
		v := bytes.Repeat([]byte{byte(i)}, 100+i*40)
		if _, err := st.Create(ctx, key, v); err != nil {
			t.Fatal(err)
		}
		acked[key] = v
	}

	// An unused image with 24 MB of incompressible layer.
	bb, err := testenv.BusyboxPath()
	if err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, 24<<20)
	rand.New(rand.NewSource(1)).Read(blob)
	layer, config, err := testenv.BusyboxLayer(bb, map[string][]byte{"data/blob": blob})
	if err != nil {
		t.Fatal(err)
	}
	config = bytes.Replace(config, []byte(`"Cmd":["sh"]`), []byte(`"Cmd":["true"]`), 1)
	archive, err := testenv.DockerArchive("bonsai.test/unused:1", layer, config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.ImportImages(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	t.Logf("store, containerd and an unused image in; %s free", freeOf(t, mnt))

	// A container logs as fast as it can until the disk is full.
	sb, err := rt.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: "chatty", Namespace: "default", Name: "chatty"})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(mnt, "pods", "default_chatty_chatty", "c", "0.log")
	const line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
	id, err := rt.CreateContainer(ctx, sb, cri.ContainerConfig{Name: "c", Image: ctdtest.Image, Command: []string{"yes", line}, LogPath: logPath})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The runtime rotates the log at 10 MB and keeps five files: 50 MB,
	// more than what is left.
	deadline := time.Now().Add(3 * time.Minute)
	for freeBytes(t, mnt) > 64<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("the log did not fill the disk in 3 minutes: %s free", freeOf(t, mnt))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the container's log filled the disk: %s free", freeOf(t, mnt))

	_, err = st.Create(ctx, "/registry/core/configmaps/default/new", []byte("x"))
	if !errors.Is(err, store.ErrDiskFull) || !strings.Contains(err.Error(), "Free space") {
		t.Fatalf("a store write on the full disk: %v, want ErrDiskFull", err)
	}
	for k, v := range acked {
		if kv, err := st.Get(ctx, k); err != nil || !bytes.Equal(kv.Value, v) {
			t.Fatalf("read %s on the full disk: %v", k, err)
		}
	}
	// The container keeps running and logging into a full disk; what
	// it logged is whole records.
	time.Sleep(500 * time.Millisecond)
	if err := rt.StopContainer(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(logPath + "*") // with the rotated ones
	records := 0
	for _, f := range files {
		records += checkLogRecords(t, f, line)
	}
	t.Logf("the log's %d files hold %d whole records", len(files), records)

	// Image GC at the file system's real usage: over 85 % used, it
	// removes the unused image.
	later := time.Now().Add(time.Hour)
	g := &imageGC{rt: rt, usage: fsUsage(mnt), log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: func() time.Time { return later }}
	removed, err := g.collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || !strings.Contains(strings.Join(removed[0].RepoTags, ","), "unused") {
		t.Fatalf("image GC removed %+v, want the unused image", removed)
	}
	freed := time.Now()
	for {
		_, err := st.Create(ctx, "/registry/core/configmaps/default/new", []byte("x"))
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrDiskFull) {
			t.Fatal(err)
		}
		if time.Since(freed) > 30*time.Second {
			t.Fatalf("store writes refused 30 s after image GC (%s free): %v", freeOf(t, mnt), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("image GC left %s free; store writes resumed %v after it", freeOf(t, mnt), time.Since(freed).Round(10*time.Millisecond))
	acked["/registry/core/configmaps/default/new"] = []byte("x")
	st.Close()
	if st, err = store.OpenBadger(opts); err != nil {
		t.Fatal(err)
	}
	for k, v := range acked {
		if kv, err := st.Get(ctx, k); err != nil || !bytes.Equal(kv.Value, v) {
			t.Fatalf("read %s after reopening: %v", k, err)
		}
	}
}

func freeBytes(t *testing.T, dir string) int64 {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return int64(s.Bavail) * s.Bsize
}

func freeOf(t *testing.T, dir string) string {
	return fmt.Sprintf("%.1f MB", float64(freeBytes(t, dir))/(1<<20))
}

// checkLogRecords reads a CRI log and fails on any line that is not a
// whole record of text; it returns how many there are.
func checkLogRecords(t *testing.T, path, text string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	partial := ""
	for sc.Scan() {
		if partial != "" {
			t.Fatalf("record %d of %s is partial and not the last: %.120q", n, path, partial)
		}
		parts := strings.SplitN(sc.Text(), " ", 4)
		// The container is killed while it writes: the last record may be
		// the part of a line it wrote, as a "P" record (CRI's partial
		// line), but no record is cut short.
		if len(parts) == 4 && parts[1] == "stdout" && parts[2] == "P" && strings.HasPrefix(text, parts[3]) {
			partial = sc.Text()
		} else if len(parts) != 4 || parts[1] != "stdout" || parts[2] != "F" || parts[3] != text {
			t.Fatalf("record %d of %s is torn: %.120q", n+1, path, sc.Text())
		}
		if _, err := time.Parse(time.RFC3339Nano, parts[0]); err != nil {
			t.Fatalf("record %d of %s: %v", n+1, path, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
