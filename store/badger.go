package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// BadgerOptions configure the embedded store. Zero values take defaults.
type BadgerOptions struct {
	// Dir holds the database (bonsai uses <data-dir>/db).
	Dir string
	// MemoryMB is the memory budget for memtables and caches (default 24,
	// which keeps a store of 10,000 small objects under 40 MB RSS on a
	// 512 MB device). Raising it buys cache hits and larger memtables.
	MemoryMB int
	// CompactInterval is how often history is compacted (default 5m,
	// kube-apiserver's --etcd-compaction-interval).
	CompactInterval time.Duration
	// RetainFor and RetainRevisions bound compaction: history younger than
	// RetainFor (default 5m) and the last RetainRevisions revisions (default
	// none) are always kept. With the defaults a revision is gone at most
	// two intervals after it was written, as with kube-apiserver's
	// compactor on etcd: clients (paged lists, the conformance suite) rely
	// on an old continue token expiring.
	RetainFor       time.Duration
	RetainRevisions uint64
	// GCInterval is how often the value log is garbage collected (default
	// 1m).
	GCInterval time.Duration
	// WatchRing is how many recent events are kept in memory for watchers
	// (default 1024); MaxWatchLag is how many revisions a live watcher may
	// fall behind before it is ended (default 10,000).
	WatchRing   int
	MaxWatchLag uint64
	// MaxValueBytes is the largest value Create and Update take
	// (default DefaultMaxValueBytes); larger ones fail with a
	// ValueTooLargeError.
	MaxValueBytes int
	// QuotaBytes bounds the store's files (their allocated blocks):
	// past it, writes other than deletes fail with a SpaceError
	// (ErrQuotaExceeded) until deletes and compaction bring it under
	// (default DefaultQuotaBytes of the file system). Whatever the
	// quota, writes stop before the file system fills (ErrDiskFull).
	QuotaBytes int64
	// Expire makes keys expire after their last write (see ExpiryRule);
	// ExpiryInterval is how often expired keys are looked for (default
	// 1s).
	Expire         []ExpiryRule
	ExpiryInterval time.Duration
	Logger         *slog.Logger
}

func (o *BadgerOptions) setDefaults() {
	if o.MemoryMB <= 0 {
		o.MemoryMB = 24
	}
	if o.CompactInterval <= 0 {
		o.CompactInterval = 5 * time.Minute
	}
	if o.RetainFor <= 0 {
		o.RetainFor = 5 * time.Minute
	}
	if o.GCInterval <= 0 {
		o.GCInterval = time.Minute
	}
	if o.WatchRing <= 0 {
		o.WatchRing = 1024
	}
	if o.MaxWatchLag == 0 {
		o.MaxWatchLag = 10000
	}
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if o.ExpiryInterval <= 0 {
		o.ExpiryInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// valueThreshold is the smallest value kept in badger's value log rather
// than inline in its tree. Kept inline, a value is written to the
// write-ahead log, flushed into a table and rewritten by every compaction
// that passes it, and with minutes of history kept under churn that is
// several times over (measured: 5.0 KB written per 1 KB update). In the
// value log it is written once and the compactions move a pointer of
// about the key's size. Below half a KB, values the size of a Lease, the
// pointer is no longer much smaller than the value.
const valueThreshold = 512

// Internal keys start with a NUL byte, which no valid key can contain.
var (
	logPrefix      = []byte("\x00l")
	compactedKey   = []byte("\x00m/compacted")
	formatKey      = []byte("\x00m/format")
	formatValue    = []byte("bonsai-store/1")
	userKeysPrefix = []byte("/")
	// revisionKey is set by every write that takes a revision and sets
	// nothing else that lasts (only deletes, or keys dropped later), so
	// that the newest revision is found again at open.
	revisionKey = []byte("\x00m/revision")
	// expiryPrefix starts the expiry records: deadline (unix
	// nanoseconds, 8 bytes), then the key; the value is the revision of
	// the write that set the deadline. In deadline order, the expired
	// come first.
	expiryPrefix = []byte("\x00x")
	// reclaimPrefix holds a marker key that only reclaimSpace writes, so
	// that badger's DropPrefix has something to drop (see reclaimSpace).
	reclaimPrefix = []byte("\x00r")
)

func expiryKey(deadline time.Time, key string) []byte {
	k := make([]byte, len(expiryPrefix)+8+len(key))
	copy(k, expiryPrefix)
	binary.BigEndian.PutUint64(k[len(expiryPrefix):], uint64(deadline.UnixNano()))
	copy(k[len(expiryPrefix)+8:], key)
	return k
}

func revBytes(rev uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], rev)
	return b[:]
}

func logKey(rev uint64) []byte {
	k := make([]byte, len(logPrefix)+8)
	copy(k, logPrefix)
	binary.BigEndian.PutUint64(k[len(logPrefix):], rev)
	return k
}

// A log record: event type (1 byte), commit time (unix nanoseconds, 8
// bytes), key. Values are not duplicated: MVCC reads at the revision give
// them.
func encodeLogRecord(t EventType, at time.Time, key string) []byte {
	b := make([]byte, 9+len(key))
	b[0] = byte(t)
	binary.BigEndian.PutUint64(b[1:9], uint64(at.UnixNano()))
	copy(b[9:], key)
	return b
}

func decodeLogRecord(b []byte) (EventType, time.Time, string, error) {
	if len(b) < 10 || b[0] < byte(Added) || b[0] > byte(Deleted) {
		return 0, time.Time{}, "", fmt.Errorf("corrupt revision log record (%d bytes)", len(b))
	}
	return EventType(b[0]), time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))), string(b[9:]), nil
}

type opKind int

const (
	opPut opKind = iota
	opDelete
	opCompact
	// opHousekeep takes a revision with no event, to drop and set
	// internal keys.
	opHousekeep
)

// writeOp is one write waiting for the committer. Its revision and event
// type are decided (and the key index updated) when it is queued, under
// badgerStore.mu, so the queue order is the revision order.
type writeOp struct {
	kind  opKind
	key   string
	value []byte
	rev   uint64
	event EventType
	// compaction: discard history at and below target, deleting logKeys.
	target  uint64
	logKeys [][]byte
	// ttl is how long a put's key lives after it (its ExpiryRule).
	ttl time.Duration
	// housekeeping: internal keys to delete and to set.
	drops [][]byte
	sets  map[string][]byte
	// prev is the value the op replaces: the caller's (prevKnown), or
	// read by the committer.
	prev      []byte
	prevKnown bool
	// results
	err  error
	done chan struct{}
}

