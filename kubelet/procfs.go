package kubelet

import (
	"bytes"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// The stats sampler reads a few hundred small /proc and /sys files per
// sample (every 10 s, or every second for a tight housekeeping
// interval). os.ReadFile allocates a buffer, an *os.File and a stat per
// file, and splitting lines into maps made more: together most of a
// sample's garbage. These readers reuse pooled buffers, call the
// syscalls directly and parse in place.

var fileBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// readSmall reads a whole file into a pooled buffer; give the buffer back
// with putBuf once done with it.
func readSmall(path string) (*[]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	bp := fileBufs.Get().(*[]byte)
	b := (*bp)[:0]
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, cap(b))
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			*bp = b
			putBuf(bp)
			return nil, err
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	*bp = b
	return bp, nil
}

func putBuf(bp *[]byte) {
	if cap(*bp) > 256<<10 {
		return // a rare large file: not kept
	}
	*bp = (*bp)[:0]
	fileBufs.Put(bp)
}

// readUint reads a file holding one number; a word ("max") reads as 0.
func readUint(path string) (uint64, error) {
	bp, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	defer putBuf(bp)
	n, _ := parseUint(bytes.TrimSpace(*bp))
	return n, nil
}

// readKeys reads "key value" lines (cpu.stat, memory.stat, /proc/vmstat,
// /proc/meminfo with its "key:" and unit, /proc/stat) into vals, the
// value of keys[i] in vals[i] (0 when absent); found counts the keys
// present.
func readKeys(path string, keys []string, vals []uint64) (found int, err error) {
	bp, err := readSmall(path)
	if err != nil {
		clear(vals)
		return 0, err
	}
	defer putBuf(bp)
	return parseKeys(*bp, keys, vals), nil
}

func parseKeys(b []byte, keys []string, vals []uint64) (found int) {
	clear(vals)
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		k, rest := nextField(line)
		if len(k) == 0 {
			continue
		}
		for i, key := range keys {
			if string(k) == key {
				v, _ := nextField(rest)
				if n, ok := parseUint(v); ok {
					vals[i] = n
					found++
				}
				break
			}
		}
	}
	return found
}

// nextLine is b's first line (without its newline) and the rest.
func nextLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// nextField is the first space-separated field of b and what follows it.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	j := i
	for j < len(b) && b[j] != ' ' && b[j] != '\t' {
		j++
	}
	return b[i:j], b[j:]
}

// parseUint parses a decimal number; false for anything else (or one
// that overflows).
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
