package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestSnapshotSaveRestore drives the real binary: `bonsai snapshot save`
// takes a snapshot from the running server; after the server is stopped
// and its data dir wiped, `bonsai snapshot restore` makes a new data dir
// from it, and a server started there serves every object as it was,
// resourceVersions included. A watch from before the snapshot gets 410
// Gone, as after a compaction; one from the snapshot's revision resumes.
// ls, prune and delete see the snapshot dir; every wrong input is one
// line, exit 1, and changes nothing.
func TestSnapshotSaveRestore(t *testing.T) {
	requireBinary(t)
	tmp := t.TempDir()
	dataDir := filepath.Join(tmp, "data")
	s := startServer(t, dataDir)
	cs := adminClientset(t, s)
	ctx := t.Context()

	bonsai := func(args ...string) (string, int) {
		t.Helper()
		out, err := exec.Command(bonsaiBin, args...).CombinedOutput()
		return string(out), exitCode(err)
	}
	refused := func(want string, args ...string) {
		t.Helper()
		out, code := bonsai(args...)
		if code != 1 || strings.Count(out, "\n") != 1 || !strings.Contains(out, want) {
			t.Errorf("bonsai %s: exit %d %q, want exit 1 and one line with %q", strings.Join(args, " "), code, out, want)
		}
	}

	const ns = "snap"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"e2e": "snapshot"}
	for i := range 40 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i), Labels: labels}, Data: map[string]string{"i": strconv.Itoa(i), "big": strings.Repeat("x", 100*i)}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40; i += 4 {
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, fmt.Sprintf("cm-%02d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["updated"] = "yes"
		if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "cm-39", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: labels}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: "e2e=snapshot"}
	wantCMs, err := cs.CoreV1().ConfigMaps(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	wantSecrets, err := cs.CoreV1().Secrets(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}

	savedRE := regexp.MustCompile(`^Saved snapshot (\S+): revision (\d+), (\d+) keys, (\d+) bytes, in \S+\n$`)
	out, code := bonsai("snapshot", "save", "--data-dir", dataDir, "--node-name", "box")
	m := savedRE.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("snapshot save: exit %d %q", code, out)
	}
	file, rev := m[1], m[2]
	if dir, base := filepath.Split(file); dir != filepath.Join(dataDir, "snapshots")+"/" || !regexp.MustCompile(`^on-demand-box-\d+$`).MatchString(base) {
		t.Errorf("snapshot saved as %s, want <data-dir>/snapshots/on-demand-box-<unix time>", file)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 || strconv.FormatInt(st.Size(), 10) != m[4] {
		t.Errorf("snapshot file: %v %v, want mode 0600 and %s bytes", st, err, m[4])
	}
	if listed := atoi(t, wantCMs.ResourceVersion); atoi(t, rev) < listed {
		t.Errorf("snapshot at revision %s, older than the last list's %d", rev, listed)
	}

	// Wrong inputs, with the server running.
	refused("in use by a running bonsai", "snapshot", "restore", file, "--data-dir", dataDir)
	refused("exists; refusing to overwrite it", "snapshot", "save", file, "--data-dir", dataDir)
	refused("--snapshot-retention 0: must be at least 1", "snapshot", "prune", "--data-dir", dataDir, "--snapshot-retention", "0")
	refused(`no snapshot "nope"`, "snapshot", "delete", "nope", "--data-dir", dataDir)
	refused("unknown command", "snapshot", "take", "--data-dir", dataDir)

	// Two more snapshots; prune keeps the newest --snapshot-retention.
	time.Sleep(1100 * time.Millisecond) // names hold unix seconds
	extra := filepath.Join(tmp, "extra.snap")
	if out, code := bonsai("snapshot", "save", extra, "--data-dir", dataDir); code != 0 {
		t.Fatalf("snapshot save FILE: exit %d %q", code, out)
	}
	if out, code := bonsai("snapshot", "save", "--data-dir", dataDir, "--node-name", "box"); code != 0 {
		t.Fatalf("second snapshot save: exit %d %q", code, out)
	}
	out, code = bonsai("snapshot", "ls", "--data-dir", dataDir)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "Name") || !strings.Contains(lines[2], filepath.Base(file)) {
		t.Fatalf("snapshot ls: exit %d\n%s", code, out)
	}
	out, code = bonsai("snapshot", "prune", "--data-dir", dataDir, "--snapshot-retention", "1")
	if code != 0 || out != "Removed "+file+"\n" {
		t.Fatalf("snapshot prune: exit %d %q, want the older snapshot removed", code, out)
	}

	if code, _ := s.sigterm(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
	// The server is stopped: save reads the data dir itself.
	offline := filepath.Join(tmp, "offline.snap")
	if out, code := bonsai("snapshot", "save", offline, "--data-dir", dataDir); code != 0 || !strings.Contains(out, "revision ") {
		t.Fatalf("snapshot save with no server: exit %d %q", code, out)
	}
	refused("already holds a store", "snapshot", "restore", extra, "--data-dir", dataDir)

	// Wipe the data dir; restore on a new one.
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(tmp, "corrupt.snap")
	data, err := os.ReadFile(extra)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(corrupt, data, 0o600); err != nil {
		t.Fatal(err)
	}
	newDir := filepath.Join(tmp, "restored")
	refused("not a valid bonsai snapshot", "snapshot", "restore", corrupt, "--data-dir", newDir)
	if entries, _ := os.ReadDir(newDir); len(entries) != 0 {
		t.Fatalf("a refused restore left %v in %s", entries, newDir)
	}
	refused("no such file or directory", "snapshot", "restore", filepath.Join(tmp, "missing"), "--data-dir", newDir)

	start := time.Now()
	out, code = bonsai("snapshot", "restore", extra, "--data-dir", newDir)
	if code != 0 || !strings.HasPrefix(out, "Restored "+extra+" into "+filepath.Join(newDir, "db")+": revision ") {
		t.Fatalf("snapshot restore: exit %d %q", code, out)
	}
	t.Logf("restore took %v: %s", time.Since(start), strings.TrimSpace(out))
	extraRev := regexp.MustCompile(`revision (\d+)`).FindStringSubmatch(out)[1]

	s2 := startServer(t, newDir)
	cs2 := adminClientset(t, s2)
	gotCMs, err := cs2.CoreV1().ConfigMaps(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	gotSecrets, err := cs2.CoreV1().Secrets(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantCMs.Items, gotCMs.Items); diff != "" || len(gotCMs.Items) != 39 {
		t.Errorf("restored ConfigMaps (%d) differ (-saved +restored):\n%s", len(gotCMs.Items), diff)
	}
	if diff := cmp.Diff(wantSecrets.Items, gotSecrets.Items); diff != "" || len(gotSecrets.Items) != 1 {
		t.Errorf("restored Secrets differ (-saved +restored):\n%s", diff)
	}

	// A watch from before the snapshot: 410 Gone, as after a compaction.
	old, err := cs2.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "2"})
	if err == nil {
		ev := <-old.ResultChan()
		old.Stop()
		if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || st.Code != 410 {
			t.Errorf("watch from before the snapshot: %v %+v, want a 410 error", ev.Type, ev.Object)
		}
	} else if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("watch from before the snapshot: %v, want 410", err)
	}
	// A watch from the snapshot's revision resumes: it sees what is
	// written after.
	w, err := cs2.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: extraRev, LabelSelector: "e2e=snapshot"})
	if err != nil {
		t.Fatalf("watch from the snapshot's revision %s: %v", extraRev, err)
	}
	defer w.Stop()
	created, err := cs2.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if atoi(t, created.ResourceVersion) <= atoi(t, extraRev) {
		t.Errorf("a write after the restore got resourceVersion %s, not above the snapshot's %s", created.ResourceVersion, extraRev)
	}
	select {
	case ev := <-w.ResultChan():
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if ev.Type != watch.Added || !ok || cm.Name != "after" || cm.ResourceVersion != created.ResourceVersion {
			t.Errorf("watch from the snapshot's revision: %v %+v, want ADDED after", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Error("no event on the watch from the snapshot's revision")
	}
}

func atoi(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSnapshotWithEtcd: with an etcd datastore, `bonsai snapshot save`
// writes etcd's own snapshot, from its snapshot API through the running
// server, checked against etcd's checksum; ls lists it and restore points
// to etcdutl, which restores etcd snapshots.
func TestSnapshotWithEtcd(t *testing.T) {
	requireBinary(t)
	etcd := testenv.EtcdForTest(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	s := startServer(t, dataDir, "--datastore-endpoint", etcd.Endpoint)
	cs := adminClientset(t, s)
	if _, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "in-etcd"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bonsaiBin, "snapshot", "save", "--data-dir", dataDir, "--node-name", "box").CombinedOutput()
	m := regexp.MustCompile(`^Saved etcd snapshot (\S+): (\d+) bytes, in \S+; etcdutl snapshot restore reads it\n$`).FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("snapshot save on etcd: %v %q", err, out)
	}
	data, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if n, err := store.CheckEtcdSnapshot(bytes.NewReader(data), io.Discard); err != nil || fmt.Sprint(n) != m[2] || !bytes.Contains(data, []byte("in-etcd")) {
		t.Fatalf("the etcd snapshot (%d bytes, said %s): %v; holds the ConfigMap: %v", n, m[2], err, bytes.Contains(data, []byte("in-etcd")))
	}
	out, err = exec.Command(bonsaiBin, "snapshot", "ls", "--data-dir", dataDir).CombinedOutput()
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); err != nil || len(lines) != 2 || !strings.Contains(lines[1], filepath.Base(m[1])) || !strings.Contains(lines[1], " etcd ") {
		t.Errorf("snapshot ls: %v\n%s", err, out)
	}
	newDir := filepath.Join(t.TempDir(), "new")
	out, err = exec.Command(bonsaiBin, "snapshot", "restore", m[1], "--data-dir", newDir).CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "an etcd snapshot; restore it with etcdutl snapshot restore") || strings.Count(string(out), "\n") != 1 {
		t.Errorf("snapshot restore of an etcd snapshot: exit %d %q", exitCode(err), out)
	}
	if _, err := os.Stat(newDir); !os.IsNotExist(err) {
		t.Errorf("a refused restore made %s (%v)", newDir, err)
	}
}