type badgerStore struct {
	opts BadgerOptions
	db   *badger.DB
	log  *slog.Logger

	mu     sync.Mutex
	index  map[string]uint64 // key -> revision of its last write, queued writes included
	rev    uint64            // last assigned revision
	queue  []*writeOp
	kick   chan struct{}
	closed bool
	// failed is set when writes failed (a commit or a sync): every write
	// after is refused with it until the committer has undone the failed
	// ones (undoFailed): undoKeys are the keys they wrote, undoRevs their
	// revisions.
	failed   error
	undoKeys map[string]struct{}
	undoRevs []uint64

	// guard keeps writes within the quota and the disk's room.
	guard *diskGuard
	// writeMu is held while the committer hands writes to badger, and by
	// reclaimSpace, whose DropPrefix refuses writes meanwhile; gcMu
	// serializes value-log GC with it.
	writeMu sync.Mutex
	gcMu    sync.Mutex
	// reclaimedAt and reclaimedUsed are the revision and the store's size
	// at the last reclaimSpace.
	reclaimedAt       uint64
	reclaimedUsed     int64
	reclaimedRefusals int64
	lastReclaim       time.Time
	// syncFault, when set (tests), fails syncs.
	syncFault atomic.Pointer[func() error]

	// reads lets Close wait for the reads under way: badger's tables must
	// not go while a transaction still uses them (it dereferences a
	// closed memtable). readsClosed is set under the write lock just
	// before badger is closed.
	reads       sync.RWMutex
	readsClosed bool

	committed atomic.Uint64 // every write at or below is durable and readable
	written   atomic.Uint64 // every write at or below is in badger, maybe not yet synced
	// lastEvent is the revision of the newest event. Compactions take
	// revisions too; retention counts from here so they do not creep.
	lastEvent atomic.Uint64
	compacted atomic.Uint64
	// discardTs lags compaction by one round so reads that checked the
	// compacted revision just before a compaction still see their data.
	// discardMu guards it and badger's discard timestamp.
	discardMu      sync.Mutex
	pendingDiscard uint64
	// logStart is where the next compaction starts dropping log records:
	// past the compacted revision, or lower if a crash tore a compaction.
	compactMu sync.Mutex
	logStart  uint64

	hub     *watchHub
	advisor *logAdvisor
	// wal and vlogs sync badger's logs (see logSyncer).
	wal, vlogs *logSyncer

	stop     chan struct{}
	wg       sync.WaitGroup
	commitWG sync.WaitGroup
}

