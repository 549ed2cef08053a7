package store

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// logAdvisor marks the logs badger appends to through shared mappings (the
// memtables' write-ahead logs, *.mem, and the value logs, *.vlog) for
// random access.
//
// Why: Linux page caches fault a file mapping in by read-ahead, in large
// folios on file systems that support them (ext4 and xfs on 6.x kernels),
// and writeback writes a dirty folio whole. A log appended a few KB at a
// time and synced after each append then writes 16-32 KB per sync, on
// flash that wears out. With MADV_RANDOM the fault path reads nothing
// ahead and maps single pages, so a sync writes about what was appended
// (measured, 100,000 1 KB updates from 64 writers: 33.6 KB written per
// update without the advice, 1.5 KB with it).
//
// badger opens and maps these files itself, so the advisor watches the
// directory with inotify and advises each new log's mapping as soon as it
// appears in /proc/self/maps. The first appends to a new log may land
// before the advice; that costs at most one read-ahead window per file.
//
// The same watch gives each new log its blocks (see diskGuard): created
// is called with its path before anything else.
type logAdvisor struct {
	dir     string
	inotif  *os.File
	done    chan struct{}
	mu      sync.Mutex // serializes scans of /proc/self/maps
	created func(path string)
}

// startLogAdvisor watches dir for new logs. Call adviseAll once the
// database is open, for the logs it mapped before the watch saw them.
func startLogAdvisor(dir string, created func(path string)) (*logAdvisor, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, err
	}
	a := &logAdvisor{dir: dir, inotif: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{}), created: created}
	go a.run()
	return a, nil
}

func isLogFile(name string) bool {
	return strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")
}

func (a *logAdvisor) run() {
	defer close(a.done)
	buf := make([]byte, 4096)
	for {
		n, err := a.inotif.Read(buf)
		if err != nil {
			return // closed
		}
		var created []string
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event: wd, mask, cookie, len, then the name.
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+nameLen]
			if name := string(bytes.TrimRight(name, "\x00")); isLogFile(name) {
				created = append(created, name)
			}
			off += unix.SizeofInotifyEvent + nameLen
		}
		for _, name := range created {
			if a.created != nil {
				a.created(a.dir + "/" + name)
			}
		}
		for _, name := range created {
			a.adviseWhenMapped(a.dir + "/" + name)
		}
	}
}

// adviseWhenMapped waits briefly for badger to map a log it just created.
func (a *logAdvisor) adviseWhenMapped(path string) {
	for i := 0; i < 100; i++ {
		if a.advise(func(p string) bool { return p == path }) > 0 {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// adviseAll advises every log of the directory that is mapped now.
func (a *logAdvisor) adviseAll() {
	prefix := a.dir + "/"
	a.advise(func(p string) bool { return strings.HasPrefix(p, prefix) && isLogFile(p) })
}

// advise applies MADV_RANDOM to the mappings whose file match, and says
// how many it found.
func (a *logAdvisor) advise(match func(path string) bool) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	ranges, err := mappedRanges(match)
	if err != nil {
		return 0
	}
	for _, r := range ranges {
		// A failure (the mapping went away meanwhile) costs only the
		// advice; there is nothing to undo.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, r[0], r[1]-r[0], unix.MADV_RANDOM)
	}
	return len(ranges)
}

// mappedRanges lists the address ranges of this process's mappings of
// files that match.
func mappedRanges(match func(path string) bool) ([][2]uintptr, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][2]uintptr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path (the path may hold spaces)
		line := sc.Text()
		slash := strings.IndexByte(line, '/')
		if slash < 0 || !match(line[slash:]) {
			continue
		}
		start, end, ok := strings.Cut(line[:strings.IndexByte(line, ' ')], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(start, 16, 64)
		e, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, [2]uintptr{uintptr(s), uintptr(e)})
	}
	return out, sc.Err()
}

func (a *logAdvisor) close() {
	a.inotif.Close()
	<-a.done
}
