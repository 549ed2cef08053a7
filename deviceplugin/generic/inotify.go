package generic

import (
	"context"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// watchDirs wakes the plugin as soon as a device node appears in or goes
// from the directories its paths live in, as udev's changes to /dev do;
// the periodic rescan stays for what inotify cannot see (a directory that
// does not exist yet, globs in directory names). It gives up quietly when
// inotify is not available.
func watchDirs(ctx context.Context, patterns []string, wake func()) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return
	}
	watched := 0
	seen := map[string]bool{}
	for _, p := range patterns {
		dirs := []string{filepath.Dir(p)}
		if !strings.ContainsAny(p, "*?[") {
			dirs = append(dirs, p) // a group directory such as /dev/snd
		}
		for _, d := range dirs {
			if seen[d] || strings.ContainsAny(d, "*?[") {
				continue
			}
			seen[d] = true
			if _, err := unix.InotifyAddWatch(fd, d, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_ATTRIB); err == nil {
				watched++
			}
		}
	}
	if watched == 0 {
		unix.Close(fd)
		return
	}
	go func() {
		<-ctx.Done()
		unix.Close(fd)
	}()
	buf := make([]byte, 4096)
	for ctx.Err() == nil {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 500)
		if err != nil && err != unix.EINTR {
			return
		}
		if n <= 0 {
			continue
		}
		if _, err := unix.Read(fd, buf); err != nil && err != unix.EAGAIN {
			return
		}
		wake()
	}
}