// OpenBadger opens (or creates) the embedded store in opts.Dir. It refuses a
// directory that is not a bonsai store or is in use by another process.
func OpenBadger(opts BadgerOptions) (Store, error) {
	opts.setDefaults()
	dir := opts.Dir
	if dir == "" {
		return nil, errors.New("open store: no directory given")
	}
	if err := checkExpiryRules(opts.Expire); err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if opts.QuotaBytes < 0 {
		return nil, fmt.Errorf("open store %s: quota %d bytes is negative", dir, opts.QuotaBytes)
	}
	if err := checkStoreDir(dir); err != nil {
		return nil, err
	}
	mem := int64(opts.MemoryMB) << 20
	memtable := mem / 6
	guard, err := newDiskGuard(dir, opts.QuotaBytes, memtable, opts.MaxValueBytes, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	// What badger appends to a log before it is full: a memtable's log
	// is the whole file (twice the memtable); a value log takes writes
	// until it passes its size, by one value at most.
	memLogBytes, vlogBytes := 2*memtable, int64(valueLogFileSize+opts.MaxValueBytes+1<<20)
	bo := badgerOptions(dir, mem, opts.Logger)
	advisor, err := startLogAdvisor(dir, func(path string) {
		if strings.HasSuffix(path, ".mem") {
			guard.allocateLog(path, memLogBytes)
		} else {
			guard.allocateLog(path, vlogBytes)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("open store %s: watch logs: %w", dir, err)
	}
	// Opening writes new logs' headers, whatever the disk holds.
	guard.roomToOpenOrClose()
	db, err := badger.OpenManaged(bo)
	if err != nil {
		advisor.close()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	advisor.adviseAll()
	guard.allocateLogs(memLogBytes, vlogBytes)
	s := &badgerStore{
		opts:     opts,
		db:       db,
		guard:    guard,
		undoKeys: map[string]struct{}{},
		advisor:  advisor,
		wal:      newLogSyncer(dir, ".mem", 5),
		vlogs:    newLogSyncer(dir, ".vlog", 6),
		log:      opts.Logger,
		index:    map[string]uint64{},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	if err := s.load(); err != nil {
		db.Close()
		advisor.close()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if err := errors.Join(s.wal.start(), s.vlogs.start()); err != nil {
		s.wal.close()
		s.vlogs.close()
		db.Close()
		advisor.close()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	s.hub = newWatchHub(opts.WatchRing, s.rev, opts.MaxWatchLag, s.readLog, s.compacted.Load)
	guard.refresh()
	s.reclaimedUsed = guard.used
	s.commitWG.Add(1)
	go s.commitLoop()
	s.wg.Add(3)
	go s.every(opts.CompactInterval, s.autoCompact)
	go s.every(opts.GCInterval, s.gcValueLog)
	go s.every(time.Second, s.watchSpace)
	if len(opts.Expire) > 0 {
		s.wg.Add(1)
		go s.every(opts.ExpiryInterval, s.expireKeys)
	}
	return s, nil
}

// badgerOptions are badger's options for a store in dir with a memory
// budget of mem bytes: the ones OpenBadger opens it with, and a restore
// writes it with.
func badgerOptions(dir string, mem int64, log *slog.Logger) badger.Options {
	memtable := mem / 6
	return badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log}).
		WithSyncWrites(false). // the committer syncs once per batch
		// Values of at least valueThreshold bytes go to the value log,
		// written once; the tree holds small pointers to them, so its
		// compactions rewrite pointers, not objects.
		WithValueThreshold(valueThreshold).
		WithVerifyValueChecksum(true).
		// A tree of pointers is small: a shallow, eagerly compacted tree
		// costs little rewriting (1.6 KB written per 1 KB update in all,
		// against 1.5 KB for 10 L0 tables and a 32 MB first level), and
		// compactions are what tell the value log's garbage collector
		// which values history no longer needs. Smaller memtables would
		// tell it sooner still, but the compactions' buffers cost more
		// resident memory than the memtables save (41 against 36 MB for
		// 10,000 small objects with 1 MB memtables).
		WithMemTableSize(memtable).
		WithNumMemtables(2).
		WithNumLevelZeroTables(3).
		WithNumLevelZeroTablesStall(10).
		WithBaseTableSize(1 << 20).
		WithBaseLevelSize(4 << 20).
		WithBlockCacheSize(mem / 3).
		WithIndexCacheSize(mem / 6).
		// Smaller value-log files: garbage collection rewrites a file's
		// live values to free it, so a small file frees space sooner and
		// for less rewriting.
		WithValueLogFileSize(valueLogFileSize).
		WithNumCompactors(2).
		WithDetectConflicts(false).
		WithMetricsEnabled(false).
		WithNumGoroutines(2)
}

// checkStoreDir refuses, before badger touches anything, a directory that
// holds something other than a badger database, or one locked by another
// process.
func checkStoreDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("open store %s: %w", dir, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("open store %s: %w", dir, err)
	case len(entries) == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err != nil {
		return fmt.Errorf("open store %s: not a bonsai store (no MANIFEST among %d entries); refusing to touch it", dir, len(entries))
	}
	// badger flocks the directory and writes its pid into LOCK.
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open store %s: %w", dir, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another running process"
			if pid, err := os.ReadFile(filepath.Join(dir, "LOCK")); err == nil && len(bytes.TrimSpace(pid)) > 0 {
				holder = "another running process (pid " + string(bytes.TrimSpace(pid)) + ")"
			}
			return fmt.Errorf("open store %s: in use by %s", dir, holder)
		}
		return fmt.Errorf("open store %s: lock: %w", dir, err)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// load checks the format marker and rebuilds the key index and revisions.
func (s *badgerStore) load() error {
	txn := s.db.NewTransactionAt(math.MaxUint64, false)
	defer txn.Discard()
	var maxVersion uint64
	found := false
	it := txn.NewIterator(badger.IteratorOptions{})
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		found = true
		if v := item.Version(); v > maxVersion {
			maxVersion = v
		}
		if k := item.Key(); bytes.HasPrefix(k, userKeysPrefix) {
			s.index[string(k)] = item.Version()
		}
	}
	it.Close()
	format, err := txn.Get(formatKey)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound) && found:
		return errors.New("not a bonsai store (a badger database without bonsai's format marker); refusing to touch it")
	case errors.Is(err, badger.ErrKeyNotFound):
		// A new store: write the marker at revision 1.
		wb := s.db.NewManagedWriteBatch()
		if err := wb.SetEntryAt(badger.NewEntry(formatKey, formatValue), 1); err != nil {
			return err
		}
		if err := wb.Flush(); err != nil {
			return err
		}
		if err := s.db.Sync(); err != nil {
			return err
		}
		maxVersion = 1
	case err != nil:
		return err
	default:
		v, err := format.ValueCopy(nil)
		if err != nil {
			return err
		}
		if !bytes.Equal(v, formatValue) {
			return fmt.Errorf("unsupported store format %q (this bonsai reads %q)", v, formatValue)
		}
	}
	if undone, err := s.undoLostValues(maxVersion); err != nil {
		return err
	} else if undone > 0 {
		// The undo took a revision; reread from a transaction that sees it.
		maxVersion++
		txn.Discard()
		txn = s.db.NewTransactionAt(math.MaxUint64, false)
		defer txn.Discard()
		clear(s.index)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: userKeysPrefix})
		for it.Rewind(); it.Valid(); it.Next() {
			s.index[string(it.Item().Key())] = it.Item().Version()
		}
		it.Close()
	}
	if item, err := txn.Get(compactedKey); err == nil {
		v, err := item.ValueCopy(nil)
		if err != nil || len(v) != 8 {
			return fmt.Errorf("corrupt compaction record: %v", err)
		}
		c := binary.BigEndian.Uint64(v)
		s.compacted.Store(c)
		s.pendingDiscard = c
		s.db.SetDiscardTs(c)
	}
	s.rev = maxVersion
	s.committed.Store(maxVersion)
	s.written.Store(maxVersion)
	// Leftovers of a compaction torn by a crash sit below the compacted
	// revision; the next compaction sweeps from the first of them.
	fit := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix})
	if fit.Rewind(); fit.Valid() {
		s.logStart = binary.BigEndian.Uint64(fit.Item().Key()[len(logPrefix):])
	}
	fit.Close()
	// The newest event is the last log record (none left: compacted).
	rit := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix, Reverse: true})
	defer rit.Close()
	if rit.Seek(logKey(math.MaxUint64)); rit.Valid() {
		s.lastEvent.Store(binary.BigEndian.Uint64(rit.Item().Key()[len(logPrefix):]))
	} else {
		s.lastEvent.Store(s.compacted.Load())
	}
	return nil
}

// maxLostScan bounds how far back undoLostValues looks for a value that
// reached the disk. Only the batches not yet synced can have lost values,
// and each writer waits for its write's sync, so they hold at most one
// write per concurrent writer: far fewer than this.
const maxLostScan = 4096

