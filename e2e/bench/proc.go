package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// procField reads one "name: value" field of a /proc file (io, status) as
// an integer; status fields in kB keep their unit off.
func procField(path, name string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
		return strconv.ParseUint(v, 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s field", path, name)
}

// writeBytes is the bytes a process has dirtied for the block layer
// (write_bytes of /proc/<pid>/io, all threads). The kernel counts a page
// when it is dirtied, so a page rewritten after an fsync counts again: the
// figure is what the disk really receives, not what write(2) was asked.
func writeBytes(pid string) (uint64, error) {
	return procField("/proc/"+pid+"/io", "write_bytes")
}

// rssBytes is a process' resident set size.
func rssBytes(pid string) (uint64, error) {
	kb, err := procField("/proc/"+pid+"/status", "VmRSS")
	return kb << 10, err
}

// anonBytes is a process's anonymous resident memory (RssAnon): what
// it allocated, without the pages of its binary and files, which come
// and go with what code ran.
func anonBytes(pid int) (uint64, error) {
	kb, err := procField("/proc/"+strconv.Itoa(pid)+"/status", "RssAnon")
	return kb << 10, err
}

// dirSize returns the blocks allocated under dir and the apparent size of
// its files. badger preallocates sparse files, so only the allocated figure
// says how much disk the store takes.
func dirSize(dir string) (allocated, apparent int64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			// Files come and go under a live store (compaction, GC).
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		apparent += info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			allocated += st.Blocks * 512
		}
		return nil
	})
	return allocated, apparent, err
}

// fsName names the file system under dir, and says whether it lives in
// memory (then disk-write figures mean nothing).
func fsName(dir string) (name string, inMemory bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown", false
	}
	switch uint32(st.Type) {
	case 0x01021994:
		return "tmpfs", true
	case 0x858458f6:
		return "ramfs", true
	case 0xef53:
		return "ext4", false
	case 0x58465342:
		return "xfs", false
	case 0x9123683e:
		return "btrfs", false
	case 0x794c7630:
		return "overlayfs", false
	}
	return fmt.Sprintf("fs 0x%x", uint32(st.Type)), false
}
