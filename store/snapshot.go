package store

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"
)

// A snapshot is the store's live keys read at one revision, with the
// revision of each key's last write, in one file:
//
//	bonsai-snapshot/1\n
//	header (JSON, one line)\n
//	records: 'k', key length, key, revision, value length, value (uvarints)
//	'e', record count (uvarint), SHA-256 of every byte before it
//
// It carries no history: a store restored from it starts compacted at
// the snapshot's revision, so a watch or list from an older revision
// gets ErrCompacted (410 Gone), as after a compaction, and one from the
// snapshot's revision resumes. The checksum comes last because the
// records are streamed as they are read.
const snapshotMagic = "bonsai-snapshot/1\n"

// SnapshotFormat is the version of the snapshot format this bonsai writes
// and reads.
const SnapshotFormat = 1

// SnapshotHeader says what a snapshot holds.
type SnapshotHeader struct {
	Format int `json:"format"`
	// Bonsai is the version of the bonsai that took it.
	Bonsai string `json:"bonsai"`
	// Backend is the store it was taken from.
	Backend string `json:"backend"`
	// Revision is the revision every key was read at.
	Revision uint64    `json:"revision"`
	Created  time.Time `json:"created"`
}

// SnapshotInfo is a snapshot's header with what its body held.
type SnapshotInfo struct {
	SnapshotHeader
	Keys   int64
	Bytes  int64
	SHA256 [sha256.Size]byte
}

// Snapshotter is implemented by stores that can write a consistent
// snapshot of themselves while they serve.
type Snapshotter interface {
	// Snapshot writes every live key at the current revision to w.
	// bonsaiVersion goes into the header.
	Snapshot(ctx context.Context, w io.Writer, bonsaiVersion string) (SnapshotInfo, error)
	// SnapshotBackend is the Backend of its snapshots' headers: badger
	// (this package's format) or etcd (etcd's own).
	SnapshotBackend() string
}

// ErrCorruptSnapshot is a snapshot file that cannot be read back whole.
var ErrCorruptSnapshot = errors.New("not a valid bonsai snapshot")

// Bounds on what a record may claim, so a corrupt length never makes a
// reader allocate gigabytes.
const (
	maxSnapshotKey   = MaxKeyLen + 64
	maxSnapshotValue = 64 << 20
)

// snapshotWriter streams records, hashing all it writes.
type snapshotWriter struct {
	w    *bufio.Writer
	h    hash.Hash
	n    int64
	info SnapshotInfo
	buf  [binary.MaxVarintLen64]byte
}

func newSnapshotWriter(w io.Writer, hdr SnapshotHeader) (*snapshotWriter, error) {
	sw := &snapshotWriter{w: bufio.NewWriterSize(w, 256<<10), h: sha256.New()}
	sw.info.SnapshotHeader = hdr
	js, err := json.Marshal(hdr)
	if err != nil {
		return nil, err
	}
	sw.write([]byte(snapshotMagic))
	sw.write(append(js, '\n'))
	return sw, nil
}

func (sw *snapshotWriter) write(b []byte) {
	sw.w.Write(b) // bufio keeps the first error for Flush
	sw.h.Write(b)
	sw.n += int64(len(b))
}

func (sw *snapshotWriter) uvarint(v uint64) {
	sw.write(sw.buf[:binary.PutUvarint(sw.buf[:], v)])
}

func (sw *snapshotWriter) add(key []byte, rev uint64, value []byte) {
	sw.write([]byte{'k'})
	sw.uvarint(uint64(len(key)))
	sw.write(key)
	sw.uvarint(rev)
	sw.uvarint(uint64(len(value)))
	sw.write(value)
	sw.info.Keys++
}

func (sw *snapshotWriter) finish() (SnapshotInfo, error) {
	sw.write([]byte{'e'})
	sw.uvarint(uint64(sw.info.Keys))
	copy(sw.info.SHA256[:], sw.h.Sum(nil))
	sw.w.Write(sw.info.SHA256[:])
	sw.info.Bytes = sw.n + sha256.Size
	return sw.info, sw.w.Flush()
}

// snapshotRecord is one key of a snapshot.
type snapshotRecord struct {
	key   []byte
	rev   uint64
	value []byte
}

// snapshotReader reads a snapshot back, checking it as it goes.
type snapshotReader struct {
	r    *bufio.Reader
	h    hash.Hash
	n    int64 // bytes read
	info SnapshotInfo
}

func (sr *snapshotReader) ReadByte() (byte, error) {
	b, err := sr.r.ReadByte()
	if err == nil {
		sr.h.Write([]byte{b})
		sr.n++
	}
	return b, err
}

func (sr *snapshotReader) full(n uint64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(sr.r, b); err != nil {
		return nil, err
	}
	sr.h.Write(b)
	sr.n += int64(n)
	return b, nil
}

func corrupt(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorruptSnapshot}, a...)...)
}

