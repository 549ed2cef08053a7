package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Snapshot reads every live key and the expiry records (so that restored
// Events still expire) at the committed revision, from one read
// transaction: writes go on meanwhile and are not in it. The revision log
// is left out; see snapshotMagic.
func (s *badgerStore) Snapshot(ctx context.Context, w io.Writer, bonsaiVersion string) (SnapshotInfo, error) {
	if err := s.beginRead(); err != nil {
		return SnapshotInfo{}, err
	}
	defer s.reads.RUnlock()
	rev := s.committed.Load()
	txn := s.db.NewTransactionAt(rev, false)
	defer txn.Discard()
	sw, err := newSnapshotWriter(w, SnapshotHeader{Format: SnapshotFormat, Bonsai: bonsaiVersion, Backend: "badger", Revision: rev, Created: time.Now().UTC()})
	if err != nil {
		return SnapshotInfo{}, err
	}
	for _, prefix := range [][]byte{userKeysPrefix, expiryPrefix} {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				it.Close()
				return SnapshotInfo{}, err
			}
			item := it.Item()
			v, err := valueOf(item)
			if err != nil {
				it.Close()
				return SnapshotInfo{}, err
			}
			sw.add(item.Key(), item.Version(), v)
		}
		it.Close()
	}
	return sw.finish()
}

// RestoreBadger makes a new store in dir from the snapshot at path. dir
// must not exist or be empty; the store is written in a temporary
// directory next to it and renamed into place once synced, so a failed
// or interrupted restore leaves no store behind. The snapshot is read
// through once to check it before anything is written.
func RestoreBadger(dir, path string, log *slog.Logger) (SnapshotInfo, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	info, err := VerifySnapshot(path)
	if err != nil {
		return info, err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return info, fmt.Errorf("%s is not empty; refusing to restore over it", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return info, err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return info, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".restore-*")
	if err != nil {
		return info, err
	}
	if err := writeRestoredStore(tmp, path, info, log); err != nil {
		os.RemoveAll(tmp)
		return info, err
	}
	os.Remove(dir) // empty, or absent
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return info, err
	}
	return info, syncDir(parent)
}

// writeRestoredStore writes the snapshot's keys at their revisions into a
// new badger database in dir, marks it compacted at the snapshot's
// revision, and syncs every file.
func writeRestoredStore(dir, path string, info SnapshotInfo, log *slog.Logger) error {
	db, err := badger.OpenManaged(badgerOptions(dir, 24<<20, log))
	if err != nil {
		return err
	}
	wb := db.NewManagedWriteBatch()
	_, err = readSnapshot(path, func(rec snapshotRecord) error {
		if err := checkRestoredKey(rec.key); err != nil {
			return err
		}
		return wb.SetEntryAt(badger.NewEntry(rec.key, rec.value), rec.rev)
	})
	rev := revBytes(info.Revision)
	for _, kv := range []struct {
		key, value []byte
		at         uint64
	}{
		{formatKey, formatValue, 1},
		{compactedKey, rev, info.Revision},
		{revisionKey, rev, info.Revision},
	} {
		if err == nil {
			err = wb.SetEntryAt(badger.NewEntry(kv.key, kv.value), kv.at)
		}
	}
	if err == nil {
		err = wb.Flush()
	} else {
		wb.Cancel()
	}
	if err == nil {
		err = db.Sync()
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return syncTree(dir)
}

// checkRestoredKey takes the keys a snapshot may hold: API keys and
// expiry records.
func checkRestoredKey(key []byte) error {
	if bytes.HasPrefix(key, expiryPrefix) {
		if len(key) <= len(expiryPrefix)+8 {
			return corrupt("short expiry record %q", key)
		}
		key = key[len(expiryPrefix)+8:]
	}
	if err := ValidateKey(string(key)); err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
	}
	return nil
}

// syncTree syncs every file in dir, then dir.
func syncTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	return syncDir(dir)
}