// undoLostValues undoes the newest writes if their values did not reach the
// disk. A write's value (in the value log) and its key and log record (in
// the write-ahead log) are synced together before the write is
// acknowledged, but after a power loss the kernel may have written one log
// and not the other. badger truncates its value log at the first entry it
// cannot read back, so what survives of it is a prefix, in revision order:
// the newest write whose value is readable proves every older value is.
// Writes from the first unreadable value on were never acknowledged, and
// their events never published; they are undone at a new revision with no
// event, so every client's view (it saw none of them) stays right. It
// returns how many writes it undid.
func (s *badgerStore) undoLostValues(maxVersion uint64) (int, error) {
	txn := s.db.NewTransactionAt(math.MaxUint64, false)
	defer txn.Discard()
	type record struct {
		rev uint64
		key string
	}
	var newest []record // newest first
	firstLost := uint64(0)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix, Reverse: true})
	it.Seek(logKey(math.MaxUint64))
	for n := 0; it.Valid() && n < maxLostScan; it.Next() {
		n++
		item := it.Item()
		rev := binary.BigEndian.Uint64(item.Key()[len(logPrefix):])
		rec, err := item.ValueCopy(nil)
		if err != nil {
			it.Close()
			return 0, err
		}
		typ, _, key, err := decodeLogRecord(rec)
		if err != nil {
			it.Close()
			return 0, err
		}
		newest = append(newest, record{rev, key})
		if typ == Deleted {
			continue
		}
		size, err := s.readableValue(key, rev)
		if err != nil {
			firstLost = rev
			continue
		}
		if size >= valueThreshold {
			break // a value-log entry on disk: older ones are too
		}
	}
	it.Close()
	if firstLost == 0 {
		return 0, nil
	}
	// Put every key written from firstLost on back to its value before it,
	// and drop those log records, in one write at a new revision.
	at := maxVersion + 1
	undo := s.db.NewTransactionAt(maxVersion, true)
	defer undo.Discard()
	before := s.db.NewTransactionAt(firstLost-1, false)
	defer before.Discard()
	restored := map[string]bool{}
	undone := 0
	for _, r := range newest {
		if r.rev < firstLost {
			break
		}
		undone++
		if err := undo.Delete(logKey(r.rev)); err != nil {
			return 0, err
		}
		if restored[r.key] {
			continue
		}
		restored[r.key] = true
		item, err := before.Get([]byte(r.key))
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			err = undo.Delete([]byte(r.key))
		case err == nil:
			var v []byte
			if v, err = valueOf(item); err == nil {
				err = undo.Set([]byte(r.key), v)
			}
		}
		if err != nil {
			return 0, fmt.Errorf("undo write of %s: %w", r.key, err)
		}
	}
	if err := undo.CommitAt(at, nil); err != nil {
		return 0, err
	}
	if err := s.db.Sync(); err != nil {
		return 0, err
	}
	s.log.Warn("store: the newest writes were never acknowledged and their values did not reach the disk (power loss?); undone",
		"writes", undone, "from_revision", firstLost, "keys", len(restored), "undo_revision", at)
	return undone, nil
}

// readableValue reads key's value at rev back, checksum included, and
// returns its size.
func (s *badgerStore) readableValue(key string, rev uint64) (int, error) {
	txn := s.db.NewTransactionAt(rev, false)
	defer txn.Discard()
	item, err := txn.Get([]byte(key))
	if err != nil {
		return 0, err
	}
	v, err := valueOf(item)
	return len(v), err
}

// valueOf copies an item's value. badger logs a failed value-log read
// (a missing entry, a checksum mismatch) and hands back an empty value
// with no error; every value in the value log has at least valueThreshold
// bytes, so an empty one from there is that failure.
func valueOf(item *badger.Item) ([]byte, error) {
	v, err := item.ValueCopy(nil)
	if err == nil && len(v) == 0 && item.ValueSize() > 0 {
		err = fmt.Errorf("value of %s at revision %d is unreadable (see the log for badger's error)", item.Key(), item.Version())
	}
	return v, err
}

func (s *badgerStore) every(d time.Duration, f func()) {
	defer s.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			f()
		}
	}
}

// enqueue decides a write's revision under the index lock, hands it to
// the committer and waits for it; check runs under the lock and may
// refuse the write.
func (s *badgerStore) enqueue(op *writeOp, check func(cur uint64) error) error {
	if err := s.queueOp(op, check); err != nil {
		return err
	}
	// The write is committed whatever the caller's context does meanwhile;
	// waiting for it keeps the acknowledgement honest.
	<-op.done
	return op.err
}

// queueOp is enqueue without the wait: once it returns nil, op.done is
// closed when op is committed or has failed (op.err).
func (s *badgerStore) queueOp(op *writeOp, check func(cur uint64) error) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.failed != nil {
		s.mu.Unlock()
		return s.failed
	}
	if check != nil {
		if err := check(s.index[op.key]); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	s.rev++
	op.rev = s.rev
	op.done = make(chan struct{})
	switch op.kind {
	case opPut:
		s.index[op.key] = op.rev
	case opDelete:
		delete(s.index, op.key)
	}
	s.queue = append(s.queue, op)
	s.mu.Unlock()
	s.wake()
	return nil
}

// wake tells the committer there is something to do, without waiting.
func (s *badgerStore) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *badgerStore) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	if err := checkValue(key, value, s.opts.MaxValueBytes); err != nil {
		return 0, err
	}
	if err := s.guard.admit(int64(len(key)+len(value)), false); err != nil {
		return 0, err
	}
	op := &writeOp{kind: opPut, key: key, value: value, event: Added, ttl: ttlOf(s.opts.Expire, key)}
	err := s.enqueue(op, func(cur uint64) error {
		if cur != 0 {
			return fmt.Errorf("%w: %s", ErrExists, key)
		}
		return nil
	})
	return op.rev, err
}

func (s *badgerStore) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return s.update(&writeOp{kind: opPut, key: key, value: value, event: Modified}, rev)
}

// Replace is Update with the value it replaces known: the committer
// does not read it back from badger for the event.
func (s *badgerStore) Replace(ctx context.Context, key string, value []byte, rev uint64, prev []byte) (uint64, error) {
	return s.update(&writeOp{kind: opPut, key: key, value: value, event: Modified, prev: prev, prevKnown: true}, rev)
}

func (s *badgerStore) update(op *writeOp, rev uint64) (uint64, error) {
	key := op.key
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	if err := checkValue(key, op.value, s.opts.MaxValueBytes); err != nil {
		return 0, err
	}
	if err := s.guard.admit(int64(len(key)+len(op.value)), false); err != nil {
		return 0, err
	}
	op.ttl = ttlOf(s.opts.Expire, key)
	err := s.enqueue(op, func(cur uint64) error {
		switch {
		case cur == 0:
			return fmt.Errorf("%w: %s", ErrNotFound, key)
		case cur != rev:
			return fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, key, cur, rev)
		}
		return nil
	})
	return op.rev, err
}

