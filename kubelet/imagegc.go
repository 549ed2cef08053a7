package kubelet

import (
	"context"
	"log/slog"
	"math"
	"sort"
	"syscall"
	"time"

	"bonsai.dev/bonsai/kubelet/cri"
)

// Image garbage collection, with the kubelet's defaults: when the image
// file system is more than 85 % full, remove unused images, oldest first,
// until it is below 80 %; never an image a container uses, nor one younger
// than two minutes.
const (
	imageGCHighPercent = 85
	imageGCLowPercent  = 80
	imageMinAge        = 2 * time.Minute
	imageGCPeriod      = 5 * time.Minute
)

// imageGC removes unused images when the disk holding them fills up.
type imageGC struct {
	rt cri.Runtime
	// usage reports the image file system's size and bytes used.
	usage func() (total, used uint64, err error)
	log   *slog.Logger
	now   func() time.Time
}

// fsUsage measures the file system holding path.
func fsUsage(path string) func() (uint64, uint64, error) {
	return func() (uint64, uint64, error) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(path, &st); err != nil {
			return 0, 0, err
		}
		total := st.Blocks * uint64(st.Bsize)
		free := st.Bavail * uint64(st.Bsize)
		return total, total - free, nil
	}
}

func (g *imageGC) run(ctx context.Context) {
	t := time.NewTicker(imageGCPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := g.collect(ctx); err != nil {
			g.log.Warn("image garbage collection", "err", err)
		}
	}
}

// collect runs one round and returns the images it removed.
func (g *imageGC) collect(ctx context.Context) ([]cri.Image, error) {
	total, used, err := g.usage()
	if err != nil || total == 0 {
		return nil, err
	}
	if used*100 < total*imageGCHighPercent {
		return nil, nil
	}
	return g.free(ctx, int64(used-total*imageGCLowPercent/100))
}

// deleteUnused removes every unused image old enough, whatever the disk's
// fill: what eviction does under disk pressure before it evicts pods.
func (g *imageGC) deleteUnused(ctx context.Context) ([]cri.Image, error) {
	return g.free(ctx, math.MaxInt64)
}

// free removes unused images, oldest first, until toFree bytes are freed.
func (g *imageGC) free(ctx context.Context, toFree int64) ([]cri.Image, error) {
	imgs, err := g.rt.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	cs, err := g.rt.ListContainers(ctx)
	if err != nil {
		return nil, err
	}
	inUse := map[string]bool{}
	for _, c := range cs {
		inUse[c.ImageRef] = true
	}
	victims := imagesToRemove(imgs, inUse, g.now(), toFree)
	var removed []cri.Image
	for _, img := range victims {
		if err := g.rt.RemoveImage(ctx, img.ID); err != nil {
			g.log.Warn("removing unused image", "image", img.ID, "err", err)
			continue
		}
		removed = append(removed, img)
	}
	if len(removed) > 0 {
		g.log.Info("removed unused images", "removed", len(removed))
	}
	return removed, nil
}

// imagesToRemove picks unused images old enough, oldest first, until their
// sizes add up to toFree.
func imagesToRemove(imgs []cri.Image, inUse map[string]bool, now time.Time, toFree int64) []cri.Image {
	var candidates []cri.Image
	for _, img := range imgs {
		if inUse[img.ID] || now.Sub(img.CreatedAt) < imageMinAge {
			continue
		}
		candidates = append(candidates, img)
	}
	sort.SliceStable(candidates, func(i, j int) bool { return candidates[i].CreatedAt.Before(candidates[j].CreatedAt) })
	var out []cri.Image
	var freed int64
	for _, img := range candidates {
		if freed >= toFree {
			break
		}
		out = append(out, img)
		freed += img.Size
	}
	return out
}
