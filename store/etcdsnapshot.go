package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"os"
	"time"
)

// Snapshot of the etcd backend is etcd's own: the database file etcd's
// snapshot API streams (what etcdctl snapshot save writes), at the
// revision of its first response (0, unknown, from etcd before 3.6,
// which sends none), with etcd's SHA-256 of it appended.
// etcdutl snapshot restore reads it back into a new etcd data dir; bonsai
// does not restore it itself: the etcd servers are not its to replace.
func (s *etcdStore) Snapshot(ctx context.Context, w io.Writer, bonsaiVersion string) (SnapshotInfo, error) {
	resp, err := s.cli.Maintenance.SnapshotWithVersion(ctx)
	if err != nil {
		return SnapshotInfo{}, mapEtcdErr(err)
	}
	defer resp.Snapshot.Close()
	info := SnapshotInfo{SnapshotHeader: SnapshotHeader{Bonsai: bonsaiVersion, Backend: "etcd", Created: time.Now().UTC()}}
	if resp.Header != nil {
		info.Revision = uint64(resp.Header.Revision)
	}
	check := &etcdSnapshotCheck{h: sha256.New()}
	info.Bytes, err = io.Copy(io.MultiWriter(w, check), resp.Snapshot)
	if err != nil {
		return info, mapEtcdErr(err)
	}
	if err := check.verify(); err != nil {
		return info, err
	}
	copy(info.SHA256[:], check.tail)
	return info, nil
}

// SnapshotBackend names the backend whose snapshots s writes.
func (s *etcdStore) SnapshotBackend() string { return "etcd" }

// SnapshotBackend names the backend whose snapshots s writes.
func (s *badgerStore) SnapshotBackend() string { return "badger" }

// bboltMagic is at offset 16 of an etcd database file (bbolt's first
// meta page).
const bboltMagic = 0xED0CDAED

// etcdSnapshotCheck checks an etcd snapshot as it is written: a bbolt
// file followed by the SHA-256 of its bytes.
type etcdSnapshotCheck struct {
	h    hash.Hash
	head []byte
	tail []byte // the last sha256.Size bytes seen, not yet hashed
	n    int64
}

func (c *etcdSnapshotCheck) Write(p []byte) (int, error) {
	if len(c.head) < 20 {
		c.head = append(c.head, p[:min(len(p), 20-len(c.head))]...)
	}
	c.n += int64(len(p))
	buf := append(c.tail, p...)
	if keep := len(buf) - sha256.Size; keep > 0 {
		c.h.Write(buf[:keep])
		buf = buf[keep:]
	}
	c.tail = append([]byte(nil), buf...)
	return len(p), nil
}

func (c *etcdSnapshotCheck) verify() error {
	switch {
	case len(c.head) < 20 || binary.LittleEndian.Uint32(c.head[16:20]) != bboltMagic:
		return fmt.Errorf("%w: not an etcd database", ErrCorruptSnapshot)
	case len(c.tail) < sha256.Size || !bytes.Equal(c.h.Sum(nil), c.tail):
		return fmt.Errorf("%w: etcd snapshot checksum mismatch (%d bytes)", ErrCorruptSnapshot, c.n)
	}
	return nil
}

// CheckEtcdSnapshot reads an etcd snapshot from r and checks its
// checksum, copying it to w.
func CheckEtcdSnapshot(r io.Reader, w io.Writer) (int64, error) {
	check := &etcdSnapshotCheck{h: sha256.New()}
	n, err := io.Copy(io.MultiWriter(w, check), r)
	if err != nil {
		return n, err
	}
	return n, check.verify()
}

// IsEtcdSnapshot says whether the file at path starts like an etcd
// database.
func IsEtcdSnapshot(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [20]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false
	}
	return binary.LittleEndian.Uint32(head[16:20]) == bboltMagic
}