func (s *badgerStore) Delete(ctx context.Context, key string, rev uint64) (KeyValue, error) {
	if err := ValidateKey(key); err != nil {
		return KeyValue{}, err
	}
	if err := s.guard.admit(int64(len(key)), true); err != nil {
		return KeyValue{}, err
	}
	op := &writeOp{kind: opDelete, key: key, event: Deleted}
	err := s.enqueue(op, func(cur uint64) error {
		switch {
		case cur == 0:
			return fmt.Errorf("%w: %s", ErrNotFound, key)
		case rev != 0 && cur != rev:
			return fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, key, cur, rev)
		}
		return nil
	})
	if err != nil {
		return KeyValue{}, err
	}
	return KeyValue{Key: key, Value: op.prev, Revision: op.rev}, nil
}

// commitLoop is the only writer of badger. It takes every queued write and
// writes them at their revisions; syncLoop then fsyncs and only after that
// acknowledges them and publishes their events, in revision order. The two
// overlap: the next batch is written while the previous one syncs, and
// concurrent writers share each fsync.
//
// After a failure it writes nothing more: it fails what is queued, waits
// until every batch in flight is finished, and undoes the failed writes
// (undoFailed), retrying every second until that succeeds; then writes
// resume. No restart is needed.
func (s *badgerStore) commitLoop() {
	defer s.commitWG.Done()
	syncs := make(chan syncBatch, 2)
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		s.syncLoop(syncs)
	}()
	defer func() {
		close(syncs)
		<-synced
	}()
	var undoFailures int
	for {
		s.mu.Lock()
		batch := s.queue
		s.queue = nil
		closed := s.closed
		failed := s.failed
		s.mu.Unlock()
		switch {
		case len(batch) > 0 && failed != nil:
			// Not written: the undo puts their keys back.
			syncs <- syncBatch{batch: batch, err: failed}
			continue
		case len(batch) > 0:
			if err := s.guard.beforeCommit(); err != nil {
				syncs <- syncBatch{batch: batch, err: err}
				continue
			}
			s.writeMu.Lock()
			events, err := s.commit(batch)
			s.writeMu.Unlock()
			if err == nil {
				s.written.Store(batch[len(batch)-1].rev)
			}
			syncs <- syncBatch{batch: batch, events: events, err: err}
			continue
		case closed:
			// Failed writes not undone yet were never acknowledged: after
			// the next open they may show or not, as after a crash.
			return
		case failed != nil:
			barrier := make(chan struct{})
			syncs <- syncBatch{barrier: barrier}
			<-barrier
			err := s.undoFailed()
			if err == nil {
				undoFailures = 0
				continue
			}
			if undoFailures++; undoFailures == 1 || undoFailures%60 == 0 {
				s.log.Error("store: cannot undo failed writes yet; refusing writes, retrying every second", "err", err, "attempts", undoFailures)
			}
			select {
			case <-s.kick:
			case <-time.After(time.Second):
			}
			continue
		}
		<-s.kick
	}
}

// syncBatch is a written batch waiting for its fsync, or a barrier:
// closed once every batch sent before it is finished.
type syncBatch struct {
	batch   []*writeOp
	events  []Event
	err     error
	barrier chan struct{}
}

// syncLoop makes written batches durable, one fsync for every batch that
// is waiting, then acknowledges them. After a failure nothing more is
// acknowledged as written until a barrier (the committer is about to
// undo the failed writes).
func (s *badgerStore) syncLoop(in <-chan syncBatch) {
	var failed error
	for b := range in {
		batches := []syncBatch{b}
		for more := b.barrier == nil; more; {
			select {
			case nb, ok := <-in:
				if !ok {
					more = false
					break
				}
				batches = append(batches, nb)
				more = nb.barrier == nil
			default:
				more = false
			}
		}
		var barrier chan struct{}
		if last := batches[len(batches)-1]; last.barrier != nil {
			barrier = last.barrier
			batches = batches[:len(batches)-1]
		}
		if len(batches) > 0 {
			for _, nb := range batches {
				if failed == nil && nb.err != nil {
					failed = nb.err
				}
			}
			if failed == nil {
				failed = s.sync()
			}
			for _, nb := range batches {
				s.finish(nb, failed)
			}
		}
		if barrier != nil {
			failed = nil
			close(barrier)
		}
	}
}

// sync makes every write handed to badger durable: its write-ahead logs
// and value logs, at the same time, outside badger's lock (see logSyncer).
func (s *badgerStore) sync() error {
	if f := s.syncFault.Load(); f != nil {
		if err := (*f)(); err != nil {
			return err
		}
	}
	vlogErr := make(chan error, 1)
	go func() { vlogErr <- s.vlogs.sync() }()
	err := s.wal.sync()
	return errors.Join(err, <-vlogErr)
}

// finish acknowledges a batch: on success it becomes readable and its
// events are published; on failure its writes are remembered for the
// undo and the store refuses writes until then.
func (s *badgerStore) finish(b syncBatch, err error) {
	if err != nil {
		s.mu.Lock()
		if s.failed == nil {
			s.failed = s.failure(err)
			s.log.Error("store write failed; refusing writes until the failed ones are undone", "err", err)
		}
		for _, op := range b.batch {
			switch op.kind {
			case opPut, opDelete:
				s.undoKeys[op.key] = struct{}{}
				s.undoRevs = append(s.undoRevs, op.rev)
			}
		}
		err = s.failed
		s.mu.Unlock()
		// The committer may be idle, waiting for a write that will not
		// come (writes are refused from now on): wake it to undo these.
		s.wake()
	} else {
		last := b.batch[len(b.batch)-1].rev
		if len(b.events) > 0 {
			s.lastEvent.Store(b.events[len(b.events)-1].Revision)
		}
		s.committed.Store(last)
		s.hub.publish(b.events, last)
	}
	for _, op := range b.batch {
		if err != nil {
			op.err = err
		}
		close(op.done)
	}
}

