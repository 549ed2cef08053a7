package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The embedded store never lets badger run out of disk.
//
// Why: badger writes its logs and tables through shared mappings of
// sparse files (it truncates a new file to its full size and copies into
// the mapping). When the file system is full, the first store into a
// page with no block behind it is not an error but SIGBUS, and a Go
// program dies of it. So a full disk must never be reached from inside
// badger; errors are for the writes badger is never handed.
//
// diskGuard does that with three measures:
//
//   - It admits a write only when the file system has room: non-delete
//     writes need reserve bytes free, deletes and the store's own
//     housekeeping (compaction, expiry, value-log GC) floor bytes. The
//     reserve covers what badger may write on its own after the last
//     admitted write (a memtable flush, the compaction after it, a new
//     value-log file); free space is read with statfs at most every
//     freeCheckEvery and lowered by what was admitted since.
//   - The logs badger appends to (the memtables' write-ahead logs and
//     the newest value log) get their blocks allocated as soon as they
//     are created (fallocate), so that the appends of admitted writes
//     never fault, even if another process takes the rest of the disk
//     between the check and the write. A log whose blocks could not be
//     allocated stops every write until they are.
//   - A ballast file of ballast bytes is kept allocated in the store's
//     directory while there is room. Opening badger and closing it (which
//     flushes the memtable into a table) write whatever the disk holds;
//     on a full disk the ballast is deleted first, so they have room.
//
// It also enforces the store's quota: non-delete writes are refused while
// the store's files (their allocated blocks, what du counts, the ballast
// left out) are over quota bytes.
type diskGuard struct {
	dir     string
	quota   int64
	reserve int64
	floor   int64
	ballast int64
	log     *slog.Logger

	mu sync.Mutex
	// free is the file system's free bytes at freeAt; freeSince is what
	// was admitted after.
	free      int64
	freeAt    time.Time
	freeSince int64
	// used is the store's size at usedAt; usedSince is what was admitted
	// after.
	used      int64
	usedAt    time.Time
	usedSince int64
	// unallocated are logs whose blocks could not be allocated yet, with
	// the bytes they need.
	unallocated map[string]int64
	// overQuota and low remember the state last reported, so that the
	// log says when it changes, not at every refusal.
	overQuota, low bool
	// quotaRefusals counts the writes refused for the quota.
	quotaRefusals int64
}

const (
	freeCheckEvery = 100 * time.Millisecond
	usedCheckEvery = time.Second
	// ballastName is the ballast file in the store's directory. badger
	// keeps only its own kinds of files (.sst, .vlog, .mem, MANIFEST ...)
	// and leaves others alone.
	ballastName = "SPACE-RESERVE"
	// writeOverhead is added to each admitted write for its key, its log
	// record and badger's entry headers.
	writeOverhead = 256
)

// newDiskGuard sizes the guard for a store whose memtables are memtable
// bytes and whose values are at most maxValue bytes. quota 0 is the
// default quota of the file system.
func newDiskGuard(dir string, quota, memtable int64, maxValue int, log *slog.Logger) (*diskGuard, error) {
	if quota == 0 {
		q, err := DefaultQuotaBytes(dir)
		if err != nil {
			return nil, err
		}
		quota = q
	}
	// A close flushes up to two memtables into tables; a compaction may
	// follow (level 0 into the base level, a few MB at this tree shape);
	// new logs write their headers at once.
	floor := 4*memtable + 8<<20
	return &diskGuard{
		dir:   dir,
		quota: quota,
		floor: floor,
		// Beyond the floor: the next value log, allocated whole when
		// badger creates it.
		reserve:     floor + valueLogFileSize + int64(maxValue),
		ballast:     2*memtable + 4<<20,
		log:         log,
		unallocated: map[string]int64{},
	}, nil
}

// DefaultQuotaBytes is the quota of a store in dir unless told otherwise:
// a quarter of the file system holding it, at most 8 GiB (the largest
// size etcd's documentation advises for its own quota). On an 8 GB card
// that is 2 GiB, etcd's default quota.
func DefaultQuotaBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	for d := dir; ; d = filepath.Dir(d) {
		err := unix.Statfs(d, &st)
		if err == nil {
			break
		}
		// The directory may not exist yet: its parent's file system.
		if !errors.Is(err, unix.ENOENT) || d == filepath.Dir(d) {
			return 0, fmt.Errorf("size of the file system of %s: %w", dir, err)
		}
	}
	return min(int64(st.Blocks)*st.Bsize/4, MaxDefaultQuotaBytes), nil
}

