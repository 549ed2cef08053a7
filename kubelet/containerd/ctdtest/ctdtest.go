// Package ctdtest starts a containerd of a test's own, with bonsai's
// busybox test image imported, for tests outside kubelet/containerd that
// need real containers (the kubelet's servers, the pod workers). It owns
// nothing but the daemon and temp dir it makes, and removes both.
package ctdtest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"bonsai.dev/bonsai/kubelet/containerd"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// Image is the busybox test image every Start imports.
const Image = "bonsai.test/busybox:1"

// Start runs containerd under a temp dir (root, containerd and runc
// required: testenv.Require decides skip or fail) and returns a Runtime
// on it and the temp dir, for log files and such. Cleanup removes every
// container and sandbox, stops containerd and removes the dir.
func Start(t testing.TB) (*containerd.Runtime, string) {
	t.Helper()
	return StartIn(t, "")
}

// StartIn is Start with containerd's root, state and the temp dir under
// parent (a file system of the test's, say; "": the system's temp dir).
func StartIn(t testing.TB, parent string) (*containerd.Runtime, string) {
	t.Helper()
	testenv.Require(t, os.Geteuid() == 0, "containerd tests need root")
	for _, bin := range []string{"containerd", "runc"} {
		_, err := testenv.LookPath(bin)
		testenv.Require(t, err == nil, "%s (Debian package %s): %v", bin, bin, err)
	}
	img := testenv.BusyboxImage(t, Image)
	dir, err := os.MkdirTemp(parent, "bonsai-ctd-")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	d, err := containerd.StartDaemon(ctx, filepath.Join(dir, "containerd"), log)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	cfg := containerd.Config{Endpoint: d.Socket, Namespace: "k8s.io", StateDir: filepath.Join(dir, "io"), Logger: log}
	r, err := containerd.New(ctx, cfg)
	if err != nil {
		d.Stop()
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		removeAll(t, cfg)
		d.Stop()
		testenv.KillShims(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("removing %s: %v", dir, err)
		}
	})
	if _, err := r.ImportImages(ctx, bytes.NewReader(img)); err != nil {
		t.Fatal(err)
	}
	return r, dir
}

// removeAll stops and removes every container and sandbox through a fresh
// connection, so no task or mount outlives the test.
func removeAll(t testing.TB, cfg containerd.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := containerd.New(ctx, cfg)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer r.Close()
	cs, _ := r.ListContainers(ctx)
	for _, c := range cs {
		r.StopContainer(ctx, c.ID, 0)
		if err := r.RemoveContainer(ctx, c.ID); err != nil {
			t.Logf("cleanup: remove %s: %v", c.ID, err)
		}
	}
	sbs, _ := r.ListPodSandboxes(ctx)
	for _, sb := range sbs {
		r.RemovePodSandbox(ctx, sb.ID)
	}
}
