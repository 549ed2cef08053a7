package containerd

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Log rotation defaults, as the kubelet's containerLogMaxSize and
// containerLogMaxFiles.
const (
	DefaultLogMaxSize  = 10 << 20
	DefaultLogMaxFiles = 5
)

// logFile writes a container's output in the CRI log format
// ("<RFC3339Nano> <stream> <P|F> <text>"), the format kubectl logs reads
// through the kubelet, rotating at maxSize and keeping maxFiles files in
// all. stdout and stderr share one file, so writes are serialised.
type logFile struct {
	mu       sync.Mutex
	path     string
	f        *os.File
	size     int64
	maxSize  int64
	maxFiles int
	// taps receive the raw stream too, for kubectl attach.
	taps map[*logTap]struct{}
}

type logTap struct {
	stdout, stderr io.Writer
}

func openLogFile(path string, maxSize int64, maxFiles int) (*logFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &logFile{path: path, f: f, size: st.Size(), maxSize: maxSize, maxFiles: maxFiles, taps: map[*logTap]struct{}{}}, nil
}

// maxLogLine is the longest piece written as one record; longer lines are
// split into partial ("P") records, as containerd's CRI plugin does.
const maxLogLine = 16 << 10

// copyStream reads one stream until EOF and writes it as log records.
func (l *logFile) copyStream(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			tag := "P"
			if line[len(line)-1] == '\n' {
				tag, line = "F", line[:len(line)-1]
			}
			l.write(stream, tag, line)
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

func (l *logFile) write(stream, tag string, text []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := make([]byte, 0, len(text)+48)
	rec = time.Now().UTC().AppendFormat(rec, time.RFC3339Nano)
	rec = fmt.Appendf(rec, " %s %s ", stream, tag)
	rec = append(rec, text...)
	rec = append(rec, '\n')
	if l.f != nil {
		n, err := l.f.Write(rec)
		switch {
		case err == nil:
			l.size += int64(n)
		case n > 0:
			// A full disk took part of the record: cut it off, so the
			// file stays whole records for kubectl logs. The record is
			// lost, as any output written on a full disk.
			l.f.Truncate(l.size)
		}
		if l.maxSize > 0 && l.size >= l.maxSize {
			l.rotate()
		}
	}
	raw := text
	if tag == "F" {
		raw = append(append([]byte(nil), text...), '\n')
	}
	for t := range l.taps {
		w := t.stdout
		if stream == "stderr" && t.stderr != nil {
			w = t.stderr
		}
		if w != nil {
			w.Write(raw)
		}
	}
}

// rotate renames the current file aside with a timestamp suffix and drops
// the oldest rotated files beyond maxFiles.
func (l *logFile) rotate() {
	l.f.Close()
	l.f = nil
	os.Rename(l.path, l.path+"."+time.Now().UTC().Format("20060102-150405.000000000"))
	old, _ := filepath.Glob(l.path + ".*")
	sort.Strings(old)
	for len(old) > l.maxFiles-1 && len(old) > 0 {
		os.Remove(old[0])
		old = old[1:]
	}
	if f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640); err == nil {
		l.f, l.size = f, 0
	}
}

func (l *logFile) addTap(t *logTap) {
	l.mu.Lock()
	l.taps[t] = struct{}{}
	l.mu.Unlock()
}

func (l *logFile) removeTap(t *logTap) {
	l.mu.Lock()
	delete(l.taps, t)
	l.mu.Unlock()
}

func (l *logFile) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
