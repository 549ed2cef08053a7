package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/store"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openTestStore opens a badger store in <dataDir>/db holding n keys.
func openTestStore(t *testing.T, dataDir string, n int) store.Store {
	t.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: filepath.Join(dataDir, "db"), Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for i := range n {
		if _, err := st.Create(context.Background(), fmt.Sprintf("/registry/core/configmaps/ns/cm-%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// everySecond is a schedule that fires at each whole second: snapshot
// names hold unix seconds.
type everySecond struct{}

func (everySecond) Next(t time.Time) time.Time { return t.Truncate(time.Second).Add(time.Second) }

// TestSnapshotSchedule: each scheduled snapshot is a whole snapshot named
// scheduled-<node>-<unix time>, and the older ones beyond the retention
// go; other snapshots in the dir are left alone.
func TestSnapshotSchedule(t *testing.T) {
	dataDir := t.TempDir()
	st := openTestStore(t, dataDir, 10)
	cfg := &serverConfig{DataDir: dataDir, NodeName: "edge-1", SnapshotSchedule: everySecond{}, SnapshotRetention: 2, SnapshotDir: filepath.Join(dataDir, "snapshots")}
	if err := os.MkdirAll(cfg.SnapshotDir, 0o700); err != nil {
		t.Fatal(err)
	}
	onDemand, _, err := takeSnapshot(context.Background(), st.(store.Snapshotter), cfg.SnapshotDir, snapshotNameOnDemand, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	wait := startSnapshots(ctx, cfg, st, slog.New(slog.NewTextHandler(&logBuf, nil)))
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logBuf.String(), "pruned scheduled snapshots") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wait()
	snaps, err := listSnapshots(cfg.SnapshotDir)
	if err != nil {
		t.Fatal(err)
	}
	var scheduled []string
	haveOnDemand := false
	for _, s := range snaps {
		switch {
		case s.path == onDemand:
			haveOnDemand = true
		case strings.HasPrefix(s.name, "scheduled-edge-1-"):
			scheduled = append(scheduled, s.name)
			if _, err := store.VerifySnapshot(s.path); err != nil {
				t.Errorf("%s: %v", s.name, err)
			}
		default:
			t.Errorf("unexpected snapshot %s", s.name)
		}
	}
	if len(scheduled) != 2 || !haveOnDemand {
		t.Fatalf("scheduled snapshots %v (on-demand kept: %v), want the newest 2 and the on-demand one; log:\n%s", scheduled, haveOnDemand, logBuf.String())
	}
}

// TestSnapshotBeforeUpgrade: a store last used by an older bonsai, or by
// one that did not record its version, gets a pre-upgrade snapshot before
// this version uses it; a new store, the same version, an older one and a
// development build take none.
func TestSnapshotBeforeUpgrade(t *testing.T) {
	saved := version
	t.Cleanup(func() { version = saved })
	for _, tc := range []struct {
		name      string
		version   string
		recorded  string // "" : no record
		hadStore  bool
		snapshot  bool
		wantAfter string // "" : no record
	}{
		{"new store", "v1.2.0", "", false, false, "v1.2.0\n"},
		{"older version", "v1.2.0", "v1.1.3\n", true, true, "v1.2.0\n"},
		{"no record", "v1.2.0", "", true, true, "v1.2.0\n"},
		{"development build before", "v1.2.0", "dev\n", true, true, "v1.2.0\n"},
		{"same version", "v1.2.0", "v1.2.0\n", true, false, "v1.2.0\n"},
		{"newer version", "v1.2.0", "v1.3.0\n", true, false, "v1.2.0\n"},
		{"development build", "dev", "v1.1.0\n", true, false, "v1.1.0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version = tc.version
			dataDir := t.TempDir()
			st := openTestStore(t, dataDir, 3)
			if tc.recorded != "" {
				if err := os.WriteFile(versionFile(dataDir), []byte(tc.recorded), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg := &serverConfig{DataDir: dataDir, NodeName: "n", SnapshotDir: filepath.Join(dataDir, "snapshots")}
			if err := snapshotBeforeUpgrade(context.Background(), cfg, st, tc.hadStore, quietLog()); err != nil {
				t.Fatal(err)
			}
			snaps, err := listSnapshots(cfg.SnapshotDir)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(snaps) == 1 && strings.HasPrefix(snaps[0].name, "pre-upgrade-n-") && snaps[0].hdr.Bonsai == tc.version; got != tc.snapshot || len(snaps) > 1 {
				t.Errorf("snapshots %+v, want a pre-upgrade one: %v", snaps, tc.snapshot)
			}
			after, _ := os.ReadFile(versionFile(dataDir))
			if string(after) != tc.wantAfter {
				t.Errorf("recorded version %q, want %q", after, tc.wantAfter)
			}
		})
	}
}

// TestSnapshotCommandErrors: wrong input is one line and changes
// nothing.
func TestSnapshotCommandErrors(t *testing.T) {
	dir := t.TempDir()
	notSnap := filepath.Join(dir, "not-a-snapshot")
	if err := os.WriteFile(notSnap, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"save", "--data-dir", filepath.Join(dir, "missing")}, "data dir " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{[]string{"save", "--data-dir", dir}, "holds no store"},
		{[]string{"save", "--data-dir", dir, "--name", "Bad_Name"}, `--name "Bad_Name"`},
		{[]string{"save", filepath.Join(dir, "no", "dir", "snap"), "--data-dir", dir}, "does not exist"},
		{[]string{"save", "a", "b"}, "accepts at most 1 arg"},
		{[]string{"restore", "--data-dir", filepath.Join(dir, "new")}, "accepts 1 arg"},
		{[]string{"restore", notSnap, "--data-dir", filepath.Join(dir, "new")}, "not a valid bonsai snapshot"},
		{[]string{"prune", "--snapshot-dir", dir, "--snapshot-retention", "-1"}, "--snapshot-retention -1: must be at least 1"},
		{[]string{"delete", "not-a-snapshot", "--snapshot-dir", dir}, `no snapshot "not-a-snapshot"`},
		{[]string{"ls", "extra"}, "unknown command"},
	} {
		var out bytes.Buffer
		root := newRootCmd(&out, &out, nil)
		root.SetArgs(append([]string{"snapshot"}, tc.args...))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line with %q", tc.args, err, tc.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("refused commands left %v in %s", entries, dir)
	}
}

// TestSnapshotRestoreOverwrite: --overwrite moves the store in place
// aside, whole, and restores the snapshot in its place.
func TestSnapshotRestoreOverwrite(t *testing.T) {
	src := t.TempDir()
	st := openTestStore(t, src, 7)
	snap := filepath.Join(t.TempDir(), "snap")
	info, err := writeSnapshot(context.Background(), st.(store.Snapshotter), snap)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	old := openTestStore(t, dataDir, 2)
	oldRev, _ := old.CurrentRevision(context.Background())
	old.Close()

	var out bytes.Buffer
	root := newRootCmd(&out, &out, nil)
	root.SetArgs([]string{"snapshot", "restore", snap, "--data-dir", dataDir, "--overwrite"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	aside, _ := filepath.Glob(filepath.Join(dataDir, "db.old-*"))
	if len(aside) != 1 || !strings.Contains(out.String(), "Moved the store that was in the data dir to "+aside[0]) {
		t.Fatalf("stores moved aside: %v; output %q", aside, out.String())
	}
	for dir, want := range map[string]uint64{filepath.Join(dataDir, "db"): info.Revision, aside[0]: oldRev} {
		s, err := store.OpenBadger(store.BadgerOptions{Dir: dir, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		rev, _ := s.CurrentRevision(context.Background())
		s.Close()
		if rev != want {
			t.Errorf("%s at revision %d, want %d", dir, rev, want)
		}
	}
}

// TestSnapshotRestoreTruncated: a snapshot cut short is refused before
// the data dir is made.
func TestSnapshotRestoreTruncated(t *testing.T) {
	st := openTestStore(t, t.TempDir(), 7)
	snap := filepath.Join(t.TempDir(), "snap")
	if _, err := writeSnapshot(context.Background(), st.(store.Snapshotter), snap); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snap, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "new")
	var out bytes.Buffer
	root := newRootCmd(&out, &out, nil)
	root.SetArgs([]string{"snapshot", "restore", snap, "--data-dir", dataDir})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "not a valid bonsai snapshot") {
		t.Errorf("restore of half a snapshot: %v", err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("refused restore left %s: %v", dataDir, err)
	}
}