// MaxDefaultQuotaBytes caps DefaultQuotaBytes.
const MaxDefaultQuotaBytes = 8 << 30

// valueLogFileSize is the size of badger's value-log files (see
// OpenBadger).
const valueLogFileSize = 16 << 20

// statFree returns the file system's free bytes (for unprivileged
// writers: root's reserved blocks do not count).
func statFree(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// dirUsage is the blocks the store's files hold, the ballast left out.
// Allocated blocks, not sizes: badger's logs are sparse until written
// (or allocated ahead, which du counts too).
func dirUsage(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted under the walk: a compacted table, a GCed log
			}
			return err
		}
		if d.IsDir() || d.Name() == ballastName {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	return n, err
}

// freeLocked is the free space now, as far as the guard knows; callers
// hold mu.
func (g *diskGuard) freeLocked(now time.Time) (int64, error) {
	if now.Sub(g.freeAt) >= freeCheckEvery {
		free, err := statFree(g.dir)
		if err != nil {
			return 0, err
		}
		g.free, g.freeAt, g.freeSince = free, now, 0
	}
	return g.free - g.freeSince, nil
}

// usedLocked is the store's size now, as far as the guard knows; callers
// hold mu.
func (g *diskGuard) usedLocked(now time.Time) (int64, error) {
	if now.Sub(g.usedAt) >= usedCheckEvery {
		used, err := dirUsage(g.dir)
		if err != nil {
			return 0, err
		}
		g.used, g.usedAt, g.usedSince = used, now, 0
	}
	return g.used + g.usedSince, nil
}

// admit decides whether a write of n bytes (key and value) may go to
// badger, and counts it if so. Deletes need only the floor and ignore
// the quota: they are how a full store is emptied.
func (g *diskGuard) admit(n int64, isDelete bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	n += writeOverhead
	free, err := g.freeLocked(now)
	if err != nil {
		return fmt.Errorf("free space of %s: %w", g.dir, err)
	}
	if err := g.roomLocked(free, isDelete); err != nil {
		return err
	}
	if !isDelete {
		used, err := g.usedLocked(now)
		if err != nil {
			return fmt.Errorf("size of %s: %w", g.dir, err)
		}
		if used+n > g.quota {
			g.quotaRefusals++
			if !g.overQuota {
				g.overQuota = true
				g.log.Error("store over its quota: refusing writes other than deletes until deletes and compaction bring it under", "dir", g.dir, "used", used, "quota", g.quota)
			}
			return &SpaceError{Cause: ErrQuotaExceeded, Where: g.dir, Have: used, Limit: g.quota, Deletes: true}
		}
		g.usedSince += n
		if g.overQuota || g.low {
			g.overQuota, g.low = false, false
			g.log.Info("store takes writes again", "dir", g.dir, "used", used, "quota", g.quota, "free", free)
		}
	}
	g.freeSince += n
	return nil
}

// roomLocked refuses a write when the file system is too full for it;
// callers hold mu.
func (g *diskGuard) roomLocked(free int64, isDelete bool) error {
	need := g.reserve
	if isDelete {
		need = g.floor
	}
	if free < need || len(g.unallocated) > 0 {
		if !g.low {
			g.low = true
			g.log.Error("file system under the store nearly full: refusing writes until there is room again",
				"dir", g.dir, "free", free, "reserve", g.reserve, "floor", g.floor, "logs_not_allocated", len(g.unallocated))
		}
		// An unallocated log might fault: not even deletes then.
		return &SpaceError{Cause: ErrDiskFull, Where: g.dir, Have: max(free, 0), Limit: need, Deletes: free >= g.floor && len(g.unallocated) == 0}
	}
	return nil
}

// beforeCommit is the last look at the disk before a batch of admitted
// writes goes to badger: a fresh statfs, since another process may have
// taken the reserve since they were admitted. Below the floor the batch
// is refused (and undone like a failed one) rather than handed to a
// badger that could fault.
func (g *diskGuard) beforeCommit() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.freeAt = time.Time{}
	free, err := g.freeLocked(time.Now())
	if err != nil {
		return fmt.Errorf("free space of %s: %w", g.dir, err)
	}
	if free < g.floor || len(g.unallocated) > 0 {
		g.low = true
		return &SpaceError{Cause: ErrDiskFull, Where: g.dir, Have: max(free, 0), Limit: g.floor}
	}
	return nil
}