// failure is the error writes get while err is being undone: a
// SpaceError if the disk is full.
func (s *badgerStore) failure(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || strings.Contains(err.Error(), "no space left on device") {
		free, _ := statFree(s.opts.Dir)
		return &SpaceError{Cause: ErrDiskFull, Where: s.opts.Dir, Have: free, Limit: s.guard.reserve, Backend: err}
	}
	return fmt.Errorf("store write failed (%w); writes are refused until the store has undone it, which it retries every second", err)
}

// undoFailed puts every key failed writes wrote back to its value at the
// last acknowledged revision, and drops their log records, in one write
// at a new revision with no event (no client saw them). Nothing else is
// written meanwhile: the committer calls it once every batch in flight
// is finished, and writes are refused until it succeeds. A restored key
// is at the new revision; a key under an ExpiryRule starts a new TTL.
func (s *badgerStore) undoFailed() error {
	if !s.guard.housekeeping() {
		free, _ := statFree(s.opts.Dir)
		return &SpaceError{Cause: ErrDiskFull, Where: s.opts.Dir, Have: free, Limit: s.guard.floor}
	}
	good := s.committed.Load()
	s.written.Store(good)
	s.mu.Lock()
	keys := make([]string, 0, len(s.undoKeys))
	for k := range s.undoKeys {
		keys = append(keys, k)
	}
	revs := s.undoRevs
	s.rev++
	at := s.rev
	s.mu.Unlock()

	read := s.db.NewTransactionAt(good, false)
	defer read.Discard()
	undo := s.db.NewTransactionAt(at-1, true)
	defer undo.Discard()
	exists := make(map[string]bool, len(keys))
	now := time.Now()
	for _, k := range keys {
		item, err := read.Get([]byte(k))
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			err = undo.Delete([]byte(k))
		case err == nil:
			var v []byte
			if v, err = valueOf(item); err == nil {
				err = undo.Set([]byte(k), v)
				exists[k] = true
			}
			if ttl := ttlOf(s.opts.Expire, k); err == nil && ttl > 0 {
				err = undo.Set(expiryKey(now.Add(ttl), k), revBytes(at))
			}
		}
		if err != nil {
			return fmt.Errorf("undo write of %s: %w", k, err)
		}
	}
	for _, r := range revs {
		if err := undo.Delete(logKey(r)); err != nil {
			return err
		}
	}
	if err := undo.Set(revisionKey, revBytes(at)); err != nil {
		return err
	}
	s.writeMu.Lock()
	err := undo.CommitAt(at, nil)
	s.writeMu.Unlock()
	if err == nil {
		err = s.sync()
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	for _, k := range keys {
		if exists[k] {
			s.index[k] = at
		} else {
			delete(s.index, k)
		}
	}
	s.failed = nil
	s.undoKeys = map[string]struct{}{}
	s.undoRevs = nil
	s.mu.Unlock()
	s.written.Store(at)
	s.committed.Store(at)
	s.hub.publish(nil, at)
	s.log.Warn("store: undid failed writes; writes resume", "writes", len(revs), "keys", len(keys), "undo_revision", at)
	return nil
}

// commit writes each op as its own badger transaction at the op's revision.
// A transaction whose entries share one version carries badger's begin/end
// markers, so recovery after a crash keeps an op whole or drops it, and
// requests reach the log in revision order, so what survives a crash is a
// prefix of the revisions. (One transaction with a version per entry would
// lose both properties: badger writes its entries in map order, unmarked.)
func (s *badgerStore) commit(batch []*writeOp) ([]Event, error) {
	now := time.Now()
	// Earlier batches may be written but not yet synced: read previous
	// values at the last written revision, not the last durable one.
	readTxn := s.db.NewTransactionAt(s.written.Load(), false)
	defer readTxn.Discard()
	// Values written earlier in this batch, for later ops' previous values.
	inBatch := map[string][]byte{}
	events := make([]Event, 0, len(batch))
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	send := func(txn *badger.Txn, rev uint64) {
		wg.Add(1)
		txn.CommitAt(rev, func(err error) {
			if err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
			}
			wg.Done()
		})
	}
	for _, op := range batch {
		if op.kind == opCompact {
			txns, err := s.compactionTxns(op)
			if err != nil {
				wg.Wait()
				return nil, err
			}
			for _, txn := range txns {
				send(txn, op.rev)
			}
			continue
		}
		if op.kind == opHousekeep {
			txn, err := s.housekeepingTxn(op)
			if err != nil {
				wg.Wait()
				return nil, err
			}
			send(txn, op.rev)
			continue
		}
		if op.event != Added && !op.prevKnown {
			prev, ok := inBatch[op.key]
			if !ok {
				item, err := readTxn.Get([]byte(op.key))
				if err == nil {
					prev, err = valueOf(item)
				}
				if err != nil {
					wg.Wait()
					return nil, fmt.Errorf("read %s: %w", op.key, err)
				}
			}
			op.prev = prev
		}
		txn := s.db.NewTransactionAt(op.rev-1, true)
		var err error
		if op.kind == opDelete {
			err = txn.Delete([]byte(op.key))
			inBatch[op.key] = nil
		} else {
			err = txn.Set([]byte(op.key), op.value)
			inBatch[op.key] = op.value
		}
		if err == nil {
			err = txn.Set(logKey(op.rev), encodeLogRecord(op.event, now, op.key))
		}
		if err == nil && op.ttl > 0 {
			// The deadline runs from the commit: each write restarts it.
			// Records of earlier writes stay until their deadline, when
			// the sweep finds the key at another revision and drops them.
			err = txn.Set(expiryKey(now.Add(op.ttl), op.key), revBytes(op.rev))
		}
		if err != nil {
			txn.Discard()
			wg.Wait()
			return nil, err
		}
		send(txn, op.rev)
		ev := Event{Type: op.event, Key: op.key, Value: op.value, PrevValue: op.prev, Revision: op.rev}
		if op.event == Deleted {
			ev.Value = op.prev
		}
		events = append(events, ev)
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return events, nil
}

// housekeepingTxn drops and sets op's internal keys at its revision,
// which revisionKey records.
func (s *badgerStore) housekeepingTxn(op *writeOp) (*badger.Txn, error) {
	txn := s.db.NewTransactionAt(op.rev-1, true)
	err := txn.Set(revisionKey, revBytes(op.rev))
	for _, k := range op.drops {
		if err == nil {
			err = txn.Delete(k)
		}
	}
	for k, v := range op.sets {
		if err == nil {
			err = txn.Set([]byte(k), v)
		}
	}
	if err != nil {
		txn.Discard()
		return nil, err
	}
	return txn, nil
}

