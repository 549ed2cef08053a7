package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// storeParams size the store workload; -quick shrinks it.
type storeParams struct {
	warmup       int
	creates      int
	tputWriters  []int
	tputFor      time.Duration
	watchers     int
	watchWrites  int
	watchRate    int // writes per second
	listObjects  int
	listRuns     int
	updateKeys   int
	updates      int
	loadWriters  int
	valueSize    int
	rssObjects   int
	rssValueSize int
}

func storeParamsFor(quick bool) storeParams {
	p := storeParams{
		warmup:      50,
		creates:     2000,
		tputWriters: []int{1, 8, 64},
		tputFor:     3 * time.Second,
		watchers:    100,
		watchWrites: 300,
		watchRate:   100,
		listObjects: 10000,
		listRuns:    5,
		updateKeys:  1000,
		// Long enough that both stores reach steady state: a short phase
		// ends before an LSM's compactions (or bbolt's page rewrites) catch
		// up, and would flatter whichever store defers the most.
		updates:      100000,
		loadWriters:  64,
		valueSize:    1024,
		rssObjects:   10000,
		rssValueSize: 500,
	}
	if quick {
		p.creates = 300
		p.tputFor = time.Second
		p.watchWrites = 100
		p.listRuns = 3
		p.updates = 5000
	}
	return p
}

// backend is one store under test: bonsai's badger or the etcd peer, both
// driven through store.Store by the same workload code.
type backend struct {
	name string
	st   store.Store
	// diskWrites reads the bytes the backend's process has sent toward the
	// disk so far.
	diskWrites func() (uint64, error)

	createP50, createP99 *float64
	tput                 map[int]*float64
	watchP50, watchP99   *float64
	list                 *float64
	bytesPerUpdate       *float64
	rss                  *float64
}

// storeSuite runs each phase on badger and then on etcd before moving to
// the next phase, so that load from elsewhere on a shared machine spreads
// over both rather than landing on one.
func storeSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := storeParamsFor(b.quick)
	bonsai := &backend{name: "badger", tput: map[int]*float64{}}
	peer := &backend{name: "etcd", tput: map[int]*float64{}}
	rows := func() []Row { return storeRows(p, bonsai, peer) }

	st, err := store.OpenBadger(store.BadgerOptions{Dir: filepath.Join(b.dir, "badger")})
	if err != nil {
		return rows(), err
	}
	var closeOnce sync.Once
	closeBadger := func() { closeOnce.Do(func() { st.Close() }) }
	b.onCleanup(closeBadger)
	bonsai.st = st
	bonsai.diskWrites = func() (uint64, error) { return writeBytes("self") }
	backends := []*backend{bonsai}

	etcd, err := startEtcd(b, "etcd")
	switch {
	case err != nil:
		return rows(), err
	case etcd == nil:
		// Not installed and not in CI: bonsai's figures alone.
	default:
		est, err := store.OpenEtcd(store.EtcdOptions{Endpoint: etcd.Endpoint})
		if err != nil {
			return rows(), err
		}
		b.onCleanup(func() { est.Close() })
		pid := strconv.Itoa(etcd.PID())
		peer.st = est
		peer.diskWrites = func() (uint64, error) { return writeBytes(pid) }
		backends = append(backends, peer)
	}

	phases := []struct {
		name string
		run  func(context.Context, *backend, storeParams, *bench) error
	}{
		// Disk bytes come early, on stores that hold just the list's
		// objects: an LSM's compaction cost grows with what it holds, and
		// the throughput phase's volume varies from machine to machine.
		{"list", phaseList},
		{"disk bytes per update", phaseDiskPerUpdate},
		{"create latency", phaseCreateLatency},
		{"throughput", phaseThroughput},
		{"watch latency", phaseWatch},
	}
	for _, ph := range phases {
		for _, be := range backends {
			if err := ctx.Err(); err != nil {
				return rows(), err
			}
			b.logf("store: %s: %s", be.name, ph.name)
			if err := ph.run(ctx, be, p, b); err != nil {
				return rows(), fmt.Errorf("%s on %s: %w", ph.name, be.name, err)
			}
		}
	}
	// RSS wants a quiet machine: the big stores go first.
	closeBadger()
	if etcd != nil {
		peer.st.Close()
		etcd.Stop()
	}
	b.logf("store: badger: RSS (child process)")
	if err := measureBadgerRSS(ctx, b, bonsai); err != nil {
		return rows(), fmt.Errorf("RSS of badger: %w", err)
	}
	if etcd != nil {
		b.logf("store: etcd: RSS")
		if err := measureEtcdRSS(ctx, b, p, peer); err != nil {
			return rows(), fmt.Errorf("RSS of etcd: %w", err)
		}
	}
	return rows(), nil
}