// housekeeping says whether the store's own writes (compaction, expiry,
// garbage collection) may run now: free space at the floor at least.
func (g *diskGuard) housekeeping() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	free, err := g.freeLocked(time.Now())
	return err == nil && free >= g.floor && len(g.unallocated) == 0
}

// quotaPressure re-measures the store and returns its size, whether it
// is over its quota, and how many writes the quota refused so far.
func (g *diskGuard) quotaPressure() (used int64, over bool, refusals int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.usedAt = time.Time{}
	used, err := g.usedLocked(time.Now())
	return used, err == nil && used > g.quota, g.quotaRefusals
}

// refresh re-reads the disk: free space, the store's size, logs waiting
// for their blocks, the ballast.
func (g *diskGuard) refresh() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for path, n := range g.unallocated {
		if err := allocate(path, n, false); err == nil || errors.Is(err, fs.ErrNotExist) {
			delete(g.unallocated, path)
		}
	}
	now := time.Now()
	g.freeAt, g.usedAt = time.Time{}, time.Time{}
	free, err1 := g.freeLocked(now)
	_, err2 := g.usedLocked(now)
	if err1 != nil || err2 != nil {
		return
	}
	if free >= g.reserve+g.ballast {
		if err := g.keepBallastLocked(); err != nil {
			g.log.Warn("store: cannot allocate the space reserve", "dir", g.dir, "err", err)
		}
	}
}

// allocateLog gives a log badger just created its first n bytes' blocks.
// The watch may see the file before badger sized it, so the blocks are
// allocated past the end if need be (badger then sizes the file over
// them). On failure the log is remembered: writes stop until refresh
// allocates it.
func (g *diskGuard) allocateLog(path string, n int64) {
	if err := allocate(path, n, true); err != nil && !errors.Is(err, fs.ErrNotExist) {
		g.mu.Lock()
		g.unallocated[path] = n
		g.mu.Unlock()
		g.log.Error("store: cannot allocate a new log's blocks; refusing writes until it can", "path", path, "err", err)
	}
}

// allocate allocates the blocks of path's first n bytes; past its end
// only if pastEnd (without changing its size).
func allocate(path string, n int64, pastEnd bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	mode := uint32(unix.FALLOC_FL_KEEP_SIZE)
	if !pastEnd {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		n = min(n, fi.Size())
	}
	if n <= 0 {
		return nil
	}
	for {
		err := unix.Fallocate(int(f.Fd()), mode, 0, n)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EOPNOTSUPP {
			return nil // nothing to do for it: the reserve must do
		}
		return err
	}
}

// allocateLogs gives badger's existing logs their blocks, up to their
// sizes: at open, for the logs badger created before the watch ran.
func (g *diskGuard) allocateLogs(memBytes, vlogBytes int64) {
	for ext, n := range map[string]int64{".mem": memBytes, ".vlog": vlogBytes} {
		paths, _ := filepath.Glob(filepath.Join(g.dir, "*"+ext))
		for _, p := range paths {
			if err := allocate(p, n, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
				g.mu.Lock()
				g.unallocated[p] = n
				g.mu.Unlock()
			}
		}
	}
}

// keepBallastLocked makes sure the ballast exists, allocated; callers
// hold mu.
func (g *diskGuard) keepBallastLocked() error {
	path := filepath.Join(g.dir, ballastName)
	if fi, err := os.Stat(path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 >= g.ballast {
			return nil
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, g.ballast)
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err != nil {
		os.Remove(path)
		if err == unix.EOPNOTSUPP {
			return nil
		}
		return err
	}
	return nil
}

// roomToOpenOrClose deletes the ballast if the file system has less than
// the floor free, so that badger's open or close (a memtable flush) has
// room. It says whether it did.
func (g *diskGuard) roomToOpenOrClose() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	free, err := statFree(g.dir)
	if err != nil || free >= g.floor {
		return false
	}
	if err := os.Remove(filepath.Join(g.dir, ballastName)); err != nil {
		return false
	}
	g.freeAt = time.Time{}
	g.log.Warn("file system under the store is full: deleted the store's space reserve to open or close it safely", "dir", g.dir, "free_before", free, "reserve_bytes", g.ballast)
	return true
}
