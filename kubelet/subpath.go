package kubelet

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A subPath names a path inside a volume that a container may have
// written to: a symlink planted there (escape -> /) must never take the
// mount, or a directory the kubelet creates, out of the volume. The path
// is resolved from a descriptor of the volume's root with openat2's
// RESOLVE_BENEATH, and what it opens is bind-mounted through
// /proc/self/fd onto <pod dir>/volume-subpaths/<volume>/<container>/<n>,
// which the runtime then mounts: nothing between the check and the mount
// can swap the path, as the kubelet's safe subpath does.

// errNotBeneath is a subPath that resolves outside its volume.
var errNotBeneath = errors.New("not within volume path")

// checkRelativePath is the kubelet's own check of a path a pod gave for a
// file or directory inside a volume, for objects stored before the API
// refused such paths: relative, no "..", not empty.
func checkRelativePath(p string) error {
	if p == "" {
		return fmt.Errorf("invalid path: must not be empty")
	}
	if filepath.IsAbs(p) {
		return fmt.Errorf("invalid path %q: must be a relative path", p)
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return fmt.Errorf("invalid path %q: must not contain '..'", p)
		}
	}
	return nil
}

// openBeneath opens rel under the directory fd root as an O_PATH
// descriptor, refusing any resolution that leaves root. Missing
// directories are created (0755) one at a time under descriptors already
// checked, as the kubelet creates a missing subPath.
func openBeneath(root int, rel string) (int, error) {
	if err := checkRelativePath(rel); err != nil {
		return -1, err
	}
	fd, err := openat2Beneath(root, rel)
	if !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	dir, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	for _, elem := range strings.Split(filepath.Clean(rel), "/") {
		next, err := openat2Beneath(dir, elem)
		if errors.Is(err, unix.ENOENT) {
			// mkdirat does not follow a symlink in its last element: one
			// planted since the open makes it fail with EEXIST.
			if err := unix.Mkdirat(dir, elem, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(dir)
				return -1, err
			}
			next, err = openat2Beneath(dir, elem)
		}
		unix.Close(dir)
		if err != nil {
			return -1, err
		}
		dir = next
	}
	return dir, nil
}

// openat2Beneath resolves rel beneath dir with symlinks allowed only where
// they stay beneath it. Kernels before 5.6 have no openat2: there every
// element is opened with O_NOFOLLOW and a symlink anywhere is refused,
// stricter than needed but never outside.
func openat2Beneath(dir int, rel string) (int, error) {
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return -1, errNotBeneath
	case errors.Is(err, unix.ENOSYS):
		return openNoSymlinks(dir, rel)
	}
	return -1, err
}

func openNoSymlinks(dir int, rel string) (int, error) {
	cur, err := unix.Dup(dir)
	if err != nil {
		return -1, err
	}
	for _, elem := range strings.Split(filepath.Clean(rel), "/") {
		if elem == "." {
			continue
		}
		next, err := unix.Openat(cur, elem, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(next)
			if err != nil {
				return -1, err
			}
			return -1, errNotBeneath
		}
		cur = next
	}
	return cur, nil
}

// bindSubPath resolves sub beneath the volume at volRoot and bind-mounts
// what it finds onto target, which it creates as a file or directory to
// match. A mount already there (an earlier attempt of the container) is
// replaced, so a path swapped since is resolved again.
func bindSubPath(volRoot, sub, target string) error {
	root, err := unix.Open(volRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open volume %s: %w", volRoot, err)
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, sub)
	if errors.Is(err, errNotBeneath) {
		return fmt.Errorf("subpath %q not within volume path %q", sub, volRoot)
	}
	if err != nil {
		return fmt.Errorf("subpath %q of volume %q: %w", sub, volRoot, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	for mountedAt(target) {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount old subpath %s: %w", target, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(target, 0o750)
	} else {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o640); err == nil {
			f.Close()
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	src := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Mount(src, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind subpath %q of volume %q: %w", sub, volRoot, err)
	}
	return nil
}

// unmountUnder unmounts every mount at or below dir, deepest first, and
// reports whether any is left: the caller must not remove a tree that
// still has one, or it would delete what the mount shows (a hostPath's
// files through a subPath bind).
func unmountUnder(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		unix.Unmount(m, unix.MNT_DETACH)
	}
	if left, err := mountsUnder(dir); err != nil || len(left) > 0 {
		if err == nil {
			err = fmt.Errorf("still mounted: %s", strings.Join(left, ", "))
		}
		return err
	}
	return nil
}

// mountedAt reports whether path is a mount point; a bind mount from the
// same file system has the same device as its parent, so mountinfo says.
func mountedAt(path string) bool {
	m, err := mountsUnder(path)
	return err == nil && len(m) > 0 && m[0] == filepath.Clean(path)
}

// mountsUnder lists the mount points at or below dir, from mountinfo.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := UnescapeMountPath(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// UnescapeMountPath undoes /proc/mounts' and mountinfo's octal escapes (\040 for a space).
func UnescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
