package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pageOutBinary asks the kernel to reclaim the pages of bonsai's own
// executable that are mapped now, and to map back only the pages bonsai
// touches from then on. Start-up runs the init code of every package once
// (API types, the runtime and network clients), which a control plane
// never touches again; without this those clean pages stay counted in
// bonsai's RSS until memory pressure evicts them.
//
// Paging out alone is not enough: a fault on a file page maps the up to
// 16 neighbours that are in the page cache too (the kernel's fault-around),
// and an ordinary fault reads 128 KB around the page into that cache. The
// Go runtime's tables (function metadata, stack maps, type data) are read
// a few bytes per function all over the file, so after an hour of pods
// nearly the whole 70 MB would be mapped again. So the mappings are marked
// MADV_RANDOM (a fault reads the one page it needs) and the file's pages
// are dropped from the page cache (nothing cached to fault around): what
// stays mapped is what runs. The price is one 4 KB read per page on first
// use after start.
func pageOutBinary() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		// No huge pages for the executable: one touched byte would map
		// 2 MB of it back in. Then MADV_PAGEOUT (Linux 5.4+); older
		// kernels answer EINVAL and nothing changes. The raw syscall:
		// these addresses are not Go memory.
		for _, advice := range []int{unix.MADV_NOHUGEPAGE, unix.MADV_RANDOM, unix.MADV_PAGEOUT} {
			unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), uintptr(advice))
		}
	}
	// Pages of the file no process maps (among them the ones just paged
	// out) leave the page cache. Only clean pages can go, so a binary
	// written moments ago (an upgrade, a fresh build) is flushed first;
	// nothing is lost, and a file system that cannot drop pages (tmpfs)
	// keeps them.
	if exeFile, err := os.Open("/proc/self/exe"); err == nil {
		unix.Fdatasync(int(exeFile.Fd()))
		unix.Fadvise(int(exeFile.Fd()), 0, 0, unix.FADV_DONTNEED)
		exeFile.Close()
	}
}
