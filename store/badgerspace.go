package store

import (
	"context"
	"time"
)

// reclaimEvery is how often, at most, a store over its quota tries to
// give space back.
const reclaimEvery = 10 * time.Second

// watchSpace runs every second: it re-reads the disk and, while the
// store is over its quota or refuses writes for it, reclaims space.
func (s *badgerStore) watchSpace() {
	s.guard.refresh()
	used, over, refusals := s.guard.quotaPressure()
	if !over && refusals == s.reclaimedRefusals || time.Since(s.lastReclaim) < reclaimEvery {
		return
	}
	// Again only if something changed: deletes since, or the last round
	// freed space (the value-log GC frees a file per round).
	if s.committed.Load() == s.reclaimedAt && used >= s.reclaimedUsed {
		return
	}
	s.reclaimedRefusals = refusals
	s.reclaimSpace()
}

// reclaimSpace gives the space of deleted objects and old history back
// now, instead of when later writes would have made badger do it: those
// writes are the ones refused over the quota, so without this a full
// store would stay full.
//
//  1. History is compacted up to the newest event, whatever RetainFor
//     and RetainRevisions say: over its quota the store keeps only the
//     present. Watchers behind get 410 Gone and re-list, as after any
//     compaction.
//  2. badger's discard point moves to the compacted revision at once,
//     after the reads under way (which may read older revisions) end.
//  3. The memtables are flushed and level 0 compacted into the tree,
//     dropping the versions under the discard point, which tells the
//     value-log GC what it may free. badger has no call for only that;
//     DropPrefix does it (it flushes every memtable, then compacts level
//     0 and the tables holding the prefix), given a prefix that holds
//     one marker key and nothing else.
//  4. The value log is garbage collected.
func (s *badgerStore) reclaimSpace() {
	if !s.guard.housekeeping() {
		return
	}
	start := time.Now()
	s.lastReclaim = start
	before, _, _ := s.guard.quotaPressure()
	if target := s.lastEvent.Load(); target > s.compacted.Load() {
		if err := s.Compact(context.Background(), target); err != nil {
			s.log.Warn("store over quota: compaction failed", "err", err)
			return
		}
	}
	s.reads.Lock()
	compacted := s.compacted.Load()
	s.reads.Unlock()
	s.discardMu.Lock()
	if compacted > s.pendingDiscard {
		s.pendingDiscard = compacted
	}
	s.db.SetDiscardTs(s.pendingDiscard)
	s.discardMu.Unlock()

	marker := &writeOp{kind: opHousekeep, sets: map[string][]byte{string(reclaimPrefix) + "/marker": {1}}}
	if err := s.enqueue(marker, nil); err != nil {
		s.log.Warn("store over quota: cannot reclaim space", "err", err)
		return
	}
	s.writeMu.Lock()
	s.gcMu.Lock()
	err := s.db.DropPrefix(reclaimPrefix)
	s.gcMu.Unlock()
	s.writeMu.Unlock()
	if err != nil {
		s.log.Warn("store over quota: flushing and compacting the tree failed", "err", err)
	}
	s.gcValueLog()
	after, _, _ := s.guard.quotaPressure()
	s.reclaimedAt, s.reclaimedUsed = s.committed.Load(), after
	s.log.Info("store over quota: reclaimed space", "before", before, "after", after, "quota", s.guard.quota, "compacted", compacted, "took", time.Since(start).Round(time.Millisecond))
}
