package kubelet

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/kubelet/containerd/ctdtest"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestImageGCWithContainerd: over the high threshold, an unused old image
// goes and the one a container uses stays; young images and a disk below
// the threshold keep everything.
func TestImageGCWithContainerd(t *testing.T) {
	rt, dir := ctdtest.Start(t)
	ctx := context.Background()
	bb, err := testenv.BusyboxPath()
	if err != nil {
		t.Fatal(err)
	}
	layer, config, err := testenv.BusyboxLayer(bb)
	if err != nil {
		t.Fatal(err)
	}
	// Another config makes another image ID.
	config = bytes.Replace(config, []byte(`"Cmd":["sh"]`), []byte(`"Cmd":["true"]`), 1)
	archive, err := testenv.DockerArchive("bonsai.test/unused:1", layer, config)
	if err != nil {
		t.Fatal(err)
	}
	imported, err := rt.ImportImages(ctx, bytes.NewReader(archive))
	if err != nil || len(imported) != 1 {
		t.Fatalf("import: %v %v", imported, err)
	}
	unused := imported[0].ID
	used, err := rt.ImageStatus(ctx, ctdtest.Image)
	if err != nil || used == nil || used.ID == unused {
		t.Fatalf("image status: %+v %v (unused %s)", used, err, unused)
	}
	sb, err := rt.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: "gc", Namespace: "default", Name: "gc"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.CreateContainer(ctx, sb, cri.ContainerConfig{Name: "c", Image: ctdtest.Image, Command: []string{"sleep", "60"}, LogPath: filepath.Join(dir, "gc.log")})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	gc := func(usedPct uint64, now time.Time) []cri.Image {
		g := &imageGC{rt: rt, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: func() time.Time { return now },
			usage: func() (uint64, uint64, error) { return 1000, usedPct * 10, nil }}
		removed, err := g.collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return removed
	}
	later := time.Now().Add(time.Hour)
	if r := gc(84, later); len(r) != 0 {
		t.Fatalf("below the high threshold it removed %v", r)
	}
	if r := gc(90, time.Now()); len(r) != 0 {
		t.Fatalf("young images were removed: %v", r)
	}
	r := gc(90, later)
	if len(r) != 1 || r[0].ID != unused {
		t.Fatalf("removed %+v, want only %s", r, unused)
	}
	if img, _ := rt.ImageStatus(ctx, "bonsai.test/unused:1"); img != nil {
		t.Fatal("the unused image is still there")
	}
	if img, _ := rt.ImageStatus(ctx, ctdtest.Image); img == nil || !strings.HasPrefix(img.ID, "sha256:") {
		t.Fatal("the image in use was removed")
	}
}
