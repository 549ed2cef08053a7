package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// snapshotPath streams a snapshot of the store (see store.Snapshotter)
// for `bonsai snapshot save`, which cannot open a store the running
// server holds. Only system:masters may call it: a snapshot holds every
// Secret.
const snapshotPath = "/bonsai/snapshot"

// SnapshotBackendHeader names the format of the snapshot streamed:
// badger (bonsai's own) or etcd (etcd's database file).
const SnapshotBackendHeader = "Bonsai-Snapshot-Backend"

func (s *Server) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	u, ok := encryptionCaller(w, r, "take a snapshot of the datastore")
	if !ok {
		return
	}
	if s.snapshots == nil {
		writeError(w, apierrors.NewBadRequest("this datastore does not take snapshots"))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(SnapshotBackendHeader, s.snapshots.SnapshotBackend())
	// An error once bytes are sent shows as a truncated snapshot, which
	// the client refuses; before, it gets a Status.
	cw := &countingWriter{w: w}
	info, err := s.snapshots.Snapshot(r.Context(), cw, s.cfg.Version)
	if err != nil {
		s.log.Warn("snapshot failed", "user", u.Name, "err", err)
		if cw.n == 0 {
			w.Header().Del("Content-Type")
			writeError(w, apierrors.NewInternalError(fmt.Errorf("snapshot: %w", err)))
		}
		return
	}
	s.log.Info("snapshot taken", "user", u.Name, "revision", info.Revision, "keys", info.Keys, "bytes", strconv.FormatInt(info.Bytes, 10))
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
