package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// logSyncer makes what badger appended to its logs durable without going
// through badger's Sync.
//
// Why: badger's Sync holds the database's lock (for reading) while it
// syncs the memtable's write-ahead log, and every write takes that lock
// (for writing) before it goes into the memtable. So the committer could
// not write the next batch while the previous one synced: the two stages
// ran one after the other, and the machine idled in every sync.
//
// Both logs are files badger writes through shared mappings; fdatasync of
// the file writes the pages written through them (they are the file's
// page cache), as badger's msync would. A log kind's files are numbered in
// order (00007.mem, 00008.mem; 000003.vlog) and badger appends only to the
// newest: it creates the next file before the first write into it. So a
// sync first picks up every file created since the last one (the next
// numbers that exist), syncs them and the one that was newest before, and
// then keeps only the newest open. That also covers a memtable badger
// just swapped out: its log is not synced by badger until the memtable is
// flushed to a table, and it holds writes acknowledged before that.
type logSyncer struct {
	dir, ext string
	width    int // digits of the file names

	mu    sync.Mutex
	files []logFile // the newest last
}

type logFile struct {
	fid  uint64
	file *os.File
}

func newLogSyncer(dir, ext string, width int) *logSyncer {
	return &logSyncer{dir: dir, ext: ext, width: width}
}

// start opens the newest log of the kind that exists now.
func (l *logSyncer) start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.openNewest()
}

// openNewest opens the newest log of the kind, if there is one; callers
// hold mu.
func (l *logSyncer) openNewest() error {
	names, err := filepath.Glob(filepath.Join(l.dir, "*"+l.ext))
	if err != nil {
		return err
	}
	var newest uint64
	found := false
	for _, n := range names {
		fid, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(n), l.ext), 10, 64)
		if err != nil {
			continue
		}
		if !found || fid > newest {
			newest, found = fid, true
		}
	}
	if !found {
		return nil
	}
	return l.open(newest)
}

func (l *logSyncer) path(fid uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%0*d%s", l.width, fid, l.ext))
}

// open adds file fid as the newest; callers hold mu.
func (l *logSyncer) open(fid uint64) error {
	f, err := os.Open(l.path(fid))
	if err != nil {
		return err
	}
	l.files = append(l.files, logFile{fid, f})
	return nil
}

// sync makes every write badger made to the kind's logs so far durable.
func (l *logSyncer) sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.catchUp(); err != nil {
		return err
	}
	for _, f := range l.files {
		if err := unix.Fdatasync(int(f.file.Fd())); err != nil {
			return fmt.Errorf("sync %s: %w", f.file.Name(), err)
		}
	}
	// Only the newest gets writes from now on.
	for len(l.files) > 1 {
		l.files[0].file.Close()
		l.files = l.files[1:]
	}
	return nil
}

// catchUp opens the logs created since the last sync; callers hold mu.
func (l *logSyncer) catchUp() error {
	if len(l.files) == 0 {
		return l.openNewest() // none yet, or none when the store opened
	}
	for next := l.files[len(l.files)-1].fid + 1; ; next++ {
		err := l.open(next)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (l *logSyncer) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.files {
		f.file.Close()
	}
	l.files = nil
}
