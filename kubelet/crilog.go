package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// logOptions are the kubelet's containerLogs query, parsed.
type logOptions struct {
	follow     bool
	tail       int64     // last lines only; < 0: all
	since      time.Time // zero: from the start
	timestamps bool
	limitBytes int64  // <= 0: no limit
	stream     string // "stdout", "stderr", or "" for both
}

// logRecord is one line of a CRI log file:
// "<RFC3339Nano> <stdout|stderr> <P|F> <text>".
type logRecord struct {
	ts      time.Time
	stream  string
	partial bool
	text    []byte
}

func parseLogRecord(line []byte) (logRecord, error) {
	var rec logRecord
	line = bytes.TrimSuffix(line, []byte{'\n'})
	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return rec, fmt.Errorf("CRI log line %q: no stream", line)
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return rec, fmt.Errorf("CRI log line %q: %v", line, err)
	}
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok || (string(stream) != "stdout" && string(stream) != "stderr") {
		return rec, fmt.Errorf("CRI log line %q: bad stream", line)
	}
	// The tag may carry more ':'-separated fields after P or F, as the
	// CRI spec allows; an empty line may end right after the tag.
	tag, text, _ := bytes.Cut(rest, []byte{' '})
	tag, _, _ = bytes.Cut(tag, []byte{':'})
	switch string(tag) {
	case "P":
		rec.partial = true
	case "F":
	default:
		return rec, fmt.Errorf("CRI log line %q: bad tag %q", line, tag)
	}
	rec.ts, rec.stream, rec.text = t, string(stream), text
	return rec, nil
}

// maxPendingLine bounds a line assembled from partial records: a
// container that never writes a newline must not grow the reader forever.
const maxPendingLine = 1 << 20

// logLine is a whole line of one stream, assembled from its records.
type logLine struct {
	ts   time.Time
	data []byte // ends in '\n' unless the line is unfinished
}

// lineAssembler joins partial records per stream (stdout's and stderr's
// pieces may interleave) and applies the stream and since filters.
type lineAssembler struct {
	opts    logOptions
	pending map[string]*logLine
	emit    func(logLine) error
}

func (a *lineAssembler) add(rec logRecord) error {
	if a.opts.stream != "" && rec.stream != a.opts.stream {
		return nil
	}
	p := a.pending[rec.stream]
	if p == nil {
		p = &logLine{ts: rec.ts}
		a.pending[rec.stream] = p
	}
	p.data = append(p.data, rec.text...)
	if rec.partial && len(p.data) < maxPendingLine {
		return nil
	}
	if !rec.partial {
		p.data = append(p.data, '\n')
	}
	delete(a.pending, rec.stream)
	return a.out(*p)
}

