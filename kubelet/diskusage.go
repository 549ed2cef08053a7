package kubelet

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"bonsai.dev/bonsai/kubelet/cri"
)

// DefaultVolumeStatsInterval is how often the pods' volumes and the
// containers' writable layers are measured: the kubelet's
// --volume-stats-agg-period. Measuring them walks their files, which a
// sample every 10 s must not.
const DefaultVolumeStatsInterval = time.Minute

// StatsVolume is a volume of a StatsPod the sampler measures: the
// kubelet-managed kinds (emptyDir, configMap, secret, downwardAPI,
// projected). Ephemeral ones (emptyDir on disk and configMap, as the
// kubelet counts them) add to the pod's ephemeral storage.
type StatsVolume struct {
	Name, Path string
	Ephemeral  bool
}

// diskFigure is one measured directory or writable layer.
type diskFigure struct {
	at                  time.Time
	used, inodesUsed    uint64
	fs                  *statsapi.FsStats // the file system holding it; nil for a layer
	ephemeral, measured bool
}

// diskUsage keeps the last figures of the pods' volumes (by path) and
// the containers' writable layers (by container id), refreshed every
// interval by its own goroutine, and at once for ones not measured yet.
type diskUsage struct {
	rt       cri.Runtime
	interval time.Duration
	// noVolumes: volumes are not measured (a negative
	// --volume-stats-agg-period, as the kubelet's); layers still are.
	noVolumes bool

	mu      sync.Mutex
	volumes map[string]diskFigure
	layers  map[string]diskFigure
	// want are the volumes and containers of the last sample.
	want []StatsPod
	kick chan struct{}
}

// newDiskUsage measures every interval: DefaultVolumeStatsInterval when
// 0; when negative, the layers at that default and no volume.
func newDiskUsage(rt cri.Runtime, interval time.Duration) *diskUsage {
	d := &diskUsage{rt: rt, interval: interval, volumes: map[string]diskFigure{}, layers: map[string]diskFigure{}, kick: make(chan struct{}, 1)}
	if interval <= 0 {
		d.interval, d.noVolumes = DefaultVolumeStatsInterval, interval < 0
	}
	return d
}

// run measures every interval, and when kicked, until ctx ends.
func (d *diskUsage) run(ctx context.Context) {
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.measure(ctx, true)
		case <-d.kick:
			d.measure(ctx, false)
		}
	}
}

// track records the pods of a sample; a volume or container not measured
// yet wakes the measuring goroutine.
func (d *diskUsage) track(pods []StatsPod) {
	d.mu.Lock()
	d.want = pods
	if d.noVolumes {
		d.want = make([]StatsPod, len(pods))
		for i, p := range pods {
			p.Volumes = nil
			d.want[i] = p
		}
	}
	missing := false
	pods = d.want
	for _, p := range pods {
		for _, v := range p.Volumes {
			if _, ok := d.volumes[v.Path]; !ok {
				missing = true
			}
		}
		for _, c := range p.Containers {
			if _, ok := d.layers[c.ID]; !ok && d.layerUsage() != nil {
				missing = true
			}
		}
	}
	d.mu.Unlock()
	if missing {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

func (d *diskUsage) layerUsage() cri.LayerUsage {
	lu, _ := d.rt.(cri.LayerUsage)
	return lu
}

// measure walks the tracked volumes and asks the runtime for the tracked
// layers: all of them when all, else only the ones without a figure.
// Figures of what is no longer tracked are dropped.
func (d *diskUsage) measure(ctx context.Context, all bool) {
	d.mu.Lock()
	pods := d.want
	known := func(m map[string]diskFigure, k string) bool { _, ok := m[k]; return ok }
	var vols []StatsVolume
	var ctrs []string
	keepV, keepL := map[string]bool{}, map[string]bool{}
	for _, p := range pods {
		for _, v := range p.Volumes {
			keepV[v.Path] = true
			if all || !known(d.volumes, v.Path) {
				vols = append(vols, v)
			}
		}
		for _, c := range p.Containers {
			keepL[c.ID] = true
			if all || !known(d.layers, c.ID) {
				ctrs = append(ctrs, c.ID)
			}
		}
	}
	d.mu.Unlock()

	newV := map[string]diskFigure{}
	for _, v := range vols {
		f := diskFigure{at: time.Now(), ephemeral: v.Ephemeral}
		if used, inodes, err := du(v.Path); err == nil {
			f.used, f.inodesUsed, f.measured = used, inodes, true
			f.fs = fsStats(metav1.NewTime(f.at), v.Path)
		}
		newV[v.Path] = f
	}
	newL := map[string]diskFigure{}
	if lu := d.layerUsage(); lu != nil {
		for _, id := range ctrs {
			f := diskFigure{at: time.Now()}
			if used, inodes, err := lu.ContainerLayerUsage(ctx, id); err == nil {
				f.used, f.inodesUsed, f.measured = used, inodes, true
			}
			newL[id] = f
		}
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	for k, f := range newV {
		d.volumes[k] = f
	}
	for k, f := range newL {
		d.layers[k] = f
	}
	for k := range d.volumes {
		if !keepV[k] {
			delete(d.volumes, k)
		}
	}
	for k := range d.layers {
		if !keepL[k] {
			delete(d.layers, k)
		}
	}
}

// figures are the last figures of a pod's volumes (in its order) and of
// its containers' layers (by id); absent ones are not measured yet.
func (d *diskUsage) figures(p *StatsPod) (vols []diskFigure, layers map[string]diskFigure) {
	d.mu.Lock()
	defer d.mu.Unlock()
	vols = make([]diskFigure, len(p.Volumes))
	for i, v := range p.Volumes {
		vols[i] = d.volumes[v.Path]
	}
	layers = make(map[string]diskFigure, len(p.Containers))
	for _, c := range p.Containers {
		if f, ok := d.layers[c.ID]; ok {
			layers[c.ID] = f
		}
	}
	return vols, layers
}

// du is the space a directory's files take (their blocks, each inode
// once, as du counts) and how many inodes it holds, itself included;
// it does not follow symlinks nor cross into other file systems.
func du(dir string) (used, inodes uint64, err error) {
	var root unix.Stat_t
	if err := unix.Lstat(dir, &root); err != nil {
		return 0, 0, err
	}
	seen := map[uint64]bool{}
	err = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone, or unreadable: counted as far as read
		}
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil {
			return nil
		}
		if st.Dev != root.Dev {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !e.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		used += uint64(st.Blocks) * 512
		inodes++
		return nil
	})
	return used, inodes, err
}