func (s *badgerStore) Get(ctx context.Context, key string) (KeyValue, error) {
	return s.GetUnless(ctx, key, nil)
}

// GetUnless reads the value from the value log (a copy, its checksum
// verified) only when have says it is needed. When the key's last write
// is committed, the key index gives its revision without a read of
// badger's tables: a write that finds the object in the API server's
// cache of recent writes costs no read at all.
func (s *badgerStore) GetUnless(ctx context.Context, key string, have func(rev uint64) bool) (KeyValue, error) {
	if err := ValidateKey(key); err != nil {
		return KeyValue{}, err
	}
	if have != nil {
		if rev, ok := s.committedRevision(key); ok && have(rev) {
			return KeyValue{Key: key, Revision: rev}, nil
		}
	}
	if err := s.beginRead(); err != nil {
		return KeyValue{}, err
	}
	defer s.reads.RUnlock()
	txn := s.db.NewTransactionAt(s.committed.Load(), false)
	defer txn.Discard()
	item, err := txn.Get([]byte(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return KeyValue{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return KeyValue{}, err
	}
	if have != nil && have(item.Version()) {
		return KeyValue{Key: key, Revision: item.Version()}, nil
	}
	v, err := valueOf(item)
	if err != nil {
		return KeyValue{}, err
	}
	return KeyValue{Key: key, Value: v, Revision: item.Version()}, nil
}

// committedRevision is the revision of key's last write when that write
// is committed: what a read at the committed revision would find, as of
// the moment the index was consulted. committed is loaded first, so a
// write the index shows at or below it was durable and readable by then,
// and no later write of the key had been queued. ok is false for a key
// deleted or never written, for one whose last write is still on its way
// to disk, and once the store is closed: the caller reads badger.
func (s *badgerStore) committedRevision(key string) (uint64, bool) {
	committed := s.committed.Load()
	s.mu.Lock()
	rev, ok := s.index[key]
	closed := s.closed
	s.mu.Unlock()
	return rev, ok && !closed && rev <= committed
}

// beginRead is called before a read of badger; unless it fails (the
// store is closed), s.reads.RUnlock must follow the read.
func (s *badgerStore) beginRead() error {
	s.reads.RLock()
	if s.readsClosed {
		s.reads.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *badgerStore) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

func (s *badgerStore) List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return ListResult{}, err
	}
	if err := s.beginRead(); err != nil {
		return ListResult{}, err
	}
	defer s.reads.RUnlock()
	start, rev := prefix, opts.Revision
	if opts.Continue != "" {
		var err error
		if start, rev, err = DecodeContinue(prefix, opts.Continue); err != nil {
			return ListResult{}, err
		}
	}
	current := s.committed.Load()
	switch {
	case rev == 0:
		rev = current
	case rev > current:
		return ListResult{}, fmt.Errorf("%w: %d > %d", ErrFutureRevision, rev, current)
	case rev < s.compacted.Load():
		return ListResult{}, fmt.Errorf("%w: revision %d, compacted at %d", ErrCompacted, rev, s.compacted.Load())
	}
	txn := s.db.NewTransactionAt(rev, false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
	defer it.Close()
	res := ListResult{Revision: rev}
	for it.Seek([]byte(start)); it.Valid(); it.Next() {
		item := it.Item()
		if opts.Limit > 0 && int64(len(res.Items)) == opts.Limit {
			tok, err := EncodeContinue(prefix, string(item.Key()), rev)
			if err != nil {
				return ListResult{}, err
			}
			res.Continue = tok
			for ; it.Valid(); it.Next() {
				res.RemainingCount++
			}
			break
		}
		v, err := valueOf(item)
		if err != nil {
			return ListResult{}, err
		}
		res.Items = append(res.Items, KeyValue{Key: string(item.KeyCopy(nil)), Value: v, Revision: item.Version()})
	}
	return res, nil
}

func (s *badgerStore) Watch(ctx context.Context, prefix string, rev uint64) (Watcher, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	current := s.hub.current()
	switch {
	case rev == 0:
		rev = current
	case rev > current:
		return nil, fmt.Errorf("%w: %d > %d", ErrFutureRevision, rev, current)
	case rev < s.compacted.Load():
		return nil, fmt.Errorf("%w: revision %d, compacted at %d", ErrCompacted, rev, s.compacted.Load())
	}
	return s.hub.watch(ctx, prefix, rev), nil
}

// readLog serves watchers history from the revision log and MVCC reads.
func (s *badgerStore) readLog(after, upTo uint64, limit int) ([]Event, error) {
	if err := s.beginRead(); err != nil {
		return nil, err
	}
	defer s.reads.RUnlock()
	if after < s.compacted.Load() {
		return nil, ErrCompacted
	}
	txn := s.db.NewTransactionAt(upTo, false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix})
	defer it.Close()
	var evs []Event
	for it.Seek(logKey(after + 1)); it.Valid() && len(evs) < limit; it.Next() {
		item := it.Item()
		rev := binary.BigEndian.Uint64(item.Key()[len(logPrefix):])
		if rev > upTo {
			break
		}
		rec, err := item.ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		typ, _, key, err := decodeLogRecord(rec)
		if err != nil {
			return nil, err
		}
		ev := Event{Type: typ, Key: key, Revision: rev}
		if typ != Deleted {
			if ev.Value, err = s.valueAt(key, rev); err != nil {
				return nil, err
			}
		}
		if typ != Added {
			if ev.PrevValue, err = s.valueAt(key, rev-1); err != nil {
				return nil, err
			}
			if typ == Deleted {
				ev.Value = ev.PrevValue
			}
		}
		evs = append(evs, ev)
	}
	if after < s.compacted.Load() {
		// Compaction raced the read: the history may be incomplete.
		return nil, ErrCompacted
	}
	return evs, nil
}

func (s *badgerStore) valueAt(key string, rev uint64) ([]byte, error) {
	txn := s.db.NewTransactionAt(rev, false)
	defer txn.Discard()
	item, err := txn.Get([]byte(key))
	if err != nil {
		return nil, fmt.Errorf("history of %s at %d: %w", key, rev, err)
	}
	return valueOf(item)
}

func (s *badgerStore) CurrentRevision(ctx context.Context) (uint64, error) {
	return s.committed.Load(), s.usable()
}

func (s *badgerStore) Compact(ctx context.Context, rev uint64) error {
	if rev > s.committed.Load() {
		return fmt.Errorf("%w: %d > %d", ErrFutureRevision, rev, s.committed.Load())
	}
	// A compaction writes: not on a disk too full for it.
	if !s.guard.housekeeping() {
		free, _ := statFree(s.opts.Dir)
		return &SpaceError{Cause: ErrDiskFull, Where: s.opts.Dir, Have: free, Limit: s.guard.floor}
	}
	// One compaction at a time; the log scan runs here, not in the
	// committer, so writers never wait for it.
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	if rev <= s.compacted.Load() {
		return nil
	}
	start := max(s.logStart, 1)
	if c := s.compacted.Load(); start <= c && s.logStart == 0 {
		start = c + 1
	}
	if err := s.beginRead(); err != nil {
		return err
	}
	read := s.db.NewTransactionAt(rev, false)
	it := read.NewIterator(badger.IteratorOptions{Prefix: logPrefix})
	var keys [][]byte
	for it.Seek(logKey(start)); it.Valid(); it.Next() {
		k := it.Item().KeyCopy(nil)
		if binary.BigEndian.Uint64(k[len(logPrefix):]) > rev {
			break
		}
		keys = append(keys, k)
	}
	it.Close()
	read.Discard()
	s.reads.RUnlock()
	if err := s.enqueue(&writeOp{kind: opCompact, target: rev, logKeys: keys}, nil); err != nil {
		return err
	}
	s.logStart = rev + 1
	return nil
}

// compactionTxns records op.target as the compacted revision, then drops the
// revision log at and below it; badger drops old versions of keys as its LSM
// compactions pass the discard timestamp. The record goes first: if a crash
// tears the rest, readers already refuse the half-dropped history, and the
// next compaction sweeps what is left from the start of the log.
func (s *badgerStore) compactionTxns(op *writeOp) ([]*badger.Txn, error) {
	if op.target <= s.compacted.Load() {
		return nil, nil
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], op.target)
	first := s.db.NewTransactionAt(op.rev-1, true)
	if err := first.Set(compactedKey, v[:]); err != nil {
		first.Discard()
		return nil, err
	}
	txns := []*badger.Txn{first}
	for i := 0; i < len(op.logKeys); i += 1000 {
		txn := s.db.NewTransactionAt(op.rev-1, true)
		txns = append(txns, txn)
		for _, k := range op.logKeys[i:min(i+1000, len(op.logKeys))] {
			if err := txn.Delete(k); err != nil {
				for _, t := range txns {
					t.Discard()
				}
				return nil, err
			}
		}
	}
	// Readers check compacted before reading; the previous round's target
	// becomes badger's discard point now, one round late, so no read that
	// passed that check loses its versions mid-flight.
	s.discardMu.Lock()
	s.db.SetDiscardTs(s.pendingDiscard)
	s.pendingDiscard = op.target
	s.discardMu.Unlock()
	s.compacted.Store(op.target)
	return txns, nil
}