// flush emits the unfinished lines, as they are, when the reading ends.
func (a *lineAssembler) flush() error {
	for _, s := range []string{"stdout", "stderr"} {
		if p := a.pending[s]; p != nil {
			delete(a.pending, s)
			if err := a.out(*p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *lineAssembler) out(l logLine) error {
	if !a.opts.since.IsZero() && l.ts.Before(a.opts.since) {
		return nil
	}
	return a.emit(l)
}

// errLimitReached ends a read at limitBytes.
var errLimitReached = errors.New("limitBytes reached")

// logWriter writes lines with an optional timestamp up to limitBytes.
type logWriter struct {
	w          io.Writer
	timestamps bool
	left       int64 // < 0: no limit
}

func (lw *logWriter) write(l logLine) error {
	buf := l.data
	if lw.timestamps {
		buf = append(l.ts.UTC().AppendFormat(make([]byte, 0, 40+len(l.data)), time.RFC3339Nano), ' ')
		buf = append(buf, l.data...)
	}
	if lw.left >= 0 && int64(len(buf)) >= lw.left {
		buf = buf[:lw.left]
		lw.left = 0
		if _, err := lw.w.Write(buf); err != nil {
			return err
		}
		return errLimitReached
	}
	if lw.left >= 0 {
		lw.left -= int64(len(buf))
	}
	_, err := lw.w.Write(buf)
	return err
}

// tailRing keeps the last n lines.
type tailRing struct {
	lines []logLine
	n     int
	next  int
	full  bool
}

func (r *tailRing) add(l logLine) {
	if r.n == 0 {
		return
	}
	l.data = bytes.Clone(l.data)
	if len(r.lines) < r.n {
		r.lines = append(r.lines, l)
		return
	}
	r.lines[r.next] = l
	r.next = (r.next + 1) % r.n
	r.full = true
}

func (r *tailRing) each(f func(logLine) error) error {
	for i := range r.lines {
		j := i
		if r.full {
			j = (r.next + i) % r.n
		}
		if err := f(r.lines[j]); err != nil {
			return err
		}
	}
	return nil
}

// Polling is how a follower learns of new output: the writer lives in the
// same process but another package, and a poll every 100 ms costs less
// than an inotify watch per follower.
var (
	logPollInterval    = 100 * time.Millisecond
	logRunningInterval = time.Second
	// logExitGrace is how long a follower keeps reading after the
	// container stopped: the runtime drains the container's last output
	// into the file after it records the exit.
	logExitGrace = 500 * time.Millisecond
)

// readCRILog writes the log of one container instance, kept at path in the
// CRI format and rotated by renaming path aside, to w. Like the kubelet it
// reads the current file only. With follow it goes on across rotations
// until ctx ends or running reports the container stopped (nil: until ctx
// ends).
func readCRILog(ctx context.Context, path string, opts logOptions, w io.Writer, running func() bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { f.Close() }()
	lw := &logWriter{w: w, timestamps: opts.timestamps, left: -1}
	if opts.limitBytes > 0 {
		lw.left = opts.limitBytes
	}
	var ring *tailRing
	asm := &lineAssembler{opts: opts, pending: map[string]*logLine{}, emit: lw.write}
	if opts.tail >= 0 {
		ring = &tailRing{n: int(min(opts.tail, 1<<20))}
		asm.emit = func(l logLine) error { ring.add(l); return nil }
	}
	br := bufio.NewReaderSize(f, 64<<10)
	// carry holds the start of a record whose newline is not written yet.
	var carry []byte
	// drain reads every complete record now in the file.
	drain := func() (bool, error) {
		got := false
		for {
			line, err := br.ReadSlice('\n')
			if err == bufio.ErrBufferFull {
				carry = append(carry, line...)
				continue
			}
			if len(line) > 0 && err == nil {
				got = true
				if len(carry) > 0 {
					line = append(carry, line...)
					carry = carry[:0]
				}
				rec, perr := parseLogRecord(line)
				if perr != nil {
					continue // a torn or foreign line; the kubelet skips them too
				}
				if err := asm.add(rec); err != nil {
					return got, err
				}
				continue
			}
			carry = append(carry, line...)
			if err == io.EOF {
				return got, nil
			}
			return got, err
		}
	}
	finish := func(err error) error {
		if err == nil {
			err = asm.flush()
		}
		if errors.Is(err, errLimitReached) {
			return nil
		}
		return err
	}
	if _, err := drain(); err != nil {
		return finish(err)
	}
	if ring != nil {
		asm.emit = lw.write
		if err := ring.each(lw.write); err != nil {
			return finish(err)
		}
	}
	if !opts.follow {
		return finish(nil)
	}
	var stoppedAt, lastRunningCheck time.Time
	for {
		select {
		case <-ctx.Done():
			return finish(nil)
		case <-time.After(logPollInterval):
		}
		got, err := drain()
		if err != nil {
			return finish(err)
		}
		if rotated(f, path) {
			// Whatever the writer put in the old file before renaming it
			// is read first; then the new file from its start.
			if _, err := drain(); err != nil {
				return finish(err)
			}
			nf, err := os.Open(path)
			if err != nil {
				if os.IsNotExist(err) {
					continue // between the rename and the new file
				}
				return finish(err)
			}
			f.Close()
			f, carry = nf, carry[:0]
			br.Reset(f)
			continue
		}
		if got {
			stoppedAt = time.Time{}
			continue
		}
		if running == nil {
			continue
		}
		if !stoppedAt.IsZero() {
			if time.Since(stoppedAt) >= logExitGrace {
				return finish(nil)
			}
			continue
		}
		if time.Since(lastRunningCheck) >= logRunningInterval {
			lastRunningCheck = time.Now()
			if !running() {
				stoppedAt = time.Now()
			}
		}
	}
}

// rotated reports whether path names another file than f now.
func rotated(f *os.File, path string) bool {
	cur, err := f.Stat()
	if err != nil {
		return false
	}
	st, err := os.Stat(path)
	if err != nil {
		return os.IsNotExist(err)
	}
	return !os.SameFile(cur, st)
}
