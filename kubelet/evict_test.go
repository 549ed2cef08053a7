package kubelet

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/kubelet/containerd/ctdtest"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/kubelet/eviction"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// Under disk pressure the eviction manager reclaims node-level resources
// before it evicts a pod, as the kubelet does: on a real 128 MB file
// system with containerd's images on it, filled until nodefs.available is
// below its threshold, it removes the dead container (not the newest
// instance of the pod's container) and the unused 24 MB image, and with
// that the threshold plus its minimum reclaim is clear, so no pod needs
// to go.
func TestDiskPressureReclaimsBeforeEvicting(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a 128 MB file system")
	}
	mnt := testenv.Tmpfs(t, 128<<20)
	rt, _ := ctdtest.StartIn(t, mnt)
	ctx := context.Background()

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
	archive, err := testenv.DockerArchive("bonsai.test/unused:1", layer, config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.ImportImages(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}

	// A pod whose container ran twice: the first instance is dead.
	sb, err := rt.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: "twice", Namespace: "default", Name: "twice"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for attempt := range 2 {
		id, err := rt.CreateContainer(ctx, sb, cri.ContainerConfig{Name: "c", Attempt: uint32(attempt), Image: ctdtest.Image, Command: []string{"true"},
			LogPath: filepath.Join(mnt, "logs", "twice", "c", strings.Repeat("x", attempt+1)+".log")})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		time.Sleep(10 * time.Millisecond) // distinct creation times
	}
	waitExited(t, rt, ids...)

	// Leave 8 MB free; the threshold wants 16 MB, plus 4 MB reclaimed.
	free := freeBytes(t, mnt)
	testenv.FillDisk(t, filepath.Join(mnt, "filler"), free-8<<20)
	ts, err := eviction.Parse(map[string]string{"nodefs.available": "16Mi"}, nil, nil, map[string]string{"nodefs.available": "4Mi"})
	if err != nil {
		t.Fatal(err)
	}
	stats := NewStatsSampler(StatsConfig{NodeName: "n", RootDir: mnt})
	stats.Sample(ctx)
	if met := eviction.Met(ts, eviction.Observe(stats.Summary()), false); len(met) != 1 {
		t.Fatalf("nodefs.available<16Mi with %s free: met %v", freeOf(t, mnt), met)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	later := time.Now().Add(time.Hour) // the image is old enough
	e := &evictionLoop{
		a: &Agent{cfg: Config{Logger: log}}, m: &podManager{rt: rt, log: log},
		mgr: eviction.NewManager(eviction.Config{Thresholds: ts}), stats: stats,
		gc: &imageGC{rt: rt, usage: fsUsage(mnt), log: log, now: func() time.Time { return later }},
	}
	if !e.reclaimNodeLevel(ctx) {
		t.Fatalf("reclaiming dead containers and unused images should clear the threshold: %s free", freeOf(t, mnt))
	}
	imgs, err := rt.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if strings.Contains(strings.Join(img.RepoTags, ","), "unused") {
			t.Errorf("the unused image is still there: %+v", img)
		}
	}
	cs, err := rt.ListContainers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, c := range cs {
		left[c.ID] = true
	}
	if left[ids[0]] || !left[ids[1]] {
		t.Errorf("containers left %v: want the dead first instance %s gone and the newest %s kept", left, ids[0], ids[1])
	}
}

func waitExited(t *testing.T, rt cri.Runtime, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			st, err := rt.ContainerStatus(context.Background(), id)
			if err == nil && st.State == cri.ContainerExited {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("container %s did not exit: %+v %v", id, st, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