// autoCompact keeps at least RetainFor of history and at least the last
// RetainRevisions revisions. It waits until a tenth of RetainRevisions can
// go: a compaction is itself a synced write. With the defaults (no
// revision floor, one compaction every 5 minutes) an idle node, whose
// Lease renewals move the revision 360 times an hour, adds 12 compactions
// an hour.
func (s *badgerStore) autoCompact() {
	if !s.guard.housekeeping() {
		return
	}
	newest := s.lastEvent.Load()
	if newest <= s.opts.RetainRevisions {
		return
	}
	limit := newest - s.opts.RetainRevisions
	cutoff := time.Now().Add(-s.opts.RetainFor)
	from := s.compacted.Load()
	if limit <= from {
		return
	}
	txn := s.db.NewTransactionAt(limit, false)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix})
	var target uint64
	for it.Seek(logKey(from + 1)); it.Valid(); it.Next() {
		item := it.Item()
		rev := binary.BigEndian.Uint64(item.Key()[len(logPrefix):])
		if rev > limit {
			break
		}
		var at time.Time
		err := item.Value(func(v []byte) error {
			_, t, _, err := decodeLogRecord(v)
			at = t
			return err
		})
		if err != nil || at.After(cutoff) {
			break
		}
		target = rev
	}
	it.Close()
	txn.Discard()
	if target > from && target-from >= max(s.opts.RetainRevisions/10, 1) {
		if err := s.Compact(context.Background(), target); err != nil {
			s.log.Warn("store compaction failed", "target", target, "err", err)
			return
		}
		s.log.Debug("store compacted", "revision", target)
	}
}

// gcValueLog rewrites value-log files that are mostly garbage. It
// writes their live values anew, so it waits for room on the disk.
func (s *badgerStore) gcValueLog() {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	for s.guard.housekeeping() && s.db.RunValueLogGC(0.5) == nil {
		select {
		case <-s.stop:
			return
		default:
		}
	}
}

func (s *badgerStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.wake()
	s.commitWG.Wait()
	close(s.stop)
	s.wg.Wait()
	s.hub.close()
	s.reads.Lock()
	s.readsClosed = true
	s.reads.Unlock()
	// Closing flushes the memtable into a table, whatever the disk holds.
	s.guard.roomToOpenOrClose()
	err := s.db.Close()
	s.wal.close()
	s.vlogs.close()
	s.advisor.close()
	return err
}

// badgerLogger routes badger's logging into slog, quietly: its INFO lines
// are routine.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) { b.l.Error("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) {
	msg := fmt.Sprintf(f, a...)
	// Cache statistics are tuning hints, not problems of the user's.
	if strings.Contains(msg, "Block cache might be too small") || strings.Contains(msg, "Cache life expectancy") {
		b.l.Debug("badger: " + msg)
		return
	}
	b.l.Warn("badger: " + msg)
}
func (b badgerLogger) Infof(f string, a ...any)  { b.l.Debug("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Debugf(f string, a ...any) {}