// readSnapshotHeader reads the magic and the header.
func readSnapshotHeader(r io.Reader) (*snapshotReader, error) {
	sr := &snapshotReader{r: bufio.NewReaderSize(r, 256<<10), h: sha256.New()}
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(sr.r, magic); err != nil || string(magic) != snapshotMagic {
		return nil, corrupt("no %q at its start", bytes.TrimSpace([]byte(snapshotMagic)))
	}
	sr.h.Write(magic)
	sr.n += int64(len(magic))
	line, err := sr.r.ReadSlice('\n')
	if err != nil {
		return nil, corrupt("header: %v", err)
	}
	sr.h.Write(line)
	sr.n += int64(len(line))
	if err := json.Unmarshal(line, &sr.info.SnapshotHeader); err != nil {
		return nil, corrupt("header: %v", err)
	}
	hdr := sr.info.SnapshotHeader
	switch {
	case hdr.Format != SnapshotFormat:
		return nil, fmt.Errorf("snapshot format %d: this bonsai reads format %d", hdr.Format, SnapshotFormat)
	case hdr.Revision == 0:
		return nil, corrupt("header has no revision")
	}
	return sr, nil
}

// next reads the next record; ok is false at the end, once the count and
// checksum are checked.
func (sr *snapshotReader) next() (rec snapshotRecord, ok bool, err error) {
	tag, err := sr.ReadByte()
	if err != nil {
		return rec, false, corrupt("truncated after %d keys", sr.info.Keys)
	}
	switch tag {
	case 'k':
	case 'e':
		return rec, false, sr.end()
	default:
		return rec, false, corrupt("unknown record type %q after %d keys", tag, sr.info.Keys)
	}
	klen, err := binary.ReadUvarint(sr)
	if err != nil || klen == 0 || klen > maxSnapshotKey {
		return rec, false, corrupt("key %d: bad length", sr.info.Keys+1)
	}
	if rec.key, err = sr.full(klen); err != nil {
		return rec, false, corrupt("truncated in key %d", sr.info.Keys+1)
	}
	if rec.rev, err = binary.ReadUvarint(sr); err != nil || rec.rev == 0 || rec.rev > sr.info.Revision {
		return rec, false, corrupt("key %q: revision out of range", rec.key)
	}
	vlen, err := binary.ReadUvarint(sr)
	if err != nil || vlen > maxSnapshotValue {
		return rec, false, corrupt("key %q: bad value length", rec.key)
	}
	if rec.value, err = sr.full(vlen); err != nil {
		return rec, false, corrupt("truncated in the value of %q", rec.key)
	}
	sr.info.Keys++
	return rec, true, nil
}

func (sr *snapshotReader) end() error {
	n, err := binary.ReadUvarint(sr)
	if err != nil || int64(n) != sr.info.Keys {
		return corrupt("its end says %d keys, it holds %d", n, sr.info.Keys)
	}
	copy(sr.info.SHA256[:], sr.h.Sum(nil))
	var sum [sha256.Size]byte
	if _, err := io.ReadFull(sr.r, sum[:]); err != nil {
		return corrupt("truncated checksum")
	}
	sr.n += sha256.Size
	if sum != sr.info.SHA256 {
		return corrupt("checksum mismatch")
	}
	if _, err := sr.r.ReadByte(); err != io.EOF {
		return corrupt("bytes after its checksum")
	}
	return nil
}

// ReadSnapshotHeader reads the header of the snapshot at path, without
// checking the rest.
func ReadSnapshotHeader(path string) (SnapshotHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return SnapshotHeader{}, err
	}
	defer f.Close()
	sr, err := readSnapshotHeader(io.LimitReader(f, 64<<10))
	if err != nil {
		return SnapshotHeader{}, err
	}
	return sr.info.SnapshotHeader, nil
}

// VerifySnapshot reads the whole snapshot at path and checks it.
func VerifySnapshot(path string) (SnapshotInfo, error) {
	return readSnapshot(path, func(snapshotRecord) error { return nil })
}

// CheckSnapshot reads a whole snapshot from r and checks it.
func CheckSnapshot(r io.Reader) (SnapshotInfo, error) {
	return readSnapshotFrom(r, func(snapshotRecord) error { return nil })
}

// readSnapshot hands each record of the snapshot at path to f, and fails
// if the snapshot turns out corrupt.
func readSnapshot(path string, f func(snapshotRecord) error) (SnapshotInfo, error) {
	file, err := os.Open(path)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer file.Close()
	return readSnapshotFrom(file, f)
}

func readSnapshotFrom(r io.Reader, f func(snapshotRecord) error) (SnapshotInfo, error) {
	sr, err := readSnapshotHeader(r)
	if err != nil {
		return SnapshotInfo{}, err
	}
	for {
		rec, ok, err := sr.next()
		if err != nil {
			return sr.info, err
		}
		if !ok {
			break
		}
		if err := f(rec); err != nil {
			return sr.info, err
		}
	}
	sr.info.Bytes = sr.n
	return sr.info, nil
}

// WriteFileDurably writes a file through write into a temporary file next
// to path, syncs it and renames it into place, then syncs the directory:
// path is either absent or whole, even after a crash. A failed write
// leaves nothing behind.
func WriteFileDurably(path string, perm os.FileMode, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