func storeRows(p storeParams, bonsai, peer *backend) []Row {
	kb := fmtNum(float64(p.valueSize) / 1024)
	row := func(name, unit string, bv, pv *float64, t *Target) Row {
		return Row{Name: "store: " + name, Unit: unit, Bonsai: bv, PeerName: "etcd", Peer: pv, Target: t}
	}
	rows := []Row{
		row(fmt.Sprintf("create latency p50 (%s KB, 1 writer)", kb), "ms", bonsai.createP50, peer.createP50, nil),
		row(fmt.Sprintf("create latency p99 (%s KB, 1 writer)", kb), "ms", bonsai.createP99, peer.createP99, atMost(5, "ms")),
	}
	for _, n := range p.tputWriters {
		var t *Target
		if n == 64 {
			t = atLeastPeerTimes(3, "etcd")
		}
		rows = append(rows, row(fmt.Sprintf("acked writes/s, %d %s", n, plural(n, "writer")), "writes/s", bonsai.tput[n], peer.tput[n], t))
	}
	rows = append(rows,
		row(fmt.Sprintf("watch latency p50 (%d watchers)", p.watchers), "ms", bonsai.watchP50, peer.watchP50, nil),
		row(fmt.Sprintf("watch latency p99 (%d watchers)", p.watchers), "ms", bonsai.watchP99, peer.watchP99, atMost(10, "ms")),
		row(fmt.Sprintf("list %s x %s KB (median of %d)", fmtNum(float64(p.listObjects)), kb, p.listRuns), "ms", bonsai.list, peer.list, nil),
		row(fmt.Sprintf("disk bytes per %s KB update", kb), "KB", bonsai.bytesPerUpdate, peer.bytesPerUpdate, atMostAndBelowPeer(4, "KB", "etcd")),
		row(fmt.Sprintf("RSS holding %s x %d B objects", fmtNum(float64(p.rssObjects)), p.rssValueSize), "MB", bonsai.rss, peer.rss, below(40, "MB")),
	)
	return rows
}

// startEtcd starts the peer in a fresh dir. A missing etcd is a failure
// under CI=true (`make bench` installs it) and otherwise leaves the peer
// column empty.
func startEtcd(b *bench, name string) (*testenv.Etcd, error) {
	bin, err := testenv.LookPath("etcd")
	if err != nil {
		if testenv.InCI() {
			return nil, fmt.Errorf("missing prerequisite: etcd (Debian etcd-server): %w", err)
		}
		b.logf("warning: %v: no etcd figures (install Debian's etcd-server, or run `make bench`)", err)
		return nil, nil
	}
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	e, err := testenv.StartEtcd(dir)
	if err != nil {
		return nil, err
	}
	b.onCleanup(e.Stop)
	b.noteOnce("etcd", "peer: %s (%s), fsync on, same disk", peerVersion(bin), bin)
	return e, nil
}

// value makes an incompressible value so that no backend is flattered by
// compression; the first 8 bytes carry a timestamp where one is wanted.
type valueMaker struct{ r *rand.Rand }

func newValueMaker(seed uint64) valueMaker {
	return valueMaker{rand.New(rand.NewPCG(seed, 0x6b6f6e736169))}
}

func (m valueMaker) make(n int) []byte {
	v := make([]byte, (n+7)&^7)
	for i := 0; i < len(v); i += 8 {
		binary.LittleEndian.PutUint64(v[i:], m.r.Uint64())
	}
	return v[:n]
}

