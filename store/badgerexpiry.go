package store

import (
	"encoding/binary"
	"errors"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Expiry on badger: each put under an ExpiryRule writes, in the same
// transaction, an expiry record keyed by its deadline (see expiryPrefix).
// A sweep reads the records whose deadline has passed, in deadline order,
// and deletes each key still at the record's revision, an ordinary
// delete: a revision, a Deleted event, the last value. A record whose key
// was written again (a newer record holds the new deadline) or deleted
// since is only dropped. The records hold no memory and survive
// restarts; a store that was down past some deadlines deletes those keys
// at its first sweep.
//
// Why not badger's own TTLs: badger drops an expired entry silently, at
// no revision, so watchers would never see a delete and the revision log
// would hold writes of keys that no read finds.

// expiryBatch bounds one sweep pass: the records read, and the deletes
// queued, at once.
const expiryBatch = 1000

var errStale = errors.New("expiry record is stale")

// expireKeys sweeps until no expired record is left, a pass at a time.
func (s *badgerStore) expireKeys() {
	for {
		n, err := s.expirePass(time.Now(), expiryBatch)
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				s.log.Warn("store: expiring keys", "err", err)
			}
			return
		}
		if n < expiryBatch {
			return
		}
		select {
		case <-s.stop:
			return
		default:
		}
	}
}

type dueRecord struct {
	record []byte
	key    string
	rev    uint64
}

// expirePass deletes the keys of up to limit records due at now and
// drops those records; it returns how many records it took.
func (s *badgerStore) expirePass(now time.Time, limit int) (int, error) {
	if !s.guard.housekeeping() {
		return 0, nil // deletes would be refused too; later
	}
	due, err := s.dueRecords(now, limit)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	// Queue every delete, then wait for all: one batch, one fsync.
	var queued []*writeOp
	var firstErr error
	drops := make([][]byte, 0, len(due))
	for _, d := range due {
		op := &writeOp{kind: opDelete, key: d.key, event: Deleted}
		err := s.queueOp(op, func(cur uint64) error {
			if cur != d.rev {
				return errStale
			}
			return nil
		})
		switch {
		case err == nil:
			queued = append(queued, op)
		case errors.Is(err, errStale):
		default:
			firstErr = err
		}
		if firstErr != nil {
			break
		}
		drops = append(drops, d.record)
	}
	if firstErr == nil {
		op := &writeOp{kind: opHousekeep, drops: drops}
		if err := s.queueOp(op, nil); err != nil {
			firstErr = err
		} else {
			queued = append(queued, op)
		}
	}
	for _, op := range queued {
		<-op.done
		if op.err != nil && firstErr == nil {
			firstErr = op.err
		}
	}
	return len(due), firstErr
}

// dueRecords reads up to limit expiry records due at now, oldest
// deadline first.
func (s *badgerStore) dueRecords(now time.Time, limit int) ([]dueRecord, error) {
	if err := s.beginRead(); err != nil {
		return nil, err
	}
	defer s.reads.RUnlock()
	txn := s.db.NewTransactionAt(s.committed.Load(), false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: expiryPrefix})
	defer it.Close()
	var due []dueRecord
	at := uint64(now.UnixNano())
	for it.Rewind(); it.Valid() && len(due) < limit; it.Next() {
		item := it.Item()
		k := item.Key()
		if len(k) < len(expiryPrefix)+8 {
			continue
		}
		if binary.BigEndian.Uint64(k[len(expiryPrefix):]) > at {
			break
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		var rev uint64
		if len(v) == 8 {
			rev = binary.BigEndian.Uint64(v)
		}
		due = append(due, dueRecord{record: item.KeyCopy(nil), key: string(k[len(expiryPrefix)+8:]), rev: rev})
	}
	return due, nil
}
