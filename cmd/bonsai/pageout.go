package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pageOutBinary asks the kernel to reclaim the pages of bonsai's own
// executable that are mapped now. Start-up runs the init code of every
// package once (API types, the runtime and network clients), which a
// control plane never touches again; without this those clean pages stay
// counted in bonsai's RSS until memory pressure evicts them. Code the
// steady state uses is faulted back in from the page cache.
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
		unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_NOHUGEPAGE)
		unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT)
	}
}