// parallel runs f(0..n-1) concurrently and returns the first error.
func parallel(n int, f func(w int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(w); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}

// load creates n keys prefix+kNNNNNN with writers concurrent writers and
// returns each key's revision.
func load(ctx context.Context, st store.Store, prefix string, n, size, writers int) ([]uint64, error) {
	revs := make([]uint64, n)
	err := parallel(writers, func(w int) error {
		vm := newValueMaker(uint64(w))
		for i := w; i < n; i += writers {
			if err := ctx.Err(); err != nil {
				return err
			}
			rev, err := st.Create(ctx, fmt.Sprintf("%sk%06d", prefix, i), vm.make(size))
			if err != nil {
				return err
			}
			revs[i] = rev
		}
		return nil
	})
	return revs, err
}

func phaseCreateLatency(ctx context.Context, be *backend, p storeParams, _ *bench) error {
	vm := newValueMaker(1)
	// The first writes of a fresh store pay for file creation and
	// connection set-up; that is not the steady state being measured.
	if _, err := load(ctx, be.st, "/registry/bench/warmup/", p.warmup, p.valueSize, 1); err != nil {
		return err
	}
	lat := make([]time.Duration, 0, p.creates)
	for i := 0; i < p.creates; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		v := vm.make(p.valueSize)
		t0 := time.Now()
		if _, err := be.st.Create(ctx, fmt.Sprintf("/registry/bench/create/k%06d", i), v); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	be.createP50, be.createP99 = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99))
	return nil
}

// phaseThroughput counts acknowledged creates of new keys by n writers
// that each write as fast as their acknowledgements come back.
func phaseThroughput(ctx context.Context, be *backend, p storeParams, _ *bench) error {
	for _, n := range p.tputWriters {
		var acked atomic.Int64
		start := time.Now()
		deadline := start.Add(p.tputFor)
		err := parallel(n, func(w int) error {
			vm := newValueMaker(uint64(100 + w))
			for j := 0; time.Now().Before(deadline); j++ {
				if err := ctx.Err(); err != nil {
					return err
				}
				key := fmt.Sprintf("/registry/bench/tput%d/w%02d/k%07d", n, w, j)
				if _, err := be.st.Create(ctx, key, vm.make(p.valueSize)); err != nil {
					return err
				}
				acked.Add(1)
			}
			return nil
		})
		if err != nil {
			return err
		}
		// Writes in flight at the deadline count, and so does the time
		// they took.
		be.tput[n] = num(float64(acked.Load()) / time.Since(start).Seconds())
	}
	return nil
}

// phaseWatch times delivery to many watchers of one prefix: the writer
// stamps each value with the time just before its write is sent, and each
// watcher takes the difference at receipt. The delay therefore includes
// the write's own commit, as a client of the API sees it.
func phaseWatch(ctx context.Context, be *backend, p storeParams, _ *bench) error {
	const prefix = "/registry/bench/watch/"
	rev, err := be.st.CurrentRevision(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lats := make([][]time.Duration, p.watchers)
	var received sync.WaitGroup
	errs := make(chan error, p.watchers)
	for i := 0; i < p.watchers; i++ {
		w, err := be.st.Watch(wctx, prefix, rev)
		if err != nil {
			return err
		}
		defer w.Stop()
		received.Add(1)
		go func() {
			defer received.Done()
			l := make([]time.Duration, 0, p.watchWrites)
			for len(l) < p.watchWrites {
				ev, ok := <-w.Events()
				if !ok {
					errs <- fmt.Errorf("watch ended after %d of %d events: %v", len(l), p.watchWrites, w.Err())
					return
				}
				now := time.Now()
				if len(ev.Value) < 8 {
					errs <- fmt.Errorf("event %s without a timestamp", ev.Key)
					return
				}
				sent := time.Unix(0, int64(binary.BigEndian.Uint64(ev.Value)))
				l = append(l, now.Sub(sent))
			}
			lats[i] = l
		}()
	}
	vm := newValueMaker(2)
	tick := time.NewTicker(time.Second / time.Duration(p.watchRate))
	defer tick.Stop()
	for i := 0; i < p.watchWrites; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		v := vm.make(p.valueSize)
		binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
		if _, err := be.st.Create(ctx, fmt.Sprintf("%sk%06d", prefix, i), v); err != nil {
			return err
		}
	}
	be.watchP50, be.watchP99, err = watchLatencies(ctx, &received, errs, lats, p.watchWrites)
	return err
}

// watchLatencies waits until every watcher has received every write (or
// one failed), then summarises the delivery latencies they measured.
func watchLatencies(ctx context.Context, received *sync.WaitGroup, errs chan error, lats [][]time.Duration, writes int) (p50, p99 *float64, err error) {
	done := make(chan struct{})
	go func() { received.Wait(); close(done) }()
	select {
	case <-done:
	case err := <-errs:
		return nil, nil, err
	case <-time.After(30 * time.Second):
		return nil, nil, fmt.Errorf("watchers did not receive all %d events within 30s", writes)
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	select {
	case err := <-errs:
		return nil, nil, err
	default:
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	return ms(percentile(all, 0.50)), ms(percentile(all, 0.99)), nil
}

func phaseList(ctx context.Context, be *backend, p storeParams, _ *bench) error {
	const prefix = "/registry/bench/list/"
	if _, err := load(ctx, be.st, prefix, p.listObjects, p.valueSize, p.loadWriters); err != nil {
		return err
	}
	var runs []time.Duration
	for i := 0; i < p.listRuns; i++ {
		t0 := time.Now()
		res, err := be.st.List(ctx, prefix, store.ListOptions{})
		if err != nil {
			return err
		}
		runs = append(runs, time.Since(t0))
		if len(res.Items) != p.listObjects {
			return fmt.Errorf("list returned %d items, want %d", len(res.Items), p.listObjects)
		}
	}
	be.list = ms(percentile(runs, 0.5))
	return nil
}

// phaseDiskPerUpdate divides what the backend's process sent toward the
// disk during an update-only phase by the number of updates. sync(2)
// before and after puts the writeback of earlier phases before the window
// and this phase's inside it.
func phaseDiskPerUpdate(ctx context.Context, be *backend, p storeParams, _ *bench) error {
	const prefix = "/registry/bench/update/"
	revs, err := load(ctx, be.st, prefix, p.updateKeys, p.valueSize, p.loadWriters)
	if err != nil {
		return err
	}
	syscall.Sync()
	before, err := be.diskWrites()
	if err != nil {
		return err
	}
	// Writer w owns the keys i with i%writers == w, so no two writers race
	// for a key and every update's compare-and-swap succeeds.
	writers := p.loadWriters
	err = parallel(writers, func(w int) error {
		vm := newValueMaker(uint64(200 + w))
		count := p.updates / writers
		if w < p.updates%writers {
			count++
		}
		var mine []int
		for i := w; i < p.updateKeys; i += writers {
			mine = append(mine, i)
		}
		for j := 0; j < count; j++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			i := mine[j%len(mine)]
			rev, err := be.st.Update(ctx, fmt.Sprintf("%sk%06d", prefix, i), vm.make(p.valueSize), revs[i])
			if err != nil {
				return err
			}
			revs[i] = rev
		}
		return nil
	})
	if err != nil {
		return err
	}
	syscall.Sync()
	after, err := be.diskWrites()
	if err != nil {
		return err
	}
	be.bytesPerUpdate = num(float64(after-before) / float64(p.updates) / 1024)
	return nil
}

// measureBadgerRSS runs the store in a child process that links nothing
// but the store (e2e/bench/storerss), so the figure is the store's: not
// what earlier phases left in this process, nor the pages the bench's own
// client libraries touch at start.
func measureBadgerRSS(ctx context.Context, b *bench, be *backend) error {
	p := storeParamsFor(false)
	dir := filepath.Join(b.dir, "rss-badger")
	bin := filepath.Join(b.dir, "storerss")
	if err := execCommand(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./e2e/bench/storerss").Run(); err != nil {
		return fmt.Errorf("build storerss: %v", err)
	}
	cmd := execCommand(ctx, bin, "-dir", dir, "-objects", fmt.Sprint(p.rssObjects), "-size", fmt.Sprint(p.rssValueSize))
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("child: %w", err)
	}
	var kb uint64
	for _, line := range splitLines(string(out)) {
		if _, err := fmt.Sscanf(line, "VmRSS_kB %d", &kb); err == nil {
			be.rss = num(float64(kb) / 1024)
			return nil
		}
	}
	return fmt.Errorf("child printed no VmRSS_kB line: %q", out)
}

// measureEtcdRSS gives the peer the same objects in a fresh etcd.
func measureEtcdRSS(ctx context.Context, b *bench, p storeParams, be *backend) error {
	e, err := startEtcd(b, "rss-etcd")
	if err != nil || e == nil {
		return err
	}
	defer e.Stop()
	st, err := store.OpenEtcd(store.EtcdOptions{Endpoint: e.Endpoint})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := load(ctx, st, "/registry/bench/rss/", p.rssObjects, p.rssValueSize, 16); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	rss, err := rssBytes(strconv.Itoa(e.PID()))
	if err != nil {
		return err
	}
	be.rss = num(float64(rss) / (1 << 20))
	return nil
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	// Nearest rank: the smallest sample with at least q of them at or
	// below it.
	i := int(math.Ceil(float64(len(s))*q)) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) *float64 { return num(float64(d) / float64(time.Millisecond)) }

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
